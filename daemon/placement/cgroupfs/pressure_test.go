package cgroupfs

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"testing/synctest"
	"time"

	"github.com/schedpolicyd/schedpolicyd/cgroup"
	"github.com/schedpolicyd/schedpolicyd/daemon/placement"
	"github.com/schedpolicyd/schedpolicyd/internal/testutil"
	"github.com/schedpolicyd/schedpolicyd/policy"
)

// quietWatch is a cgroupSource that never signals: the test scans.
type quietWatch struct{}

func (quietWatch) Changed() <-chan struct{}                { return nil }
func (quietWatch) Attached() <-chan struct{}               { return nil }
func (quietWatch) TakeAttached() map[string]bool           { return nil }
func (quietWatch) Written() <-chan struct{}                { return nil }
func (quietWatch) TakeWritten() (map[string]bool, bool)    { return nil, false }
func (quietWatch) WatchChild(string, cgroup.CgroupVersion) {}
func (quietWatch) UnwatchChild(string)                     {}
func (quietWatch) WatchDir(string)                         {}
func (quietWatch) UnwatchDir(string)                       {}
func (quietWatch) Close()                                  {}

// pressureRig is a cgroupfs placement on a mock cgroup v2 tree whose
// pressure triggers are the test's, kept in triggers with the file each
// was armed on (the parent's cpu.pressure) in file.
type pressureRig struct {
	t        *testing.T
	p        *Placement
	parent   string
	triggers testutil.FakePressureTriggers
	file     []string
}

func newPressureRig(t *testing.T) *pressureRig {
	t.Helper()
	root := t.TempDir()
	testutil.Put(t, filepath.Join(root, "cgroup.controllers"), "cpuset cpu")
	testutil.Put(t, filepath.Join(root, "cgroup.subtree_control"), "cpuset cpu")
	parent := filepath.Join(root, "schedpolicyd")
	testutil.Put(t, filepath.Join(parent, "cgroup.controllers"), "cpuset cpu")
	testutil.Put(t, filepath.Join(parent, "cgroup.subtree_control"), "cpuset")
	testutil.Put(t, filepath.Join(parent, "cpuset.cpus.effective"), "0-3")
	cfg := &placement.Config{CgroupRoot: parent, ProcRoot: filepath.Join(root, "proc"), SampleInterval: time.Second,
		UtilHalfLife: policy.DefaultHalfLife, NoTaskClock: true}
	r := &pressureRig{t: t, parent: parent}
	r.p = New(placement.NewEngine(cfg, testutil.Logger(t), &placement.Counters{}, nil))
	r.p.newWatch = func(string) (cgroupSource, error) { return quietWatch{}, nil }
	r.p.e.Pressure.Open = func(path string, stall, window time.Duration) (placement.PressureSource, error) {
		r.file = append(r.file, path)
		return r.triggers.Arm(), nil
	}
	r.p.e.Save = func() error { return nil }
	if err := r.p.Open(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.p.Close)
	return r
}

// add makes workload name (idle: its CPU time never moves) and scans.
func (r *pressureRig) add(name string) {
	r.t.Helper()
	dir := filepath.Join(r.parent, name)
	testutil.Put(r.t, filepath.Join(dir, "cpuset.cpus"), "")
	testutil.Put(r.t, filepath.Join(dir, "cpuset.cpus.effective"), "0-3")
	testutil.Put(r.t, filepath.Join(dir, "cpu.stat"), "usage_usec 0\nuser_usec 0\nsystem_usec 0")
	if !r.p.Scan() || r.p.workloads[name] == nil {
		r.t.Fatalf("%s not adopted", name)
	}
}

// remove removes workload name and scans.
func (r *pressureRig) remove(name string) {
	r.t.Helper()
	if err := os.RemoveAll(filepath.Join(r.parent, name)); err != nil {
		r.t.Fatal(err)
	}
	if !r.p.Scan() || r.p.workloads[name] != nil {
		r.t.Fatalf("%s not forgotten", name)
	}
}

