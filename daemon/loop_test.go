package daemon

import (
	"context"
	"path/filepath"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/schedpolicyd/schedpolicyd/acpi"
	"github.com/schedpolicyd/schedpolicyd/daemon/energy"
	"github.com/schedpolicyd/schedpolicyd/daemon/placement"
	"github.com/schedpolicyd/schedpolicyd/internal/testutil"
	"github.com/schedpolicyd/schedpolicyd/policy"
	"github.com/schedpolicyd/schedpolicyd/sysfs"
)

// The loop's timers under testing/synctest: the loop runs in a bubble, on
// its fake clock, with the placement engine driving an in-memory driver
// (fakeDriver) and in-memory sources, and each test asserts the exact
// instants at which it samples, decides, confirms and reads.

// fakeDriver is a driver of one workload, "w" on 1 CPU, that places
// nothing. canStop: it opens a pressure trigger (pressure fires it), so
// sampling stops once idle. It records when the loop made it sample and
// apply (offsets from t0), and at a pressure wake its workload is
// crowded, starting a real confirmation, read through rate.
type fakeDriver struct {
	e       *placement.Engine
	t0      time.Time
	base    time.Duration
	canStop bool
	backoff placement.SampleBackoff // the engine's at the start
	// busy says whether the n-th periodic sample (from 1) finds a
	// workload busy; nil: never.
	busy func(n int) bool
	// samples are the periodic samples' instants, wakes the pressure
	// wakes', applies the decisions', confirmed the confirmations' ends.
	samples, wakes, applies, confirmed []time.Duration
	// onApply, when set, makes the plan of the n-th apply.
	onApply func(n int) policy.Plan

	pressure chan struct{}
	rate     float64 // "w"'s runnable threads
}

var (
	_ placement.Driver    = (*fakeDriver)(nil)
	_ placement.Refresher = (*fakeDriver)(nil)
	_ placement.Confirmer = (*fakeDriver)(nil)
)

func (f *fakeDriver) since() time.Duration { return time.Since(f.t0) }

func (f *fakeDriver) Mode() string { return "fake" }

// Open arms the engine's pressure trigger where the driver has one
// (canStop), on an in-memory trigger that pressure fires; Close drops it.
func (f *fakeDriver) Open() error {
	if f.canStop {
		f.e.Pressure.Open = func(string, time.Duration, time.Duration) (placement.PressureSource, error) {
			return &testutil.FakePressureTrigger{Fires: f.pressure}, nil // never ends
		}
		f.e.Pressure.Configure(f.e.Log, "fake", f.Count())
	}
	return nil
}

func (f *fakeDriver) Close() { f.e.StopWakes() }

// Scan finds the one workload, which never changes.
func (f *fakeDriver) Scan() bool { return false }

// Refresh is a periodic sample: its instant is recorded.
func (f *fakeDriver) Refresh() (changed, busy bool) {
	f.samples = append(f.samples, f.since())
	return false, false
}

// Sample finds the workload busy as busy says of the last periodic
// sample.
func (f *fakeDriver) Sample() bool { return f.busy != nil && f.busy(len(f.samples)) }

// PlanInput records an apply; the driver has nothing to place (no plan
// stands) unless onApply makes the plan, which Write then puts in the
// engine's place.
func (f *fakeDriver) PlanInput(sysfs.CPUSet) (placement.PlanInput, bool) {
	f.applies = append(f.applies, f.since())
	return placement.PlanInput{}, f.onApply != nil
}

func (f *fakeDriver) Write(policy.Plan, []placement.Want) {
	f.e.Plan = f.onApply(len(f.applies))
}

// Restore has nothing to put back: the driver places nothing.
func (f *fakeDriver) Restore() bool { return true }

func (f *fakeDriver) Count() int { return 1 }

// Crowded: "w" is crowded at a pressure wake (recorded), at no sample.
func (f *fakeDriver) Crowded(atWake bool) placement.Crowding {
	if !atWake {
		return placement.Crowding{}
	}
	f.wakes = append(f.wakes, f.since())
	return placement.Crowding{Names: []string{"w"}, Field: "runnable_over_cpus", Desc: []string{"w:2/1"}}
}

func (f *fakeDriver) CPUs(string) int { return 1 }

func (f *fakeDriver) RunDelay(string) (run, wait time.Duration, err error) {
	return time.Duration(f.rate * float64(f.since())), 0, nil
}

// Saturated: a confirmation ended (recorded).
func (f *fakeDriver) Saturated([]string) { f.confirmed = append(f.confirmed, f.since()) }

