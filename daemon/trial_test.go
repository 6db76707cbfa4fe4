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
