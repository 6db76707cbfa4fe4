package sysfs

import (
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// TestDirThreadsSubtree: a unit's cgroup (v2: cgroup.threads) counts the
// threads of every cgroup below it, and DirRunDelay and DirRunnable read
// exactly those threads' schedstat and stat; a v1 directory (tasks) is
// read the same way.
func TestDirThreadsSubtree(t *testing.T) {
	root := t.TempDir()
	writeTree(t, root, map[string]string{
		"cg/u.service/cgroup.threads":                   "10\n",
		"cg/u.service/app.slice/cgroup.threads":         "",
		"cg/u.service/app.slice/x.scope/cgroup.threads": "11\n12\n",
		"cg/u.service/app.slice/x.scope/cpu.max":        "max 100000\n",
		"cg/v1/tasks":                                   "12\n",
		"proc/10/schedstat":                             "1000000 2000 3\n",
		"proc/11/schedstat":                             "4000000 5000000 7\n",
		"proc/12/schedstat":                             "6000000 0 1\n",
		"proc/10/stat":                                  "10 (a b) S 1\n",
		"proc/11/stat":                                  "11 (spin)) R 1\n",
		"proc/12/stat":                                  "12 (spin) R 1\n",
	})
	dir := filepath.Join(root, "cg/u.service")
	tids, err := DirThreads(dir)
	slices.Sort(tids)
	if err != nil || !slices.Equal(tids, []int{10, 11, 12}) {
		t.Fatalf("DirThreads = %v, %v; want [10 11 12]", tids, err)
	}
	proc := filepath.Join(root, "proc")
	if run, wait, err := DirRunDelay(dir, proc); err != nil || run != 11*time.Millisecond || wait != 5002*time.Microsecond {
		t.Errorf("DirRunDelay = %v, %v, %v; want 11ms, 5.002ms", run, wait, err)
	}
	if n, err := DirRunnable(dir, proc); err != nil || n != 2 {
		t.Errorf("DirRunnable = %d, %v; want 2 (threads 11 and 12)", n, err)
	}
	if n, err := DirRunnable(filepath.Join(root, "cg/v1"), proc); err != nil || n != 1 {
		t.Errorf("DirRunnable(v1 tasks) = %d, %v; want 1", n, err)
	}
	if _, err := DirThreads(filepath.Join(root, "cg/gone")); !IsGone(err) {
		t.Errorf("DirThreads(missing) err = %v, want IsGone", err)
	}
}
