package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"time"
)

// fakeMachine is an in-process daemon and clock for runCompare's own
// logic: the policy in force is the latest hold's (unless forced), each
// sleep advances both clocks and adds the energy of the policy in force
// at the held policy's next scripted power to that (policy, power
// source) total. Intervals are numbered from 1; events[n] runs as
// interval n's settle begins, afterHalf[n] half-way through interval n.
type fakeMachine struct {
	t           *testing.T
	settle      time.Duration
	powerSource string
	energySrc   string
	holds       map[uint32]string
	last        uint32
	ops         []string // "hold P", "release N"
	totals      map[energyKey]energyTotal
	mono, boot  time.Duration
	// watts[policy] are the powers of that policy's successive
	// intervals (W); a settle draws the next one, unmeasured by the
	// comparison.
	watts      map[string][]float64
	interval   int    // intervals slept so far
	forced     string // the policy in force whatever is held
	unmeasured bool   // the meter counts nothing
	events     map[int]func(f *fakeMachine)
	afterHalf  map[int]func(f *fakeMachine)
	cancel     map[int]context.CancelFunc // cancel half-way through interval n
}

func newFakeMachine(t *testing.T, watts map[string][]float64) *fakeMachine {
	return &fakeMachine{t: t, settle: fakeOpts.settle, powerSource: "battery", energySrc: "battery", holds: map[uint32]string{},
		totals: map[energyKey]energyTotal{}, watts: watts, events: map[int]func(*fakeMachine){},
		afterHalf: map[int]func(*fakeMachine){}, cancel: map[int]context.CancelFunc{}}
}

func (f *fakeMachine) inForce() string {
	if f.forced != "" {
		return f.forced
	}
	var latest uint32
	for c := range f.holds {
		latest = max(latest, c)
	}
	if latest == 0 {
		return "powersaving" // the knob's choice on battery
	}
	return f.holds[latest]
}

func (f *fakeMachine) hold(p string) (uint32, error) {
	f.last++
	f.holds[f.last] = p
	f.ops = append(f.ops, "hold "+p)
	return f.last, nil
}

func (f *fakeMachine) release(c uint32) error {
	delete(f.holds, c)
	f.ops = append(f.ops, fmt.Sprintf("release %d", c))
	return nil
}

func (f *fakeMachine) read(cookie uint32) (compareReading, error) {
	r := compareReading{policy: f.inForce(), powerSource: f.powerSource, energySource: f.energySrc, totals: map[energyKey]energyTotal{}}
	for k, v := range f.totals {
		r.totals[k] = v
	}
	_, r.held = f.holds[cookie]
	return r, nil
}

// draw adds d of the policy in force at power w.
func (f *fakeMachine) draw(d time.Duration, w float64) {
	f.mono += d
	f.boot += d
	if f.unmeasured {
		return
	}
	k := energyKey{f.inForce(), f.powerSource}
	t := f.totals[k]
	t.joules += w * d.Seconds()
	t.seconds += d.Seconds()
	f.totals[k] = t
}

func (f *fakeMachine) sleep(ctx context.Context, d time.Duration, p string) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if d == f.settle {
		if ev := f.events[f.interval+1]; ev != nil {
			ev(f)
		}
		if p != f.inForce() && f.forced == "" {
			f.t.Fatalf("settling under %s while %s is held", f.inForce(), p)
		}
		f.draw(d, f.watts[p][0])
		return nil
	}
	f.interval++
	n := f.interval
	w := f.watts[p][0]
	f.watts[p] = f.watts[p][1:]
	f.draw(d/2, w)
	if c := f.cancel[n]; c != nil {
		c()
		return context.Canceled
	}
	if ev := f.afterHalf[n]; ev != nil {
		ev(f)
	}
	f.draw(d-d/2, w)
	return nil
}

func (f *fakeMachine) now() (time.Duration, time.Duration) { return f.mono, f.boot }

var fakeOpts = compareOptions{duration: 6 * (3*time.Second + 10*time.Second), interval: 10 * time.Second, settle: 3 * time.Second, policies: []string{"performance", "powersaving"}}

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Max(1, math.Abs(b)) }

