package policy

import (
	"fmt"
	"math"
	"reflect"
	"slices"
	"testing"
	"time"
)

// busyLoops is the seed's experiment: i always-busy single-thread workloads
// ("for ((i = 0; i < I; i++)) ; do while true; do :; done & done").
func busyLoops(i int) []Load {
	var loads []Load
	for k := range i {
		loads = append(loads, Load{Name: fmt.Sprintf("loop%02d", k), Util: 1, Threads: 1})
	}
	return loads
}

func all(t Topology) []int { return normalize(t, nil) }

func TestPlanPlacement(t *testing.T) {
	tests := []struct {
		name       string
		topo       Topology
		allowed    []int
		policy     Policy
		loads      []Load
		wantPolicy Policy
		want       map[string][]int
	}{
		// performance spreads
		{name: "performance gives all allowed CPUs", topo: snbLaptop, allowed: seq(0, 7), policy: Performance,
			loads: []Load{{Name: "a", Util: 0.1}, {Name: "b", Util: 3}}, wantPolicy: Performance,
			want: map[string][]int{"a": seq(0, 7), "b": seq(0, 7)}},
		{name: "performance honours the allowed set", topo: snbLaptop, allowed: []int{1, 2, 5}, policy: Performance,
			loads: []Load{{Name: "a", Util: 0.1}}, wantPolicy: Performance, want: map[string][]int{"a": {1, 2, 5}}},
		// powersaving packs threads, then cores, then packages
		{name: "powersaving packs two light loads onto one CPU (vacancy rule)", topo: twoCPU, allowed: []int{0, 1}, policy: Powersaving,
			loads: []Load{{Name: "a", Util: 0.1}, {Name: "b", Util: 0.1}}, wantPolicy: Powersaving,
			want: map[string][]int{"a": {0}, "b": {0}}},
		{name: "powersaving fills SMT siblings first", topo: snbLaptop, allowed: seq(0, 7), policy: Powersaving,
			loads: []Load{{Name: "a", Util: 0.8}, {Name: "b", Util: 0.9}}, wantPolicy: Powersaving,
			want: map[string][]int{"a": {0}, "b": {4}}},
		{name: "powersaving: a 2.5-CPU workload takes three threads of two cores", topo: snbLaptop, allowed: seq(0, 7), policy: Powersaving,
			loads: []Load{{Name: "a", Util: 2.5, Threads: 3}}, wantPolicy: Powersaving,
			want: map[string][]int{"a": {0, 1, 4}}},
		{name: "powersaving stays in one socket", topo: nhmEP, allowed: seq(0, 15), policy: Powersaving,
			loads: []Load{{Name: "a", Util: 5, Threads: 5}}, wantPolicy: Powersaving,
			want: map[string][]int{"a": {0, 1, 2, 8, 9}}},
		{name: "powersaving keeps the CPU a workload already has", topo: twoCPU, allowed: []int{0, 1}, policy: Powersaving,
			loads: []Load{{Name: "a", Util: 0.1, Current: []int{1}}}, wantPolicy: Powersaving,
			want: map[string][]int{"a": {1}}},
		{name: "powersaving: a small workload joins a busy CPU with vacancy", topo: snbLaptop, allowed: seq(0, 7), policy: Powersaving,
			loads: []Load{{Name: "big", Util: 0.6}, {Name: "tiny", Util: 0.05}}, wantPolicy: Powersaving,
			want: map[string][]int{"big": {0}, "tiny": {0}}},
		{name: "powersaving: no vacancy, the small workload takes the sibling", topo: snbLaptop, allowed: seq(0, 7), policy: Powersaving,
			loads: []Load{{Name: "big", Util: 0.9}, {Name: "tiny", Util: 0.05}}, wantPolicy: Powersaving,
			want: map[string][]int{"big": {0}, "tiny": {4}}},
		// balance: one busy workload per core (group capacity 1)
		{name: "balance puts two busy loops on two cores", topo: snbLaptop, allowed: seq(0, 7), policy: Balance,
			loads: busyLoops(2), wantPolicy: Balance, want: map[string][]int{"loop00": {0}, "loop01": {1}}},
		{name: "balance: small workload packs only under 60 %", topo: snbLaptop, allowed: seq(0, 7), policy: Balance,
			loads: []Load{{Name: "a", Util: 0.3}, {Name: "b", Util: 0.1}}, wantPolicy: Balance,
			want: map[string][]int{"a": {0}, "b": {4}}},
		// saturation and race to idle
		{name: "a saturated workload grows at once", topo: twoCPU, allowed: []int{0, 1}, policy: Powersaving,
			loads: []Load{{Name: "a", Util: 0.95, Current: []int{0}}}, wantPolicy: Powersaving,
			want: map[string][]int{"a": {0, 1}}},
		{name: "more runnable threads than CPUs grow the set", topo: snbLaptop, allowed: seq(0, 7), policy: Powersaving,
			loads: []Load{{Name: "a", Util: 1, Threads: 4, Current: []int{0}}}, wantPolicy: Powersaving,
			want: map[string][]int{"a": {0, 1, 4, 5}}},
		{name: "cpu.pressure grows the set", topo: snbLaptop, allowed: seq(0, 7), policy: Powersaving,
			loads: []Load{{Name: "a", Util: 0.5, Threads: 1, Pressure: 40, Current: []int{0}}}, wantPolicy: Powersaving,
			want: map[string][]int{"a": {0, 4}}},
		{name: "overload falls back to performance", topo: twoCPU, allowed: []int{0, 1}, policy: Powersaving,
			loads: []Load{{Name: "a", Util: 1.5, Threads: 2}, {Name: "b", Util: 1}}, wantPolicy: Performance,
			want: map[string][]int{"a": {0, 1}, "b": {0, 1}}},
		{name: "balance over sd_capacity 5 falls back to performance", topo: snbLaptop, allowed: seq(0, 7), policy: Balance,
			loads: busyLoops(6), wantPolicy: Performance,
			want: map[string][]int{"loop00": seq(0, 7), "loop01": seq(0, 7), "loop02": seq(0, 7), "loop03": seq(0, 7), "loop04": seq(0, 7), "loop05": seq(0, 7)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := Input{Topology: tt.topo, Allowed: tt.allowed, Policy: tt.policy, Loads: tt.loads}
			got := PlanPlacement(in)
			if got.Policy != tt.wantPolicy {
				t.Errorf("policy = %q, want %q", got.Policy, tt.wantPolicy)
			}
			if !reflect.DeepEqual(got.CPUs, tt.want) {
				t.Errorf("CPUs = %v, want %v", got.CPUs, tt.want)
			}
			var union []int
			for _, s := range tt.want {
				union = append(union, s...)
			}
			slices.Sort(union)
			union = slices.Compact(union)
			if !reflect.DeepEqual(got.Active, union) {
				t.Errorf("active = %v, want %v", got.Active, union)
			}
			if again := PlanPlacement(in); !reflect.DeepEqual(again, got) {
				t.Errorf("not deterministic: %+v vs %+v", again, got)
			}
		})
	}
}

