package policy

import (
	"fmt"
	"reflect"
	"testing"
)

// vm2Units are the units seen on the 2-vCPU test VM: dbus 0.01, work1
// 0.12, work2 0.11 CPUs and five idle units, each currently at cur.
// threads is the runnable-thread count each gets: 1 as `plan --load`
// gives it, 0 (unknown) as the daemon's units have it.
func vm2Units(threads int, cur []int) []Load {
	loads := []Load{
		{Name: "dbus", Util: 0.01, Threads: threads, Current: cur},
		{Name: "work1", Util: 0.12, Threads: threads, Current: cur},
		{Name: "work2", Util: 0.11, Threads: threads, Current: cur},
	}
	for i := range 5 {
		loads = append(loads, Load{Name: fmt.Sprintf("idle%d", i+1), Threads: threads, Current: cur})
	}
	return loads
}

// every gives each of names the same set.
func every(set []int, names ...string) map[string][]int {
	out := map[string][]int{}
	for _, n := range names {
		out[n] = set
	}
	return out
}

var vm2Names = []string{"dbus", "work1", "work2", "idle1", "idle2", "idle3", "idle4", "idle5"}

// TestPlanIdleWorkloads: on 2 CPUs without SMT, powersaving must not put
// five idle units beside 0.24 CPUs of load on CPU 1 (as it did when the
// vacancy rule counted each idle unit as a runnable task: the plan then
// used 2 cores and the daemon, whose units were unrestricted, kept them
// so). Idle workloads follow the packed work whatever their count, from
// any current placement.
func TestPlanIdleWorkloads(t *testing.T) {
	for _, tc := range []struct {
		name    string
		policy  Policy
		threads int
		cur     []int
		want    map[string][]int
	}{
		{"powersaving, plan's thread counts", Powersaving, 1, nil, every([]int{0}, vm2Names...)},
		{"powersaving, the daemon's units: unrestricted, no thread count", Powersaving, 0, []int{0, 1}, every([]int{0}, vm2Names...)},
		{"powersaving, everything now on CPU 1", Powersaving, 0, []int{1}, every([]int{1}, vm2Names...)},
		{"balance, plan's thread counts", Balance, 1, nil, every([]int{0}, vm2Names...)},
		// Without thread counts the demands are util / 0.9 and balance's
		// 60 % vacancy leaves no room for work2 beside work1
		// (13.3 + 4 × 12.2 > 60): its threshold does not allow one CPU.
		// The idle units still take no CPU of their own.
		{"balance, no thread counts", Balance, 0, nil, func() map[string][]int {
			m := every([]int{0}, vm2Names...)
			m["work2"] = []int{1}
			return m
		}()},
		// That fresh plan uses both CPUs, so unrestricted units use no
		// more cores than it does: kept (Stability).
		{"balance, the daemon's units", Balance, 0, []int{0, 1}, every([]int{0, 1}, vm2Names...)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := Input{Topology: twoCPU, Allowed: []int{0, 1}, Policy: tc.policy, Loads: vm2Units(tc.threads, tc.cur)}
			got := PlanPlacement(in)
			if got.Policy != tc.policy || !reflect.DeepEqual(got.CPUs, tc.want) {
				t.Fatalf("%s %v, want %s %v", got.Policy, got.CPUs, tc.policy, tc.want)
			}
			// Fed back, the plan is kept.
			if again := PlanPlacement(feed(in, got)); !reflect.DeepEqual(again.CPUs, got.CPUs) {
				t.Errorf("fed back: %v, want it kept: %v", again.CPUs, got.CPUs)
			}
		})
	}
}

