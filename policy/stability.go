package policy

import "math"

// overloadMargin is how much more overloaded (in CPUs of util × nr_running
// over a threshold) the current cpusets may be than a fresh packing and
// still be kept.
const overloadMargin = 1.0

// acceptable reports whether the current cpusets may be kept (see
// PlanPlacement, "Stability").
func (tr *tree) acceptable(rules balancer, loads []loadState, fresh [][]int32, member func(i int) bool, pref, nAllowed int) bool {
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
	fewer := c.packages > f.packages || c.cores > f.cores || c.capped > f.capped || c.classCost > f.classCost
	if fewer && len(contendedGroups(loads, func(i int) []int32 { return fresh[i] }, nAllowed)) == 0 {
		return false
	}
	// A fresh packing that uses fewer CPUs only by putting workloads
	// together that the next decision would find contended
	// (shareContention) and spread again is no better than the current
	// sets: taking it made a steady load cycle through four plans
	// (TestPlanSteadyLoadNoFlap, "shared when packed").
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