// TestPressureArmedWithWorkloads: the cgroupfs placement arms no pressure
// trigger with no workload (WakeC(WakePressure) nil), arms one — on the
// managed v2 parent's cpu.pressure — with the first workload, keeps that
// one for the second, and closes it after the last is gone.
func TestPressureArmedWithWorkloads(t *testing.T) {
	r := newPressureRig(t)
	if len(r.triggers.Armed) != 0 || r.p.e.WakeC(placement.WakePressure) != nil || r.p.e.Sampling() {
		t.Fatalf("0 workloads: %d armed, sampling %v; want none, not sampling", len(r.triggers.Armed), r.p.e.Sampling())
	}
	r.add("a")
	if len(r.triggers.Armed) != 1 || r.triggers.Live() != 1 || r.p.e.WakeC(placement.WakePressure) != r.triggers.Armed[0].Fires {
		t.Fatalf("1 workload: %d armed, %d open; want 1, listened to", len(r.triggers.Armed), r.triggers.Live())
	}
	if want := filepath.Join(r.parent, "cpu.pressure"); r.file[0] != want {
		t.Fatalf("armed on %s, want %s", r.file[0], want)
	}
	r.add("b")
	r.remove("a")
	if len(r.triggers.Armed) != 1 || r.triggers.Live() != 1 {
		t.Fatalf("workloads a, b, then b: %d armed, %d open; want the first one kept", len(r.triggers.Armed), r.triggers.Live())
	}
	r.remove("b")
	if r.triggers.Live() != 0 || r.p.e.WakeC(placement.WakePressure) != nil || r.p.e.WakeC(placement.WakePressureDone) != nil {
		t.Fatalf("0 workloads again: %d open, want the trigger closed", r.triggers.Live())
	}
	r.add("c")
	if len(r.triggers.Armed) != 2 || r.triggers.Live() != 1 {
		t.Fatalf("a workload again: %d armed, %d open; want a second arming", len(r.triggers.Armed), r.triggers.Live())
	}
}

// TestPressureWakeBacksOff: a pressure wake that finds no workload of the
// placement's crowded (here every one is idle) mutes the trigger for 1 s
// (WakeC(WakePressure) nil, the trigger paused, kept), keeps sampling
// stopped (the wake's sample counts as a periodic one) and still replans;
// WakePressureResume at the end of the 1 s listens again, and the next
// such wake mutes it for 2 s. A new workload during a mute listens at
// once and starts the back-off again. One trigger throughout.
func TestPressureWakeBacksOff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newPressureRig(t)
		r.add("a")
		for i := 0; i < 3; i++ {
			r.p.e.OnSample() // quiet: sampling stops
		}
		if r.p.e.Sampling() {
			t.Fatal("still sampling after 3 quiet samples")
		}
		var replans []string
		replan := func(why string, force bool) { replans = append(replans, fmt.Sprintf("%s/%v", why, force)) }
		wake := func() {
			t.Helper()
			select {
			case <-r.p.e.WakeC(placement.WakePressure):
			default:
				r.triggers.Armed[len(r.triggers.Armed)-1].Fires <- struct{}{}
				<-r.p.e.WakeC(placement.WakePressure)
			}
			r.p.e.OnWake(placement.WakePressure).Do(replan)
		}
		// resumeAt waits for the mute's end, exactly after d.
		resumeAt := func(d time.Duration) {
			t.Helper()
			time.Sleep(d - time.Nanosecond)
			if testutil.Ready(r.p.e.WakeC(placement.WakePressureResume)) {
				t.Fatalf("resumed before %v", d)
			}
			time.Sleep(time.Nanosecond)
			if !testutil.Ready(r.p.e.WakeC(placement.WakePressureResume)) {
				t.Fatalf("not resumed after %v", d)
			}
			r.p.e.OnWake(placement.WakePressureResume).Do(replan)
		}

		wake()
		tr := r.triggers.Armed[0]
		if !tr.Paused || r.p.e.WakeC(placement.WakePressure) != nil || r.p.e.Pressure.Backoff() != time.Second || r.p.e.Sampling() {
			t.Fatalf("after a wake with nothing crowded: paused %v, backoff %v, sampling %v; want muted for 1s, not sampling", tr.Paused, r.p.e.Pressure.Backoff(), r.p.e.Sampling())
		}
		resumeAt(time.Second)
		if tr.Paused || r.p.e.WakeC(placement.WakePressure) != tr.Fires {
			t.Fatalf("after the 1s mute: paused %v; want listened to again", tr.Paused)
		}
		wake()
		if r.p.e.Pressure.Backoff() != 2*time.Second || !tr.Paused {
			t.Fatalf("second wake: backoff %v, paused %v; want muted for 2s", r.p.e.Pressure.Backoff(), tr.Paused)
		}
		resumeAt(2 * time.Second)
		wake()
		if r.p.e.Pressure.Backoff() != 4*time.Second {
			t.Fatalf("third wake: backoff %v, want 4s", r.p.e.Pressure.Backoff())
		}
		r.add("b")
		if tr.Paused || r.p.e.WakeC(placement.WakePressure) != tr.Fires || r.p.e.Pressure.Backoff() != 0 || r.p.e.WakeC(placement.WakePressureResume) != nil {
			t.Fatalf("a workload added while muted: paused %v, backoff %v; want listened to, back-off reset", tr.Paused, r.p.e.Pressure.Backoff())
		}
		if len(r.triggers.Armed) != 1 || r.triggers.Live() != 1 {
			t.Fatalf("%d armed, %d open; want the one trigger throughout", len(r.triggers.Armed), r.triggers.Live())
		}
		if s := r.p.e.Stats.PressureWakes.Load(); s != 3 {
			t.Fatalf("%d pressure wakes counted, want 3", s)
		}
		if fmt.Sprint(replans) != "[cpu pressure/false cpu pressure/false cpu pressure/false]" {
			t.Fatalf("replans %v", replans)
		}
	})
}
