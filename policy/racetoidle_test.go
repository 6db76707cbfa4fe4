package policy

import (
	"reflect"
	"testing"
	"time"
)

// flapping is a race-to-idle sequence seen on a 2-CPU machine: two
// light workloads (0.3 and 0.1 CPUs, packed on one CPU), and at every third decision from 10 to 109 a burst (a
// 2-thread build at 1.5 CPUs beside a busy loop: 3 CPUs of demand over
// the 2 CPUs' threshold). A workload confined to k CPUs shows at most k
// CPUs of use. One decision a second.
func flapping(s int, prev Plan) []Load {
	burst := s >= 10 && s < 110 && (s-10)%3 == 0
	loads := []Load{{Name: "a", Util: 0.3, Threads: 1}, {Name: "b", Util: 0.1, Threads: 1}}
	if burst {
		loads = []Load{{Name: "a", Util: 1.5, Threads: 2}, {Name: "b", Util: 1, Threads: 1}}
	}
	for i := range loads {
		if cur := prev.CPUs[loads[i].Name]; cur != nil {
			loads[i].Current = cur
			loads[i].Util = min(loads[i].Util, float64(len(cur)))
		}
	}
	return loads
}

// runFlapping makes the decisions of flapping from 0 to n-1 as the daemon
// does (each plan's history and sets fed to the next) and returns each
// decision's plan.
func runFlapping(n int, disableLazy bool) []Plan {
	t0 := time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)
	in := Input{Topology: twoCPU, Allowed: []int{0, 1}, Policy: Powersaving, MaxInterval: time.Second, DisableLazy: disableLazy}
	var plans []Plan
	var prev Plan
	for s := range n {
		in.Loads, in.Now = flapping(s, prev), t0.Add(time.Duration(s)*time.Second)
		p := PlanPlacement(in)
		plans = append(plans, p)
		in.Lazy, prev = p.Lazy, p
	}
	return plans
}

// toggles counts the decisions whose Plan.Policy differs from the one
// before (the daemon's reason gains or loses "(race to idle)").
func toggles(plans []Plan) int {
	n := 0
	for i := 1; i < len(plans); i++ {
		if plans[i].Policy != plans[i-1].Policy {
			n++
		}
	}
	return n
}

// TestRaceToIdleHysteresis: the decision to race to idle has the lazy
// power balance's hysteresis. The burst at 10 races to idle at once; the
// bursts every third decision keep the history busy, so the plan stays
// in race to idle, and it packs again at the first decision with none of
// the last 32 over the threshold and at most 4 among the 32 before: the
// last bursts are at 109, 106, 103, 100 and 97, so 109 + 32 = 141 is not
// enough (decisions 78..109 hold 11 bursts) and 97 must leave the window
// of 64: decision 161. Two toggles, where the load alone gives 68 (each
// of the 34 bursts enters, the next decision leaves).
func TestRaceToIdleHysteresis(t *testing.T) {
	const n = 200
	plans := runFlapping(n, false)
	for s, p := range plans {
		want, held := Powersaving, false
		if s >= 10 && s < 161 {
			want = Performance
			held = s >= 11 && (s-10)%3 != 0 || s >= 110
		}
		if p.Policy != want || p.Deferred != held || p.Lazy.RaceToIdle != (want == Performance) {
			t.Fatalf("decision %d: policy %s, deferred %v, race to idle %v; want %s, %v, %v (record %#x)",
				s, p.Policy, p.Deferred, p.Lazy.RaceToIdle, want, held, want == Performance, p.Lazy.Record)
		}
		if want == Performance && (len(p.CPUs["a"]) != 2 || len(p.CPUs["b"]) != 2) {
			t.Fatalf("decision %d: race to idle with sets %v, want every CPU", s, p.CPUs)
		}
	}
	if got := toggles(plans); got != 2 {
		t.Errorf("%d toggles, want 2", got)
	}
	if p := plans[161]; !reflect.DeepEqual(p.CPUs, every([]int{0}, "a", "b")) {
		t.Errorf("decision 161: %v, want both packed on CPU 0", p.CPUs)
	}
	// The sequence flaps: without the history every burst enters race
	// to idle and the next decision leaves it.
	if got := toggles(runFlapping(n, true)); got != 68 {
		t.Errorf("without lazy balance: %d toggles, want 68", got)
	}
}

// TestRaceToIdleQuietInterval: 8 × MaxInterval without a decision clears
// the history (patch 18's reset), and the held race to idle with it.
func TestRaceToIdleQuietInterval(t *testing.T) {
	t0 := time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)
	in := Input{Topology: twoCPU, Allowed: []int{0, 1}, Policy: Powersaving, MaxInterval: time.Second, Now: t0,
		Loads: []Load{{Name: "a", Util: 1.5, Threads: 2}, {Name: "b", Util: 1, Threads: 1}}}
	raced := PlanPlacement(in)
	if raced.Policy != Performance || !raced.Lazy.RaceToIdle || raced.Deferred {
		t.Fatalf("burst: %s, race to idle %v, deferred %v; want performance, true, false", raced.Policy, raced.Lazy.RaceToIdle, raced.Deferred)
	}
	quiet := in
	quiet.Loads = []Load{{Name: "a", Util: 0.3, Threads: 1, Current: []int{0, 1}}, {Name: "b", Util: 0.2, Threads: 1, Current: []int{0, 1}}}
	quiet.Lazy = raced.Lazy
	for _, tc := range []struct {
		gap  time.Duration
		want Policy
	}{{time.Second, Performance}, {8 * time.Second, Performance}, {8*time.Second + time.Nanosecond, Powersaving}} {
		quiet.Now = t0.Add(tc.gap)
		if got := PlanPlacement(quiet); got.Policy != tc.want || got.Lazy.RaceToIdle != (tc.want == Performance) {
			t.Errorf("quiet decision %v later: %s, race to idle %v; want %s", tc.gap, got.Policy, got.Lazy.RaceToIdle, tc.want)
		}
	}
	// A forced decision (DisableLazy) or an empty history is not held.
	quiet.Now = t0.Add(time.Second)
	quiet.DisableLazy = true
	if got := PlanPlacement(quiet); got.Policy != Powersaving || got.Lazy.RaceToIdle {
		t.Errorf("forced: %s, race to idle %v; want powersaving", got.Policy, got.Lazy.RaceToIdle)
	}
	quiet.DisableLazy, quiet.Lazy = false, LazyState{}
	if got := PlanPlacement(quiet); got.Policy != Powersaving {
		t.Errorf("empty history: %s, want powersaving", got.Policy)
	}
}

// TestRaceToIdleHeldForMachinePolicyOnly: with workloads of two policies
// the hold applies to the machine policy's plan, which carries the
// history; the services' powersaving plan under balance races on its own
// load only.
func TestRaceToIdleHeldForMachinePolicyOnly(t *testing.T) {
	in := Input{Topology: twoCPU, Allowed: []int{0, 1}, Policy: Balance,
		Loads: []Load{{Name: "app", Util: 0.3, Threads: 1, Current: []int{0, 1}}, {Name: "svc", Util: 0.1, Threads: 1, Class: ClassService, Current: []int{0, 1}}},
		Lazy:  LazyState{Record: 1, RaceToIdle: true}}
	got := PlanPlacement(in)
	if got.Policy != Performance || got.Policies["app"] != Performance || got.Policies["svc"] != Powersaving || !got.Lazy.RaceToIdle {
		t.Fatalf("policy %s, policies %v, race to idle %v; want performance (held), app performance, svc powersaving", got.Policy, got.Policies, got.Lazy.RaceToIdle)
	}
}
