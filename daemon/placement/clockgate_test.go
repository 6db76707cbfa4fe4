package placement

import (
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/schedpolicyd/schedpolicyd/internal/testutil"
	"github.com/schedpolicyd/schedpolicyd/sysfs"
)

// fakeWatch is an in-memory ClockWatch: it records the period of each
// (re)open of a key's counters, pauses and resumes, and gives Burst the
// values the test sets.
type fakeWatch struct {
	periods map[string][]time.Duration
	paused  map[string]bool
	burst   [2]time.Duration // ran, wall of every Burst
}

func newFakeWatch() *fakeWatch {
	return &fakeWatch{periods: map[string][]time.Duration{}, paused: map[string]bool{}}
}

func (f *fakeWatch) C() <-chan struct{} { return nil }
func (f *fakeWatch) Close()             {}
func (f *fakeWatch) Open() int          { return len(f.periods) }
func (f *fakeWatch) Has(key string) bool {
	_, ok := f.periods[key]
	return ok
}
func (f *fakeWatch) Keys() []string { return nil }
func (f *fakeWatch) SetTasks(key string, _ func() ([]int, error), period time.Duration) (int, error) {
	return f.SetCgroup(key, "", nil, period)
}
func (f *fakeWatch) SetCgroup(key, _ string, _ []int, period time.Duration) (int, error) {
	f.periods[key] = append(f.periods[key], period)
	f.paused[key] = false
	return 1, nil
}
func (f *fakeWatch) Pause(key string) error  { f.paused[key] = true; return nil }
func (f *fakeWatch) Resume(key string) error { f.paused[key] = false; return nil }
func (f *fakeWatch) Remove(key string)       { delete(f.periods, key); delete(f.paused, key) }
func (f *fakeWatch) Burst(key string) (ran, wall time.Duration, ok bool) {
	return f.burst[0], f.burst[1], f.Has(key)
}

func ms(m ...int) []time.Duration {
	out := make([]time.Duration, len(m))
	for i, x := range m {
		out[i] = time.Duration(x) * time.Millisecond
	}
	return out
}

