package cgroup

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/schedpolicyd/schedpolicyd/internal/testutil"
	"github.com/schedpolicyd/schedpolicyd/sysfs"
)

// TestDirUsageKernelFileChecks: a cgroup path another process chose (a
// unit's ControlGroup from a user's manager) may hold anything as its
// cpu.stat; DirUsage reads it with sysfs's kernel-file checks (regular
// files only, no symbolic link as the last component, no wait on a FIFO,
// at most sysfs.MaxKernelFile; sysfs's TestKernelFileChecks). Before, a
// FIFO as cpu.stat hung the daemon's loop for good and a symbolic link to
// /dev/zero grew it until it ran out of memory.
func TestDirUsageKernelFileChecks(t *testing.T) {
	c := testutil.NewCPUStatCases(t, sysfs.MaxKernelFile+1)
	for _, p := range []string{c.FIFO, c.Zero, c.Big} {
		if _, err := DirUsage(filepath.Dir(p)); err == nil {
			t.Errorf("DirUsage(%s) read it", filepath.Dir(p))
		}
	}
	if d, err := DirUsage(filepath.Dir(c.Good)); err != nil || d.Microseconds() != 1500 {
		t.Fatalf("DirUsage of a regular cpu.stat = %v, %v", d, err)
	}
}

// TestDirThreadsBounded: the walk below a cgroup (a user's delegated
// subtree, where the user makes cgroups at will) stops at its bounds with
// ErrTooManyThreads: deeper than MaxThreadDepth, more cgroups than
// MaxThreadDirs.
func TestDirThreadsBounded(t *testing.T) {
	deep := t.TempDir()
	d := deep
	for i := 0; i <= MaxThreadDepth+1; i++ {
		if err := os.WriteFile(filepath.Join(d, "cgroup.threads"), []byte("1\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		d = filepath.Join(d, "c")
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := DirThreads(deep); !errors.Is(err, ErrTooManyThreads) {
		t.Fatalf("a tree %d deep: %v, want ErrTooManyThreads", MaxThreadDepth+2, err)
	}
	wide := t.TempDir()
	os.WriteFile(filepath.Join(wide, "cgroup.threads"), nil, 0o644)
	for i := 0; i < MaxThreadDirs; i++ {
		c := filepath.Join(wide, "c"+strconv.Itoa(i))
		os.Mkdir(c, 0o755)
		os.WriteFile(filepath.Join(c, "cgroup.threads"), []byte("7\n"), 0o644)
	}
	if _, err := DirThreads(wide); !errors.Is(err, ErrTooManyThreads) {
		t.Fatalf("%d cgroups: %v, want ErrTooManyThreads", MaxThreadDirs+1, err)
	}
	ok := t.TempDir()
	os.WriteFile(filepath.Join(ok, "cgroup.threads"), []byte("5\n6\n"), 0o644)
	os.Mkdir(filepath.Join(ok, "x"), 0o755)
	os.WriteFile(filepath.Join(ok, "x", "cgroup.threads"), []byte("7\n"), 0o644)
	if tids, err := DirThreads(ok); err != nil || len(tids) != 3 {
		t.Fatalf("a small tree: %v, %v", tids, err)
	}
}
