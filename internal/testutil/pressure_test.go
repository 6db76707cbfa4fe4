package testutil

import (
	"errors"
	"testing"
	"testing/synctest"
	"time"
)

// TestPressureTriggers: each Arm is a new open trigger, kept in order;
// its channels are the test's, Pause, Resume and Close are recorded, and
// Live counts the ones not closed.
func TestPressureTriggers(t *testing.T) {
	var o FakePressureTriggers
	a, b := o.Arm(), o.Arm()
	if len(o.Armed) != 2 || o.Armed[0] != a || o.Armed[1] != b || a == b || o.Live() != 2 {
		t.Fatalf("armed %v, %d live; want a then b, 2 live", o.Armed, o.Live())
	}
	a.Fires <- struct{}{} // buffered: the test fires without a reader
	select {
	case <-a.C():
	default:
		t.Error("a fired, C has nothing")
	}
	a.Pause()
	if !a.Paused || b.Paused {
		t.Errorf("paused a: a %v, b %v", a.Paused, b.Paused)
	}
	a.Resume()
	if a.Paused {
		t.Error("resumed a is still paused")
	}
	if err := a.Close(); err != nil || !a.Closed || o.Live() != 1 {
		t.Errorf("closed a: %v, closed %v, %d live; want 1 live", err, a.Closed, o.Live())
	}
	b.Failure = errors.New("gone")
	close(b.Ends)
	select {
	case <-b.Done():
		if b.Err() != b.Failure {
			t.Errorf("Err = %v, want the failure", b.Err())
		}
	default:
		t.Error("b ended, Done has nothing")
	}
}

// TestReady: in a bubble, a value due by now is seen (and taken) once the
// bubble is blocked; one due a nanosecond later is not.
func TestReady(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := make(chan int, 1)
		go func() { time.Sleep(time.Second); c <- 1 }()
		time.Sleep(time.Second - time.Nanosecond)
		if Ready(c) {
			t.Fatal("ready before the sender's second")
		}
		time.Sleep(time.Nanosecond)
		if !Ready(c) {
			t.Fatal("not ready at the sender's second")
		}
		if Ready(c) {
			t.Fatal("the value was not taken")
		}
	})
}
