package policy

import (
	"math"
	"slices"
	"sort"
)

// item is a workload's share of one domain's load, in CPUs.
type item struct {
	w       int32
	portion float64
}

type span struct{ lo, hi int32 }

// packer computes the fresh power-aware placement over a tree.
type packer struct {
	tr         *tree
	rules      balancer
	loads      []loadState
	out        [][]span // per workload
	spread     bool     // some domain balanced for performance
	rootSpread bool     // the top domain did
	// pref orders groups by efficiency class on a hybrid topology:
	// efficientFirst, performantFirst, or 0 (a single class).
	pref int
}

// Class preferences of a plan on a hybrid topology (classPref).
const (
	efficientFirst  = 1  // LPE, E, P; little, mid, big
	performantFirst = -1 // P, E, LPE; big, mid, little
)

// classPref is the class order a policy packs in on topology t: on a
// hybrid machine powersaving fills the most efficient class first and
// spills to the next only when it is full, and balance gives the
// performance cores first; with one class, none.
func classPref(t Topology, p Policy) int {
	if !t.Hybrid() {
		return 0
	}
	if p == Powersaving {
		return efficientFirst
	}
	return performantFirst
}

func newPacker(tr *tree, rules balancer, loads []loadState, pref int) *packer {
	return &packer{tr: tr, rules: rules, loads: loads, out: make([][]span, len(loads)), pref: pref}
}

func (pk *packer) run() {
	items := make([]item, len(pk.loads))
	for i, l := range pk.loads {
		items[i] = item{w: int32(i), portion: l.demand}
	}
	pk.place(pk.tr.root, items, true)
}

// sets returns each workload's placement as ascending positions.
func (pk *packer) sets() [][]int32 {
	out := make([][]int32, len(pk.out))
	for i, ss := range pk.out {
		var ps []int32
		for _, s := range ss {
			for p := s.lo; p < s.hi; p++ {
				ps = append(ps, p)
			}
		}
		slices.Sort(ps)
		out[i] = slices.Compact(ps)
	}
	return out
}

func (pk *packer) spreadAll(nd *dnode, items []item, root bool) {
	pk.spread = true
	if root {
		pk.rootSpread = true
	}
	for _, it := range items {
		pk.out[it.w] = append(pk.out[it.w], span{nd.lo, nd.hi})
	}
}

// countIn returns how many of the ascending positions cur lie in [lo, hi).
func countIn(cur []int32, lo, hi int32) int {
	a, _ := slices.BinarySearch(cur, lo)
	b, _ := slices.BinarySearch(cur, hi)
	return b - a
}

// place packs items (workload shares) into domain n, the way the patch
// set's power-aware wake-up balancing walks the sched domains: a domain
// whose load exceeds its threshold is spread (race to idle); otherwise its
// groups are ranked (groupOrder: the group_leader first), each workload
// keeps to its current group where it can (homes), and the groups are
// filled in rank order up to their thresholds (fill), each group then
// placing its share the same way down to the CPUs (placeCPUs).
func (pk *packer) place(n int32, items []item, root bool) {
	nd := &pk.tr.nodes[n]
	if len(nd.kids) == 0 {
		for _, it := range items {
			pk.out[it.w] = append(pk.out[it.w], span{nd.lo, nd.hi})
		}
		return
	}
	// The steps fill slices made here rather than return their own, so
	// that the small ones stay on the stack.
	k := len(nd.kids)
	th := make([]float64, k)
	if !pk.thresholds(nd, items, th) {
		pk.spreadAll(nd, items, root)
		return
	}
	cur, home := make([]float64, k), make([]int, len(items))
	pk.homes(nd, items, cur, home)
	order, rank := make([]int, k), make([]int, k)
	pk.groupOrder(nd, cur, th, order, rank)
	idx := pk.itemOrder(items, home, rank)
	if pk.kidsAreLeaves(nd) {
		pk.placeCPUs(nd.kids, order, items, idx)
		return
	}
	kidItems := make([][]item, k)
	if pk.pref != 0 {
		key := make([]int32, k)
		for j, kid := range nd.kids {
			if pk.pref == efficientFirst {
				key[j] = pk.tr.nodes[kid].minClass
			} else {
				key[j] = -pk.tr.nodes[kid].maxClass
			}
		}
		fillWhole(order, th, key, items, idx, kidItems)
	} else {
		fill(order, th, items, idx, kidItems)
	}
	for j, its := range kidItems {
		if len(its) > 0 {
			pk.place(nd.kids[j], its, false)
		}
	}
}