func TestPlanPlacementEmpty(t *testing.T) {
	got := PlanPlacement(Input{Topology: twoCPU, Allowed: []int{0, 1}, Policy: Powersaving})
	if len(got.CPUs) != 0 || got.Active != nil {
		t.Fatalf("no loads: got %+v, want an empty plan", got)
	}
	got = PlanPlacement(Input{Topology: twoCPU, Policy: Powersaving, Loads: []Load{{Name: "a"}}})
	if got.CPUs["a"] != nil || got.Active != nil {
		t.Fatalf("no allowed CPUs: got %+v, want empty sets", got)
	}
	// An empty topology (before the daemon read one) gives performance.
	got = PlanPlacement(Input{Allowed: []int{0, 1}, Policy: Powersaving, Loads: []Load{{Name: "a"}}})
	if !reflect.DeepEqual(got.CPUs["a"], []int{0, 1}) {
		t.Fatalf("empty topology: got %+v", got)
	}
}

// active counts the packages and cores of the union of a plan's sets.
func active(topo Topology, p Plan) (pkgs, cores, threads int) {
	pk, co := map[int]bool{}, map[int]bool{}
	for _, id := range p.Active {
		c := topo.cpus[topo.index(id)]
		pk[c.Package], co[c.Core] = true, true
	}
	return len(pk), len(co), len(p.Active)
}

