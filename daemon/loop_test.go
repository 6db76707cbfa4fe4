package daemon

import (
	"context"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/schedpolicyd/schedpolicyd/daemon/statefile"
	"github.com/schedpolicyd/schedpolicyd/internal/testutil"
	"github.com/schedpolicyd/schedpolicyd/policy"
	"github.com/schedpolicyd/schedpolicyd/sysfs"
)

// The loop's timers under testing/synctest: the loop runs in a bubble, on
// its fake clock, with an in-memory back end (fakeBackend) and in-memory
// sources, and each test asserts the exact instants at which it samples,
// decides, confirms and reads.

// fakeBackend is a back end that places nothing. It samples as the
// placements do (a sampleBackoff; canStop: a pressure trigger would wake
// the loop, so sampling stops once idle), records when the loop made it
// sample and apply (offsets from t0), and gives the loop a pressure wake
// (pressure) that starts a real confirmation of candidate "w" (1 CPU),
// read through runnable.
type fakeBackend struct {
	t0      time.Time
	base    time.Duration
	canStop bool
	backoff sampleBackoff
	// busy says whether the n-th periodic sample (from 1) finds a
	// workload busy; nil: never.
	busy func(n int) bool
	// samples are the periodic samples' instants, wakes the pressure
	// wakes', applies the decisions', confirmed the confirmations' ends.
	samples, wakes, applies, confirmed []time.Duration
	// plan is what lastPlan returns; onApply, when set, makes the next one.
	plan    policy.Plan
	onApply func(n int) policy.Plan

	pressure chan struct{}
	confirm  confirmation
	runnable time.Duration // "w"'s cumulative run + wait time
}

func (f *fakeBackend) since() time.Duration { return time.Since(f.t0) }

func (f *fakeBackend) mode() string                       { return "fake" }
func (f *fakeBackend) loadRecords(statefile.State)        {}
func (f *fakeBackend) putRecords(*statefile.State)        {}
func (f *fakeBackend) open() error                        { return nil }
func (f *fakeBackend) close()                             {}
func (f *fakeBackend) scan() bool                         { return false }
func (f *fakeBackend) restore() bool                      { return true }
func (f *fakeBackend) hotplug(before, after sysfs.CPUSet) {}
func (f *fakeBackend) rebalance()                         {}
func (f *fakeBackend) freshen()                           {}
func (f *fakeBackend) syncClock() bool                    { return false }
func (f *fakeBackend) eventsC() <-chan event              { return nil }
func (f *fakeBackend) onMsg(event, replanFunc)            {}
func (f *fakeBackend) create(string, int) (string, error) {
	return "", nil
}
func (f *fakeBackend) setOverride(string, policy.Policy) error { return nil }
func (f *fakeBackend) status() []WorkloadStatus                { return nil }
func (f *fakeBackend) count() int                              { return 1 }
func (f *fakeBackend) modelLoads(*modelInput)                  {}
func (f *fakeBackend) lastPlan() policy.Plan                   { return f.plan }
func (f *fakeBackend) placed() (int, int, []string)            { return 0, 0, nil }

func (f *fakeBackend) apply(policy.Policy, policy.Topology, sysfs.CPUSet, bool) {
	f.applies = append(f.applies, f.since())
	if f.onApply != nil {
		f.plan = f.onApply(len(f.applies))
	}
}

func (f *fakeBackend) sampling() bool             { return f.backoff.sampling(f.canStop) }
func (f *fakeBackend) sampleEvery() time.Duration { return f.backoff.every(f.base, f.canStop) }

func (f *fakeBackend) onSample() bool {
	f.samples = append(f.samples, f.since())
	f.backoff.sampled(f.busy != nil && f.busy(len(f.samples)))
	return false
}

func (f *fakeBackend) wakeC(k wake) <-chan struct{} {
	if k == wakePressure {
		return f.pressure
	}
	return nil
}

func (f *fakeBackend) confirmC() <-chan time.Time { return f.confirm.C() }

func (f *fakeBackend) read(string) (run, wait time.Duration, err error) { return f.runnable, 0, nil }

func (f *fakeBackend) onWake(k wake, replan replanFunc) {
	switch k {
	case wakePressure:
		// As the placements do: look at once, then every period, and
		// confirm the crowded workload.
		f.wakes = append(f.wakes, f.since())
		f.backoff.reset()
		f.confirm.start("cpu pressure", []string{"w"}, f.read)
		replan("cpu pressure", false)
	case wakeConfirmDue:
		f.confirmed = append(f.confirmed, f.since())
		if r := f.confirm.finish(func(string) int { return 1 }, f.read); len(r.names) > 0 {
			replan("crowded workload confirmed", false)
		}
	}
}

// loopDaemon is a daemon holding back end f, its sample period f.base,
// made inside the bubble (so are its channels and the energy guard).
func loopDaemon(t *testing.T, f *fakeBackend) *Daemon {
	t.Helper()
	d, err := New(Config{SysfsRoot: t.TempDir(), StateDir: t.TempDir(), SampleInterval: f.base, Log: testutil.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	d.place = f
	d.knob = policy.DefaultKnob()
	d.energyGuard = time.NewTimer(time.Hour)
	d.energyGuard.Stop()
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
// idleSamplesBeforeBackoff quiet samples its period doubles at each quiet
// sample, up to 32 periods, and a busy sample takes it back to one period
// at once.
func TestLoopSamplingBacksOff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &fakeBackend{base: time.Second, busy: func(n int) bool { return n == 7 }}
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
// sampling stops after idleSamplesBeforeBackoff quiet samples, without
// backing off first, and a wake brings it back for as many. The ticker
// keeps its phase while sampling is off: the first sample after the wake
// is the tick that fell due meanwhile, at once, then they come on the
// whole seconds again.
func TestLoopSamplingStopsWhileIdle(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &fakeBackend{base: time.Second, canStop: true, pressure: make(chan struct{})}
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
