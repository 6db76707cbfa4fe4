package daemon

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/schedpolicyd/schedpolicyd/policy"
)

// FuzzValidWorkloadName: a name ValidWorkloadName accepts is one clean
// path component that, joined to the managed parent, names a direct child
// of it (it can never escape the parent or address an interface file);
// every refusal wraps policy.ErrInvalid.
func FuzzValidWorkloadName(f *testing.F) {
	for _, s := range []string{"build", "job-1.2_x", "", ".", "..", "../etc", "a/b", ".hidden", "cgroup.procs", "cpuset.cpus", "tasks", "x\x00y", "x\ny", "\xff\xfe", strings.Repeat("a", 65), "ünïcode", "/abs"} {
		f.Add(s)
	}
	const parent = "/sys/fs/cgroup/cpuset/schedpolicyd"
	f.Fuzz(func(t *testing.T, name string) {
		err := ValidWorkloadName(name)
		if err != nil {
			if !errors.Is(err, policy.ErrInvalid) {
				t.Fatalf("ValidWorkloadName(%q) = %v, does not wrap ErrInvalid", name, err)
			}
			return
		}
		p := filepath.Join(parent, name)
		if filepath.Dir(p) != parent || filepath.Base(p) != name {
			t.Fatalf("accepted %q escapes the parent: %s", name, p)
		}
		if strings.HasPrefix(name, ".") || strings.HasPrefix(name, "cgroup.") || strings.HasPrefix(name, "cpuset.") || len(name) > MaxWorkloadName {
			t.Fatalf("accepted %q", name)
		}
	})
}
