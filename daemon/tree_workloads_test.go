package daemon

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/schedpolicyd/schedpolicyd/internal/testutil"
	"github.com/schedpolicyd/schedpolicyd/tree"
)

// TestTreeWorkloadsFile: the tree's read-only workloads file lists every
// managed workload with the CPUs its cpuset.cpus holds, one "NAME CPULIST"
// line each (without D-Bus there is no other way to see them). On
// both backends: as adopted under performance, packed on battery, a
// workload with a space in its name (escaped as in mountinfo), and a write
// refused without changing anything.
func TestTreeWorkloadsFile(t *testing.T) {
	for _, backend := range []string{"plain", "fuse"} {
		t.Run(backend, func(t *testing.T) {
			if backend == "fuse" {
				needFUSE(t)
			}
			m := newMockLaptop(t)
			d := m.startWith(t, func(c *Config) { c.TreeBackend = tree.Backend(backend) })
			file := filepath.Join(m.tree, TreePrefix, fileWorkloads)
			cpus := func(name string) string { return testutil.ReadTrim(t, filepath.Join(m.managed, name, "cpuset.cpus")) }
			read := func() string {
				b, err := os.ReadFile(file)
				if err != nil {
					t.Fatal(err)
				}
				return string(b)
			}
			waitFor := func(what, want string) {
				t.Helper()
				testutil.Eventually(t, what, func() (bool, string) { got := read(); return got == want, got })
			}

			waitFor("a and b on every CPU", "a 0-7\nb 0-7\n")
			if st, err := os.Stat(file); err != nil || st.Mode().Perm() != 0o444 {
				t.Errorf("%s: %v, %v; want mode 0444", file, st.Mode(), err)
			}

			// On battery: packed; the file says what the cgroups hold.
			ps := filepath.Join(m.sys, "class/power_supply")
			testutil.Put(t, ps+"/AC/online", "0")
			testutil.Put(t, ps+"/BAT0/status", "Discharging")
			testutil.Eventually(t, "packed on CPU 0", func() (bool, string) {
				return cpus("a") == "0" && cpus("b") == "0", cpus("a") + " / " + cpus("b")
			})
			waitFor("the packed CPUs", "a 0\nb 0\n")

			// A workload made by hand with a space in its name.
			testutil.Put(t, filepath.Join(m.managed, "my build", "cpuset.cpus"), "")
			testutil.Put(t, filepath.Join(m.managed, "my build", "cpu.stat"), "usage_usec 0")
			testutil.Eventually(t, "my build adopted and placed", func() (bool, string) { return cpus("my build") == "0", cpus("my build") })
			waitFor("three workloads", "a 0\nb 0\nmy\\040build 0\n")

			// Read-only: a write is refused (FUSE: EACCES at open; plain:
			// reverted) and changes nothing.
			before := d.Snapshot()
			err := os.WriteFile(file, []byte("a 0-7\n"), 0o644)
			if backend == "fuse" && !errors.Is(err, syscall.EACCES) {
				t.Errorf("writing %s: %v, want EACCES", file, err)
			}
			waitFor("the file as it was", "a 0\nb 0\nmy\\040build 0\n")
			if cpus("a") != "0" || d.Snapshot().Policy != before.Policy {
				t.Errorf("the write changed something: a %s, policy %s", cpus("a"), d.Snapshot().Policy)
			}
		})
	}
}

func TestWorkloadLines(t *testing.T) {
	for _, c := range []struct {
		ws   []WorkloadStatus
		want string
	}{
		{nil, ""},
		{[]WorkloadStatus{{Name: "build", CPUs: "0-3,8"}, {Name: "web", CPUs: "1"}}, "build 0-3,8\nweb 1\n"},
		{[]WorkloadStatus{{Name: "a b\tc\nd\\e\x7f", CPUs: "0"}}, `a\040b\011c\012d\134e\177 0` + "\n"},
		{[]WorkloadStatus{{Name: "ünï", CPUs: "2"}}, "ünï 2\n"}, // UTF-8 as it is
	} {
		if got := string(workloadLines(c.ws)); got != c.want {
			t.Errorf("workloadLines(%+v) = %q, want %q", c.ws, got, c.want)
		}
	}
}
