package policy

import "slices"

// planMixed is PlanPlacement for workloads of different policies on a
// machine of one class: each policy's plan is made over every workload,
// as if the machine ran that policy, and each workload takes its set from
// the plan of its own policy — the room that policy would give it beside
// everything else that runs. The machine's policy's plan carries the lazy
// history; each plan keeps a set only by looking at its own members
// (planWith). pols[i] is the policy of in.Loads[i].
func planMixed(in Input, pols []Policy) Plan {
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
// policy's members are planned on their own, the foreground's policies
// first; the plans that place packed-away work (background, services,
// unfocused apps) then leave out the foreground's cores (every SMT
// sibling of a CPU it got), unless that would leave no CPU. A
// foreground workload its class leaves unconfined (Performance while the
// machine packs) gets every allowed CPU, but is planned with balance
// (the performance cores first) to find the cores its load needs: those
// are its footprint (Plan.Foreground). The machine policy's plan over
// every workload still gives Plan.Policy, Lazy, Deferred and Spread, as
// on a machine of one class.
func planHybrid(in Input, pols []Policy) Plan {
	main := planWith(in, func(i int) bool { return pols[i] == in.Policy })
	out := Plan{Policy: main.Policy, CPUs: make(map[string][]int, len(in.Loads)), Lazy: main.Lazy,
		Deferred: main.Deferred, Spread: main.Spread, Policies: make(map[string]Policy, len(in.Loads))}
	topo := in.Topology
	allowed := normalize(topo, in.Allowed)
	// planned is the policy each workload is planned with: its own, but
	// balance for the footprint of an unconfined foreground workload.
	planned := slices.Clone(pols)
	unconfined := make([]bool, len(in.Loads))
	for i, l := range in.Loads {
		if Foreground(l.Class) && pols[i] == Performance && packing(in.Policy) > 0 {
			planned[i], unconfined[i] = Balance, true
		}
	}
	var everywhere []int // what an unconfined workload gets
	focusedPol := map[Policy]bool{}
	for i, l := range in.Loads {
		if Foreground(l.Class) {
			focusedPol[planned[i]] = true
		}
		if unconfined[i] && everywhere == nil {
			everywhere = allowedFor(in, balancerFor(Performance))
		}
	}
	var order []Policy
	for _, first := range []bool{true, false} {
		for _, p := range AvailablePolicies {
			if focusedPol[p] == first && slices.Contains(planned, p) {
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
			if planned[i] == p {
				sub.Loads = append(sub.Loads, l)
				idx = append(idx, i)
				bg = bg || packedAway(l.Class)
			}
		}
		shared := false
		if !focusedPol[p] && bg && len(focusedCPUs) > 0 {
			var rest []int
			for _, id := range allowed {
				if !focusedCPUs[id] {
					rest = append(rest, id)
				}
			}
			if len(rest) > 0 {
				sub.Allowed = rest
			} else {
				shared = true
			}
			sub.awake = focusedCPUs
		}
		plan := planWith(sub, nil)
		out.Spread = out.Spread || plan.Spread
		out.Deferred = out.Deferred || plan.Deferred
		for _, i := range idx {
			name := in.Loads[i].Name
			set, pol := plan.CPUs[name], plan.Policy
			if unconfined[i] {
				set, pol = everywhere, Performance
			}
			out.CPUs[name] = set
			out.Policies[name] = pol
			why := plan.Reasons[name]
			if unconfined[i] {
				why = "" // its set is every CPU, not its footprint's
			}
			if shared && packedAway(in.Loads[i].Class) {
				why = "shares the foreground's cores: no other CPU is allowed"
			}
			if why != "" {
				if out.Reasons == nil {
					out.Reasons = map[string]string{}
				}
				out.Reasons[name] = why
			}
			for _, id := range set {
				active[id] = true
			}
			if Foreground(in.Loads[i].Class) {
				for _, id := range plan.CPUs[name] {
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
	for id := range focusedCPUs {
		out.Foreground = append(out.Foreground, id)
	}
	slices.Sort(out.Foreground)
	return out
}