// TestGoldenSeed: the seed's experiments (patch 17), which packages, cores
// and threads each policy's plan allows for i busy loops.
func TestGoldenSeed(t *testing.T) {
	type row struct {
		i                   int
		policy              Policy
		effective           Policy
		active              string // the union, as a cpulist-ish slice
		pkgs, cores, thread int
	}
	tests := []struct {
		name string
		topo Topology
		rows []row
	}{
		{"SNB laptop 4C/8T", snbLaptop, []row{
			{2, Powersaving, Powersaving, "[0 4]", 1, 1, 2},
			{2, Balance, Balance, "[0 1]", 1, 2, 2},
			{2, Performance, Performance, "[0 1 2 3 4 5 6 7]", 1, 4, 8},
			{4, Powersaving, Powersaving, "[0 1 4 5]", 1, 2, 4},
			{4, Balance, Balance, "[0 1 2 3]", 1, 4, 4},
			{4, Performance, Performance, "[0 1 2 3 4 5 6 7]", 1, 4, 8},
			{8, Powersaving, Powersaving, "[0 1 2 3 4 5 6 7]", 1, 4, 8},
			{8, Balance, Performance, "[0 1 2 3 4 5 6 7]", 1, 4, 8}, // 8 > sd_capacity 5
			{8, Performance, Performance, "[0 1 2 3 4 5 6 7]", 1, 4, 8},
		}},
		{"SNB EP 2S×8C×2T", snbEP, []row{
			{4, Powersaving, Powersaving, "[0 1 16 17]", 1, 2, 4},
			{4, Balance, Balance, "[0 1 2 3]", 1, 4, 4},
			{4, Performance, Performance, fmt.Sprint(seq(0, 31)), 2, 16, 32},
			{8, Powersaving, Powersaving, "[0 1 2 3 16 17 18 19]", 1, 4, 8},
			{8, Balance, Balance, "[0 1 2 3 4 5 6 7]", 1, 8, 8},
			{8, Performance, Performance, fmt.Sprint(seq(0, 31)), 2, 16, 32},
			{16, Powersaving, Powersaving, "[0 1 2 3 4 5 6 7 16 17 18 19 20 21 22 23]", 1, 8, 16},
			// 16 ≤ sd_capacity 18: node 0 gets 9 (> its 8 cores: spread), node 1 gets 7 cores
			{16, Balance, Balance, "[0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 16 17 18 19 20 21 22 23]", 2, 15, 23},
			{16, Performance, Performance, fmt.Sprint(seq(0, 31)), 2, 16, 32},
		}},
	}
	for _, tt := range tests {
		for _, r := range tt.rows {
			t.Run(fmt.Sprintf("%s/i=%d/%s", tt.name, r.i, r.policy), func(t *testing.T) {
				p := PlanPlacement(Input{Topology: tt.topo, Allowed: all(tt.topo), Policy: r.policy, Loads: busyLoops(r.i)})
				if p.Policy != r.effective {
					t.Errorf("policy %s, want %s", p.Policy, r.effective)
				}
				if got := fmt.Sprint(p.Active); got != r.active {
					t.Errorf("active %s, want %s", got, r.active)
				}
				pk, co, th := active(tt.topo, p)
				if pk != r.pkgs || co != r.cores || th != r.thread {
					t.Errorf("packages/cores/threads %d/%d/%d, want %d/%d/%d", pk, co, th, r.pkgs, r.cores, r.thread)
				}
			})
		}
	}
}