// TestCompareCounts: three rounds of performance against powersaving at
// known powers; every interval counted; each round holds each policy
// once; the new hold is taken before the old one is released, and the
// last is released at the end. The means, the 95 % intervals and the
// difference are exact: performance 10, 12, 11 W (mean 11, sd 1, t(2) =
// 4.303: ± 4.303/√3), powersaving 8, 8.5, 9 W (mean 8.5, sd 0.5).
func TestCompareCounts(t *testing.T) {
	f := newFakeMachine(t, map[string][]float64{"performance": {10, 12, 11}, "powersaving": {8, 8.5, 9}})
	rep, err := runCompare(context.Background(), f, f, rand.New(rand.NewPCG(1, 2)), fakeOpts, nil)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Stopped != "" || len(rep.Intervals) != 6 || rep.EnergySource != "battery" || rep.IntervalSeconds != 10 || rep.SettleSeconds != 3 {
		t.Fatalf("report %+v", rep)
	}
	for i, iv := range rep.Intervals {
		if iv.Discarded != "" || iv.Round != i/2+1 || iv.Seconds != 10 || !near(iv.Watts, iv.Joules/10) || iv.PowerSource != "battery" {
			t.Errorf("interval %d: %+v", i, iv)
		}
		if i%2 == 1 && iv.Policy == rep.Intervals[i-1].Policy {
			t.Errorf("round %d holds %s twice", iv.Round, iv.Policy)
		}
		if want := 13*float64(i) + 3; iv.StartS != want {
			t.Errorf("interval %d starts at %v s, want %v", i, iv.StartS, want)
		}
	}
	if len(f.holds) != 0 {
		t.Errorf("holds left: %v", f.holds)
	}
	// Each hold is in place before the one before it is released.
	var want []string
	for i, iv := range rep.Intervals {
		want = append(want, "hold "+iv.Policy)
		if i > 0 {
			want = append(want, fmt.Sprintf("release %d", i))
		}
	}
	want = append(want, "release 6")
	if !reflect.DeepEqual(f.ops, want) {
		t.Errorf("ops %v, want %v", f.ops, want)
	}
	ci := func(sd float64, n int) float64 { return studentT975(float64(n-1)) * sd / math.Sqrt(float64(n)) }
	p, s := rep.Policies[0], rep.Policies[1]
	if p.Policy != "performance" || p.Intervals != 3 || !near(p.MeanWatts, 11) || !near(*p.CI95Watts, 4.303/math.Sqrt(3)) || !near(*p.CI95Watts, ci(1, 3)) {
		t.Errorf("performance %+v (ci %v)", p, *p.CI95Watts)
	}
	if s.Policy != "powersaving" || s.Intervals != 3 || !near(s.MeanWatts, 8.5) || !near(*s.CI95Watts, 4.303*0.5/math.Sqrt(3)) {
		t.Errorf("powersaving %+v", s)
	}
	// Welch: se² = 1/3 + 0.25/3, df = 2.94 → t(2) = 4.303; the interval
	// -2.5 ± 4.303·√(1.25/3) holds 0: not conclusive; with m of each,
	// t(2m−2)·√(1.25/m) < 2.5 first at m = 4 (2.447·0.559 = 1.37): 1 more.
	if len(rep.Differences) != 1 {
		t.Fatalf("differences %+v", rep.Differences)
	}
	d := rep.Differences[0]
	h := 4.303 * math.Sqrt(1.25/3)
	if d.Policy != "powersaving" || d.Baseline != "performance" || !near(d.Watts, -2.5) || !near(d.Percent, -2.5/11*100) ||
		!near(*d.CI95LowWatts, -2.5-h) || !near(*d.CI95HighWatts, -2.5+h) || d.Conclusive || d.MoreIntervals != 1 {
		t.Errorf("difference %+v (%v … %v)", d, *d.CI95LowWatts, *d.CI95HighWatts)
	}
}

// TestCompareConclusive: with no spread at all the difference is exact
// and conclusive.
func TestCompareConclusive(t *testing.T) {
	f := newFakeMachine(t, map[string][]float64{"performance": {10, 10, 10}, "powersaving": {7, 7, 7}})
	rep, err := runCompare(context.Background(), f, f, rand.New(rand.NewPCG(3, 4)), fakeOpts, nil)
	if err != nil {
		t.Fatal(err)
	}
	d := rep.Differences[0]
	if !d.Conclusive || d.MoreIntervals != 0 || !near(d.Watts, -3) || !near(*d.CI95LowWatts, -3) || !near(*d.CI95HighWatts, -3) || !near(d.Percent, -30) {
		t.Errorf("difference %+v", d)
	}
	var b bytes.Buffer
	writeCompare(&b, rep)
	want := `measured on this machine: the system batteries' discharge: the whole machine, measured only while on battery
6 of 6 intervals of 10.0 s counted (each after 3.0 s to settle)
POLICY       INTERVALS  MEAN     95% CI
performance  3          10.00 W  ± 0.00 W
powersaving  3          7.00 W   ± 0.00 W
powersaving vs performance: -3.00 W (-30.0 %), 95 % CI -3.00 to -3.00 W: powersaving draws less, conclusively
the comparison's hold is released: the daemon is back to its own decision
`
	if b.String() != want {
		t.Errorf("text:\n%s\nwant:\n%s", b.String(), want)
	}
}

