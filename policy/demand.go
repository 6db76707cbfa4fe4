package policy

import (
	"fmt"
	"math"
	"slices"
)

// Saturation rules (docs/USAGE.md, "Workloads"): a workload confined to k CPUs can never
// show more than k CPUs of use, so the average alone cannot say how much
// it wants.
const (
	// SaturationRatio: using this share of its cpuset, with no thread
	// count to say otherwise, a workload's demand is unknown.
	SaturationRatio = 0.90
	// PressureHigh: cpu.pressure some avg10 at or above this (percent)
	// means the workload's threads wait for CPU.
	PressureHigh = 10.0
)

// loadState is one workload during planning.
type loadState struct {
	cur     []int32 // current CPUs inside the tree, as positions, ascending
	demand  float64 // P: potential demand in CPUs
	util    float64 // Load.Util, sanitised
	threads int     // Load.Threads
	// contended: the workload shares an overloaded confined set with
	// others (see shareContention); its current set must not be kept.
	contended bool
	// idle: demand below idleDemand; the workload occupies no CPU of
	// its own (see idleDemand).
	idle bool
	// scale converts util (CPU time) to capacity (CPUs of the biggest
	// kind): the mean capacity of the CPUs it ran on, on a hybrid
	// topology; 1 with a single class.
	scale float64
}

// idleDemand is the potential demand, in CPUs, below which a workload is
// idle: asleep in the patch's terms. find_leader_cpu's integer percent
// (putil) rounds it to 0 %, and it has no runnable thread to add to
// nr_running. Counted like a busy one, every idle unit of a slice added a
// task to its CPU's util × nr_running until the vacancy rule gave up on a
// CPU that held 0.24 CPUs of load, so idle units alone made a plan use a
// second CPU; and a current placement spread over every CPU then never
// used more cores than the plan, so it was kept. An idle workload adds
// nothing to any threshold and is placed where the packed work is.
const idleDemand = 0.01

// loadState converts a Load: current CPUs to positions, and the demand.
func (tr *tree) loadState(l Load, nAllowed int, mark []bool) loadState {
	var st loadState
	n := len(tr.pos)
	if len(l.Current) > n/8 {
		// large sets: mark and scan, O(n), already sorted
		for _, id := range l.Current {
			if i := tr.topo.index(id); i >= 0 {
				if p := tr.posOf[i]; p >= 0 {
					mark[p] = true
				}
			}
		}
		for p, m := range mark {
			if m {
				st.cur = append(st.cur, int32(p))
				mark[p] = false
			}
		}
	} else {
		for _, id := range l.Current {
			if i := tr.topo.index(id); i >= 0 {
				if p := tr.posOf[i]; p >= 0 {
					st.cur = append(st.cur, p)
				}
			}
		}
		slices.Sort(st.cur)
		st.cur = slices.Compact(st.cur)
	}
	u := l.Util
	if math.IsNaN(u) || u < 0 {
		u = 0
	}
	k := len(st.cur)
	if k == 0 {
		k = nAllowed
	}
	p := u
	if l.Threads == 0 {
		// No thread count: keep the workload under the saturation
		// ratio of its own set, or every plan would look saturated at
		// the next decision.
		p = u / SaturationRatio
	}
	if l.Threads > k {
		p = u * float64(l.Threads) / float64(k)
	}
	if l.Threads >= 2 {
		p = math.Max(p, float64(stableSize(u, l.Threads, p)))
	}
	if k < nAllowed {
		saturated := l.Pressure >= PressureHigh ||
			(l.Threads == 0 && u >= SaturationRatio*float64(k))
		if saturated {
			p = math.Max(p, float64(k+1))
		}
	}
	st.demand, st.util, st.threads, st.scale = p, u, l.Threads, 1
	st.idle = p < idleDemand
	return st
}

// toCapacity converts the loads' demand, measured in CPU time, to
// capacity on a hybrid topology: a workload busy on k E-cores of
// cpu_capacity 580 needs 0.57 × k of P-cores (the kernel's PELT util is
// capacity-invariant the same way). The scale is the mean capacity of its
// current CPUs, or of every CPU when it has none. The saturation rule
// stays in CPUs of its own set, where it is the same rule: a workload can
// show at most k CPUs of time on k CPUs, whatever their kind.
func (tr *tree) toCapacity(loads []loadState) {
	root := &tr.nodes[tr.root]
	all := root.capw / float64(root.weight())
	for i := range loads {
		l := &loads[i]
		f := all
		if len(l.cur) > 0 {
			sum := 0.0
			for _, p := range l.cur {
				sum += tr.nodes[tr.leaf[p]].capw
			}
			f = sum / float64(len(l.cur))
		}
		l.scale = f
		l.demand *= f
	}
}

