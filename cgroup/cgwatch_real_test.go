package cgroup

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/schedpolicyd/schedpolicyd/internal/testutil"
)

// TestCgroupWatchTakeAttached: a task attached to one child of a real v1
// cpuset parent raises Attached, and TakeAttached names that child alone,
// once.
func TestCgroupWatchTakeAttached(t *testing.T) {
	parent := testutil.CpusetV1Parent(t, "schedpolicyd-watch")
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() }) // before the parent's removal
	cg, err := OpenCgroup(parent, CgroupOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"a", "b"} {
		if err := os.Mkdir(filepath.Join(parent, n), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := cg.PrepareChild(n); err != nil {
			t.Fatal(err)
		}
	}
	w, err := WatchCgroup(parent)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	for _, n := range []string{"a", "b"} {
		w.WatchChild(filepath.Join(parent, n), CgroupV1)
	}
	if err := os.WriteFile(filepath.Join(parent, "a", "tasks"), []byte(strconv.Itoa(cmd.Process.Pid)), 0); err != nil {
		t.Fatal(err)
	}
	select {
	case <-w.Attached():
	case <-time.After(10 * time.Second):
		t.Fatal("no Attached hint in 10 s")
	}
	if got := w.TakeAttached(); len(got) != 1 || !got["a"] {
		t.Fatalf("TakeAttached = %v, want only a", got)
	}
	if got := w.TakeAttached(); len(got) != 0 {
		t.Fatalf("TakeAttached again = %v, want none", got)
	}
}