// loopDaemon is a daemon whose engine drives f, its sample period f.base,
// made inside the bubble (so are its channels and the energy guard).
func loopDaemon(t *testing.T, f *fakeDriver) *Daemon {
	t.Helper()
	d, err := New(Config{SysfsRoot: t.TempDir(), StateDir: t.TempDir(), SampleInterval: f.base, Log: testutil.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	d.place = placement.NewEngine(&d.pcfg, d.log, &d.stats, d.done)
	f.e = d.place
	d.place.Drive(f)
	d.place.Backoff = f.backoff
	if err := d.place.Open(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.place.Close)
	d.dec.knob = policy.DefaultKnob()
	d.energy.guard = &wrapGuard{}
	f.t0 = time.Now()
	return d
}

// runLoop runs d's loop on src until the test ends.
func runLoop(t *testing.T, d *Daemon, src loopSources) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- d.loop(ctx, src) }()
	t.Cleanup(func() {
		cancel()
		if err := <-errc; err != nil {
			t.Error(err)
		}
	})
}

func secs(s ...float64) []time.Duration {
	out := make([]time.Duration, len(s))
	for i, x := range s {
		out[i] = time.Duration(x * float64(time.Second))
	}
	return out
}

// TestLoopSamplingBacksOff: with nothing to wake the loop when a workload
// gets busy (no pressure trigger), sampling never stops; after
// IdleSamplesBeforeBackoff quiet samples its period doubles at each quiet
// sample, up to 32 periods, and a busy sample takes it back to one period
// at once.
func TestLoopSamplingBacksOff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &fakeDriver{base: time.Second, busy: func(n int) bool { return n == 7 }}
		d := loopDaemon(t, f)
		runLoop(t, d, loopSources{})
		time.Sleep(200 * time.Second)
		synctest.Wait()
		// Quiet at 1, 2, 3 s: then every 2, 4, 8, 16, 32 s. Busy at 33 s:
		// every second again, backing off from 36 s.
		want := secs(1, 2, 3, 5, 9, 17, 33, 34, 35, 36, 38, 42, 50, 66, 98, 130, 162, 194)
		if !slices.Equal(f.samples, want) {
			t.Fatalf("samples at %v, want %v", f.samples, want)
		}
	})
}

// TestLoopSamplingStopsWhileIdle: where a pressure trigger wakes the loop,
// sampling stops after IdleSamplesBeforeBackoff quiet samples, without
// backing off first, and a wake brings it back for as many. The ticker
// keeps its phase while sampling is off: the first sample after the wake
// is the tick that fell due meanwhile, at once, then they come on the
// whole seconds again.
func TestLoopSamplingStopsWhileIdle(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &fakeDriver{base: time.Second, canStop: true, pressure: make(chan struct{})}
		d := loopDaemon(t, f)
		runLoop(t, d, loopSources{})
		time.Sleep(10500 * time.Millisecond)
		synctest.Wait()
		if want := secs(1, 2, 3); !slices.Equal(f.samples, want) {
			t.Fatalf("samples at %v, want %v and none after", f.samples, want)
		}
		f.pressure <- struct{}{} // at 10.5 s
		time.Sleep(10 * time.Second)
		synctest.Wait()
		if want := secs(1, 2, 3, 10.5, 11, 12); !slices.Equal(f.samples, want) {
			t.Fatalf("samples at %v, want %v: at the wake (10.5 s), on the ticker's phase after, three, then none", f.samples, want)
		}
		if want := secs(10.5); !slices.Equal(f.wakes, want) {
			t.Fatalf("pressure wakes at %v, want %v", f.wakes, want)
		}
	})
}

// decideAt has d decide (recompute) at offset at from f.t0, through a
// request as a D-Bus call makes one.
func decideAt(t *testing.T, d *Daemon, f *fakeDriver, at time.Duration) {
	t.Helper()
	time.Sleep(time.Until(f.t0.Add(at)))
	if err := d.do(context.Background(), func() error { d.recompute("test", false); return nil }); err != nil {
		t.Fatal(err)
	}
}

