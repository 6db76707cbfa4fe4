package units

import (
	"fmt"
	"path/filepath"
	"testing"
	"testing/synctest"
	"time"

	"github.com/schedpolicyd/schedpolicyd/daemon/placement"
	"github.com/schedpolicyd/schedpolicyd/internal/testutil"
	"github.com/schedpolicyd/schedpolicyd/policy"
	"github.com/schedpolicyd/schedpolicyd/sysfs"
)

// TestUnitsPressureArmedWithUnits: the units placement arms no pressure
// trigger while it has no unit — not at Open — arms one with the first
// unit adopted, keeps it for the second, and closes it after the last
// went; Close leaves none open.
func TestUnitsPressureArmedWithUnits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newMemUnits(t)
		var o testutil.FakePressureTriggers
		h.u.e.Pressure.Open = func(string, time.Duration, time.Duration) (placement.PressureSource, error) { return o.Arm(), nil }
		h.open()
		if len(o.Armed) != 0 || h.u.e.WakeC(placement.WakePressure) != nil {
			t.Fatalf("opened with no unit: %d armed, want none", len(o.Armed))
		}
		h.m.Start("a.service", "schedpolicyd.slice", true)
		h.follow(nil)
		if len(o.Armed) != 1 || o.Live() != 1 || h.u.e.WakeC(placement.WakePressure) != o.Armed[0].Fires {
			t.Fatalf("1 unit: %d armed, %d open; want 1, listened to", len(o.Armed), o.Live())
		}
		h.m.Start("b.service", "schedpolicyd.slice", true)
		h.follow(nil)
		h.m.Stop("a.service")
		h.follow(nil)
		if len(h.u.workloads) != 1 || len(o.Armed) != 1 || o.Live() != 1 {
			t.Fatalf("units %v: %d armed, %d open; want the first trigger kept", h.u.Names(), len(o.Armed), o.Live())
		}
		h.m.Stop("b.service")
		h.follow(nil)
		if len(h.u.workloads) != 0 || o.Live() != 0 || h.u.e.WakeC(placement.WakePressure) != nil {
			t.Fatalf("no unit left (%v): %d open, want the trigger closed", h.u.Names(), o.Live())
		}
		h.m.Start("c.service", "schedpolicyd.slice", true)
		h.follow(nil)
		if len(o.Armed) != 2 || o.Live() != 1 {
			t.Fatalf("a unit again: %d armed, %d open; want a second arming", len(o.Armed), o.Live())
		}
		h.u.Close()
		if o.Live() != 0 {
			t.Fatalf("after Close: %d open", o.Live())
		}
	})
}

// TestUnitsPressureWakeBacksOff: a pressure wake that finds no unit with
// AllowedCPUs= set stalled mutes the trigger (paused, not listened to)
// for 1 s, then (resumed at exactly 1 s) 2 s; a wake that finds the
// packed unit stalled (1 ms of its own cpu.pressure since the last
// sample) keeps listening, starts a confirmation and the back-off again:
// the next empty wake mutes it for 1 s. One trigger throughout.
func TestUnitsPressureWakeBacksOff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		root := t.TempDir()
		unit := filepath.Join(root, "system.slice/spin.service")
		testutil.Put(t, filepath.Join(unit, "cgroup.threads"), "")
		usage, total := 1_000_000, 1_000 // µs
		put := func() {
			testutil.Put(t, filepath.Join(unit, "cpu.stat"), fmt.Sprintf("usage_usec %d\nuser_usec 0\nsystem_usec 0\n", usage))
			testutil.Put(t, filepath.Join(unit, "cpu.pressure"), fmt.Sprintf("some avg10=0.00 avg60=0.00 avg300=0.00 total=%d\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n", total))
		}
		put()
		log := testutil.Logger(t)
		u := &Placement{
			e:       placement.NewEngine(&placement.Config{UtilHalfLife: policy.DefaultHalfLife, Log: log}, log, &placement.Counters{}, nil),
			unified: true, procRoot: filepath.Join(root, "proc"),
			workloads: map[string]*unitWorkload{
				"spin.service": {name: "spin.service", cgroup: unit, cpus: sysfs.NewCPUSet(0), lastAt: time.Now()},
			},
		}
		u.attach()
		var o testutil.FakePressureTriggers
		u.e.Pressure.Open = func(string, time.Duration, time.Duration) (placement.PressureSource, error) { return o.Arm(), nil }
		u.e.Pressure.Configure(log, "/proc/pressure/cpu", len(u.workloads))
		t.Cleanup(u.e.Pressure.Close)
		u.Sample() // the first read of the stall total
		replan := func(string, bool) {}
		wake := func() {
			t.Helper()
			c := u.e.WakeC(placement.WakePressure)
			if c == nil {
				t.Fatal("no pressure trigger to wake")
			}
			o.Armed[len(o.Armed)-1].Fires <- struct{}{}
			<-c
			u.e.OnWake(placement.WakePressure).Do(replan)
		}
		resumeAt := func(d time.Duration) {
			t.Helper()
			time.Sleep(d - time.Nanosecond)
			if testutil.Ready(u.e.WakeC(placement.WakePressureResume)) {
				t.Fatalf("resumed before %v", d)
			}
			time.Sleep(time.Nanosecond)
			if !testutil.Ready(u.e.WakeC(placement.WakePressureResume)) {
				t.Fatalf("not resumed after %v", d)
			}
			u.e.OnWake(placement.WakePressureResume).Do(replan)
		}

		wake()
		tr := o.Armed[0]
		if !tr.Paused || u.e.WakeC(placement.WakePressure) != nil || u.e.Pressure.Backoff() != time.Second {
			t.Fatalf("nothing stalled: paused %v, backoff %v; want muted for 1s", tr.Paused, u.e.Pressure.Backoff())
		}
		resumeAt(time.Second)
		wake()
		if !tr.Paused || u.e.Pressure.Backoff() != 2*time.Second {
			t.Fatalf("nothing stalled again: paused %v, backoff %v; want muted for 2s", tr.Paused, u.e.Pressure.Backoff())
		}
		resumeAt(2 * time.Second)
		total += 1_000 // 1 ms of its own stall
		usage += 100_000
		put()
		wake()
		if tr.Paused || u.e.WakeC(placement.WakePressure) != tr.Fires || u.e.Pressure.Backoff() != 0 || u.e.ConfirmC() == nil {
			t.Fatalf("the unit stalled: paused %v, backoff %v, confirming %v; want listened to, back-off reset, a confirmation", tr.Paused, u.e.Pressure.Backoff(), u.e.ConfirmC() != nil)
		}
		u.e.Confirm.Drop()
		wake()
		if u.e.Pressure.Backoff() != time.Second {
			t.Fatalf("nothing stalled after the reset: backoff %v, want 1s", u.e.Pressure.Backoff())
		}
		if n := u.e.Stats.PressureWakes.Load(); n != 4 {
			t.Fatalf("%d pressure wakes counted, want 4", n)
		}
		if len(o.Armed) != 1 || o.Live() != 1 {
			t.Fatalf("%d armed, %d open; want the one trigger throughout", len(o.Armed), o.Live())
		}
	})
}
