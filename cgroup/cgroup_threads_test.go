package cgroup

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/schedpolicyd/schedpolicyd/internal/testutil"
)

// TestDirThreadsSubtree: a unit's cgroup (v2: cgroup.threads) counts the
// threads of every cgroup below it, and DirRunDelay and DirRunnable read
// exactly those threads' schedstat and stat; a v1 directory (tasks) is
// read the same way.
func TestDirThreadsSubtree(t *testing.T) {
	root := t.TempDir()
	testutil.WriteTree(t, root, map[string]string{
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

// TestDirThreadsRealV1: on the real v1 cpuset hierarchy a workload's
// threads include those of a cgroup below it, and a leaf (link count 2:
// not listed) gives its own. Real processes in a parent of the test's own,
// removed after.
func TestDirThreadsRealV1(t *testing.T) {
	path := testutil.CpusetV1Dir(t, "schedpolicyd-threads")
	cg, err := OpenCgroup(path, CgroupOptions{Create: true})
	if err != nil {
		t.Fatal(err)
	}
	w, g := filepath.Join(path, "w"), filepath.Join(path, "w", "g")
	var pids []int
	t.Cleanup(func() { // before CpusetV1Dir's removal: cleanups run last first
		for _, pid := range pids {
			syscall.Kill(pid, syscall.SIGKILL)
			syscall.Wait4(pid, nil, 0, nil)
		}
		os.Remove(g)
	})
	if err := os.MkdirAll(g, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := cg.PrepareChild("w"); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
		b, err := os.ReadFile(filepath.Join(w, f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(g, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, dir := range []string{w, g} {
		c := exec.Command("sleep", "1000")
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		pids = append(pids, c.Process.Pid)
		if err := os.WriteFile(filepath.Join(dir, "tasks"), []byte(strconv.Itoa(c.Process.Pid)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := DirThreads(w)
	slices.Sort(got)
	want := slices.Sorted(slices.Values(pids))
	if err != nil || !slices.Equal(got, want) {
		t.Errorf("DirThreads(w) = %v, %v; want %v (its own and g's)", got, err, want)
	}
	if got, err := DirThreads(g); err != nil || !slices.Equal(got, pids[1:]) {
		t.Errorf("DirThreads(w/g) = %v, %v; want %v", got, err, pids[1:])
	}
}