// TestLoopLazyWake: a decision that leaves the plan Deferred while the
// loop does not sample gets one more decision just past the instant the
// lazy history clears (LazyResetAfter(SampleInterval) + lazyWakeMargin
// after the Deferred plan's decision), and none after a plan that is not
// Deferred. While the loop samples, the samples decide: no lazy wake.
func TestLoopLazyWake(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &fakeDriver{base: time.Second, canStop: true, backoff: idleBackoff()}
		f.onApply = func(n int) policy.Plan {
			if n == 1 {
				return policy.Plan{Deferred: true, Lazy: policy.LazyState{Last: time.Now()}}
			}
			return policy.Plan{}
		}
		d := loopDaemon(t, f)
		runLoop(t, d, loopSources{})
		decideAt(t, d, f, 500*time.Millisecond)
		time.Sleep(100 * time.Second)
		synctest.Wait()
		if want := secs(0.5, 8.51); !slices.Equal(f.applies, want) {
			t.Fatalf("decisions at %v, want %v: the Deferred plan's, then 8 s + 10 ms after it, once", f.applies, want)
		}
	})
	synctest.Test(t, func(t *testing.T) {
		// Sampling every 3 s, the plan Deferred since 0.5 s all along.
		f := &fakeDriver{base: 3 * time.Second, busy: func(int) bool { return true }}
		d := loopDaemon(t, f)
		last := f.t0.Add(500 * time.Millisecond)
		f.onApply = func(int) policy.Plan { return policy.Plan{Deferred: true, Lazy: policy.LazyState{Last: last}} }
		runLoop(t, d, loopSources{})
		decideAt(t, d, f, 500*time.Millisecond)
		time.Sleep(28500 * time.Millisecond) // past 0.5 s + 8 × 3 s + 10 ms
		synctest.Wait()
		if want := secs(0.5, 3, 6, 9, 12, 15, 18, 21, 24, 27); !slices.Equal(f.applies, want) {
			t.Fatalf("decisions at %v, want %v: the request's and each sample's, no lazy wake while sampling", f.applies, want)
		}
	})
}

// TestLazyWakeTimer: lazyWake fires at its deadline exactly, follows a new
// deadline, is disarmed by a zero one, and a deadline already past (a
// decision that kept the history after the wake) fires lazyWakeMargin
// later.
func TestLazyWakeTimer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		t0 := time.Now()
		var l lazyWake
		defer l.stop()
		c := l.c(t0.Add(5 * time.Second))
		time.Sleep(5*time.Second - time.Nanosecond)
		if testutil.Ready(c) {
			t.Fatal("fired before its deadline")
		}
		time.Sleep(time.Nanosecond)
		if !testutil.Ready(c) {
			t.Fatal("not fired at its deadline")
		}
		l.fired()
		// The same deadline, now past: lazyWakeMargin from now.
		c = l.c(t0.Add(5 * time.Second))
		time.Sleep(lazyWakeMargin - time.Nanosecond)
		if testutil.Ready(c) {
			t.Fatal("a past deadline fired before the margin")
		}
		time.Sleep(time.Nanosecond)
		if !testutil.Ready(c) {
			t.Fatal("a past deadline did not fire after the margin")
		}
		l.fired()
		// A later deadline replaces an earlier one.
		now := time.Now()
		l.c(now.Add(time.Second))
		c = l.c(now.Add(3 * time.Second))
		time.Sleep(2 * time.Second)
		if testutil.Ready(c) {
			t.Fatal("fired at the replaced deadline")
		}
		time.Sleep(time.Second)
		if !testutil.Ready(c) {
			t.Fatal("not fired at the new deadline")
		}
		l.fired()
		// Zero disarms.
		c = l.c(time.Now().Add(time.Second))
		if l.c(time.Time{}) != nil {
			t.Fatal("a zero deadline gave a channel")
		}
		time.Sleep(2 * time.Second)
		if testutil.Ready(c) {
			t.Fatal("fired after it was disarmed")
		}
	})
}

// TestLoopConfirmsWake: a pressure wake decides at once and starts a
// confirmation; the loop ends it exactly wakeConfirm later, and a
// saturated workload (two threads runnable on its one CPU) makes a second
// decision then.
func TestLoopConfirmsWake(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &fakeDriver{base: time.Second, canStop: true, backoff: idleBackoff(), pressure: make(chan struct{}), rate: 2}
		d := loopDaemon(t, f)
		runLoop(t, d, loopSources{})
		time.Sleep(10500 * time.Millisecond)
		f.pressure <- struct{}{}
		time.Sleep(100 * time.Millisecond) // not three samples: a second away
		synctest.Wait()
		if want := secs(10.53); !slices.Equal(f.confirmed, want) {
			t.Fatalf("confirmations ended at %v, want %v", f.confirmed, want)
		}
		// The wake's decision, the sample the wake brought back (the
		// tick due meanwhile: TestLoopSamplingStopsWhileIdle), the
		// confirmation's.
		if want := secs(10.5, 10.5, 10.53); !slices.Equal(f.applies, want) {
			t.Fatalf("decisions at %v, want %v: the wake's, its sample's, the confirmation's", f.applies, want)
		}
	})
}