// TestPlanIdleFollowsPackedWork: an idle workload never makes a plan use
// a CPU alone. Placed after the others, it joins the group the packing
// fills, and there a CPU that holds work: its current one if the vacancy
// rule leaves room, else the one of smallest positive vacancy, else the
// one with the most room — a full one too, while its load fits — rather
// than an idle CPU; with nothing busy, all idle workloads share one CPU.
func TestPlanIdleFollowsPackedWork(t *testing.T) {
	idle := func(name string, cur ...int) Load { return Load{Name: name, Current: cur} }
	for _, tc := range []struct {
		name   string
		topo   Topology
		policy Policy
		loads  []Load
		want   map[string][]int
	}{
		{"a full CPU and idle units", twoCPU, Powersaving,
			[]Load{{Name: "loop", Util: 1, Threads: 1}, idle("a", 1), idle("b", 0, 1), idle("c")},
			map[string][]int{"loop": {0}, "a": {0}, "b": {0}, "c": {0}}},
		{"only idle units, spread now", twoCPU, Powersaving,
			[]Load{idle("a", 1), idle("b", 0), idle("c", 0, 1)},
			map[string][]int{"a": {0}, "b": {0}, "c": {0}}},
		// SMT laptop: two busy loops fill core 0's threads, the light
		// l3 takes core 1, the group the packing fills last: the idle
		// units, on every CPU now, join l3 on CPU 1 (balance: one loop
		// per core, l3 on core 2, CPU 2).
		{"SMT laptop, idle units on every CPU", snbLaptop, Powersaving,
			[]Load{{Name: "l1", Util: 1, Threads: 1}, {Name: "l2", Util: 1, Threads: 1}, {Name: "l3", Util: 0.3, Threads: 1},
				idle("idle0", 2), idle("idle1", 3), idle("idle2", 4), idle("idle3", 5), idle("idle4", 6), idle("idle5", 7)},
			func() map[string][]int {
				m := every([]int{1}, "l3", "idle0", "idle1", "idle2", "idle3", "idle4", "idle5")
				m["l1"], m["l2"] = []int{0}, []int{4}
				return m
			}()},
		{"SMT laptop, balance", snbLaptop, Balance,
			[]Load{{Name: "l1", Util: 1, Threads: 1}, {Name: "l2", Util: 1, Threads: 1}, {Name: "l3", Util: 0.3, Threads: 1},
				idle("idle0", 2), idle("idle1", 3), idle("idle2", 4), idle("idle3", 5), idle("idle4", 6), idle("idle5", 7)},
			func() map[string][]int {
				m := every([]int{2}, "l3", "idle0", "idle1", "idle2", "idle3", "idle4", "idle5")
				m["l1"], m["l2"] = []int{0}, []int{1}
				return m
			}()},
		// An idle unit stays on its current CPU while the vacancy rule
		// leaves room there: CPU 1 (vacancy 60 %), not CPU 0 (50 %),
		// which find_leader_cpu would pick.
		{"idle stays on its busy CPU", twoCPU, Powersaving,
			[]Load{{Name: "a", Util: 0.5, Threads: 1, Current: []int{0}}, {Name: "b", Util: 0.4, Threads: 1, Current: []int{1}}, idle("c", 1)},
			map[string][]int{"a": {0}, "b": {1}, "c": {1}}},
		{"idle without a current set", twoCPU, Powersaving,
			[]Load{{Name: "a", Util: 0.5, Threads: 1, Current: []int{0}}, {Name: "b", Util: 0.4, Threads: 1, Current: []int{1}}, idle("c")},
			map[string][]int{"a": {0}, "b": {1}, "c": {0}}},
		// With no thread count the demand is util / 0.9: 0.0095 CPUs is
		// 0.0106, a small task, and 0.0085 is 0.0094, idle. Their CPU 1
		// is the busier group, so the loop takes it; the vacancy rule
		// finds no room there for tick, which takes the idle CPU 0, nor
		// for sleep, whose load is real: it joins tick.
		{"just above idle is a small task", twoCPU, Powersaving,
			[]Load{{Name: "loop", Util: 1, Threads: 1}, {Name: "tick", Util: 0.0095, Current: []int{1}}, {Name: "sleep", Util: 0.0085, Current: []int{1}}},
			map[string][]int{"loop": {1}, "tick": {0}, "sleep": {0}}},
		// Idle units are counted by their load: 300 of 0.005 CPUs
		// (1.5 CPUs) fill CPU 0 to 100 % and go on to CPU 1.
		{"many idle units still carry their load", twoCPU, Powersaving, manyIdle(300, 0.005),
			func() map[string][]int {
				m := map[string][]int{}
				for i, l := range manyIdle(300, 0.005) {
					m[l.Name] = []int{0}
					if i >= 200 {
						m[l.Name] = []int{1}
					}
				}
				return m
			}()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := PlanPlacement(Input{Topology: tc.topo, Allowed: all(tc.topo), Policy: tc.policy, Loads: tc.loads})
			if got.Policy != tc.policy || !reflect.DeepEqual(got.CPUs, tc.want) {
				t.Fatalf("%s %v, want %s %v", got.Policy, got.CPUs, tc.policy, tc.want)
			}
		})
	}
}

// TestPlanIdleAloneNotKept: current sets where an idle workload alone
// holds a CPU use more cores than the fresh packing, so they are not kept
// (with an empty lazy history); with a history that forbids packing they
// are (lazy balance, Plan.Deferred).
func TestPlanIdleAloneNotKept(t *testing.T) {
	in := Input{Topology: twoCPU, Allowed: []int{0, 1}, Policy: Powersaving, Loads: []Load{
		{Name: "work", Util: 0.3, Threads: 1, Current: []int{0}},
		{Name: "idle", Current: []int{1}},
	}}
	if got := PlanPlacement(in); !reflect.DeepEqual(got.CPUs, every([]int{0}, "work", "idle")) || got.Deferred {
		t.Fatalf("%v deferred %v, want both on CPU 0 at once", got.CPUs, got.Deferred)
	}
	in.Lazy = LazyState{Record: 1}
	if got := PlanPlacement(in); !reflect.DeepEqual(got.CPUs, map[string][]int{"work": {0}, "idle": {1}}) || !got.Deferred {
		t.Fatalf("%v deferred %v, want the current sets, deferred", got.CPUs, got.Deferred)
	}
}

// TestPlanIdleAnyCount: the light load packs onto one CPU whatever
// the count of idle units, unrestricted now or not, on the 2-CPU machine
// and on the SMT laptop.
func TestPlanIdleAnyCount(t *testing.T) {
	for _, topo := range []Topology{twoCPU, snbLaptop} {
		for _, n := range []int{0, 1, 5, 64, 512} {
			for _, cur := range [][]int{nil, all(topo)} {
				loads := vm2Units(0, cur)[:3]
				for i := range n {
					loads = append(loads, Load{Name: fmt.Sprintf("idle%03d", i), Current: cur})
				}
				got := PlanPlacement(Input{Topology: topo, Allowed: all(topo), Policy: Powersaving, Loads: loads})
				if !reflect.DeepEqual(got.Active, []int{0}) {
					t.Errorf("%d CPUs, %d idle units, current %v: active %v, want [0]", topo.NumCPUs(), n, cur, got.Active)
				}
			}
		}
	}
}

// manyIdle is n idle workloads of util CPUs each, one runnable thread.
func manyIdle(n int, util float64) []Load {
	var loads []Load
	for i := range n {
		loads = append(loads, Load{Name: fmt.Sprintf("u%03d", i), Util: util, Threads: 1})
	}
	return loads
}
