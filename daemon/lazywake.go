package daemon

import (
	"time"

	"github.com/schedpolicyd/schedpolicyd/policy"
)

// A burst leaves performance decisions in the lazy balance history (patch
// 18), and packing waits until 32 power decisions have passed without one.
// The kernel decides every few milliseconds; the daemon only at samples
// and events, and sampling stops once every workload is idle, so a
// workload spread by a burst could stay spread, its plan Deferred, until
// the next event. The history is also cleared by a power decision made
// more than policy.LazyResetAfter(SampleInterval) after the previous one,
// so a stopped loop whose plan is Deferred gets one decision just past that
// time: one wakeup instead of a workload left on every CPU.

// lazyWakeMargin puts the decision strictly past the reset time.
const lazyWakeMargin = 10 * time.Millisecond

// lazyWake is the one-shot timer of that decision; at is its deadline,
// zero while none is armed.
type lazyWake struct {
	t  *time.Timer
	at time.Time
}

// c arms the timer for at (zero: none) and returns its channel, nil while
// none is armed. A deadline already past is moved to now + margin.
func (l *lazyWake) c(at time.Time) <-chan time.Time {
	if at.IsZero() {
		if l.t != nil && !l.at.IsZero() {
			l.t.Stop()
		}
		l.at = time.Time{}
		return nil
	}
	if !at.Equal(l.at) {
		d := max(time.Until(at), lazyWakeMargin)
		if l.t == nil {
			l.t = time.NewTimer(d)
		} else {
			l.t.Reset(d)
		}
		l.at = at
	}
	return l.t.C
}

// fired records that the timer's value was received: the next c with the
// same deadline arms it again (a decision that changed nothing keeps it).
func (l *lazyWake) fired() { l.at = time.Time{} }

// stop releases the timer.
func (l *lazyWake) stop() {
	if l.t != nil {
		l.t.Stop()
	}
}

// lazyExpiry is when the lazy history of a Deferred plan clears while the
// loop does not sample (zero when sampling or when the plan is not
// Deferred): just past LazyResetAfter(SampleInterval) after the Deferred
// plan's decision.
func (d *Daemon) lazyExpiry(sampling bool) time.Time {
	if sampling {
		return time.Time{}
	}
	var last time.Time
	if p := d.place.LastPlan(); p.Deferred {
		last = p.Lazy.Last
	}
	after := policy.LazyResetAfter(d.cfg.SampleInterval)
	if last.IsZero() || after <= 0 {
		return time.Time{}
	}
	return last.Add(after + lazyWakeMargin)
}
