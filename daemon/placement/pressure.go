package placement

import (
	"errors"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/schedpolicyd/schedpolicyd/sysfs"
)

// PressureSource is what a PressureGate needs of an armed CPU pressure
// trigger (sysfs.PressureTrigger, or a test's): C fires (coalesced) each
// time the stall threshold is crossed, Done closes when the kernel drops
// the trigger early (Err says why), Pause and Resume stop and restart its
// polling (an event meanwhile is on C after Resume), Close releases it.
type PressureSource interface {
	C() <-chan struct{}
	Done() <-chan struct{}
	Err() error
	Pause()
	Resume()
	Close() error
}

// PressureOpener arms a trigger "some <stall> <window>" on the PSI file
// path, as sysfs.OpenPressureTrigger does (its errors: sysfs.ErrNoPSI
// wrapped where path is no kernel PSI file, else the kernel's refusal).
type PressureOpener func(path string, stall, window time.Duration) (PressureSource, error)

// openPressureTrigger is the default PressureOpener: the kernel's trigger.
func openPressureTrigger(path string, stall, window time.Duration) (PressureSource, error) {
	t, err := sysfs.OpenPressureTrigger(path, stall, window)
	if err != nil {
		return nil, err // not a nil *PressureTrigger in a non-nil interface
	}
	return t, nil
}

// The pressure back-off (PressureGate.Woke): a wake that found none of the
// back end's workloads crowded pauses the trigger for PressureBackoffMin,
// the next such wake for twice as long, and so on up to PressureBackoffMax
// (1, 2, 4, 8, 16, 32 s). CPU pressure that is all someone else's then
// wakes the loop at most 6 times in the first 63 s and once per 32 s after
// (each time: the back-off's end, and at once the kernel's signal given
// meanwhile, the wake's one sample; the poll thread wakes at most once
// during the pause and once at its end). A wake that found a
// workload of ours crowded, a confirmed burst, or a change of the
// workloads starts the back-off again from PressureBackoffMin.
const (
	PressureBackoffMin = time.Second
	PressureBackoffMax = 32 * time.Second
)

// PressureGate holds a back end's CPU pressure trigger. It is armed only
// while the back end has at least one workload (Changed), so that a daemon
// with nothing to place has no trigger, no poll goroutine and no psimon
// work in the kernel; it is closed while the back end has none. A wake
// that found nothing of the back end's own crowded backs off (Woke): the
// trigger is not listened to (C nil, its polling paused, the kernel's
// trigger kept: one made afresh may fire at once however quiet the
// machine) for a while that doubles from PressureBackoffMin to
// PressureBackoffMax, and ResumeC fires at the end, when the back end
// calls Resume to listen again. An arming that is refused (no PSI, the
// kernel's parameters) is logged once and not tried again until the next
// Configure (the back end opened again); nor is one the kernel dropped.
//
// The zero value is unconfigured: it arms nothing and every channel is
// nil. Owned by the event loop, like its back end.
type PressureGate struct {
	// Open arms a trigger (nil: the kernel's, sysfs.OpenPressureTrigger);
	// tests set it before Configure.
	Open PressureOpener

	log  logrus.FieldLogger
	path string // the PSI file; "" unconfigured
	t    PressureSource
	// stall and window are the parameters the kernel granted at the first
	// arming since Configure (0 before): later armings use them.
	stall, window time.Duration
	armedOnce     bool // "armed" said at info level once since Configure
	off           bool // refused or dropped: not armed until Configure
	want          bool // the back end has a workload

	// backoff is the length of the current (or last) mute, 0 since the
	// last reset; resume is the current mute's channel (nil: not muted),
	// fed by timer. While muted, t is paused.
	backoff time.Duration
	resume  chan struct{}
	timer   *time.Timer
}

// Configure sets the PSI file path the gate arms on and its logger (a
// back end's open), forgets an earlier refusal, and arms now when the
// back end has n > 0 workloads. A trigger held on another file is closed
// first.
func (g *PressureGate) Configure(log logrus.FieldLogger, path string, n int) {
	g.Close()
	g.log, g.path = log, path
	g.Changed(n)
}

// Close closes the trigger, ends a mute and forgets the path: nothing is
// armed until the next Configure. Safe on the zero value and twice.
func (g *PressureGate) Close() {
	g.disarm()
	g.unmute()
	g.path, g.off, g.want, g.backoff = "", false, false, 0
	g.stall, g.window, g.armedOnce = 0, 0, false
}

// Changed is told that the back end's workloads changed (adopted,
// forgotten, a task attached) and that it now has n: the back-off starts
// again (a mute ends now), and the trigger is armed when n > 0, closed
// when n is 0.
func (g *PressureGate) Changed(n int) {
	g.want = n > 0
	g.Reset()
	if !g.want {
		g.disarm()
	}
}

// Reset starts the back-off again: a wake found a workload of ours
// crowded or stalled (or the workloads changed). A mute ends now and the
// trigger is armed again (while the back end has workloads).
func (g *PressureGate) Reset() {
	g.backoff = 0
	if g.resume != nil {
		g.unmute()
	}
	g.arm()
}

