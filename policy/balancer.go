package policy

import (
	"fmt"
	"math"
	"slices"
	"time"
)

// Load is one managed workload (a cgroup) as the balancer sees it.
type Load struct {
	Name string
	// Util is the workload's decayed CPU utilisation in CPUs (1.0 = one
	// CPU fully busy; may exceed 1 for multi-threaded workloads), e.g.
	// from UtilAverage.
	Util float64
	// Current is the workload's cpuset now (CPU IDs, any order).
	Current []int
	// Threads is the instant number of runnable threads (the patch's
	// nr_running; e.g. the "R" tasks of cgroup.threads / tasks). 0 means
	// unknown.
	Threads int
	// Pressure is cgroup v2 cpu.pressure "some avg10", in percent
	// (0..100). 0 means none or unknown (cgroup v1).
	Pressure float64
	// Class is what kind of work it is (ClassService, ClassFocused, …;
	// "" is ClassWorkload); with Slice it picks the policy the workload
	// is placed with (LoadPolicy).
	Class string
	// Slice is the systemd slice the workload runs in ("" none), whose
	// rule in Input.Slices applies to it.
	Slice string
}

// Input is everything one balancing decision depends on. The same Input
// always gives the same Plan.
type Input struct {
	Topology Topology
	// Allowed is the set of CPUs the managed parent may hand out (online
	// CPUs of the parent cpuset). CPUs unknown to a non-empty Topology are
	// ignored. Empty: the plan is empty.
	Allowed []int
	// Policy is the effective policy from the knob (Knob.Effective).
	Policy Policy
	Loads  []Load
	// Lazy is the previous decision's Plan.Lazy (zero value on the first
	// decision).
	Lazy LazyState
	// Now is the time of this decision; only the lazy history reset uses
	// it. Zero: never reset by time.
	Now time.Time
	// MaxInterval is the longest regular gap between two decisions (the
	// daemon's sampling period; the kernel's sd->max_interval). After
	// 8 × MaxInterval without a decision the lazy history is cleared.
	// 0 disables the reset.
	MaxInterval time.Duration
	// DisableLazy packs whenever the load allows it, ignoring patch 18's
	// history (for comparisons and tests).
	DisableLazy bool
	// Slices are the configured slice rules by slice name ([[slice]] in
	// schedpolicyd.conf); a Load's Slice picks its rule. nil: none.
	Slices map[string]SliceRule
}

// Plan is a placement: the CPUs each workload may run on.
//
// The slices in CPUs and Active may share memory with each other; treat
// them as read-only.
type Plan struct {
	// Policy is the policy the plan was made with: the input policy, or
	// Performance when a power-aware policy fell back because the load
	// exceeds the whole set's threshold ("race to idle"), or because
	// the lazy history still holds it there (see PlanPlacement).
	Policy Policy
	// CPUs maps each workload name to its CPUs (ascending).
	CPUs map[string][]int
	// Active is the union of all workloads' CPUs (ascending).
	Active []int
	// Lazy is the lazy-balance history to pass as the next Input.Lazy.
	Lazy LazyState
	// Deferred reports that the load would pack tighter but lazy balance
	// held the current cpusets (growing only workloads that need it), or
	// held the plan in race to idle.
	Deferred bool
	// Spread reports that at least one domain was over its threshold and
	// balanced for performance (a "performance balance" in patch 18's
	// record).
	Spread bool
	// Policies maps each workload name to the policy it was placed with:
	// its LoadPolicy, or Performance where that policy's plan fell back
	// (race to idle).
	Policies map[string]Policy
}

// Saturation rules (DESIGN.md §5): a workload confined to k CPUs can never
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

const eps = 1e-9

// overloadMargin is how much more overloaded (in CPUs of util × nr_running
// over a threshold) the current cpusets may be than a fresh packing and
// still be kept.
const overloadMargin = 1.0

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