// TestSteadyLoadKeepsCPUs: feeding a plan back as the current cpusets with
// the same load changes nothing.
func TestSteadyLoadKeepsCPUs(t *testing.T) {
	loads := []Load{{Name: "a", Util: 1.5, Threads: 2}, {Name: "b", Util: 0.5, Threads: 1}, {Name: "c", Util: 0.1}, {Name: "d", Util: 2.2, Threads: 3}}
	for _, pol := range []Policy{Powersaving, Balance} {
		in := Input{Topology: nhmEP, Allowed: all(nhmEP), Policy: pol, Loads: loads}
		p1 := PlanPlacement(in)
		in2 := feed(in, p1)
		p2 := PlanPlacement(in2)
		if !reflect.DeepEqual(p1.CPUs, p2.CPUs) {
			t.Errorf("%s: plan changed with a steady load:\n%v\n%v", pol, p1.CPUs, p2.CPUs)
		}
	}
}

// feed returns in with each load's Current set to the plan's CPUs and the
// plan's lazy state carried over.
func feed(in Input, p Plan) Input {
	out := in
	out.Loads = slices.Clone(in.Loads)
	for i := range out.Loads {
		out.Loads[i].Current = p.CPUs[out.Loads[i].Name]
	}
	out.Lazy = p.Lazy
	return out
}

// TestTraceLazy: a make -j–like load oscillating around the packing
// threshold (powersaving on the 4C/8T laptop) for 10 minutes of simulated time,
// one decision per second.
// Lazy balance must rewrite cpusets at least 10× less often.
func TestTraceLazy(t *testing.T) {
	run := func(lazy bool) int {
		start := time.Date(2013, 1, 24, 11, 6, 42, 0, time.UTC)
		in := Input{Topology: snbLaptop, Allowed: all(snbLaptop), Policy: Powersaving, MaxInterval: time.Second, DisableLazy: !lazy}
		writes := 0
		var prev Plan
		for s := range 600 {
			// 4 compile jobs, one runnable thread each, 90 % busy (3.6
			// CPUs: two cores when packed); every 3rd and 7th second
			// each runs three threads (10.8 CPUs > the 8 logical CPUs).
			// A job confined to k CPUs shows at most k CPUs of use.
			threads := 1
			if s%3 == 0 || s%7 == 0 {
				threads = 3
			}
			loads := make([]Load, 4)
			for k := range loads {
				loads[k] = Load{Name: fmt.Sprintf("cc%d", k), Util: 0.9 * float64(threads), Threads: threads}
				if prev.CPUs != nil {
					loads[k].Current = prev.CPUs[loads[k].Name]
					loads[k].Util = min(loads[k].Util, float64(len(loads[k].Current)))
				}
			}
			in.Loads, in.Now = loads, start.Add(time.Duration(s)*time.Second)
			p := PlanPlacement(in)
			for _, l := range loads {
				if prev.CPUs != nil && !slices.Equal(prev.CPUs[l.Name], p.CPUs[l.Name]) {
					writes++
				}
			}
			in.Lazy, prev = p.Lazy, p
		}
		return writes
	}
	eager, lazy := run(false), run(true)
	t.Logf("cpuset writes in 600 decisions: eager %d, lazy %d", eager, lazy)
	if lazy*10 > eager || eager == 0 {
		t.Fatalf("lazy balance wrote %d cpusets, eager %d: want at least 10× fewer", lazy, eager)
	}
}

