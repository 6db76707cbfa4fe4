package policy

import (
	"math"
	"reflect"
	"testing"
)

// TestSimulateManyThreadsClosedForm: a load of more than
// MaxSimulatedThreads threads, each busy a small share of a CPU, is spread
// in closed form: no thread is placed one at a time (the step count of
// simulate is 0, where the thread-by-thread placement would take one step
// per thread), the estimate does not depend on the thread count, and it
// is the limit of the thread-by-thread placement. Where that placement is
// even (u = 2 over the laptop's 4 cores × 2 threads: 0.25 per CPU) the
// closed form gives exactly the same estimate as 8 threads.
func TestSimulateManyThreadsClosedForm(t *testing.T) {
	all8 := Plan{CPUs: map[string][]int{"a": {0, 1, 2, 3, 4, 5, 6, 7}}}
	even := func(threads int) []Load { return []Load{{Name: "a", Util: 2, Threads: threads}} }
	want, steps := SNBLaptop.simulate(snbLaptop, all8, even(8))
	if steps != 8 {
		t.Fatalf("8 threads: %d steps, want 8", steps)
	}
	for _, n := range []int{MaxSimulatedThreads + 1, math.MaxInt32, math.MaxInt64} {
		got, steps := SNBLaptop.simulate(snbLaptop, all8, even(n))
		if steps != 0 {
			t.Errorf("%d threads: %d steps, want 0 (closed form)", n, steps)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%d threads: %+v, want %+v (8 threads: 0.25 on every CPU)", n, got, want)
		}
	}

	// Uneven: another workload is busy first; the closed form is the
	// limit of the placement thread by thread, so MaxSimulatedThreads
	// threads (placed one at a time, the most that are) come within a
	// few thousandths of it, on one package, on two, and with classes.
	hybridPlan := Plan{CPUs: map[string][]int{"x": {0}, "y": {0, 1, 2, 3, 8, 9, 10, 11, 12, 13}}}
	for _, c := range []struct {
		name  string
		topo  Topology
		model EnergyModel
		plan  Plan
		util  float64
	}{
		{"laptop", snbLaptop, SNBLaptop, Plan{CPUs: map[string][]int{"x": {0}, "y": {0, 1, 2, 3, 4, 5, 6, 7}}}, 3},
		{"laptop, cores 0 and 2", snbLaptop, SNBLaptop, Plan{CPUs: map[string][]int{"x": {0}, "y": {6, 0, 4, 2}}}, 1.5},
		{"2 sockets", snbEP, SNBServer, Plan{CPUs: map[string][]int{"x": {0}, "y": all(snbEP)}}, 5},
		{"hybrid", adlP, SNBLaptop.WithClasses([]float64{0.35, 1}), hybridPlan, 4},
	} {
		t.Run(c.name, func(t *testing.T) {
			loads := func(threads int) []Load {
				return []Load{{Name: "x", Util: 0.75, Threads: 1}, {Name: "y", Util: c.util, Threads: threads}}
			}
			closed, steps := c.model.simulate(c.topo, c.plan, loads(math.MaxInt32))
			if steps != 1 { // x's one thread
				t.Errorf("closed form: %d steps, want 1", steps)
			}
			again, _ := c.model.simulate(c.topo, c.plan, loads(3*MaxSimulatedThreads))
			if !reflect.DeepEqual(closed, again) {
				t.Errorf("the closed form depends on the thread count: %+v and %+v", closed, again)
			}
			stepwise, steps := c.model.simulate(c.topo, c.plan, loads(MaxSimulatedThreads))
			if steps != 1+MaxSimulatedThreads {
				t.Errorf("%d threads: %d steps, want one per thread", MaxSimulatedThreads, steps)
			}
			if math.Abs(closed.Watts-stepwise.Watts) > 0.005 || math.Abs(closed.BusyThreads-stepwise.BusyThreads) > 1e-9 ||
				closed.BusyCores != stepwise.BusyCores || closed.BusyPackages != stepwise.BusyPackages ||
				len(closed.ClassWatts) != len(stepwise.ClassWatts) {
				t.Errorf("closed form %+v, %d threads %+v: want them within 0.005 W", closed, MaxSimulatedThreads, stepwise)
			}
			for k := range closed.ClassWatts {
				if math.Abs(closed.ClassWatts[k]-stepwise.ClassWatts[k]) > 0.005 {
					t.Errorf("class %d: closed form %v W, %d threads %v W", k, closed.ClassWatts[k], MaxSimulatedThreads, stepwise.ClassWatts[k])
				}
			}
		})
	}
}

