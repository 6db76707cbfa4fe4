package daemon

// Cases a hostile trial of the restore and lock rules brought up (N1–N7),
// on real cgroup v1 cpusets.

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/schedpolicyd/schedpolicyd/daemon/statefile"
	"github.com/schedpolicyd/schedpolicyd/internal/testutil"
	"github.com/schedpolicyd/schedpolicyd/policy"
)

func packedSetup(t *testing.T) (parent string, m mockLaptop, run func(root string) (*Daemon, context.CancelFunc, <-chan error)) {
	t.Helper()
	parent = testutil.CpusetV1Parent(t, "schedpolicyd-test")
	needTwoCPUs(t, parent)
	v1Workloads(t, parent, map[string]string{"a": "0", "b": "1", "c": "0-1"})
	m = thisMachineLaptop(t)
	run = func(root string) (*Daemon, context.CancelFunc, <-chan error) {
		return m.startCfg(t, func(c *Config) { c.CgroupRoot = root })
	}
	return parent, m, run
}

func wantOriginals(t *testing.T, parent string, names ...string) {
	t.Helper()
	orig := map[string]string{"a": "0", "b": "1", "c": "0-1"}
	for i, n := range []string{"a", "b", "c"} {
		dir := filepath.Join(parent, n)
		if i < len(names) {
			dir = filepath.Join(parent, names[i])
		}
		if got := cpusOf(t, dir); got != orig[n] {
			t.Errorf("%s = %s, want its original %s", dir, got, orig[n])
		}
		if got := flagOf(t, dir); got != "1" {
			t.Errorf("%s sched_load_balance = %s, want 1 as found", dir, got)
		}
	}
}

// TestTrialRenamedWorkload (N3): a workload renamed while packed keeps its
// record (same inode) and is restored under its new name.
func TestTrialRenamedWorkload(t *testing.T) {
	parent, _, run := packedSetup(t)
	d, cancel, done := run(parent)
	setPolicy(t, d, policy.Powersaving)
	if cpusOf(t, parent+"/b") == "1" {
		t.Fatal("b not packed; the test needs it written")
	}
	if err := os.Rename(parent+"/b", parent+"/b2"); err != nil {
		t.Skipf("cannot rename a cgroup here: %v", err)
	}
	testutil.Eventually(t, "b2 adopted", func() (bool, string) {
		for _, w := range d.Snapshot().Workloads {
			if w.Name == "b2" {
				return true, ""
			}
		}
		return false, ""
	})
	cancel()
	<-done
	wantOriginals(t, parent, "a", "b2", "c")
}

// TestTrialSymlinkedRoot (N4): after a crash, a run that names the same
// parent through a symlink restores it: records are keyed by the resolved
// path.
func TestTrialSymlinkedRoot(t *testing.T) {
	parent, m, run := packedSetup(t)
	d, cancel, done := run(parent)
	setPolicy(t, d, policy.Powersaving)
	dirs := []string{parent + "/a", parent + "/b", parent + "/c"}
	putBack := crashState(t, m.state, dirs)
	cancel()
	<-done
	putBack()
	link := filepath.Join(t.TempDir(), "cs")
	if err := os.Symlink(filepath.Dir(parent), link); err != nil {
		t.Fatal(err)
	}
	_, cancel, done = run(filepath.Join(link, filepath.Base(parent)))
	cancel()
	<-done
	wantOriginals(t, parent)
}

// TestTrialParentRenamedAway (N2): the managed parent renamed away while
// its children are packed: what is ours in them is put back through the
// files held open before they are forgotten.
func TestTrialParentRenamedAway(t *testing.T) {
	parent, _, run := packedSetup(t)
	d, cancel, done := run(parent)
	setPolicy(t, d, policy.Powersaving)
	old := parent + "-old"
	if err := os.Rename(parent, old); err != nil {
		t.Skipf("cannot rename a cgroup here: %v", err)
	}
	t.Cleanup(func() {
		for _, n := range []string{"a", "b", "c"} {
			os.Remove(filepath.Join(old, n))
		}
		os.Remove(old)
	})
	testutil.Eventually(t, "parent recreated", func() (bool, string) {
		_, err := os.Stat(parent + "/cpuset.cpus")
		return err == nil && len(d.Snapshot().Workloads) == 0, ""
	})
	cancel()
	<-done
	for n, want := range map[string]string{"a": "0", "b": "1", "c": "0-1"} {
		if got := cpusOf(t, filepath.Join(old, n)); got != want {
			t.Errorf("%s-old/%s = %s, want its original %s", filepath.Base(parent), n, got, want)
		}
	}
}

