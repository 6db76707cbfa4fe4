package cgroupfs

// Real CPU hotplug of CPU 1 on a real cgroup v1 parent (moved from
// package daemon, where each booted a daemon: TestRestoreRealHotplug,
// the trial case N5 TestRestoreRealHotplugCrash). They take a CPU of the
// machine offline, which trims every v1 cpuset on it: they run only with
// SCHEDPOLICYD_TEST_HOTPLUG=1 (testutil.NeedRealHotplug), alone.

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/schedpolicyd/schedpolicyd/daemon/statefile"
	"github.com/schedpolicyd/schedpolicyd/internal/testutil"
	"github.com/schedpolicyd/schedpolicyd/policy"
	"github.com/schedpolicyd/schedpolicyd/sysfs"
)

// cpuOnline sets the real CPU 1 online or offline, skipping where that is
// impossible, and puts it back online at cleanup.
func cpuOnline(t *testing.T, on bool) {
	t.Helper()
	testutil.NeedRealHotplug(t)
	const f = "/sys/devices/system/cpu/cpu1/online"
	v := "0"
	if on {
		v = "1"
	}
	if err := os.WriteFile(f, []byte(v), 0o644); err != nil {
		t.Skipf("cannot set %s to %s here: %v", f, v, err)
	}
	t.Cleanup(func() { os.WriteFile(f, []byte("1"), 0o644) })
}

// TestRestoreRealHotplug (real CPU hotplug of CPU 1): (a) a run started
// with CPU 1 offline gives it to the parent and the workloads once it is
// back; (b) a stop while CPU 1 is offline restores originals in part and
// keeps them recorded, with the parent's; the next run, with CPU 1 back,
// restores them in full and drops the records.
func TestRestoreRealHotplug(t *testing.T) {
	testutil.NeedRealHotplug(t)
	c := realTree(t)
	for n, v := range trialOriginals {
		c.child(n, v)
	}
	state := t.TempDir()

	// (b) first: packed, then CPU 1 goes offline, then a stop.
	r := run(t, c.parent, state, policy.Performance)
	r.apply(policy.Powersaving)
	cpuOnline(t, false)
	r.hotplug(sysfs.NewCPUSet(0))
	r.stop()
	recs := map[string]statefile.Record{}
	for _, rec := range r.saved().Cgroups {
		recs[filepath.Base(rec.Path)] = rec
	}
	if rec := recs["c"]; rec.Original != "0-1" || !rec.Written() {
		t.Errorf("c's record after a stop with CPU 1 offline = %+v, want original 0-1 kept", rec)
	}
	if rec := recs[filepath.Base(c.parent)]; !rec.Parent || rec.Original != "0-1" {
		t.Errorf("parent's record = %+v, want original 0-1 kept", rec)
	}
	testutil.WantEq(t, "c with CPU 1 offline (its original's online part)", cpus(t, c.parent+"/c"), "0")

	// (a): a run started with CPU 1 offline; then it comes back.
	r = newRig(t, c.parent, state, nil)
	r.online = sysfs.NewCPUSet(0)
	r.start(policy.Performance)
	cpuOnline(t, true)
	r.hotplug(sysfs.NewCPUSet(0, 1))
	back := func() string { return "parent=" + cpus(t, c.parent) + " " + cpusOf(t, c.parent, "a", "b", "c") }
	r.until("CPU 1 back in the parent and the workloads", func() bool { return back() == "parent=0-1 a=0-1 b=0-1 c=0-1" })
	r.stop()
	testutil.WantEq(t, "after the stop with CPU 1 back", cpusOf(t, c.parent, "a", "b", "c"), "a=0 b=1 c=0-1")
	if st := r.saved(); len(st.Cgroups) != 0 {
		t.Errorf("records left after everything was restored: %+v", st.Cgroups)
	}
}

// TestRestoreRealHotplugCrash (N5, real CPU hotplug): a crash while CPU 1
// is offline, and CPU 1 back before the next start: the kernel trimmed
// the workloads against the parent's CPUs as that run finds them, so they
// are still ours and get their originals back.
func TestRestoreRealHotplugCrash(t *testing.T) {
	testutil.NeedRealHotplug(t)
	c := realTree(t)
	for n, v := range trialOriginals {
		c.child(n, v)
	}
	state := t.TempDir()
	r := run(t, c.parent, state, policy.Performance)
	testutil.WantEq(t, "performance: a and b spread", cpusOf(t, c.parent, "a", "b"), "a=0-1 b=0-1")
	cpuOnline(t, false)
	r.hotplug(sysfs.NewCPUSet(0))
	r.crash() // as kill -9 with CPU 1 offline leaves it
	cpuOnline(t, true)
	run(t, c.parent, state, policy.Performance).stop()
	wantOriginals(t, c)
}
