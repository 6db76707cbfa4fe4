package placement

import (
	"slices"
	"testing"
	"testing/synctest"
	"time"
)

// TestConfirmationTimer: a confirmation is due exactly wakeConfirm after
// it started, and judges its candidates by their average runnable threads
// over exactly that time: at the CPU count + WakeMargin saturated, within
// WakeMargin of it borderline (retried once, wakeConfirm after the first
// ended), below light.
func TestConfirmationTimer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		t0 := time.Now()
		rate := map[string]float64{"sat": 1.5, "border": 1.49, "light": 0.49}
		read := func(n string) (run, wait time.Duration, err error) {
			return time.Duration(rate[n] * float64(time.Since(t0))), 0, nil
		}
		one := func(string) int { return 1 }
		var c Confirmation
		if c.C() != nil {
			t.Fatal("a channel with nothing pending")
		}
		if !c.Start("sample", []string{"sat", "border", "light"}, read) {
			t.Fatal("not started")
		}
		if c.Start("cpu pressure", []string{"sat"}, read) {
			t.Fatal("a second start while one is pending")
		}
		time.Sleep(wakeConfirm - time.Nanosecond)
		synctest.Wait()
		select {
		case <-c.C():
			t.Fatal("due before wakeConfirm")
		default:
		}
		time.Sleep(time.Nanosecond)
		<-c.C() // due now: a late one would block the bubble
		if got := time.Since(t0); got != wakeConfirm {
			t.Fatalf("due after %v, want %v", got, wakeConfirm)
		}
		r := c.Finish(one, read)
		want := confirmed{Saturated: []string{"sat:1.50/1"}, Light: []string{"border:1.49/1", "light:0.49/1"}, Names: []string{"sat"}, Borderline: []string{"border"}}
		if !equalConfirmed(r, want) {
			t.Fatalf("confirmed %+v, want %+v", r, want)
		}
		if c.C() != nil {
			t.Fatal("finished, but still a channel")
		}
		if !c.Retry("sample", false, r, read) {
			t.Fatal("the borderline candidate not retried")
		}
		rate["border"] = 1.5 // since the first ended
		t1 := time.Now()
		<-c.C()
		if got := time.Since(t1); got != wakeConfirm {
			t.Fatalf("the retry due after %v, want %v", got, wakeConfirm)
		}
		signal, retried := c.Signal, c.Retried
		if signal != "sample retry" || !retried {
			t.Fatalf("retry signal %q retried %v", signal, retried)
		}
		// 1.49 over 30 ms, then 1.5 over the retry's 30 ms: the read
		// grew by 1.5 × 60 ms − 1.49 × 30 ms over 30 ms.
		r = c.Finish(one, read)
		if !slices.Equal(r.Names, []string{"border"}) || !slices.Equal(r.Saturated, []string{"border:1.51/1"}) {
			t.Fatalf("the retry confirmed %+v, want border saturated at 1.51", r)
		}
		if c.Retry(signal, retried, confirmed{Borderline: []string{"border"}}, read) {
			t.Fatal("a retry retried")
		}
	})
}

func equalConfirmed(a, b confirmed) bool {
	return slices.Equal(a.Saturated, b.Saturated) && slices.Equal(a.Light, b.Light) && slices.Equal(a.Names, b.Names) && slices.Equal(a.Borderline, b.Borderline)
}