// PlanPlacement computes a placement plan. It is pure and deterministic
// and does not modify its input.
//
// Demand. Each workload's potential demand P, in CPUs, is the patch's
// "maximum potential util" (patch 17: rq->util × max(nr_running, 1))
// summed over its k current CPUs: Util × max(1, Threads / k); with no
// thread count, Util / 0.9 so the plan leaves it below saturation; with two
// or more threads, at least the smallest set on which that formula would
// not ask for more at the next decision (stableSize). A confined
// workload (k < allowed) whose Util ≥ 90 % of k with no thread count, or
// whose cpu.pressure some avg10 ≥ 10 %, is saturated: P ≥ k + 1, so its
// set grows at once instead of waiting for the average.
//
// Idle workloads. A workload whose P is below 0.01 CPUs (find_leader_cpu's
// integer putil rounds it to 0 %) is asleep: it adds nothing to any
// threshold nor to a CPU's nr_running, and it goes where the packed work
// is — its current CPU if that one got work, else the busy CPU with the
// smallest positive vacancy, else the busy CPU with the most room; with
// nothing busy, all idle workloads share one CPU. However many there are,
// idle workloads never make a plan use a CPU of their own.
//
// Policies (DESIGN.md §5; the domain tree is described on buildTree):
//   - performance: every workload gets every allowed CPU (CFS spreads).
//   - balance / powersaving: from the top domain down, if the domain's
//     load exceeds its threshold (sd_capacity for balance, span weight for
//     powersaving) or cannot fit its groups, the domain is balanced for
//     performance: its workloads get all of its CPUs. Otherwise its groups
//     are filled in order up to their thresholds (group capacity or group
//     weight) — the busiest group with room first (the patch's
//     group_leader); inside the LLC unthrottled CPUs come before busy
//     ones, above it busy groups before unthrottled ones (the CPU order
//     of ../shared/seeds/004: same CPU, SMT, LLC, package, node, prefer
//     CPUs not scaled down) — and each group is packed the same way.
//     Among a domain's CPUs (the last level), a workload that is not small
//     gets CPUs of its own; a small one (4 × util below max_util: 25 %
//     powersaving, 15 % balance) goes to the busy CPU with the smallest
//     positive vacancy max_util − (util × nr + 4 × putil) (patch 13).
//   - If the whole set is over its threshold, Plan.Policy is Performance.
//
// Stability. When the current cpusets are valid, no workload is short of
// CPUs, they use no more packages, cores or frequency-capped CPUs than the
// fresh packing, and no CPU (core for balance) is more over its threshold
// than in the fresh packing by more than one CPU's worth, they are kept
// unchanged. Otherwise the fresh packing is used — unless lazy
// balance (Input.Lazy, patch 18) forbids packing now, in which case the
// current cpusets are kept and only short workloads grow (Plan.Deferred).
// Every performance decision is immediate.
//
// Race to idle. Once the machine policy's plan has raced to idle (the
// whole set over its threshold), it stays there — Plan.Policy
// Performance, every workload on every allowed CPU, Plan.Deferred — while
// the lazy history forbids packing: it packs again at the first decision
// after 32 in a row below the threshold with at most 4 over it among the
// 32 before (LazyState.PowerBalanceAllowed), or after 8 × MaxInterval
// without a decision. A load flapping around the threshold so stays in
// race to idle instead of toggling at every crossing. The history records
// what the load asked for, never the hold itself. DisableLazy, and a
// zero Input.Lazy, leave the hold out. Plans of other policies (classes,
// slice rules), and on a hybrid machine each policy's plan over its own
// members (see "Efficiency classes"), race to idle on their own load
// only.
//
// Classes and slices. Each workload is placed with its LoadPolicy (its
// Class and its Slice's rule in Input.Slices against Input.Policy; see
// ClassPolicy for the table). When they differ, each policy present is
// planned as above over every workload, as if the machine ran it, and
// each workload takes its set from its own policy's plan: the focused app
// gets the room balance would give it beside everything else, background
// work the set powersaving would give it. Sets of different policies may
// overlap (CFS shares those CPUs). Only the machine policy's plan carries
// the lazy history (Plan.Lazy); each plan's stability is judged on its
// own members; Plan.Policies says which policy placed each workload.
//
// Efficiency classes. On a hybrid topology (CPUDesc.Class takes more
// than one value: P-cores and E-cores, big.LITTLE) powersaving fills the
// most efficient class first and balance the most performant; every
// group order puts the class first, thresholds count capacity (an E-core
// of cpu_capacity 580 holds 0.57 of a P-core's load; demand measured in
// CPU time is scaled by the mean capacity of the CPUs it ran on), a
// workload goes whole into the first module of the best class with room
// for it, and current sets on a worse class than the fresh plan's are not
// kept. Workloads of different policies are planned each policy on its
// own, the focused app's first, and background and service work is kept
// off every core (SMT siblings included) the focused app got, unless no
// CPU would be left. CPUs marked Reserved (another owner confines work
// there) get nothing packed onto them. With a single class none of this
// applies and the plans are the ones above.
//
// Every workload gets a non-empty set of allowed CPUs when any CPU is
// allowed. With no allowed CPUs every set is empty.
func PlanPlacement(in Input) Plan {
	pols := make([]Policy, len(in.Loads))
	mixed := false
	for i, l := range in.Loads {
		var rule *SliceRule
		if r, ok := in.Slices[l.Slice]; ok && l.Slice != "" {
			rule = &r
		}
		pols[i] = LoadPolicy(in.Policy, l.Class, rule)
		mixed = mixed || pols[i] != in.Policy
	}
	if !mixed {
		plan := planWith(in, nil)
		plan.Policies = make(map[string]Policy, len(in.Loads))
		for _, l := range in.Loads {
			plan.Policies[l.Name] = plan.Policy
		}
		return plan
	}
	if in.Topology.Hybrid() {
		return planHybrid(in, pols)
	}
	// Workloads of different policies: each policy's plan is made over
	// every workload, as if the machine ran that policy, and each
	// workload takes its set from the plan of its own policy — the room
	// that policy would give it beside everything else that runs. The
	// machine's policy's plan carries the lazy history; each plan keeps a
	// set only by looking at its own members (planWith).
	main := planWith(in, func(i int) bool { return pols[i] == in.Policy })
	out := Plan{Policy: main.Policy, CPUs: make(map[string][]int, len(in.Loads)), Lazy: main.Lazy,
		Deferred: main.Deferred, Spread: main.Spread, Policies: make(map[string]Policy, len(in.Loads))}
	// Active is the union of the sets, marked by CPU ID: sets of a
	// spreading plan hold every allowed CPU each, too many to sort.
	var mark []bool
	for _, p := range AvailablePolicies {
		sub := main
		if p != in.Policy {
			has := false
			for _, q := range pols {
				has = has || q == p
			}
			if !has {
				continue
			}
			pin := in
			pin.Policy = p
			pin.Lazy.RaceToIdle = false // the machine policy's plan's
			sub = planWith(pin, func(i int) bool { return pols[i] == p })
			out.Spread = out.Spread || sub.Spread
			out.Deferred = out.Deferred || sub.Deferred
		}
		for i, l := range in.Loads {
			if pols[i] == p {
				out.CPUs[l.Name] = sub.CPUs[l.Name]
				out.Policies[l.Name] = sub.Policy
				for _, id := range sub.CPUs[l.Name] {
					if id >= len(mark) {
						mark = append(mark, make([]bool, id+1-len(mark))...)
					}
					mark[id] = true
				}
			}
		}
	}
	for id, m := range mark {
		if m {
			out.Active = append(out.Active, id)
		}
	}
	return out
}