// shareContention applies the saturation rule to workloads that share a
// confined set of CPUs. The kernel sees their threads on the same run
// queues (patch 17: group_utils = Σ rq->util × max(nr_running, 1)), so two
// single-threaded workloads busy on one CPU are two tasks on one run queue,
// not two half-CPU loads: each shows only its share of the CPU, and the
// per-workload rule (a workload alone at ≥ 90 % of its set) never fires.
// For each distinct confined current set S (|S| below the allowed CPUs)
// held by two or more workloads that are not small (util ≥ 25 %) and whose
// utilisation together reaches 90 % of |S| (the same saturation ratio as
// for one workload; an instant thread count alone is too noisy for light
// loads), unless they have no more runnable threads than |S| and their
// demands fit in it (the packer's own placement), each member's demand becomes
// at least util × n / |S|, with n the larger of their runnable threads
// together and |S| + 1, and the members are marked contended, so their
// sets are re-planned at once.
func shareContention(loads []loadState, nAllowed int) {
	for _, idx := range contendedGroups(loads, func(i int) []int32 { return loads[i].cur }, nAllowed) {
		k := float64(len(loads[idx[0]].cur))
		threads := 0
		for _, i := range idx {
			threads += loads[i].threads
		}
		n := math.Max(float64(threads), k+1)
		for _, i := range idx {
			loads[i].demand = math.Max(loads[i].demand, loads[i].util*n/k)
			loads[i].contended = true
		}
	}
}

// contendedGroups returns the groups of workloads (indexes into loads,
// ascending) that share one confined set S of CPUs, set(i) (|S| below
// nAllowed), by the rule shareContention applies to their current sets:
// two or more that are not small, their utilisation together at least
// SaturationRatio × |S|, and either more runnable threads than |S| or
// demands that do not fit in it. demand is read as loadState has it
// before toCapacity (divided by scale where it is set). Groups come in
// the order of their first member.
func contendedGroups(loads []loadState, set func(i int) []int32, nAllowed int) [][]int {
	// contentionMinUtil: members below it are small tasks in the sense of
	// patch 13 (4 × util < powersaving's max_util of 100 %), which the
	// vacancy rule deliberately packs beside busy ones.
	const contentionMinUtil = 0.25
	groups := map[string][]int{}
	var keys []string
	for i := range loads {
		s := set(i)
		if k := len(s); k == 0 || k >= nAllowed {
			continue
		}
		key := fmt.Sprint(s)
		if _, ok := groups[key]; !ok {
			keys = append(keys, key)
		}
		groups[key] = append(groups[key], i)
	}
	var out [][]int
	for _, key := range keys {
		idx := groups[key]
		if len(idx) < 2 {
			continue
		}
		k := float64(len(set(idx[0])))
		threads, util, demand, big := 0, 0.0, 0.0, 0
		for _, i := range idx {
			l := &loads[i]
			threads += l.threads
			util += l.util
			d := l.demand
			if l.scale != 0 {
				d /= l.scale
			}
			demand += d
			if l.util >= contentionMinUtil {
				big++
			}
		}
		if big < 2 || util < SaturationRatio*k {
			// Room left, or one workload plus small ones the vacancy
			// rule put beside it: packing them together is the point.
			continue
		}
		if threads <= int(k) && demand <= k+eps {
			// No more runnable threads than CPUs, and their demands
			// (each with the saturation margin where its threads are
			// unknown) fit: the set the packer itself gives such a group
			// (it fills a CPU up to its capacity), not one that hides
			// their wants. Marked contended, the group was spread, then
			// packed again at the next decision, and so on for ever
			// (TestPropSteadyLoadNoChanges: 0.65 of unknown threads and
			// one thread at 0.25 on one CPU).
			continue
		}
		out = append(out, idx)
	}
	return out
}

// stableSize is the smallest m ≥ ceil(p) CPUs on which a workload of
// util u (CPUs) and n runnable threads would not look short at the next
// decision: min(u, m) × max(1, n/m) ≤ m. Without it a workload whose
// threads each use little of a CPU would grow and shrink in turn.
func stableSize(u float64, n int, p float64) int {
	m := max(1, int(math.Ceil(p-1e-6)))
	for m < n && math.Min(u, float64(m))*float64(n)/float64(m) > float64(m)+eps {
		m++
	}
	return m
}
