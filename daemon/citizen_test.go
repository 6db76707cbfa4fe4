package daemon

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/schedpolicyd/schedpolicyd/cgroup"
)

// TestDelegatedXattr: a directory is delegated only with a delegate xattr
// of "1", as systemd sets on a Delegate= unit's cgroup. tmpfs takes
// trusted.* xattrs from root, so the real syscall is exercised here; the
// whole rule (systemd PID 1, cgroup v2) runs in the VM of
// packaging/systemd-test (cgroupfs-foreign-warning).
func TestDelegatedXattr(t *testing.T) {
	dir, err := os.MkdirTemp("/dev/shm", "citizen")
	if err != nil {
		t.Skipf("no tmpfs at /dev/shm: %v", err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	plain := filepath.Join(dir, "plain")
	zero := filepath.Join(dir, "zero")
	deleg := filepath.Join(dir, "deleg")
	for _, d := range []string{plain, zero, deleg} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := unix.Setxattr(deleg, "trusted.delegate", []byte("1"), 0); err != nil {
		t.Skipf("cannot set trusted.* xattrs here (needs root and tmpfs xattrs): %v", err)
	}
	if err := unix.Setxattr(zero, "trusted.delegate", []byte("0"), 0); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		dir  string
		want bool
	}{{plain, false}, {zero, false}, {deleg, true}, {filepath.Join(dir, "missing"), false}} {
		if got := delegated(c.dir); got != c.want {
			t.Errorf("delegated(%s) = %v, want %v", filepath.Base(c.dir), got, c.want)
		}
	}
	// Not a systemd machine with cgroup v2 here: never a warning.
	if w := foreignCgroupRoot(dir, "/sys/fs/cgroup", "/sys/fs/cgroup/schedpolicyd"); w != "" && !cgroup.IsUnified("/sys/fs/cgroup") {
		t.Errorf("foreignCgroupRoot on a non-v2 /sys/fs/cgroup = %q, want \"\"", w)
	}
}
