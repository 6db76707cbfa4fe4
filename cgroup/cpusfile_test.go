package cgroup

import (
	"errors"
	"path/filepath"
	"testing"

	"github.com/schedpolicyd/schedpolicyd/internal/testutil"
	"github.com/schedpolicyd/schedpolicyd/sysfs"
)

// TestCPUsFileRealV1: a held-open cpuset.cpus takes repeated writes on the
// real cgroup v1 cpuset, and reports IsGone after the child is removed;
// the sched_load_balance flag reads and writes.
func TestCPUsFileRealV1(t *testing.T) {
	path := testutil.CpusetV1Dir(t, "schedpolicyd-test")
	cg := openWithChild(t, path, CgroupOptions{Create: true})
	all, err := cg.ReadCPUs("w")
	if err != nil {
		t.Fatal(err)
	}
	first := sysfs.NewCPUSet(all.List()[0])
	f, err := cg.OpenCPUs("w")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, want := range []sysfs.CPUSet{first, all, first} {
		if err := f.Write(want); err != nil {
			t.Fatal(err)
		}
		if got, err := cg.ReadCPUs("w"); err != nil || !got.Equal(want) {
			t.Fatalf("after writing %s through the held file: %s, %v", want, got, err)
		}
	}

	if on, err := cg.SchedLoadBalance(""); err != nil || !on {
		t.Fatalf("parent sched_load_balance = %v, %v; want true (the default)", on, err)
	}
	if err := cg.SetSchedLoadBalance("w", false); err != nil {
		t.Fatal(err)
	}
	if on, err := cg.SchedLoadBalance("w"); err != nil || on {
		t.Fatalf("child sched_load_balance = %v, %v after clearing", on, err)
	}
	if err := cg.SetSchedLoadBalance("", false); err == nil {
		t.Fatal("the parent's flag was accepted for writing")
	}

	if err := cg.RemoveChild("w"); err != nil {
		t.Fatal(err)
	}
	if err := f.Write(all); !IsGone(err) {
		t.Fatalf("write after rmdir: %v, want an IsGone error", err)
	}
}

// TestCPUsFileMock: on a mock tree the file is not held open (a plain
// file would keep its old contents past a shorter write).
func TestCPUsFileMock(t *testing.T) {
	root := mockV1(t)
	cg, err := OpenCgroup(filepath.Join(root, "managed"), CgroupOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cg.OpenCPUs("w"); !errors.Is(err, errors.ErrUnsupported) {
		t.Fatalf("OpenCPUs on a mock tree: %v, want ErrUnsupported", err)
	}
	// "0-N" means something only to the kernel's list parser.
	if err := cg.WriteAllCPUs("w"); !errors.Is(err, errors.ErrUnsupported) {
		t.Fatalf("WriteAllCPUs on a mock tree: %v, want ErrUnsupported", err)
	}
}

// openWithChild opens the cgroup at dir with opts, then creates its child
// w and prepares it (CreateChild, PrepareChild: what the placement does
// before a child's first write), failing t on any error.
func openWithChild(t *testing.T, dir string, opts CgroupOptions) *Cgroup {
	t.Helper()
	cg, err := OpenCgroup(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := cg.CreateChild("w"); err != nil {
		t.Fatal(err)
	}
	if err := cg.PrepareChild("w"); err != nil {
		t.Fatal(err)
	}
	return cg
}