// TestTrialCorruptStateKept (N7): a state.json that cannot be used is kept
// beside (state.json.corrupt-TIME), never overwritten and lost.
func TestTrialCorruptStateKept(t *testing.T) {
	m := newMockLaptop(t)
	os.MkdirAll(m.state, 0o755)
	bad := `{"version": 2,, "cgroups": [{"path": "/x", "original_cpus": "1"}]}`
	if err := os.WriteFile(filepath.Join(m.state, statefile.StateFile), []byte(bad), 0o644); err != nil {
		t.Fatal(err)
	}
	_, cancel, done := m.start(t)
	cancel()
	<-done
	kept, _ := filepath.Glob(filepath.Join(m.state, statefile.StateFile+".corrupt-*"))
	if len(kept) != 1 {
		t.Fatalf("kept files %v, want one state.json.corrupt-*", kept)
	}
	if got := testutil.Read(t, kept[0]); got != bad {
		t.Errorf("kept file holds %q, want the bad file as it was", got)
	}
}

// TestTrialPendingPromoted (N1): a crash after a write recorded only as
// pending; the next run finds that value in the file, so it is the
// applied one now: a later write that fails (EBUSY: a child of the
// workload uses a CPU the plan takes away) does not lose it, and the stop
// restores the original.
func TestTrialPendingPromoted(t *testing.T) {
	parent := testutil.CpusetV1Parent(t, "schedpolicyd-test")
	needTwoCPUs(t, parent)
	v1Workloads(t, parent, map[string]string{"a": "0-1"})
	v1Workloads(t, parent+"/a", map[string]string{"g": "1"})
	m := thisMachineLaptop(t)
	a := filepath.Join(parent, "a")
	if err := statefile.SaveState(m.state, statefile.State{
		Knob: policy.Knob{PowerAware: policy.PowerAwareOn, PowerAwarePolicy: policy.Powersaving}, Chosen: true,
		Cgroups: []statefile.Record{{Path: a, Inode: dirInode(a), Values: statefile.Values{Original: "1", Pending: "0-1"}}},
	}); err != nil {
		t.Fatal(err)
	}
	_, cancel, done := m.startCfg(t, func(c *Config) { c.CgroupRoot = parent })
	cancel()
	<-done
	if got := cpusOf(t, a); got != "1" {
		t.Errorf("a = %s after the stop, want its original 1", got)
	}
	if st, _ := statefile.LoadState(m.state); len(originals(st)) != 0 {
		t.Errorf("records left: %+v", st.Cgroups)
	}
}

// TestRestoreRealHotplugCrash (N5, real CPU hotplug): a crash while CPU 1
// is offline, and CPU 1 back before the next start: the kernel trimmed
// the workloads against the parent's CPUs as that run finds them, so they
// are still ours and get their originals back.
func TestRestoreRealHotplugCrash(t *testing.T) {
	testutil.NeedRealHotplug(t)
	parent, m, run := packedSetup(t)
	d, cancel, done := run(parent)
	testutil.Eventually(t, "performance: a and b spread", func() (bool, string) {
		return cpusOf(t, parent+"/a") == "0-1" && cpusOf(t, parent+"/b") == "0-1", ""
	})
	cpuOnline(t, false)
	hotplug(t, d, m, "0")
	dirs := []string{parent + "/a", parent + "/b", parent + "/c"}
	putBack := crashState(t, m.state, dirs)
	cancel()
	<-done
	putBack() // as kill -9 with CPU 1 offline leaves it
	cpuOnline(t, true)
	testutil.Put(t, filepath.Join(m.sys, "devices/system/cpu/online"), "0-1")
	_, cancel, done = run(parent)
	cancel()
	<-done
	wantOriginals(t, parent)
}