// thresholds sets th[j] to the packing threshold of group j of domain nd,
// in CPUs. It reports false when the items must be spread over nd instead:
// their load is over nd's own threshold, or the groups' thresholds cannot
// hold it (rounding).
func (pk *packer) thresholds(nd *dnode, items []item, th []float64) bool {
	total := 0.0
	for _, it := range items {
		total += it.portion
	}
	if total > pk.rules.domainThreshold(nd)+eps {
		return false
	}
	sumTh := 0.0
	for j, k := range nd.kids {
		th[j] = pk.rules.groupThreshold(&pk.tr.nodes[k], nd)
		sumTh += th[j]
	}
	return !(sumTh < total-eps) // a NaN does not spread, as in the check above
}

// homes adds to cur[j] the current load of group j of domain nd (each
// item's share spread evenly over its current CPUs in nd) and sets home[i]
// to item i's home group, the one holding most of its current CPUs (-1:
// none in nd).
func (pk *packer) homes(nd *dnode, items []item, cur []float64, home []int) {
	tr := pk.tr
	for i, it := range items {
		home[i] = -1
		c := pk.loads[it.w].cur
		inD := countIn(c, nd.lo, nd.hi)
		if inD == 0 {
			continue
		}
		best := 0
		for j, k := range nd.kids {
			kd := &tr.nodes[k]
			cnt := countIn(c, kd.lo, kd.hi)
			if cnt == 0 {
				continue
			}
			cur[j] += it.portion * float64(cnt) / float64(inD)
			if cnt > best {
				best, home[i] = cnt, j
			}
		}
	}
}

// groupOrder ranks the groups of domain nd: it fills order with the group
// indexes best first, and rank[j] with group j's place in it. Above the LLC the busiest
// group with room comes first (the patch set's group_leader), then the
// least frequency-capped; inside the LLC the least capped first, then the
// busiest; ties go to the lower first CPU (group_first_cpu). On a hybrid
// topology the class preference (packer.pref) comes before all of these,
// so a class is filled before the next one is used.
func (pk *packer) groupOrder(nd *dnode, cur, th []float64, order, rank []int) {
	tr := pk.tr
	kids := nd.kids
	aboveLLC := nd.level == LevelPKG || nd.level == LevelNUMA || nd.level == LevelSYS
	for j := range order {
		order[j] = j
	}
	busy := func(j int) float64 { return math.Min(cur[j], th[j]) }
	cappedFrac := func(j int) float64 {
		kd := &tr.nodes[kids[j]]
		return float64(kd.capped) / float64(kd.weight())
	}
	sort.SliceStable(order, func(a, b int) bool {
		ja, jb := order[a], order[b]
		if pk.pref != 0 {
			ka, kb := &tr.nodes[kids[ja]], &tr.nodes[kids[jb]]
			if pk.pref == efficientFirst {
				if ka.minClass != kb.minClass {
					return ka.minClass < kb.minClass
				}
				if ka.maxClass != kb.maxClass {
					return ka.maxClass < kb.maxClass
				}
			} else {
				if ka.maxClass != kb.maxClass {
					return ka.maxClass > kb.maxClass
				}
				if ka.minClass != kb.minClass {
					return ka.minClass > kb.minClass
				}
			}
		}
		ba, bb := busy(ja), busy(jb)
		ca, cb := cappedFrac(ja), cappedFrac(jb)
		if aboveLLC {
			if ba != bb {
				return ba > bb
			}
			if ca != cb {
				return ca < cb
			}
		} else {
			if ca != cb {
				return ca < cb
			}
			if ba != bb {
				return ba > bb
			}
		}
		if pk.pref != 0 {
			// CPPC ranks binned cores of one class: favoured ones for
			// the performance-first plans, the others for packing.
			if pa, pb := tr.nodes[kids[ja]].perf, tr.nodes[kids[jb]].perf; pa != pb {
				return (pa > pb) == (pk.pref == performantFirst)
			}
		}
		return tr.nodes[kids[ja]].first < tr.nodes[kids[jb]].first
	})
	for r, j := range order {
		rank[j] = r
	}
}