// TestClockGatePeriods: the task-clock counters' periods and pauses on a
// fake clock. A key counts at clockPeriod; a light signal (under clockBusy
// of its CPUs, within clockLight of the last) makes it slow, at
// clockSlowPeriod, each confirmation that finds it light doubles that up
// to clockSlowMax, and a slow signal counts only when the key's tasks
// were runnable for its CPUs + WakeMargin on average since the last. A
// confirmation that finds it saturated pauses it. Only a calm sample that
// began at or after the instant it went slow or paused (not at a later
// doubling) takes it back to clockPeriod, counting.
func TestClockGatePeriods(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		t0 := time.Now()
		at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
		sleepTo := func(s float64) { time.Sleep(time.Until(at(s))) }
		fw := newFakeWatch()
		var waited time.Duration // "w"'s runnable time so far
		g := newClockGateOn(fw, testutil.Logger(t),
			func(string) (time.Duration, error) { return waited, nil },
			func(k int) float64 { return float64(k) + WakeMargin })
		one := func(string) int { return 1 }
		calm := func(string, int) bool { return false }
		key := func() clockKey { return *g.keys["w"] }
		periods := func(want ...int) {
			t.Helper()
			if got := fw.periods["w"]; !slices.Equal(got, ms(want...)) {
				t.Fatalf("at %v: opened at %v, want %v", time.Since(t0), got, ms(want...))
			}
		}

		g.SetCgroup("w", "/w", sysfs.NewCPUSet(0))
		periods(10)

		// Light but not often: a second since the last signal.
		sleepTo(1)
		fw.burst = [2]time.Duration{10 * time.Millisecond, time.Second}
		if hot, _ := g.bursts([]string{"w"}, one, calm); hot != nil {
			t.Fatalf("hot %v", hot)
		}
		periods(10)
		// Light and often: slow from 2 s.
		sleepTo(2)
		fw.burst = [2]time.Duration{10 * time.Millisecond, time.Second - time.Nanosecond}
		g.bursts([]string{"w"}, one, calm)
		periods(10, 50)
		if k := key(); !k.slow || !k.since.Equal(at(2)) {
			t.Fatalf("slow %v since %v, want slow since 2 s", k.slow, k.since.Sub(t0))
		}

		// Slow signals: 1.49 runnable threads on average since the last
		// do not count, 1.5 do.
		waited = 0
		sleepTo(2.2)
		waited += 298 * time.Millisecond
		if hot, _ := g.bursts([]string{"w"}, one, calm); hot != nil {
			t.Fatalf("a slow signal at 1.49 runnable threads on 1 CPU counted: %v", hot)
		}
		sleepTo(2.4)
		waited += 300 * time.Millisecond
		if hot, _ := g.bursts([]string{"w"}, one, calm); !slices.Equal(hot, []string{"w"}) {
			t.Fatalf("a slow signal at 1.5 runnable threads on 1 CPU: hot %v", hot)
		}

		// Each confirmation that finds it light doubles the slow period,
		// up to clockSlowMax.
		for i := range 6 {
			sleepTo(3 + float64(i)/10)
			g.Settle([]string{"w"}, nil, func(string) bool { return false })
		}
		periods(10, 50, 100, 200, 400, 800, 1600)

		// Calm samples: one that began before it went slow, or one that
		// was busy (clockBusy of its CPU), leave it slow.
		g.Calm("w", 0, at(1.9), at(3.9), 1)
		g.Calm("w", 250*time.Millisecond, at(2), at(3), 1)
		periods(10, 50, 100, 200, 400, 800, 1600)
		// One that began as it went slow takes it back.
		g.Calm("w", 249*time.Millisecond, at(2), at(3), 1)
		periods(10, 50, 100, 200, 400, 800, 1600, 10)
		if k := key(); k.slow || k.paused {
			t.Fatalf("after a calm sample: slow %v paused %v", k.slow, k.paused)
		}

		// Saturated: paused at 5 s, not slowed while paused, back at a
		// calm sample from 5 s.
		sleepTo(5)
		g.Settle([]string{"w"}, []string{"w"}, func(string) bool { return false })
		sleepTo(5.5)
		g.Settle([]string{"w"}, nil, func(string) bool { return false })
		if k := key(); !k.paused || k.slow || !fw.paused["w"] || !k.since.Equal(at(5)) {
			t.Fatalf("paused %v (watch %v) slow %v since %v, want paused since 5 s", k.paused, fw.paused["w"], k.slow, k.since.Sub(t0))
		}
		g.Calm("w", 0, at(4.9), at(6), 1)
		if !key().paused {
			t.Fatal("resumed by a sample that began before the pause")
		}
		g.Calm("w", 0, at(5), at(6), 1)
		if key().paused || fw.paused["w"] {
			t.Fatal("not resumed by a calm sample from the pause")
		}
		periods(10, 50, 100, 200, 400, 800, 1600, 10) // resumed, not reopened

		// Slow at 7 s, paused at 8 s: a calm sample from 8 s resumes it
		// and takes it back to clockPeriod.
		sleepTo(7)
		fw.burst = [2]time.Duration{0, 100 * time.Millisecond}
		g.bursts([]string{"w"}, one, calm)
		sleepTo(8)
		g.Settle([]string{"w"}, []string{"w"}, func(string) bool { return false })
		g.Calm("w", 0, at(7.5), at(9), 1)
		if k := key(); !k.paused || !k.slow {
			t.Fatalf("slow and paused since 8 s, a sample from 7.5 s: paused %v slow %v", k.paused, k.slow)
		}
		g.Calm("w", 0, at(8), at(9), 1)
		if k := key(); k.paused || k.slow {
			t.Fatalf("a calm sample from 8 s: paused %v slow %v", k.paused, k.slow)
		}
		periods(10, 50, 100, 200, 400, 800, 1600, 10, 50, 10)
	})
}
