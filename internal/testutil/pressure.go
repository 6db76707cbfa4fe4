package testutil

import (
	"testing/synctest"
)

// PressureTrigger is an in-memory CPU pressure trigger: what
// placement.PressureSource asks of one (C, Done, Err, Pause, Resume,
// Close). The test fires it with a send on Fires (buffered: one) and
// ends it by closing Ends, Err then answering Failure; Closed and Paused
// say what its gate did to it. It is not safe for concurrent use: the
// gate and the test take turns (one goroutine, or a synctest bubble).
type PressureTrigger struct {
	Fires, Ends    chan struct{}
	Failure        error
	Closed, Paused bool
}

// NewPressureTrigger makes an open trigger that has not fired.
func NewPressureTrigger() *PressureTrigger {
	return &PressureTrigger{Fires: make(chan struct{}, 1), Ends: make(chan struct{})}
}

// C is Fires.
func (t *PressureTrigger) C() <-chan struct{} { return t.Fires }

// Done is Ends.
func (t *PressureTrigger) Done() <-chan struct{} { return t.Ends }

// Err is Failure.
func (t *PressureTrigger) Err() error { return t.Failure }

// Pause sets Paused.
func (t *PressureTrigger) Pause() { t.Paused = true }

// Resume clears Paused.
func (t *PressureTrigger) Resume() { t.Paused = false }

// Close sets Closed; it never fails.
func (t *PressureTrigger) Close() error { t.Closed = true; return nil }

// PressureTriggers keeps the triggers a test's gate armed, in order: its
// Open hands out Arm's.
type PressureTriggers struct {
	Armed []*PressureTrigger
}

// Arm makes a new trigger (NewPressureTrigger) and keeps it in Armed.
func (o *PressureTriggers) Arm() *PressureTrigger {
	t := NewPressureTrigger()
	o.Armed = append(o.Armed, t)
	return t
}

// Live is how many of Armed are still open (not Closed).
func (o *PressureTriggers) Live() int {
	n := 0
	for _, t := range o.Armed {
		if !t.Closed {
			n++
		}
	}
	return n
}

// Ready reports whether c has a value now, taking it if so, once every
// other goroutine of the synctest bubble is durably blocked
// (synctest.Wait): what is due by the bubble's present time has then
// been sent. It must be called from inside a synctest bubble.
func Ready[T any](c <-chan T) bool {
	synctest.Wait()
	select {
	case <-c:
		return true
	default:
		return false
	}
}
