package daemon

import (
	"slices"
	"testing"
	"time"
)

// TestConfirmationSortsAndRetries: a finished confirmation sorts its
// candidates by their average runnable threads over the 30 ms (here read
// from a clock-driven fake: a workload runnable f threads on average),
// raises none twice, retries the borderline ones (at least their CPU
// count, less than wakeMargin more) once, and never retries a retry.
func TestConfirmationSortsAndRetries(t *testing.T) {
	t0 := time.Now()
	rate := map[string]float64{"busy": 1.9, "starting": 1.2, "light": 0.3, "wide": 2.2}
	cpus := map[string]int{"busy": 1, "starting": 1, "light": 1, "wide": 2}
	read := func(n string) (time.Duration, time.Duration, error) {
		return time.Duration(float64(time.Since(t0)) * rate[n]), 0, nil
	}
	var c confirmation
	if c.C() != nil {
		t.Fatal("the zero confirmation has a channel")
	}
	if !c.start("cpu pressure", []string{"busy", "light", "starting", "wide"}, read) {
		t.Fatal("start with four readable candidates did not start")
	}
	if c.start("sample", []string{"busy"}, read) {
		t.Fatal("a second start while one is pending started")
	}
	<-c.C()
	r := c.finish(func(n string) int { return cpus[n] }, read)
	if !slices.Equal(r.names, []string{"busy"}) || !slices.Equal(r.borderline, []string{"starting", "wide"}) || len(r.light) != 3 {
		t.Fatalf("finish = %+v; want busy saturated, starting and wide borderline, three light", r)
	}
	if c.C() != nil {
		t.Fatal("finish left a timer")
	}
	if !c.retry("cpu pressure", r, read) || c.signal != "cpu pressure retry" {
		t.Fatalf("no retry of the borderline ones (signal %q)", c.signal)
	}
	<-c.C()
	rate["starting"] = 1.8 // its second thread runs now
	r = c.finish(func(n string) int { return cpus[n] }, read)
	if !slices.Equal(r.names, []string{"starting"}) || !slices.Equal(r.borderline, []string{"wide"}) {
		t.Fatalf("retry's finish = %+v; want starting saturated, wide borderline", r)
	}
	if c.retry("cpu pressure retry", r, read) {
		t.Fatal("a retry was retried")
	}
}
