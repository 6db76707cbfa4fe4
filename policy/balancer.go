package policy

import (
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
	// awake is the CPUs other work keeps awake (the focused app's, in a
	// hybrid plan): a home there costs no wake (chooseHomes).
	awake map[int]bool
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
	// Reasons says, for a workload whose home is not what the class
	// order alone would give, why: the energy models' choice of its
	// home (Topology.WithHomes), or a background workload sharing the
	// foreground's cores because no other CPU is left. nil when there
	// is nothing to say.
	Reasons map[string]string
	// Foreground is, on a hybrid machine while it packs, the CPUs of the
	// cores the foreground's load is planned on (the focused app, the
	// session; ClassPolicy, Foreground), SMT siblings included: the
	// cores packed-away work is kept off. The foreground itself may run
	// on every CPU unless a slice rule confines it. nil: no foreground,
	// or a machine of one class.
	Foreground []int
}

const eps = 1e-9

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
// Policies (docs/USAGE.md, "Workloads"; the domain tree is described on
// buildTree):
//   - performance: every workload gets every allowed CPU (CFS spreads).
//   - balance / powersaving: from the top domain down, if the domain's
//     load exceeds its threshold (sd_capacity for balance, span weight for
//     powersaving) or cannot fit its groups, the domain is balanced for
//     performance: its workloads get all of its CPUs. Otherwise its groups
//     are filled in order up to their thresholds (group capacity or group
//     weight) — the busiest group with room first (the patch's
//     group_leader); inside the LLC unthrottled CPUs come before busy
//     ones, above it busy groups before unthrottled ones (the CPU order
//     of Alfred Chen's BFS commit 1fa3bb5, docs/SOURCES.md §1: same CPU,
//     SMT, LLC, package, node, prefer CPUs not scaled down) — and each
//     group is packed the same way.
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
// each workload takes its set from its own policy's plan: background work
// and unfocused apps the set powersaving would give them, the foreground
// (the focused app, the session) every allowed CPU. Sets of different policies may
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
// own, the foreground's first, and background, service and unfocused app
// work is kept off every core (SMT siblings included) the foreground's
// load is planned on (Plan.Foreground: an unconfined foreground
// workload's load is planned as balance plans it, the performance cores
// first, while it may run on every CPU), unless no CPU would be left. CPUs marked Reserved (another owner confines work
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
	return planMixed(in, pols)
}

// planWith is PlanPlacement for every workload under in.Policy; member
// (nil: every workload) says whose sets the caller takes, and only those
// decide whether the current sets are kept (Stability).
func planWith(in Input, member func(i int) bool) Plan {
	topo := in.Topology
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
	allowed := allowedFor(in, rules)
	if len(allowed) == 0 {
		return everyone(nil)
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
	var homeWhy string
	if pref == efficientFirst && topo.homes != nil {
		// The cheapest home for this plan's load first (WithHomes):
		// plan on the topology whose classes are renumbered in that
		// order.
		// Idle loads count too: leaving them out made the home jump
		// between the class order (all idle: no price) and the priced
		// choice as a light load crossed idleDemand, a move with
		// every sample (the idle-desktop scenario: four a second).
		util := 0.0
		for _, l := range loads {
			util += l.demand * capacityScale
		}
		if ch, ok := topo.chooseHomes(allowed, util, in.awake, currentHome(topo, in.Loads, len(allowed))); ok {
			homeWhy = ch.Reason
			if rt, ok := topo.homes.remapped[orderKey(ch.Order)]; ok {
				topo = rt
				tr = topo.treeFor(allowed)
				for i, l := range in.Loads {
					loads[i] = tr.loadState(l, len(allowed), mark)
				}
				shareContention(loads, len(allowed))
				tr.toCapacity(loads)
			}
		}
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
	curOK := tr.acceptable(rules, loads, freshSets, member, pref, len(allowed))
	if homeWhy != "" {
		plan.Reasons = make(map[string]string, len(in.Loads))
		for _, l := range in.Loads {
			plan.Reasons[l.Name] = homeWhy
		}
	}
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

// allowedFor returns the CPU IDs a plan under rules may use: in.Allowed
// ascending and deduplicated, restricted to the topology's CPUs when it
// knows any, and without its Reserved CPUs when rules pack and another
// CPU is left. Empty when nothing is allowed.
func allowedFor(in Input, rules balancer) []int {
	topo := in.Topology
	if len(in.Allowed) == 0 {
		return nil
	}
	var allowed []int
	if topo.NumCPUs() == 0 {
		allowed = slices.Clone(in.Allowed)
		slices.Sort(allowed)
		allowed = slices.Compact(allowed)
	} else {
		allowed = normalize(topo, in.Allowed)
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
	return allowed
}

// unionPos returns the positions in a or b, ascending, each once.
func unionPos(a, b []int32) []int32 {
	out := make([]int32, 0, len(a)+len(b))
	out = append(out, a...)
	out = append(out, b...)
	slices.Sort(out)
	return slices.Compact(out)
}

// currentHome is the class every confined load of loads is on now (their
// Current cpusets, each smaller than the nAllowed CPUs it may have, all
// within one class), the home chooseHomes keeps unless another costs
// homeMargin less; -1 when there is none (nothing confined yet, or the
// confined loads span classes).
func currentHome(t Topology, loads []Load, nAllowed int) int {
	home := -1
	for _, l := range loads {
		if len(l.Current) == 0 || len(l.Current) >= nAllowed {
			continue
		}
		for _, id := range l.Current {
			i := t.index(id)
			if i < 0 {
				continue
			}
			switch c := t.cpus[i].Class; {
			case home == -1:
				home = c
			case home != c:
				return -1
			}
		}
	}
	return home
}