// itemOrder returns the order in which items are placed, as indexes into
// items: idle workloads (loadState.idle) after the others, so that they
// take what room the loaded groups leave before any other group is used;
// then by the rank of their home group (homeless last), then by workload,
// so each workload lands in its current group when that group has room.
func (pk *packer) itemOrder(items []item, home, rank []int) []int {
	homeRank := func(i int) int {
		if home[i] < 0 {
			return len(rank)
		}
		return rank[home[i]]
	}
	idx := make([]int, len(items))
	for i := range idx {
		idx[i] = i
	}
	sort.SliceStable(idx, func(a, b int) bool {
		if ia, ib := pk.loads[items[idx[a]].w].idle, pk.loads[items[idx[b]].w].idle; ia != ib {
			return ib
		}
		ra, rb := homeRank(idx[a]), homeRank(idx[b])
		if ra != rb {
			return ra < rb
		}
		return items[idx[a]].w < items[idx[b]].w
	})
	return idx
}

// kidsAreLeaves reports whether every group of nd is a single CPU.
func (pk *packer) kidsAreLeaves(nd *dnode) bool {
	for _, k := range nd.kids {
		if len(pk.tr.nodes[k].kids) > 0 {
			return false
		}
	}
	return true
}

// fill is the tape: it lays the items, in idx order, over the groups in
// order, each group up to its threshold th, splitting an item where a
// group fills up, and appends each group's share to kidItems[j]. A
// zero-load item joins the group being filled (or the last one used).
func fill(order []int, th []float64, items []item, idx []int, kidItems [][]item) {
	used := make([]float64, len(th))
	c, last := 0, -1
	for _, i := range idx {
		it := items[i]
		rem := it.portion
		if rem <= eps {
			j := last
			if c < len(order) && (j < 0 || used[order[c]] > 0) {
				j = order[c]
			}
			if j < 0 {
				j = order[len(order)-1]
			}
			kidItems[j] = append(kidItems[j], item{it.w, 0})
			continue
		}
		for rem > eps && c < len(order) {
			j := order[c]
			room := th[j] - used[j]
			if room <= eps {
				c++
				continue
			}
			take := math.Min(rem, room)
			if rem-take <= 1e-6 {
				take = rem // no slivers from rounding
			}
			kidItems[j] = append(kidItems[j], item{it.w, take})
			used[j] += take
			rem -= take
			last = j
		}
		if rem > eps { // cannot happen when Σ th ≥ total; be safe
			j := order[len(order)-1]
			kidItems[j] = append(kidItems[j], item{it.w, rem})
		}
	}
}

// fillWhole is fill for a hybrid topology: each item goes whole into the
// first group in order with room for it among the groups of the best
// class that still has room (key: the groups' class, in order), so a
// light workload is not cut across two modules of one class; an item
// that class cannot hold whole is laid along the groups' remaining room
// as fill does, spilling to the next class only where the class is full.
func fillWhole(order []int, th []float64, key []int32, items []item, idx []int, kidItems [][]item) {
	used := make([]float64, len(th))
	last := -1
	for _, i := range idx {
		it := items[i]
		if it.portion <= eps {
			j := last
			if j < 0 {
				j = order[0]
			}
			kidItems[j] = append(kidItems[j], item{it.w, 0})
			continue
		}
		placed := false
		best := int32(-1 << 30)
		for _, j := range order {
			if th[j]-used[j] > eps {
				best = key[j]
				break
			}
		}
		for _, j := range order {
			if key[j] != best {
				continue
			}
			if th[j]-used[j] >= it.portion-1e-6 {
				kidItems[j] = append(kidItems[j], it)
				used[j] += it.portion
				last, placed = j, true
				break
			}
		}
		if placed {
			continue
		}
		rem := it.portion
		for _, j := range order {
			room := th[j] - used[j]
			if rem <= eps {
				break
			}
			if room <= eps {
				continue
			}
			take := math.Min(rem, room)
			if rem-take <= 1e-6 {
				take = rem
			}
			kidItems[j] = append(kidItems[j], item{it.w, take})
			used[j] += take
			rem -= take
			last = j
		}
		if rem > eps {
			j := order[len(order)-1]
			kidItems[j] = append(kidItems[j], item{it.w, rem})
		}
	}
}

