package placement

import (
	"errors"
	"fmt"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	logtest "github.com/sirupsen/logrus/hooks/test"

	"github.com/schedpolicyd/schedpolicyd/internal/testutil"
	"github.com/schedpolicyd/schedpolicyd/sysfs"
)

// fakeOpener records each arming as "STALL/WINDOW" and hands out
// the test's triggers, or refuses with refuse(stall, window) when that is
// set.
type fakeOpener struct {
	testutil.FakePressureTriggers
	opened []string
	refuse func(stall, window time.Duration) error
}

func (o *fakeOpener) open(path string, stall, window time.Duration) (PressureSource, error) {
	o.opened = append(o.opened, fmt.Sprintf("%v/%v", stall, window))
	if o.refuse != nil {
		if err := o.refuse(stall, window); err != nil {
			return nil, err
		}
	}
	return o.Arm(), nil
}

func newGate(t *testing.T, o *fakeOpener) *PressureGate {
	g := &PressureGate{Open: o.open}
	g.Configure(testutil.Logger(t), "/proc/pressure/cpu", 0)
	t.Cleanup(g.Close)
	return g
}

// TestPressureGateFollowsWorkloads: no trigger with 0 workloads; the first
// arms one (the narrow window), more keep that one, and it is closed (C and
// Done nil) after the last is gone; the next first arms again.
func TestPressureGateFollowsWorkloads(t *testing.T) {
	o := &fakeOpener{}
	g := newGate(t, o)
	if len(o.opened) != 0 || g.Armed() || g.C() != nil || g.Done() != nil || g.Covers() {
		t.Fatalf("0 workloads: opened %v, armed %v, covers %v; want nothing armed", o.opened, g.Armed(), g.Covers())
	}
	g.Changed(1)
	g.Changed(2)
	g.Changed(3)
	if fmt.Sprint(o.opened) != "[20ms/500ms]" || o.Live() != 1 || g.C() != o.Armed[0].Fires || !g.Covers() {
		t.Fatalf("3 workloads: opened %v (%d open), want [20ms/500ms] (1 open, listened to)", o.opened, o.Live())
	}
	g.Changed(2)
	g.Changed(1)
	if o.Live() != 1 {
		t.Fatalf("1 workload left: %d open, want 1", o.Live())
	}
	g.Changed(0)
	if o.Live() != 0 || g.Armed() || g.C() != nil || g.Done() != nil || g.Covers() {
		t.Fatalf("0 workloads again: %d open, armed %v; want none", o.Live(), g.Armed())
	}
	g.Changed(1)
	if fmt.Sprint(o.opened) != "[20ms/500ms 20ms/500ms]" || o.Live() != 1 {
		t.Fatalf("a workload again: opened %v (%d open), want a second arming", o.opened, o.Live())
	}
	g.Close()
	if o.Live() != 0 {
		t.Fatalf("after Close: %d open", o.Live())
	}
	g.Changed(1)
	if len(o.opened) != 2 {
		t.Fatalf("unconfigured after Close, yet armed: %v", o.opened)
	}
}

// TestPressureGateConfigureWithWorkloads: a back end opened (again) with
// workloads arms at once; one without arms nothing.
func TestPressureGateConfigureWithWorkloads(t *testing.T) {
	o := &fakeOpener{}
	g := &PressureGate{Open: o.open}
	g.Configure(testutil.Logger(t), "/x/cpu.pressure", 2)
	if o.Live() != 1 {
		t.Fatalf("configured with 2 workloads: %d open, want 1", o.Live())
	}
	g.Configure(testutil.Logger(t), "/y/cpu.pressure", 0)
	if o.Live() != 0 || len(o.opened) != 1 {
		t.Fatalf("configured again with none: %d open of %v, want 0 of 1", o.Live(), o.opened)
	}
}