// TestLoopEnergyGuard: with a RAPL counter that wraps every 20 s at its
// power limit, the meter is read every 10 s (half of it) while nothing
// else reads it, and a reading for another reason (a new power source
// closes the energy segment) starts the 10 s again from there.
func TestLoopEnergyGuard(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &fakeDriver{base: time.Second, canStop: true, backoff: idleBackoff()}
		d := loopDaemon(t, f)
		zone := filepath.Join(d.cfg.SysfsRoot, "class/powercap/intel-rapl:0")
		testutil.Put(t, zone+"/name", "package-0")
		testutil.Put(t, zone+"/energy_uj", "1000")
		testutil.Put(t, zone+"/max_energy_range_uj", "20000000")        // 20 J
		testutil.Put(t, zone+"/constraint_0_power_limit_uw", "1000000") // 1 W
		var reads []time.Duration
		now := func() time.Time { reads = append(reads, f.since()); return time.Now() }
		d.energy.meter = energy.NewMeter(d.fs, d.log, now, nil)
		d.energy.meter.Start(d.dec.energyKey(), false)
		if g := d.energy.meter.GuardAfter(); g != 10*time.Second {
			t.Fatalf("GuardAfter %v, want 10s", g)
		}
		d.energy.armGuard()
		power := make(chan acpi.State)
		runLoop(t, d, loopSources{power: power})
		time.Sleep(34 * time.Second)
		power <- acpi.State{Power: acpi.Decision{Source: acpi.Battery, Reason: "test"}, BatteryPercent: -1}
		time.Sleep(16 * time.Second)
		synctest.Wait()
		if want := secs(0, 10, 20, 30, 34, 44); !slices.Equal(reads, want) {
			t.Fatalf("meter read at %v, want %v", reads, want)
		}
	})
}

// pingCounter is a notifier that records the instants of the watchdog
// pings (offsets from t0).
type pingCounter struct {
	t0    time.Time
	pings []time.Duration
}

func (p *pingCounter) Ready(string) error                       { return nil }
func (p *pingCounter) Status(string) error                      { return nil }
func (p *pingCounter) Stopping() error                          { return nil }
func (p *pingCounter) WatchdogInterval() (time.Duration, error) { return 0, nil }
func (p *pingCounter) Watchdog() error {
	p.pings = append(p.pings, time.Since(p.t0))
	return nil
}

// TestLoopWatchdogAfterLongTurn: the watchdog is pinged on its ticker
// while the loop waits, and right after a turn that took longer than a
// second (a scan or an apply that a slow manager made last up to their
// timeouts), so that what systemd's watchdog measures is one turn, not
// that plus the ticker's phase. With WatchdogSec=30s (pings every 15 s)
// a 20 s turn starting 14 s after a ping used to leave 34 s between
// pings; now 20 s.
func TestLoopWatchdogAfterLongTurn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &fakeDriver{base: time.Hour}
		d := loopDaemon(t, f)
		p := &pingCounter{t0: f.t0}
		d.notify = p
		runLoop(t, d, loopSources{watchdog: 15 * time.Second})
		time.Sleep(44 * time.Second)
		synctest.Wait()
		// A turn of 20 s begins at 44 s (the last ping at 30 s).
		d.do(context.Background(), func() error { time.Sleep(20 * time.Second); return nil })
		synctest.Wait()
		time.Sleep(36 * time.Second) // to 100 s
		synctest.Wait()
		want := secs(15, 30, 64, 79, 94)
		if !slices.Equal(p.pings, want) {
			t.Fatalf("pings at %v, want %v", p.pings, want)
		}
		var gap time.Duration
		for i := 1; i < len(p.pings); i++ {
			gap = max(gap, p.pings[i]-p.pings[i-1])
		}
		if gap > 34*time.Second {
			t.Fatalf("longest gap between pings %v", gap)
		}
	})
}

// idleBackoff is a sampling back-off that has seen the quiet samples that
// stop sampling.
func idleBackoff() placement.SampleBackoff {
	var b placement.SampleBackoff
	for !b.Idle() {
		b.Sampled(false)
	}
	return b
}
