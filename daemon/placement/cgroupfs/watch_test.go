package cgroupfs

// Workloads coming, going, changing and finishing under the managed
// parent's watch (moved from package daemon, where each booted a daemon
// and polled its snapshot: TestDaemonRecreatesVanishedParent,
// TestAdoptRetriesChildNotReady, TestWorkloadRemovedBetweenPlanAndWrite,
// TestDaemonWorkloadReplaced, TestRestoreHandEdit, TestDaemonReapsOnExit,
// TestDaemonReapsAfterRestart). The rig handles the watch's wakes as the
// loop does (rig.until), so each test waits for the events it caused, not
// for time.

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/schedpolicyd/schedpolicyd/internal/testutil"
	"github.com/schedpolicyd/schedpolicyd/policy"
)

// TestRecreatesVanishedParent, on the mock cgroup v2 tree: when the
// managed parent disappears it is made again, and the children that come
// back are adopted.
func TestRecreatesVanishedParent(t *testing.T) {
	c, r := runAB(t)
	if err := os.RemoveAll(c.parent); err != nil {
		t.Fatal(err)
	}
	r.until("parent recreated", func() bool {
		_, err := os.Stat(c.parent)
		return err == nil
	})
	testutil.WantEq(t, "workloads once the parent is made again", r.names(), "")
	// A mock v2 parent needs the files the kernel would create in it; the
	// placement keeps retrying until the cgroup is usable.
	c.fillParent()
	c.child("z", "")
	r.until("z adopted and placed", func() bool { return r.names() == "z" && cpus(t, c.parent+"/z") == "0-1" })
	testutil.WantEq(t, "z's status", fmt.Sprint(r.p.Status()[0].CPUs), "0-1")
}

// TestAdoptRetriesChildNotReady, on the mock cgroup v2 tree: a child
// whose cpuset.cpus cannot be read yet (a directory tree where the files
// come after mkdir) is not dropped: it is retried when its files appear,
// with no other hint.
func TestAdoptRetriesChildNotReady(t *testing.T) {
	c := mockTree(t)
	r := run(t, c.parent, "", policy.Performance)
	dir := filepath.Join(c.parent, "c")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	// The watch sees c without files first.
	r.until("c seen, waiting", func() bool {
		return strings.Contains(fmt.Sprint(r.logged("cannot adopt this cgroup yet")), "workload=c")
	})
	testutil.WantEq(t, "workloads while c waits", r.names(), "")
	testutil.Put(t, filepath.Join(dir, "cpu.stat"), "usage_usec 0")
	testutil.Put(t, filepath.Join(dir, "cpuset.cpus"), "1")
	r.until("c adopted", func() bool { return r.names() == "c" })
}

// TestWorkloadRemovedBetweenPlanAndWrite: the workload's directory goes
// away after the placement listed it and before it writes the new
// cpuset. The write fails with ENOENT; the workload is forgotten quietly,
// the others are placed, nothing counts as an error, and the placement
// goes on. On the mock tree and on a real v1 parent (rmdir of a real
// cgroup, then the write).
func TestWorkloadRemovedBetweenPlanAndWrite(t *testing.T) {
	forEachTree(t, func(t *testing.T, c *cgtree) {
		c.child("a", "")
		c.child("b", "")
		r := run(t, c.parent, "", policy.Performance)
		testutil.WantEq(t, "workloads", r.names(), "a b")
		errors := r.stats.Errors.Load()
		c.remove("a") // between the listing and the next plan's write
		r.apply(policy.Powersaving)
		testutil.WantEq(t, "workloads after the removal", r.names(), "b")
		testutil.WantEq(t, "b packed", cpusOf(t, c.parent, "b"), "b=0")
		if n := r.stats.Errors.Load() - errors; n != 0 {
			t.Errorf("a vanished workload counted as %d errors", n)
		}
		a := filepath.Join(c.parent, "a")
		if o, has := originals(r.saved())[a]; has {
			t.Errorf("state.json keeps a's original %q", o)
		}
	})
}

// TestWorkloadReplaced, on a real cgroup v1 parent: a workload removed
// and made again under the same name between two scans (rmdir and mkdir
// back to back) is a new cgroup: it is prepared (cpus and mems filled
// in, so tasks can be attached on v1) and managed, not mistaken for the
// old one.
func TestWorkloadReplaced(t *testing.T) {
	c := realTree(t)
	r := run(t, c.parent, "", policy.Performance)
	dir := filepath.Join(c.parent, "w1")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	r.until("w1 adopted", func() bool { return r.names() == "w1" })
	old := inode(t, dir)
	if err := syscall.Rmdir(dir); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	r.until("the new w1 prepared and managed", func() bool {
		return testutil.ReadTrim(t, filepath.Join(dir, "cpuset.mems")) != "" && r.names() == "w1" && r.p.workloads["w1"].rec.Inode != old
	})
	testutil.WantEq(t, "the new w1's mems", testutil.ReadTrim(t, filepath.Join(dir, "cpuset.mems")), testutil.ReadTrim(t, filepath.Join(c.parent, "cpuset.mems")))
	// A task can be attached, and a policy switch writes the new cgroup.
	sleeper := exec.Command("sleep", "100")
	if err := sleeper.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sleeper.Process.Kill(); sleeper.Wait() })
	testutil.Write(t, filepath.Join(dir, "cgroup.procs"), fmt.Sprint(sleeper.Process.Pid))
	r.apply(policy.Powersaving)
	testutil.WantEq(t, "w1 after powersaving", cpus(t, dir), "0")
	if n := r.stats.Errors.Load(); n != 0 {
		t.Errorf("%d refused writes", n)
	}
}

