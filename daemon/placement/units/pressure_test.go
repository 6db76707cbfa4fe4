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

// countedTrigger is a pressure trigger the test fires; closed and paused
// say what the gate did to it.
type countedTrigger struct {
	c, done        chan struct{}
	closed, paused bool
}

func (t *countedTrigger) Pause()  { t.paused = true }
func (t *countedTrigger) Resume() { t.paused = false }

func (t *countedTrigger) C() <-chan struct{}    { return t.c }
func (t *countedTrigger) Done() <-chan struct{} { return t.done }
func (t *countedTrigger) Err() error            { return nil }
func (t *countedTrigger) Close() error          { t.closed = true; return nil }

// triggers hands a PressureGate countedTriggers and keeps them.
type triggers struct{ armed []*countedTrigger }

func (o *triggers) open(string, time.Duration, time.Duration) (placement.PressureSource, error) {
	t := &countedTrigger{c: make(chan struct{}, 1), done: make(chan struct{})}
	o.armed = append(o.armed, t)
	return t, nil
}

func (o *triggers) live() int {
	n := 0
	for _, t := range o.armed {
		if !t.closed {
			n++
		}
	}
	return n
}

// TestUnitsPressureArmedWithUnits: the units placement arms no pressure
// trigger while it has no unit — not at Open — arms one with the first
// unit adopted, keeps it for the second, and closes it after the last
// went; Close leaves none open.
func TestUnitsPressureArmedWithUnits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newMemUnits(t)
		var o triggers
		h.u.e.Pressure.Open = o.open
		h.open()
		if len(o.armed) != 0 || h.u.e.WakeC(placement.WakePressure) != nil {
			t.Fatalf("opened with no unit: %d armed, want none", len(o.armed))
		}
		h.m.start("a.service", "schedpolicyd.slice", true)
		h.follow(nil)
		if len(o.armed) != 1 || o.live() != 1 || h.u.e.WakeC(placement.WakePressure) != o.armed[0].c {
			t.Fatalf("1 unit: %d armed, %d open; want 1, listened to", len(o.armed), o.live())
		}
		h.m.start("b.service", "schedpolicyd.slice", true)
		h.follow(nil)
		h.m.stop("a.service")
		h.follow(nil)
		if len(h.u.workloads) != 1 || len(o.armed) != 1 || o.live() != 1 {
			t.Fatalf("units %v: %d armed, %d open; want the first trigger kept", h.u.Names(), len(o.armed), o.live())
		}
		h.m.stop("b.service")
		h.follow(nil)
		if len(h.u.workloads) != 0 || o.live() != 0 || h.u.e.WakeC(placement.WakePressure) != nil {
			t.Fatalf("no unit left (%v): %d open, want the trigger closed", h.u.Names(), o.live())
		}
		h.m.start("c.service", "schedpolicyd.slice", true)
		h.follow(nil)
		if len(o.armed) != 2 || o.live() != 1 {
			t.Fatalf("a unit again: %d armed, %d open; want a second arming", len(o.armed), o.live())
		}
		h.u.Close()
		if o.live() != 0 {
			t.Fatalf("after Close: %d open", o.live())
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
		var o triggers
		u.e.Pressure.Open = o.open
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
			o.armed[len(o.armed)-1].c <- struct{}{}
			<-c
			u.e.OnWake(placement.WakePressure).Do(replan)
		}
		resumeAt := func(d time.Duration) {
			t.Helper()
			time.Sleep(d - time.Nanosecond)
			synctest.Wait()
			select {
			case <-u.e.WakeC(placement.WakePressureResume):
				t.Fatalf("resumed before %v", d)
			default:
			}
			time.Sleep(time.Nanosecond)
			synctest.Wait()
			select {
			case <-u.e.WakeC(placement.WakePressureResume):
			default:
				t.Fatalf("not resumed after %v", d)
			}
			u.e.OnWake(placement.WakePressureResume).Do(replan)
		}

		wake()
		tr := o.armed[0]
		if !tr.paused || u.e.WakeC(placement.WakePressure) != nil || u.e.Pressure.Backoff() != time.Second {
			t.Fatalf("nothing stalled: paused %v, backoff %v; want muted for 1s", tr.paused, u.e.Pressure.Backoff())
		}
		resumeAt(time.Second)
		wake()
		if !tr.paused || u.e.Pressure.Backoff() != 2*time.Second {
			t.Fatalf("nothing stalled again: paused %v, backoff %v; want muted for 2s", tr.paused, u.e.Pressure.Backoff())
		}
		resumeAt(2 * time.Second)
		total += 1_000 // 1 ms of its own stall
		usage += 100_000
		put()
		wake()
		if tr.paused || u.e.WakeC(placement.WakePressure) != tr.c || u.e.Pressure.Backoff() != 0 || u.e.ConfirmC() == nil {
			t.Fatalf("the unit stalled: paused %v, backoff %v, confirming %v; want listened to, back-off reset, a confirmation", tr.paused, u.e.Pressure.Backoff(), u.e.ConfirmC() != nil)
		}
		u.e.Confirm.Drop()
		wake()
		if u.e.Pressure.Backoff() != time.Second {
			t.Fatalf("nothing stalled after the reset: backoff %v, want 1s", u.e.Pressure.Backoff())
		}
		if n := u.e.Stats.PressureWakes.Load(); n != 4 {
			t.Fatalf("%d pressure wakes counted, want 4", n)
		}
		if len(o.armed) != 1 || o.live() != 1 {
			t.Fatalf("%d armed, %d open; want the one trigger throughout", len(o.armed), o.live())
		}
	})
}
