package cgroup

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/schedpolicyd/schedpolicyd/internal/testutil"
)

// TestCgroupWatchParentRemoved: the managed parent's own rmdir raises
// Changed, after its last child's removal was seen, while the parent is
// held open as the daemon's lock holds it (the kernel then delays the
// parent's IN_DELETE_SELF until it is closed; cgroupfs may not raise it at
// all) — on a plain directory and on a real cgroup v1 cpuset.
func TestCgroupWatchParentRemoved(t *testing.T) {
	for name, parent := range map[string]func(t *testing.T) string{
		"plain directory": func(t *testing.T) string {
			dir := filepath.Join(t.TempDir(), "parent")
			if err := os.Mkdir(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			return dir
		},
		"cgroup v1 cpuset": func(t *testing.T) string { return testutil.CpusetV1Parent(t, "schedpolicyd-gone") },
	} {
		t.Run(name, func(t *testing.T) {
			dir := parent(t)
			child := filepath.Join(dir, "child")
			if err := os.Mkdir(child, 0o755); err != nil {
				t.Fatal(err)
			}
			held, err := os.Open(dir)
			if err != nil {
				t.Fatal(err)
			}
			defer held.Close()
			w, err := WatchCgroup(dir)
			if err != nil {
				t.Fatal(err)
			}
			defer w.Close()
			if err := os.Remove(child); err != nil {
				t.Fatal(err)
			}
			waitChanged(t, w, "the child's removal")
			if err := os.Remove(dir); err != nil {
				t.Fatal(err)
			}
			waitChanged(t, w, "the parent's removal")
		})
	}
}

// waitChanged fails t unless w's Changed fires; the bound only keeps a
// missing hint from hanging the test.
func waitChanged(t *testing.T, w *CgroupWatch, what string) {
	t.Helper()
	select {
	case <-w.Changed():
	case <-time.After(testutil.DefaultBound):
		t.Fatalf("no Changed hint for %s in %v", what, testutil.DefaultBound)
	}
}