// TestRestoreHandEdit, on a real cgroup v1 parent: a cpuset changed by
// hand while the placement runs is the user's: its status shows it
// (override "user"), it is written no more, and a stop leaves it as the
// user set it while every other workload is restored. A value set just
// after adoption, before the first write, is never written over.
func TestRestoreHandEdit(t *testing.T) {
	c := realTree(t)
	for n, v := range trialOriginals {
		c.child(n, v)
	}
	r := run(t, c.parent, "", policy.Performance)
	testutil.WantEq(t, "performance: a and b spread", cpusOf(t, c.parent, "a", "b"), "a=0-1 b=0-1")
	testutil.Write(t, c.parent+"/c/cpuset.cpus", "1") // the user's
	status := func(n string) string {
		for _, w := range r.p.Status() {
			if w.Name == n {
				return w.CPUs + " " + string(w.Override)
			}
		}
		return ""
	}
	r.until("c shown as the user's", func() bool { return status("c") == "1 "+ReleasedOverride })
	r.apply(policy.Powersaving)
	r.apply(policy.Performance)
	testutil.WantEq(t, "c after policy switches: the user's", cpus(t, c.parent+"/c"), "1")

	// Just after adoption, before the first write: e is the user's 0.
	e := c.child("e", "0-1")
	r.until("e adopted", func() bool { return strings.Contains(r.names(), "e") })
	testutil.Write(t, e+"/cpuset.cpus", "0")
	r.apply(policy.Powersaving) // in the same turn of the loop as the write
	testutil.WantEq(t, "e: the user's 0, not written over", cpus(t, e), "0")
	r.stop()
	testutil.WantEq(t, "after the stop", cpusOf(t, c.parent, "a", "b", "c", "e"), "a=0 b=1 c=1 e=0")
}

// TestReapsOnExit, on a real cgroup v1 parent: a workload the placement
// created is removed when its last task exits — seen through pidfd exit
// watches, not sampling (the rig never samples here). The first task
// leaves a child behind in the workload, so the placement must go on to
// watch that one.
func TestReapsOnExit(t *testing.T) {
	c := realTree(t)
	r := run(t, c.parent, "", policy.Performance)
	sh := exec.Command("sh", "-c", "read x; sleep 1000 </dev/null >/dev/null 2>&1 & echo $!")
	in, out := testutil.StartPiped(t, sh)
	path, err := r.e.Create("job", sh.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	r.decide("workload created", true)
	testutil.WantEq(t, "path", path, filepath.Join(c.parent, "job"))
	// sh forks the sleep inside the workload, prints its pid and exits.
	in.Write([]byte("go\n"))
	b, err := io.ReadAll(out)
	if err != nil {
		t.Fatal(err)
	}
	sh.Wait()
	var sleepPid int
	if _, err := fmt.Sscan(string(b), &sleepPid); err != nil {
		t.Fatalf("sleep pid from %q: %v", b, err)
	}
	sleeper, _ := os.FindProcess(sleepPid)
	t.Cleanup(func() { sleeper.Kill() })
	// sh's exit: the placement watches the sleep now.
	r.until("sh's exit handled", func() bool { return r.events == 1 })
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("job removed while its sleep still runs: %v", err)
	}
	testutil.WantEq(t, "workloads while the sleep runs", r.names(), "job")
	sleeper.Kill()
	r.until("the sleep's exit handled", func() bool { return r.events == 2 })
	// The rig never runs the periodic sample (whose refresh reaps too):
	// the removal came with the exit.
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Fatalf("job after its last task exited: %v, want removed", err)
	}
	testutil.WantEq(t, "workloads", r.names(), "")
	testutil.WantEq(t, "what the removal came with", r.last, "event cgroupfs.exitEvent")
}

// TestReapsAfterRestart, on a real cgroup v1 parent: a workload the
// placement created is still removed when its last task exits after a
// restart — and one whose task exited while no run was there is removed
// at the start — but a cgroup made again under a created one's name is
// not.
func TestReapsAfterRestart(t *testing.T) {
	c := realTree(t)
	state := t.TempDir()
	sleeper := func() *exec.Cmd {
		s := exec.Command("sleep", "1000")
		if err := s.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Process.Kill(); s.Wait() })
		return s
	}
	r := run(t, c.parent, state, policy.Performance)
	var jobs [3]*exec.Cmd
	for i, name := range []string{"live", "ended", "renewed"} {
		jobs[i] = sleeper()
		if _, err := r.e.Create(name, jobs[i].Process.Pid); err != nil {
			t.Fatal(err)
		}
		r.decide("workload created", true)
	}
	r.stop()
	// While no run is there: "ended" loses its task; "renewed" is removed
	// and made again by someone else (and holds a task of theirs).
	jobs[1].Process.Kill()
	jobs[1].Wait()
	renewed := filepath.Join(c.parent, "renewed")
	testutil.Write(t, filepath.Join(testutil.CpusetRoot, "cgroup.procs"), fmt.Sprint(jobs[2].Process.Pid))
	if err := syscall.Rmdir(renewed); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(renewed, 0o755); err != nil {
		t.Fatal(err)
	}
	r = run(t, c.parent, state, policy.Performance)
	if _, err := os.Stat(filepath.Join(c.parent, "ended")); !os.IsNotExist(err) {
		t.Errorf("ended after the start: %v, want removed", err)
	}
	testutil.WantEq(t, "workloads after the start", r.names(), "live renewed")
	jobs[0].Process.Kill()
	jobs[0].Wait()
	r.until("live removed when its task exited", func() bool {
		_, err := os.Stat(filepath.Join(c.parent, "live"))
		return os.IsNotExist(err)
	})
	testutil.WantEq(t, "workloads", r.names(), "renewed")
	if _, err := os.Stat(renewed); err != nil {
		t.Fatalf("a cgroup made again under a created one's name was removed: %v", err)
	}
}