// TestCompareDiscards: each way an interval can fail to measure what it
// claims is discarded with its reason, and the others still count.
func TestCompareDiscards(t *testing.T) {
	watts := func() map[string][]float64 {
		return map[string][]float64{"performance": {10, 10, 10}, "powersaving": {6, 6, 6}}
	}
	for _, tc := range []struct {
		name  string
		n     int                  // the interval, from 1
		half  func(f *fakeMachine) // half-way through it
		start func(f *fakeMachine) // as its settle begins
		want  string
	}{
		{name: "power source", n: 2, half: func(f *fakeMachine) { f.powerSource = "ac" }, want: "the power source changed (battery to ac)"},
		{name: "suspend", n: 3, half: func(f *fakeMachine) { f.boot += 90 * time.Second }, want: "the machine was suspended (1m30s)"},
		{name: "another hold", n: 1, half: func(f *fakeMachine) { f.forced = "balance" }, want: "balance was in force, not "},
		{name: "energy source", n: 4, half: func(f *fakeMachine) { f.energySrc = "rapl" }, want: "the energy source changed (battery to rapl)"},
		{name: "battery stops", n: 5, start: func(f *fakeMachine) { f.unmeasured = true }, half: func(f *fakeMachine) { f.unmeasured = false }, want: "the daemon measured 5.0 s of 10.0 s (a battery that stopped reporting, a counter that went backwards; see its log)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeMachine(t, watts())
			if tc.start != nil {
				f.events[tc.n] = tc.start
			}
			f.afterHalf[tc.n] = tc.half
			// Back to normal as the next interval's settle begins.
			f.events[tc.n+1] = func(f *fakeMachine) { f.powerSource, f.energySrc, f.forced = "battery", "battery", "" }
			rep, err := runCompare(context.Background(), f, f, rand.New(rand.NewPCG(5, 6)), fakeOpts, nil)
			if err != nil {
				t.Fatal(err)
			}
			counted := 0
			for i, iv := range rep.Intervals {
				switch {
				case i == tc.n-1 && !strings.HasPrefix(iv.Discarded, tc.want):
					t.Errorf("interval %d: %+v, want discarded: %s", tc.n, iv, tc.want)
				case i == tc.n-1 && iv.Watts != 0:
					t.Errorf("a discarded interval has watts: %+v", iv)
				case i != tc.n-1 && iv.Discarded == "" && !near(iv.Watts, map[string]float64{"performance": 10, "powersaving": 6}[iv.Policy]):
					t.Errorf("interval %d: %+v", i+1, iv)
				case i != tc.n-1 && iv.Discarded == "":
					counted++
				}
			}
			if len(rep.Intervals) != 6 || counted != 5 {
				t.Errorf("%d intervals, %d counted: %+v", len(rep.Intervals), counted, rep.Intervals)
			}
			var b bytes.Buffer
			writeCompare(&b, rep)
			if !strings.Contains(b.String(), "discarded 1: "+tc.want) {
				t.Errorf("text lacks the reason:\n%s", b.String())
			}
		})
	}
}