// Woke is told what a pressure wake found: found, a workload of ours
// crowded or stalled (a confirmation started), resets the back-off;
// otherwise the trigger is paused and not listened to for the next
// back-off, which doubles from PressureBackoffMin up to PressureBackoffMax
// (ResumeC fires at its end). It returns the mute's length, 0 when found.
func (g *PressureGate) Woke(found bool) time.Duration {
	if found {
		g.Reset()
		return 0
	}
	if g.t == nil || g.resume != nil {
		return 0 // not armed or muted: no wake of its to back off from
	}
	g.t.Pause()
	g.backoff = min(max(2*g.backoff, PressureBackoffMin), PressureBackoffMax)
	c := make(chan struct{}, 1) // this mute's: a late send of an earlier one goes nowhere
	g.resume = c
	g.timer = time.AfterFunc(g.backoff, func() {
		select {
		case c <- struct{}{}:
		default:
		}
	})
	return g.backoff
}

// Resume ends the mute whose ResumeC fired and listens to the trigger
// again (a signal the kernel gave meanwhile wakes the loop at once); the
// back-off keeps its length (the next wake that finds nothing doubles
// it).
func (g *PressureGate) Resume() {
	g.unmute()
	g.arm()
}

// Dropped is told that Done closed (the kernel dropped the trigger: the
// cgroup it watched was removed): the trigger is closed and not armed
// again until the next Configure. It returns the kernel's reason.
func (g *PressureGate) Dropped() error {
	var err error
	if g.t != nil {
		err = g.t.Err()
	}
	g.disarm()
	g.unmute()
	g.off = true
	return err
}

// C fires when tasks wait for a CPU; nil while no trigger is armed (no
// workload, refused, unconfigured) or it is muted.
func (g *PressureGate) C() <-chan struct{} {
	if g.t == nil || g.resume != nil {
		return nil
	}
	return g.t.C()
}

// Done closes when the kernel drops the armed trigger; nil without one.
func (g *PressureGate) Done() <-chan struct{} {
	if g.t == nil {
		return nil
	}
	return g.t.Done()
}

// ResumeC fires when the current mute ends; nil while not muted.
func (g *PressureGate) ResumeC() <-chan struct{} { return g.resume }

// Armed reports whether a trigger is armed now (listened to or muted).
func (g *PressureGate) Armed() bool { return g.t != nil }

// Muted reports whether the trigger is not listened to for a back-off.
func (g *PressureGate) Muted() bool { return g.resume != nil }

// Backoff is the current mute's length (the last one's after it ended),
// 0 since the last reset.
func (g *PressureGate) Backoff() time.Duration { return g.backoff }

// Covers reports whether CPU pressure will wake the loop when a workload
// of the back end's starts to wait for a CPU: a trigger is armed, listened
// to now or at the mute's end (at most PressureBackoffMax later).
// Sampling stops while every workload is idle only then (SampleBackoff).
func (g *PressureGate) Covers() bool { return g.t != nil }

// arm opens the trigger when the back end wants one and none is armed
// or refused. The first arming since Configure tries the narrow
// window (pressureWindow), else the 2 s one, and logs which at info
// level; later ones reuse the granted parameters and log at debug level.
// A refusal is logged once (info where the kernel has no PSI, else a
// warning) and sets off.
func (g *PressureGate) arm() {
	if !g.want || g.t != nil || g.off || g.path == "" {
		return
	}
	open := g.Open
	if open == nil {
		open = openPressureTrigger
	}
	var t PressureSource
	var err error
	if g.window != 0 {
		t, err = open(g.path, g.stall, g.window)
	} else {
		g.stall, g.window = pressureStall, pressureWindow
		t, err = open(g.path, pressureStall, pressureWindow)
		if err != nil && !errors.Is(err, sysfs.ErrNoPSI) {
			g.log.WithError(err).Debug("narrow CPU pressure window refused; trying a 2 s one")
			g.stall, g.window = PressureStallUnpriv, PressureWindowUnpriv
			t, err = open(g.path, PressureStallUnpriv, PressureWindowUnpriv)
		}
	}
	if err != nil {
		lvl := logrus.WarnLevel
		if errors.Is(err, sysfs.ErrNoPSI) {
			lvl = logrus.InfoLevel
		}
		g.log.WithError(err).Log(lvl, "no CPU pressure trigger; while every workload is idle, sampling slows down instead of stopping")
		g.off = true
		return
	}
	g.t = t
	l := g.log.WithFields(logrus.Fields{"file": g.path, "window": g.window})
	if g.armedOnce {
		l.Debug("CPU pressure trigger armed")
		return
	}
	g.armedOnce = true
	if g.window != pressureWindow {
		l = l.WithField("note", "the 500 ms window was refused (Linux ≥ 6.5 grants it only with CAP_SYS_RESOURCE); a packed workload turning busy waits up to 2 s for the wake")
	}
	l.Info("CPU pressure trigger armed (while there are workloads)")
}

// disarm closes the armed trigger, if any.
func (g *PressureGate) disarm() {
	if g.t != nil {
		g.t.Close()
		g.t = nil
	}
}

// unmute ends the mute, if any: the trigger is polled again.
func (g *PressureGate) unmute() {
	if g.timer != nil {
		g.timer.Stop()
		g.timer = nil
	}
	if g.resume != nil && g.t != nil {
		g.t.Resume()
	}
	g.resume = nil
}