// placeCPUs places items on the CPUs of a lowest-level domain (kids are
// leaves): a workload that is not small gets ceil(share) CPUs of its own,
// idle ones first (its current ones first); a small workload goes to the
// busy CPU with the smallest positive vacancy (patch 13,
// find_leader_cpu), else to an idle CPU, else to the least loaded one;
// an idle workload (loadState.idle) goes where the others went
// (placeIdle).
func (pk *packer) placeCPUs(kids []int32, order []int, items []item, idx []int) {
	lf := &leafFill{pk: pk, kids: kids, order: order,
		load: make([]float64, len(kids)), nr: make([]int, len(kids)), maxUtil: pk.rules.maxUtil(), meanCap: 1}
	if pk.pref != 0 {
		sum := 0.0
		for _, k := range kids {
			sum += pk.tr.nodes[k].capw
		}
		lf.meanCap = sum / float64(len(kids))
	}
	var large, smalls, idle []int
	for _, i := range idx {
		switch {
		case pk.loads[items[i].w].idle:
			idle = append(idle, i)
		case lf.small(items[i].portion):
			smalls = append(smalls, i)
		default:
			large = append(large, i)
		}
	}
	sort.SliceStable(smalls, func(a, b int) bool { return items[smalls[a]].portion > items[smalls[b]].portion })
	taken := make([]bool, len(kids))
	for _, i := range large {
		lf.placeLarge(items[i], taken)
	}
	clear(taken)
	for _, i := range smalls {
		lf.placeSmall(items[i], taken)
	}
	if len(idle) > 0 {
		lf.sleepers = make([]int, len(kids))
	}
	for _, i := range idle {
		lf.placeIdle(items[i], taken)
	}
}

// leafFill is placeCPUs's state: the load and number of workloads given
// so far to each CPU (kids[j]) of one lowest-level domain.
type leafFill struct {
	pk    *packer
	kids  []int32
	order []int // CPU indexes, best first (groupOrder)
	load  []float64
	nr    []int // workloads given each CPU, idle ones not counted
	// sleepers is the idle workloads given each CPU: their utilisation
	// is in load, but they have no runnable thread to add to nr_running.
	sleepers []int
	maxUtil  float64
	// meanCap is the CPUs' mean capacity in CPUs (1 with a single
	// class): on a hybrid topology loads are counted against each CPU's
	// capacity (capw).
	meanCap float64
}

// capOf is CPU j's capacity in CPUs (1 with a single class).
func (lf *leafFill) capOf(j int) float64 {
	if lf.pk.pref == 0 {
		return 1
	}
	return lf.pk.tr.nodes[lf.kids[j]].capw
}

// small reports whether a share p (in CPUs) is a light task, the one
// find_leader_cpu may add to a busy CPU: its utilisation (percent) shifted
// left by two stays under maxUtil ("putil < 25% for powersaving").
func (lf *leafFill) small(p float64) bool { return 4*(p/lf.meanCap)*100 < lf.maxUtil }

// inCur reports whether CPU j is one of workload w's current CPUs.
func (lf *leafFill) inCur(w int32, j int) bool {
	p := lf.pk.tr.nodes[lf.kids[j]].lo
	_, ok := slices.BinarySearch(lf.pk.loads[w].cur, p)
	return ok
}

// assign gives CPU j to workload w with share of its load.
func (lf *leafFill) assign(w int32, j int, share float64) {
	lf.load[j] += share
	lf.nr[j]++
	kd := &lf.pk.tr.nodes[lf.kids[j]]
	lf.pk.out[w] = append(lf.pk.out[w], span{kd.lo, kd.hi})
}

// pickIdle returns the first idle CPU in order not taken, w's current
// ones first; -1 when there is none.
func (lf *leafFill) pickIdle(w int32, taken []bool) int {
	for pass := 0; pass < 2; pass++ {
		for _, j := range lf.order {
			if lf.nr[j] == 0 && !taken[j] && (pass == 1 || lf.inCur(w, j)) {
				return j
			}
		}
	}
	return -1
}

// leastLoaded returns the least loaded CPU not taken, the first in order
// among equals.
func (lf *leafFill) leastLoaded(taken []bool) int {
	best := -1
	for _, j := range lf.order {
		if taken[j] {
			continue
		}
		if best < 0 || lf.load[j] < lf.load[best]-eps {
			best = j
		}
	}
	return best
}

