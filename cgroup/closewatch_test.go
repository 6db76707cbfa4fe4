package cgroup

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/schedpolicyd/schedpolicyd/internal/testutil"
	"github.com/schedpolicyd/schedpolicyd/sysfs"
)

// TestCloseWriteWatchRealCgroup: on the kernel's cgroupfs, a user's
// open/write/close of cpuset.cpus is reported, and the daemon's own
// pwrites through a held-open file (Cgroup.OpenCPUs) are not.
func TestCloseWriteWatchRealCgroup(t *testing.T) {
	parent := testutil.CpusetV1Parent(t, "schedpolicyd-closewatch")
	cg := openWithChild(t, parent, CgroupOptions{})
	w, err := NewCloseWriteWatch()
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	file := filepath.Join(parent, "w", "cpuset.cpus")
	if err := w.Add(file); err != nil {
		t.Fatal(err)
	}
	held, err := cg.OpenCPUs("w")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	for range 20 {
		if err := held.Write(sysfs.MustParseCPUList("0")); err != nil {
			t.Fatal(err)
		}
	}
	if got, err := held.Read(); err != nil || got.String() != "0" {
		t.Fatalf("held Read = %q, %v; want 0", got, err)
	}
	// A user's echo: reported.
	testutil.Write(t, file, "0")
	select {
	case <-w.C():
	case <-time.After(20 * time.Second):
		t.Fatal("no event for a user's write")
	}
	paths, all := w.Take()
	if all || len(paths) != 1 || !paths[file] {
		t.Fatalf("Take = %v, %v; want only %s (the held-open pwrites raise no event)", paths, all, file)
	}
	// Nothing more is pending: the pwrites before the echo were not
	// reported either.
	if paths, all := w.Take(); all || len(paths) != 0 {
		t.Fatalf("second Take = %v, %v; want nothing", paths, all)
	}
	w.Remove(file)
	testutil.Write(t, file, "0")
	select {
	case <-w.C():
		if paths, _ := w.Take(); len(paths) != 0 {
			t.Fatalf("event after Remove: %v", paths)
		}
	case <-time.After(100 * time.Millisecond):
	}
}