// TestPressureGateRefusedOnce: a refused arming is logged once and not
// tried again — not at the next workload, not after the last is gone and
// another comes — until the gate is configured again (the back end
// reopened). Where the kernel has no PSI only the narrow window is tried;
// where it refuses the narrow one, the 2 s one is, and later armings use
// what was granted.
func TestPressureGateRefusedOnce(t *testing.T) {
	noPSI := func(time.Duration, time.Duration) error { return fmt.Errorf("%w: not procfs", sysfs.ErrNoPSI) }
	o := &fakeOpener{refuse: noPSI}
	log, hook := logtest.NewNullLogger()
	g := &PressureGate{Open: o.open}
	g.Configure(log, "/proc/pressure/cpu", 0)
	for _, n := range []int{1, 2, 0, 1, 0, 1} {
		g.Changed(n)
	}
	if fmt.Sprint(o.opened) != "[20ms/500ms]" || g.Armed() || g.Covers() {
		t.Fatalf("no PSI: opened %v, armed %v; want one try and nothing armed", o.opened, g.Armed())
	}
	var said []string
	for _, e := range hook.AllEntries() {
		said = append(said, e.Level.String()+" "+e.Message)
	}
	if want := "[info no CPU pressure trigger; while every workload is idle, sampling slows down instead of stopping]"; fmt.Sprint(said) != want {
		t.Fatalf("logged %q, want the refusal once at info level: %s", said, want)
	}
	g.Configure(log, "/proc/pressure/cpu", 1)
	if len(o.opened) != 2 {
		t.Fatalf("configured again: opened %v, want a second try", o.opened)
	}

	o = &fakeOpener{refuse: func(stall, window time.Duration) error {
		if window < 2*time.Second {
			return syscall.EINVAL
		}
		return nil
	}}
	g = newGate(t, o)
	g.Changed(1)
	g.Changed(0)
	g.Changed(1)
	if want := "[20ms/500ms 200ms/2s 200ms/2s]"; fmt.Sprint(o.opened) != want || o.Live() != 1 {
		t.Fatalf("narrow window refused: opened %v (%d open), want %s (1 open)", o.opened, o.Live(), want)
	}

	o = &fakeOpener{refuse: func(time.Duration, time.Duration) error { return syscall.EPERM }}
	g = newGate(t, o)
	g.Changed(1)
	g.Changed(0)
	g.Changed(1)
	if want := "[20ms/500ms 200ms/2s]"; fmt.Sprint(o.opened) != want {
		t.Fatalf("both refused: opened %v, want %s and no retry", o.opened, want)
	}
}

// TestPressureGateDropped: a trigger the kernel dropped (Done closed) is
// closed and not armed again, whatever the workloads do, until the next
// Configure.
func TestPressureGateDropped(t *testing.T) {
	o := &fakeOpener{}
	g := newGate(t, o)
	g.Changed(1)
	o.Armed[0].Failure = errors.New("the kernel closed it")
	close(o.Armed[0].Ends)
	if err := g.Dropped(); err == nil || err.Error() != "the kernel closed it" {
		t.Fatalf("Dropped() = %v", err)
	}
	g.Changed(2)
	g.Changed(0)
	g.Changed(1)
	if len(o.opened) != 1 || o.Live() != 0 || g.Covers() {
		t.Fatalf("after the drop: opened %v (%d open), want no re-arming", o.opened, o.Live())
	}
}

// TestPressureGateBackoffDoubles: each wake that finds nothing of ours
// crowded mutes the trigger for 1, 2, 4, 8, 16, 32, 32 s — ResumeC fires
// exactly then, not a nanosecond before, and Resume listens again —;
// while muted the trigger is kept (never armed afresh: a new one may fire
// at once) but paused and not listened to (C nil), and the gate still
// covers the workloads.
func TestPressureGateBackoffDoubles(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		o := &fakeOpener{}
		g := newGate(t, o)
		g.Changed(1)
		var mutes []time.Duration
		for i := 0; i < 7; i++ {
			mute := g.Woke(false)
			mutes = append(mutes, mute)
			if g.C() != nil || o.Live() != 1 || !o.Armed[0].Paused || !g.Muted() || !g.Covers() || g.Backoff() != mute {
				t.Fatalf("wake %d: listened to %v, %d open, paused %v, muted %v, covers %v, backoff %v; want kept, paused and muted for %v", i, g.C() != nil, o.Live(), o.Armed[0].Paused, g.Muted(), g.Covers(), g.Backoff(), mute)
			}
			time.Sleep(mute - time.Nanosecond)
			if testutil.Ready(g.ResumeC()) {
				t.Fatalf("wake %d: resumed before %v", i, mute)
			}
			time.Sleep(time.Nanosecond)
			if !testutil.Ready(g.ResumeC()) {
				t.Fatalf("wake %d: not resumed after %v", i, mute)
			}
			g.Resume()
			if g.C() != o.Armed[0].Fires || o.Live() != 1 || o.Armed[0].Paused || g.Muted() || g.ResumeC() != nil {
				t.Fatalf("wake %d resumed: listened to %v, %d open, paused %v, muted %v", i, g.C() != nil, o.Live(), o.Armed[0].Paused, g.Muted())
			}
		}
		if want := secsList(1, 2, 4, 8, 16, 32, 32); fmt.Sprint(mutes) != want {
			t.Fatalf("mutes %v, want %s", mutes, want)
		}
		if len(o.opened) != 1 {
			t.Fatalf("%d armings, want 1", len(o.opened))
		}
	})
}

