package testutil

import (
	"testing/synctest"
)

// FakePressureTrigger is an in-memory CPU pressure trigger: what
// placement.PressureSource asks of one (C, Done, Err, Pause, Resume,
// Close). The test fires it with a send on Fires (buffered: one) and
// ends it by closing Ends, Err then answering Failure; Closed and Paused
// say what its gate did to it. It is not safe for concurrent use: the
// gate and the test take turns (one goroutine, or a synctest bubble).
type FakePressureTrigger struct {
	Fires, Ends    chan struct{}
	Failure        error
	Closed, Paused bool
}

// NewFakePressureTrigger makes an open trigger that has not fired.
func NewFakePressureTrigger() *FakePressureTrigger {
	return &FakePressureTrigger{Fires: make(chan struct{}, 1), Ends: make(chan struct{})}
}

// C is Fires.
func (t *FakePressureTrigger) C() <-chan struct{} { return t.Fires }

// Done is Ends.
func (t *FakePressureTrigger) Done() <-chan struct{} { return t.Ends }

// Err is Failure.
func (t *FakePressureTrigger) Err() error { return t.Failure }

// Pause sets Paused.
func (t *FakePressureTrigger) Pause() { t.Paused = true }

// Resume clears Paused.
func (t *FakePressureTrigger) Resume() { t.Paused = false }

// Close sets Closed; it never fails.
func (t *FakePressureTrigger) Close() error { t.Closed = true; return nil }

// FakePressureTriggers keeps the triggers a test's gate armed, in order:
// its Open hands out Arm's.
type FakePressureTriggers struct {
	Armed []*FakePressureTrigger
}

// Arm makes a new trigger (NewFakePressureTrigger) and keeps it in
// Armed.
func (o *FakePressureTriggers) Arm() *FakePressureTrigger {
	t := NewFakePressureTrigger()
	o.Armed = append(o.Armed, t)
	return t
}

// Live is how many of Armed are still open (not Closed).
func (o *FakePressureTriggers) Live() int {
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