func TestLazyState(t *testing.T) {
	t0 := time.Unix(1000, 0)
	var s LazyState
	if !s.PowerBalanceAllowed() {
		t.Fatal("an empty history must allow power balance")
	}
	s = s.step(true, t0, time.Second)
	for i := range 31 {
		s = s.step(false, t0.Add(time.Duration(i+1)*time.Second), time.Second)
		if s.PowerBalanceAllowed() {
			t.Fatalf("allowed after %d quiet decisions, want 32", i+1)
		}
	}
	s = s.step(false, t0.Add(32*time.Second), time.Second)
	if !s.PowerBalanceAllowed() {
		t.Fatalf("record %#x: not allowed after 32 quiet decisions", s.Record)
	}
	// Five performance decisions 33..64 ago forbid it.
	s = LazyState{Record: 0x1f << 32}
	if s.PowerBalanceAllowed() {
		t.Fatal("5 performance decisions in the high word allowed power balance")
	}
	s = LazyState{Record: 0xf << 32}
	if !s.PowerBalanceAllowed() {
		t.Fatal("4 performance decisions in the high word must be allowed")
	}
	// 8 × max_interval without a decision clears the record.
	s = LazyState{Record: 1, Last: t0}.step(false, t0.Add(9*time.Second), time.Second)
	if s.Record != 0 || !s.PowerBalanceAllowed() {
		t.Fatalf("record %#x after a long quiet gap, want 0", s.Record)
	}
	s = LazyState{Record: 1, Last: t0}.step(false, t0.Add(8*time.Second), time.Second)
	if s.Record != 2 {
		t.Fatalf("record %#x after exactly 8 intervals, want 0x2", s.Record)
	}
	// 8 × max_interval saturates: a period whose eightfold
	// overflows never clears the record, it does not clear it every time.
	for _, iv := range []time.Duration{2562047 * time.Hour, math.MaxInt64/lazyResetIntervals + 1, math.MaxInt64} {
		s = LazyState{Record: 1, Last: t0}.step(false, t0.Add(9*time.Second), iv)
		if s.Record != 2 {
			t.Fatalf("max interval %v: record %#x after 9s, want 0x2", iv, s.Record)
		}
	}
	s = LazyState{Record: 1, Last: t0}.step(false, t0.Add(math.MaxInt64/lazyResetIntervals*lazyResetIntervals+1), math.MaxInt64/lazyResetIntervals)
	if s.Record != 0 {
		t.Fatalf("largest max interval that does not overflow: record %#x after a longer gap, want 0", s.Record)
	}
}

// TestLazyResetAfter: a gap just past LazyResetAfter clears the history
// (step's rule), one of exactly it does not; 0 where step never clears.
func TestLazyResetAfter(t *testing.T) {
	t0 := time.Unix(1000, 0)
	after := LazyResetAfter(time.Second)
	if after != 8*time.Second {
		t.Fatalf("LazyResetAfter(1s) = %v, want 8s", after)
	}
	if s := (LazyState{Record: 1, Last: t0}).step(false, t0.Add(after+time.Nanosecond), time.Second); s.Record != 0 {
		t.Fatalf("record %#x just past LazyResetAfter, want 0", s.Record)
	}
	if s := (LazyState{Record: 1, Last: t0}).step(false, t0.Add(after), time.Second); s.Record != 2 {
		t.Fatalf("record %#x at exactly LazyResetAfter, want 0x2", s.Record)
	}
	for _, iv := range []time.Duration{0, -time.Second, math.MaxInt64/lazyResetIntervals + 1, math.MaxInt64} {
		if got := LazyResetAfter(iv); got != 0 {
			t.Errorf("LazyResetAfter(%v) = %v, want 0 (never cleared)", iv, got)
		}
	}
}

// TestPlanSharedCPUContention: two busy single-threaded workloads packed
// onto one CPU each show only half of it, so no workload alone looks
// saturated; their threads share one run queue, which the patch counts as
// util × nr_running. They must be spread, and a light pair must stay
// packed (two `yes` loops beside light work).
func TestPlanSharedCPUContention(t *testing.T) {
	topo, err := BuildTopology([]CPUDesc{{ID: 0, Core: 0, LLC: 0, Package: 0}, {ID: 1, Core: 1, LLC: 0, Package: 0}})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		util    float64
		threads int
		want    map[string][]int
	}{
		{"two busy loops on CPU 0 spread", 0.5, 1, map[string][]int{"a": {0}, "b": {1}}},
		{"two busy loops, no thread counts", 0.5, 0, map[string][]int{"a": {0}, "b": {1}}},
		{"two light loads stay packed", 0.1, 1, map[string][]int{"a": {0}, "b": {0}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := Input{Topology: topo, Allowed: []int{0, 1}, Policy: Powersaving, Loads: []Load{
				{Name: "a", Util: tc.util, Current: []int{0}, Threads: tc.threads},
				{Name: "b", Util: tc.util, Current: []int{0}, Threads: tc.threads},
			}}
			got := PlanPlacement(in)
			if !reflect.DeepEqual(got.CPUs, tc.want) {
				t.Fatalf("plan %v, want %v", got.CPUs, tc.want)
			}
			// Lazy balance must not hold an overloaded CPU either.
			in.DisableLazy = false
			in.Lazy = LazyState{}
			if got := PlanPlacement(in); !reflect.DeepEqual(got.CPUs, tc.want) {
				t.Errorf("with lazy balance: %v, want %v", got.CPUs, tc.want)
			}
		})
	}
}