// planHybrid is PlanPlacement for workloads of different policies on a
// hybrid topology (see PlanPlacement, "Efficiency classes"): each
// policy's members are planned on their own, the policies of focused apps
// first; the plans that place background or service work then leave out
// the focused apps' cores (every SMT sibling of a CPU they got), unless
// that would leave no CPU. The machine policy's plan over every workload
// still gives Plan.Policy, Lazy, Deferred and Spread, as on a machine of
// one class.
func planHybrid(in Input, pols []Policy) Plan {
	main := planWith(in, func(i int) bool { return pols[i] == in.Policy })
	out := Plan{Policy: main.Policy, CPUs: make(map[string][]int, len(in.Loads)), Lazy: main.Lazy,
		Deferred: main.Deferred, Spread: main.Spread, Policies: make(map[string]Policy, len(in.Loads))}
	topo := in.Topology
	allowed := normalize(topo, in.Allowed)
	focusedPol := map[Policy]bool{}
	for i, l := range in.Loads {
		if l.Class == ClassFocused {
			focusedPol[pols[i]] = true
		}
	}
	var order []Policy
	for _, first := range []bool{true, false} {
		for _, p := range AvailablePolicies {
			if focusedPol[p] == first && slices.Contains(pols, p) {
				order = append(order, p)
			}
		}
	}
	byCore := map[int][]int{}
	for _, c := range topo.cpus {
		byCore[c.Core] = append(byCore[c.Core], c.ID)
	}
	focusedCPUs := map[int]bool{}
	active := map[int]bool{}
	for _, p := range order {
		sub := in
		sub.Policy, sub.Loads = p, nil
		sub.Lazy.RaceToIdle = false // main's: the plan over every workload
		var idx []int
		bg := false
		for i, l := range in.Loads {
			if pols[i] == p {
				sub.Loads = append(sub.Loads, l)
				idx = append(idx, i)
				bg = bg || l.Class == ClassBackground || l.Class == ClassService
			}
		}
		if !focusedPol[p] && bg && len(focusedCPUs) > 0 {
			var rest []int
			for _, id := range allowed {
				if !focusedCPUs[id] {
					rest = append(rest, id)
				}
			}
			if len(rest) > 0 {
				sub.Allowed = rest
			}
		}
		plan := planWith(sub, nil)
		out.Spread = out.Spread || plan.Spread
		out.Deferred = out.Deferred || plan.Deferred
		for _, i := range idx {
			name := in.Loads[i].Name
			out.CPUs[name] = plan.CPUs[name]
			out.Policies[name] = plan.Policy
			for _, id := range plan.CPUs[name] {
				active[id] = true
				if in.Loads[i].Class == ClassFocused {
					for _, sib := range byCore[topo.cpus[topo.index(id)].Core] {
						focusedCPUs[sib] = true
					}
				}
			}
		}
	}
	for id := range active {
		out.Active = append(out.Active, id)
	}
	slices.Sort(out.Active)
	return out
}

