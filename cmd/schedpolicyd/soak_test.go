package main

import (
	"os"
	"os/signal"
	"runtime"
	"strings"
	"syscall"
	"testing"
)

// TestSoakGoroutineCheck: the soak's goroutine check does not count the
// runtime's signal loop, which the first signal.Notify starts for good
// (the task clock's SIGIO made `make soak` fail every run with "1 at
// start, 2 at end" and no reason), and it names a goroutine that was left
// behind, with the reason in soakFailed.
func TestSoakGoroutineCheck(t *testing.T) {
	before := liveGoroutines()
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGIO)
	defer signal.Stop(sig)
	// Other goroutines may come and go meanwhile (an earlier test's
	// daemon winding down): only the signal loop's absence is asserted.
	for _, g := range newGoroutines(before, liveGoroutines()) {
		if strings.Contains(g, "os/signal") {
			t.Fatalf("after signal.Notify, new goroutine %q counted; the signal loop is the runtime's for good", g)
		}
	}

	block, started := make(chan struct{}), make(chan struct{})
	go func() { close(started); leakedForTest(block) }()
	<-started
	// The goroutine is alive from close(started) until block is closed;
	// its stack reaches leakedForTest once it is scheduled there, which
	// the loop below waits for (no clock: runtime.Gosched until seen).
	var leaked []string
	for len(leaked) == 0 {
		for _, g := range newGoroutines(before, liveGoroutines()) {
			if strings.Contains(g, "leakedForTest") {
				leaked = append(leaked, g)
			}
		}
		runtime.Gosched()
	}
	rep := soakReport{GoroutinesStart: len(before), Leaked: leaked}
	why := soakFailed(rep)
	if !strings.Contains(why, "1 goroutines alive at the end that were not at the start") || !strings.Contains(why, "leakedForTest") {
		t.Errorf("soakFailed = %q; want the leaked goroutine named", why)
	}
	close(block)
	if why := soakFailed(soakReport{GoroutinesStart: 1, GoroutinesEnd: 1}); why != "" {
		t.Errorf("soakFailed of a clean run = %q; want \"\"", why)
	}
	if why := soakFailed(soakReport{Errors: 2}); why != "2 errors (cpuset writes refused, tree remount failures)" {
		t.Errorf("soakFailed with errors = %q", why)
	}
}

//go:noinline
func leakedForTest(block chan struct{}) { <-block }
