package testutil

import (
	"testing"
	"time"
)

// DefaultBound is how long Eventually waits. It is generous on purpose:
// the tests share a small machine with other work, and the bound only
// keeps a failing test from hanging; it is not a speed claim.
const DefaultBound = 20 * time.Second

// WaitFor polls cond until it reports true, first every 10 ms, then less
// often (up to every 50 ms). If bound passes first it fails t with
// "timed out after <bound> waiting for <what>" and the description cond
// returned last (what it saw, for the message; it may be empty). cond runs
// on the test's goroutine, so it may call t.Fatal itself.
func WaitFor(t testing.TB, what string, bound time.Duration, cond func() (bool, string)) {
	t.Helper()
	ok, last := Poll(bound, cond)
	switch {
	case ok:
	case last != "":
		t.Fatalf("timed out after %v waiting for %s; last seen: %s", bound, what, last)
	default:
		t.Fatalf("timed out after %v waiting for %s", bound, what)
	}
}

// Poll is WaitFor without the failure: it reports whether cond became true
// within bound, and what cond described last, for a caller that has
// something to check before it fails (a machine too busy for the test's
// premise, say).
func Poll(bound time.Duration, cond func() (bool, string)) (ok bool, last string) {
	deadline := time.Now().Add(bound)
	pause := 10 * time.Millisecond
	for {
		ok, seen := cond()
		if ok {
			return true, seen
		}
		last = seen
		if !time.Now().Before(deadline) {
			return false, last
		}
		time.Sleep(pause)
		pause = min(2*pause, 50*time.Millisecond)
	}
}

// Eventually is WaitFor with DefaultBound.
func Eventually(t testing.TB, what string, cond func() (bool, string)) {
	t.Helper()
	WaitFor(t, what, DefaultBound, cond)
}