// planWith is PlanPlacement for every workload under in.Policy; member
// (nil: every workload) says whose sets the caller takes, and only those
// decide whether the current sets are kept (Stability).
func planWith(in Input, member func(i int) bool) Plan {
	topo := in.Topology
	var allowed []int
	if len(in.Allowed) > 0 {
		if topo.NumCPUs() == 0 {
			allowed = slices.Clone(in.Allowed)
			slices.Sort(allowed)
			allowed = slices.Compact(allowed)
		} else {
			allowed = normalize(topo, in.Allowed)
		}
	}
	rules := balancerFor(in.Policy)
	plan := Plan{Policy: in.Policy, CPUs: make(map[string][]int, len(in.Loads)), Lazy: in.Lazy}
	everyone := func(set []int) Plan {
		for _, l := range in.Loads {
			plan.CPUs[l.Name] = set
		}
		if len(in.Loads) > 0 && len(set) > 0 {
			plan.Active = set
		}
		return plan
	}
	if len(allowed) == 0 {
		return everyone(nil)
	}
	if rules.packs() && len(topo.reserved) > 0 {
		// Another owner confines work to the reserved CPUs (intel-lpmd
		// on the LP E-cores): pack elsewhere, unless nothing is left.
		var rest []int
		for _, id := range allowed {
			if _, ok := slices.BinarySearch(topo.reserved, id); !ok {
				rest = append(rest, id)
			}
		}
		if len(rest) > 0 {
			allowed = rest
		}
	}
	if !rules.packs() || topo.NumCPUs() == 0 || len(in.Loads) == 0 {
		if rules.packs() {
			plan.Policy = Performance // nothing to pack with
		}
		plan.Lazy = LazyState{}
		return everyone(allowed)
	}

	tr := topo.treeFor(allowed)
	loads := make([]loadState, len(in.Loads))
	mark := make([]bool, len(tr.pos)) // scratch for loadState
	for i, l := range in.Loads {
		loads[i] = tr.loadState(l, len(allowed), mark)
	}
	shareContention(loads, len(allowed))
	pref := classPref(topo, in.Policy)
	if pref != 0 {
		tr.toCapacity(loads)
	}
	fresh := newPacker(tr, rules, loads, pref)
	fresh.run()
	plan.Spread = fresh.spread
	plan.Lazy = in.Lazy.step(fresh.spread, in.Now, in.MaxInterval)
	// Race to idle with the lazy balance's hysteresis: entered at once,
	// left only when the history allows a power balance.
	held := !fresh.rootSpread && in.Lazy.RaceToIdle && !in.DisableLazy && !plan.Lazy.PowerBalanceAllowed()
	plan.Lazy.RaceToIdle = fresh.rootSpread || held
	if plan.Lazy.RaceToIdle {
		plan.Policy, plan.Deferred = Performance, held
		return everyone(allowed)
	}
	freshSets := fresh.sets()
	curOK := tr.acceptable(rules, loads, freshSets, member, pref)
	switch {
	case curOK:
		return tr.emit(plan, in.Loads, func(i int) []int32 { return loads[i].cur })
	case in.DisableLazy || fresh.spread || plan.Lazy.PowerBalanceAllowed():
		return tr.emit(plan, in.Loads, func(i int) []int32 { return freshSets[i] })
	default:
		plan.Deferred = true
		return tr.emit(plan, in.Loads, func(i int) []int32 {
			l := &loads[i]
			if len(l.cur) == 0 {
				return freshSets[i]
			}
			if l.contended || l.demand > float64(len(l.cur))+eps {
				return unionPos(l.cur, freshSets[i])
			}
			return l.cur
		})
	}
}

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
// loads), each member's demand becomes
// at least util × n / |S|, with n the larger of their runnable threads
// together and |S| + 1, and the members are marked contended, so their
// sets are re-planned at once.
func shareContention(loads []loadState, nAllowed int) {
	// contentionMinUtil: members below it are small tasks in the sense of
	// patch 13 (4 × util < powersaving's max_util of 100 %), which the
	// vacancy rule deliberately packs beside busy ones.
	const contentionMinUtil = 0.25
	groups := map[string][]int{}
	for i, l := range loads {
		if k := len(l.cur); k == 0 || k >= nAllowed {
			continue
		}
		key := fmt.Sprint(l.cur)
		groups[key] = append(groups[key], i)
	}
	for _, idx := range groups {
		if len(idx) < 2 {
			continue
		}
		k := float64(len(loads[idx[0]].cur))
		threads, util, big := 0, 0.0, 0
		for _, i := range idx {
			threads += loads[i].threads
			util += loads[i].util
			if loads[i].util >= contentionMinUtil {
				big++
			}
		}
		if big < 2 || util < SaturationRatio*k {
			// Room left, or one workload plus small ones the vacancy
			// rule put beside it: packing them together is the point.
			continue
		}
		n := math.Max(float64(threads), k+1)
		for _, i := range idx {
			loads[i].demand = math.Max(loads[i].demand, loads[i].util*n/k)
			loads[i].contended = true
		}
	}
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

// emit converts position sets to the Plan's CPU lists.
func (tr *tree) emit(plan Plan, loads []Load, set func(i int) []int32) Plan {
	mark := make([]bool, len(tr.pos))
	for i, l := range loads {
		ps := set(i)
		ids := make([]int, len(ps))
		for j, p := range ps {
			ids[j] = tr.topo.cpus[tr.pos[p]].ID
			mark[p] = true
		}
		slices.Sort(ids)
		plan.CPUs[l.Name] = ids
	}
	for p, m := range mark {
		if m {
			plan.Active = append(plan.Active, tr.topo.cpus[tr.pos[p]].ID)
		}
	}
	slices.Sort(plan.Active)
	return plan
}

// acceptable reports whether the current cpusets may be kept (see
// PlanPlacement, "Stability").
func (tr *tree) acceptable(rules balancer, loads []loadState, fresh [][]int32, member func(i int) bool, pref int) bool {
	if member != nil {
		var ml []loadState
		var mf [][]int32
		for i := range loads {
			if member(i) {
				ml, mf = append(ml, loads[i]), append(mf, fresh[i])
			}
		}
		loads, fresh = ml, mf
	}
	for _, l := range loads {
		if len(l.cur) == 0 || l.contended || l.demand > float64(len(l.cur))+eps {
			return false
		}
	}
	cur := make([][]int32, len(loads))
	for i := range loads {
		cur[i] = loads[i].cur
	}
	c, f := tr.count(cur, pref), tr.count(fresh, pref)
	if c.packages > f.packages || c.cores > f.cores || c.capped > f.capped || c.classCost > f.classCost {
		return false
	}
	// No CPU (powersaving) or core (balance) over its threshold by the
	// patch's measure — or not worse than the fresh packing by more than
	// overloadMargin (hysteresis: two near-equal packings must not take
	// turns).
	return tr.overload(rules, loads, cur) <= tr.overload(rules, loads, fresh)+overloadMargin
}

// overload is the largest excess of a CPU (powersaving) or core (balance)
// over its threshold by the patch's measure, util × max(nr_running, 1)
// (patch 17), with each workload's util and runnable threads spread evenly
// over its set, as CFS would; 0 when none is over. A plan that piles busy
// workloads together scores high.
func (tr *tree) overload(rules balancer, loads []loadState, sets [][]int32) float64 {
	_, isBalance := rules.(balanceRules)
	util := make([]float64, len(tr.nodes))
	nr := make([]float64, len(tr.nodes))
	for i, l := range loads {
		set := sets[i]
		if len(set) == 0 {
			continue
		}
		th := float64(l.threads)
		switch {
		case l.idle:
			th = 0 // no runnable thread
		case th == 0:
			th = math.Max(1, math.Ceil(l.util-1e-6))
		}
		k := float64(len(set))
		u := l.util
		if l.scale != 0 {
			u *= l.scale
		}
		for _, p := range set {
			n := tr.leaf[p]
			if isBalance {
				n = tr.core[p]
			}
			util[n] += u / k
			nr[n] += th / k
		}
	}
	worst := 0.0
	for n, u := range util {
		if u == 0 {
			continue
		}
		nd := &tr.nodes[n]
		th := 1.0
		if isBalance && nd.weight() > 1 {
			th = float64(groupCapacity(nd.power, false))
		} else if tr.topo.Hybrid() {
			th = nd.capw
		}
		worst = math.Max(worst, u*math.Max(nr[n], 1)-th)
	}
	return worst
}

// counts are the distinct packages, cores, CPUs and capped CPUs used,
// and on a hybrid topology the classes' cost of the CPUs used: Σ class
// (efficientFirst) or Σ (highest class − class) (performantFirst), so a
// plan on the wrong side of the machine is not kept.
type counts struct{ packages, cores, threads, capped, classCost int }

func (tr *tree) count(sets [][]int32, pref int) counts {
	var c counts
	seenCPU := make([]bool, len(tr.pos))
	pk, co := map[int]bool{}, map[int]bool{}
	for _, s := range sets {
		for _, p := range s {
			if seenCPU[p] {
				continue
			}
			seenCPU[p] = true
			d := &tr.topo.cpus[tr.pos[p]]
			c.threads++
			if d.Capped {
				c.capped++
			}
			switch pref {
			case efficientFirst:
				c.classCost += d.Class
			case performantFirst:
				c.classCost += int(tr.nodes[tr.root].maxClass) - d.Class
			}
			pk[d.Package] = true
			co[d.Core] = true
		}
	}
	c.packages, c.cores = len(pk), len(co)
	return c
}

func unionPos(a, b []int32) []int32 {
	out := make([]int32, 0, len(a)+len(b))
	out = append(out, a...)
	out = append(out, b...)
	slices.Sort(out)
	return slices.Compact(out)
}