// TestPlanSteadyLoadNoFlap: steady loads that the balancer once moved
// with every decision (found by TestPropSteadyLoadNoChanges), on the
// Nehalem EP with CPUs 7 and 15 (one core) and 14 allowed, powersaving.
// Each plan, fed back as the current cpusets with each load using at most
// what they give it, must stay as it is.
//   - "packed, then contended": 0.65 (threads unknown) and one thread of
//     0.25 on one CPU, their demands (0.72 and 0.25) within it: the
//     shared-CPU contention rule spread them, and the next plan packed
//     them again.
func TestPlanSteadyLoadNoFlap(t *testing.T) {
	smt23 := intelSMT(2, 3)
	for _, tc := range []struct {
		name    string
		topo    Topology
		allowed []int
		loads   []Load
		// first is the first decision's plan when it is not want: from
		// the second decision on, the plan is want.
		first, want map[string][]int
	}{
		{"packed, then contended", nhmEP, []int{7, 14, 15},
			[]Load{{Name: "w0", Util: 0.65}, {Name: "w1", Util: 1, Threads: 1}, {Name: "w2", Util: 0.25, Threads: 1}},
			nil, map[string][]int{"w0": {7}, "w1": {15}, "w2": {7}}},
		// More large workloads than CPUs: a fresh packing on 4 cores puts
		// w5 and w6 on one CPU, where the next decision finds them
		// contended and spreads them over 5 cores. The decision after
		// that packed them again (its fresh packing uses 4 cores, by
		// putting w5 and w6 together), and so on: four plans in turn
		// for ever. The spread plan now stands.
		{"shared when packed", smt23, all(smt23),
			[]Load{{Name: "w0", Util: 1}, {Name: "w1", Util: 1}, {Name: "w2", Util: 3}, {Name: "w3", Util: 0.375},
				{Name: "w4", Util: 0.5625}, {Name: "w5", Util: 0.5}, {Name: "w6", Util: 0.5}, {Name: "w7", Util: 0.25}},
			map[string][]int{"w0": {0, 6}, "w1": {0, 1}, "w2": {1, 2, 7, 8}, "w3": {2}, "w4": {3, 8}, "w5": {9}, "w6": {9}, "w7": {3}},
			map[string][]int{"w0": {0, 8}, "w1": {0, 6}, "w2": {1, 2, 7, 8}, "w3": {2}, "w4": {3, 8}, "w5": {9}, "w6": {3, 4}, "w7": {10}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := Input{Topology: tc.topo, Allowed: tc.allowed, Policy: Powersaving, Loads: tc.loads}
			p := PlanPlacement(in)
			for i := range 6 {
				want := tc.want
				if i == 0 && tc.first != nil {
					want = tc.first
				}
				if !reflect.DeepEqual(p.CPUs, want) {
					t.Fatalf("decision %d: %v, want %v", i, p.CPUs, want)
				}
				next := feed(in, p)
				for j := range next.Loads {
					next.Loads[j].Util = math.Min(next.Loads[j].Util, float64(len(next.Loads[j].Current)))
				}
				p = PlanPlacement(next)
			}
		})
	}
}
