package daemon

import (
	"slices"
	"testing"
	"time"

	"github.com/schedpolicyd/schedpolicyd/daemon/placement"
)

// TestConfirmationSortsAndRetries: a finished confirmation sorts its
// candidates by their average runnable threads over the 30 ms (here read
// from a clock-driven fake: a workload runnable f threads on average),
// raises none twice, retries the borderline ones (within WakeMargin of
// their CPU count) once, and never retries a retry.
func TestConfirmationSortsAndRetries(t *testing.T) {
	t0 := time.Now()
	rate := map[string]float64{"busy": 1.9, "starting": 1.2, "light": 0.3, "wide": 1.7, "alone": 0.8}
	cpus := map[string]int{"busy": 1, "starting": 1, "light": 1, "wide": 2, "alone": 1}
	read := func(n string) (time.Duration, time.Duration, error) {
		return time.Duration(float64(time.Since(t0)) * rate[n]), 0, nil
	}
	var c placement.Confirmation
	if c.C() != nil {
		t.Fatal("the zero confirmation has a channel")
	}
	if !c.Start("cpu pressure", []string{"alone", "busy", "light", "starting", "wide"}, read) {
		t.Fatal("start with five readable candidates did not start")
	}
	if c.Start("sample", []string{"busy"}, read) {
		t.Fatal("a second start while one is pending started")
	}
	<-c.C()
	r := c.Finish(func(n string) int { return cpus[n] }, read)
	if !slices.Equal(r.Names, []string{"busy"}) || !slices.Equal(r.Borderline, []string{"alone", "starting", "wide"}) || len(r.Light) != 4 {
		t.Fatalf("finish = %+v; want busy saturated, alone, starting and wide borderline, four light", r)
	}
	if c.C() != nil {
		t.Fatal("finish left a timer")
	}
	if !c.Retry(c.Signal, c.Retried, r, read) || c.Signal != "cpu pressure retry" || !c.Retried {
		t.Fatalf("no retry of the borderline ones (signal %q, retried %v)", c.Signal, c.Retried)
	}
	<-c.C()
	rate["starting"] = 1.8 // its second thread runs now
	signal, retried := c.Signal, c.Retried
	r = c.Finish(func(n string) int { return cpus[n] }, read)
	if !slices.Equal(r.Names, []string{"starting"}) || !slices.Equal(r.Borderline, []string{"alone", "wide"}) {
		t.Fatalf("retry's finish = %+v; want starting saturated, alone and wide borderline", r)
	}
	if c.Retry(signal, retried, r, read) {
		t.Fatal("a retry was retried")
	}
}