// TestSimulateHugeUtil: a load's thread count is no int conversion of
// ceil(Util): a Util too large for an int, without a thread count,
// saturates its set in a few steps (it placed nothing before); a NaN or
// negative Util counts as 0 (NaN made every watt NaN).
func TestSimulateHugeUtil(t *testing.T) {
	plan := Plan{CPUs: map[string][]int{"a": {0, 1, 2, 3, 4, 5, 6, 7}}}
	for _, u := range []float64{1e300, math.Inf(1)} {
		e, steps := SNBLaptop.simulate(snbLaptop, plan, []Load{{Name: "a", Util: u}})
		if e.BusyThreads != 8 || e.BusyCores != 4 || steps > 2*8+1 {
			t.Errorf("Util %v: %+v in %d steps, want 8 busy threads in at most 17", u, e, steps)
		}
	}
	idle := SNBLaptop.Simulate(snbLaptop, plan, nil)
	for _, u := range []float64{math.NaN(), -1, math.Inf(-1)} {
		if e := SNBLaptop.Simulate(snbLaptop, plan, []Load{{Name: "a", Util: u, Threads: 4}}); !reflect.DeepEqual(e, idle) {
			t.Errorf("Util %v: %+v, want the idle machine %+v", u, e, idle)
		}
	}
}

// TestWaterFill: the closed form's filling, at each level of the
// topology.
func TestWaterFill(t *testing.T) {
	for _, c := range []struct {
		base, room []float64
		amount     float64
		want       []float64
	}{
		{[]float64{0, 0.5}, []float64{1, 1}, 1, []float64{0.75, 0.25}},                  // the lower first, then both
		{[]float64{0, 0}, []float64{0.25, 1}, 1, []float64{0.25, 0.75}},                 // the first full at 0.25
		{[]float64{0, 3}, []float64{1, 1}, 1.5, []float64{1, 0.5}},                      // a gap between them
		{[]float64{0.5, 0}, []float64{0, 1}, 0.5, []float64{0, 0.5}},                    // no room: none
		{[]float64{0, 0}, []float64{1, 1}, 5, []float64{1, 1}},                          // more than the room
		{[]float64{0, 0}, []float64{1, 1}, math.Inf(1), []float64{1, 1}},                // +Inf
		{[]float64{0, 0}, []float64{1, 1}, 0, []float64{0, 0}},                          // nothing
		{nil, nil, 1, []float64{}},                                                      // no vessel
		{[]float64{1, 1, 1}, []float64{1, 1, 1}, 1.5, []float64{0.5, 0.5, 0.5}},         // equal levels
		{[]float64{2, 0, 1}, []float64{0.5, 0.5, 0.5}, 1.25, []float64{0.25, 0.5, 0.5}}, // the highest takes the rest
	} {
		got := waterFill(c.base, c.room, c.amount)
		ok := len(got) == len(c.want)
		for k := 0; ok && k < len(got); k++ {
			ok = math.Abs(got[k]-c.want[k]) < 1e-12
		}
		if !ok {
			t.Errorf("waterFill(%v, %v, %v) = %v, want %v", c.base, c.room, c.amount, got, c.want)
		}
	}
}