// TestCompareAnotherTotal: energy counted under another (policy, power
// source) in the interval discards it even when the two ends agree.
func TestCompareAnotherTotal(t *testing.T) {
	f := newFakeMachine(t, map[string][]float64{"performance": {10, 10, 10}, "powersaving": {6, 6, 6}})
	f.afterHalf[2] = func(f *fakeMachine) {
		k := energyKey{"balance", "battery"}
		f.totals[k] = energyTotal{f.totals[k].joules + 1, f.totals[k].seconds + 0.1}
	}
	rep, err := runCompare(context.Background(), f, f, rand.New(rand.NewPCG(5, 6)), fakeOpts, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := rep.Intervals[1].Discarded; got != "energy was measured under balance on battery too" {
		t.Errorf("interval 2 discarded %q", got)
	}
}

// TestCompareStops: a cancelled context (Ctrl-C) mid-interval ends the
// comparison with what it measured and the hold released; a hold that
// an explicit choice cancelled ends it with an error's reason; no energy
// source is an error before anything is held.
func TestCompareStops(t *testing.T) {
	f := newFakeMachine(t, map[string][]float64{"performance": {10, 10, 10}, "powersaving": {6, 6, 6}})
	ctx, cancel := context.WithCancel(context.Background())
	f.cancel[3] = cancel
	var seen []compareInterval
	rep, err := runCompare(ctx, f, f, rand.New(rand.NewPCG(7, 8)), fakeOpts, func(iv compareInterval) { seen = append(seen, iv) })
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(rep.Stopped, "interrupted") || len(rep.Intervals) != 2 || !reflect.DeepEqual(seen, rep.Intervals) || len(f.holds) != 0 {
		t.Errorf("stopped %q, %d intervals, progress %d, holds %v", rep.Stopped, len(rep.Intervals), len(seen), f.holds)
	}
	if rep.Policies[0].Intervals+rep.Policies[1].Intervals != 2 {
		t.Errorf("policies %+v", rep.Policies)
	}

	f = newFakeMachine(t, map[string][]float64{"performance": {10, 10, 10}, "powersaving": {6, 6, 6}})
	f.afterHalf[2] = func(f *fakeMachine) { f.holds = map[uint32]string{} }
	rep, err = runCompare(context.Background(), f, f, rand.New(rand.NewPCG(7, 8)), fakeOpts, nil)
	if err != nil || !strings.Contains(rep.Stopped, "hold was cancelled") || len(rep.Intervals) != 1 {
		t.Errorf("cancelled hold: %v, %+v", err, rep)
	}

	f = newFakeMachine(t, nil)
	f.energySrc = "none"
	_, err = runCompare(context.Background(), f, f, rand.New(rand.NewPCG(7, 8)), fakeOpts, nil)
	var ce *cliError
	if !errors.As(err, &ce) || !strings.Contains(ce.msg, "no energy source") || len(f.ops) != 0 {
		t.Errorf("no energy source: %v, ops %v", err, f.ops)
	}
}

// TestStudentT975: the table's ends and the expansion beyond it, against
// the exact quantiles (R's qt(0.975, df)).
func TestStudentT975(t *testing.T) {
	for _, c := range []struct{ df, want, tol float64 }{
		{1, 12.706, 0}, {2, 4.303, 0}, {2.94, 4.303, 0}, {30, 2.042, 0}, {0.5, 12.706, 0},
		{31, 2.039513, 5e-4}, {60, 2.000298, 1e-4}, {120, 1.979930, 1e-4}, {1e6, 1.959966, 1e-5}, {math.Inf(1), 1.959964, 0},
	} {
		if got := studentT975(c.df); math.Abs(got-c.want) > c.tol {
			t.Errorf("studentT975(%v) = %v, want %v ± %v", c.df, got, c.want, c.tol)
		}
	}
}

// TestMoreIntervals: the smallest m with t(2m−2)·√(vsum/m) < diff.
func TestMoreIntervals(t *testing.T) {
	for _, c := range []struct {
		diff, vsum float64
		n, want    int
	}{
		{2.5, 1.25, 3, 1},  // m = 4: 2.447·√(1.25/4) = 1.368
		{0.5, 1.25, 3, 18}, // m = 21: t(40) 2.021·√(1.25/21) = 0.4931; m = 20: t(38) 2.024·√(1.25/20) = 0.5061
		{1e-9, 1, 3, maxMoreIntervals},
	} {
		if got := moreIntervals(c.diff, c.vsum, c.n); got != c.want {
			t.Errorf("moreIntervals(%v, %v, %d) = %d, want %d", c.diff, c.vsum, c.n, got, c.want)
		}
	}
}

// TestCompareOptions: the flags' bounds.
func TestCompareOptions(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--compare", "--interval", "1s"}, "--interval 1s: want 2s to 1h0m0s"},
		{[]string{"--compare", "--settle", "0s"}, "--settle 0s: want 1s to 10m0s"},
		{[]string{"--compare", "--policies", "performance"}, `--policies "performance": want at least two policies`},
		{[]string{"--compare", "--policies", "performance,fast"}, `invalid policy "fast"`},
		{[]string{"--compare", "--policies", "balance,balance"}, "balance twice"},
		{[]string{"--compare", "--duration", "1m"}, "--duration 1m0s: want at least one round (3m15s: 3 policies × (settle 5s + interval 1m0s))"},
		{[]string{"--interval", "5s"}, "--interval is an option of --compare"},
	} {
		var out, errb bytes.Buffer
		code := run(append([]string{"energy", "--bus", "unix:path=/nonexistent"}, c.args...), &out, &errb)
		if code != exitUsage || !strings.Contains(errb.String(), c.want) {
			t.Errorf("energy %v: exit %d, %q; want usage error %q", c.args, code, errb.String(), c.want)
		}
	}
}