// placeLarge gives a workload that is not small ceil(share) distinct CPUs
// (on a hybrid topology, CPUs until their capacity holds the share), idle
// ones first, and spreads its share evenly over them.
func (lf *leafFill) placeLarge(it item, taken []bool) {
	k := min(max(1, int(math.Ceil(it.portion-1e-6))), len(lf.kids))
	clear(taken)
	var got []int
	room := 0.0
	if lf.pk.pref != 0 {
		// By capacity, but never more CPUs than its threads and its
		// time (in CPUs) can use: one busy thread needs 0.78 of a
		// P-core, yet two E-cores would not help it.
		l := &lf.pk.loads[it.w]
		k = min(len(lf.kids), max(1, l.threads, int(math.Ceil(it.portion/l.scale-1e-6))))
	}
	for len(got) < k && (lf.pk.pref == 0 || len(got) == 0 || room < it.portion-1e-6) {
		j := lf.pickIdle(it.w, taken)
		if j < 0 {
			j = lf.leastLoaded(taken)
		}
		taken[j] = true
		got = append(got, j)
		room += lf.capOf(j)
	}
	k = len(got)
	for _, j := range got {
		lf.assign(it.w, j, it.portion/float64(k))
	}
}

// placeSmall puts a small workload on the busy CPU whose vacancy after it
// is smallest but positive (find_leader_cpu), else on an idle CPU, else
// on the least loaded one.
func (lf *leafFill) placeSmall(it item, taken []bool) {
	best, bestV := -1, math.Inf(1)
	for _, j := range lf.order {
		if lf.nr[j] == 0 {
			continue
		}
		c := lf.capOf(j)
		v := lf.maxUtil - ((lf.load[j]/c)*100*float64(max(lf.nr[j], 1)) + 4*(it.portion/c)*100)
		if v > eps && v < bestV-eps {
			best, bestV = j, v
		}
	}
	if best < 0 && lf.pk.pref != 0 {
		// On a hybrid topology a class is not left while one of its
		// CPUs has room for the task by capacity: the first such CPU in
		// class order, before an idle CPU of the next class.
		for _, j := range lf.order {
			if lf.load[j]+it.portion <= lf.capOf(j)+eps {
				best = j
				break
			}
		}
	}
	if best < 0 {
		best = lf.pickIdle(it.w, taken)
	}
	if best < 0 {
		best = lf.leastLoaded(taken)
	}
	lf.assign(it.w, best, it.portion)
}

// placeIdle puts an idle workload (loadState.idle) where the packed work
// is. It has no runnable thread, so it adds its utilisation to the CPU's
// load but nothing to nr_running, and it joins a CPU that holds work —
// its current one if the vacancy rule leaves room there (no needless
// migration), else the one of smallest positive vacancy
// (find_leader_cpu), else the one with the most room if the workload
// fits in its capacity — so that idle workloads, however many, never make
// the plan use a CPU of their own. Only a load that fits on no CPU in use
// takes an idle CPU (its current one first), else the least loaded one.
func (lf *leafFill) placeIdle(it item, taken []bool) {
	used := func(j int) bool { return lf.nr[j] > 0 || lf.sleepers[j] > 0 }
	vacancy := func(j int) float64 {
		c := lf.capOf(j)
		return lf.maxUtil - ((lf.load[j]/c)*100*float64(max(lf.nr[j], 1)) + 4*(it.portion/c)*100)
	}
	best := -1
	for _, j := range lf.order {
		if used(j) && lf.inCur(it.w, j) && vacancy(j) > eps {
			best = j
			break
		}
	}
	if best < 0 {
		bestV := math.Inf(1)
		for _, j := range lf.order {
			if v := vacancy(j); used(j) && v > eps && v < bestV-eps {
				best, bestV = j, v
			}
		}
	}
	if best < 0 {
		most := -eps
		for _, j := range lf.order {
			if r := lf.capOf(j) - lf.load[j] - it.portion; used(j) && r > most {
				best, most = j, r
			}
		}
	}
	for pass := 0; pass < 2 && best < 0; pass++ {
		for _, j := range lf.order {
			if !used(j) && (pass == 1 || lf.inCur(it.w, j)) {
				best = j
				break
			}
		}
	}
	if best < 0 {
		clear(taken)
		best = lf.leastLoaded(taken)
	}
	lf.load[best] += it.portion
	lf.sleepers[best]++
	kd := &lf.pk.tr.nodes[lf.kids[best]]
	lf.pk.out[it.w] = append(lf.pk.out[it.w], span{kd.lo, kd.hi})
}