func secsList(s ...int) string {
	d := make([]time.Duration, len(s))
	for i, x := range s {
		d[i] = time.Duration(x) * time.Second
	}
	return fmt.Sprint(d)
}

// TestPressureGateBackoffResets: a wake that finds a workload of ours
// crowded (Woke(true)) keeps the trigger armed and starts the back-off
// again at 1 s; so does a change of the workloads (Changed), which also
// ends a mute at once, listening to the trigger again, and Reset (a
// confirmed burst); the old mute's timer then fires nothing. The last
// workload gone ends a mute and closes the trigger.
func TestPressureGateBackoffResets(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		o := &fakeOpener{}
		g := newGate(t, o)
		g.Changed(1)
		g.Woke(false)
		time.Sleep(time.Second)
		testutil.Ready(g.ResumeC())
		g.Resume()
		if m := g.Woke(false); m != 2*time.Second {
			t.Fatalf("second mute %v, want 2s", m)
		}
		time.Sleep(2 * time.Second)
		testutil.Ready(g.ResumeC())
		g.Resume()
		if m := g.Woke(true); m != 0 || !g.Armed() || g.Backoff() != 0 || o.Live() != 1 {
			t.Fatalf("a wake that found ours: mute %v, armed %v, backoff %v; want armed, back-off reset", m, g.Armed(), g.Backoff())
		}
		if m := g.Woke(false); m != time.Second {
			t.Fatalf("after the reset: mute %v, want 1s", m)
		}

		// A new workload during a mute: armed at once, back-off reset.
		old := g.ResumeC()
		g.Changed(2)
		if g.C() == nil || o.Armed[0].Paused || g.Muted() || g.Backoff() != 0 || o.Live() != 1 {
			t.Fatalf("a workload added while muted: listened to %v, paused %v, muted %v, backoff %v", g.C() != nil, o.Armed[0].Paused, g.Muted(), g.Backoff())
		}
		time.Sleep(time.Second)
		if testutil.Ready(old) || g.ResumeC() != nil {
			t.Fatal("the ended mute's timer still fired")
		}
		if m := g.Woke(false); m != time.Second {
			t.Fatalf("after the change: mute %v, want 1s", m)
		}
		g.Reset()
		if g.C() == nil || o.Armed[0].Paused || g.Muted() || g.Backoff() != 0 {
			t.Fatalf("Reset while muted: listened to %v, muted %v, backoff %v", g.C() != nil, g.Muted(), g.Backoff())
		}
		if len(o.opened) != 1 {
			t.Fatalf("%d armings, want 1", len(o.opened))
		}

		// The last workload gone while muted: nothing armed, no resume.
		g.Woke(false)
		g.Changed(0)
		if g.Armed() || g.Muted() || g.Covers() || o.Live() != 0 {
			t.Fatalf("no workload left while muted: armed %v, muted %v, %d open", g.Armed(), g.Muted(), o.Live())
		}
		time.Sleep(time.Minute)
		synctest.Wait()
		if g.Armed() || o.Live() != 0 {
			t.Fatal("armed with no workload")
		}
	})
}
