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
}

func newPacker(tr *tree, rules balancer, loads []loadState) *packer {
	return &packer{tr: tr, rules: rules, loads: loads, out: make([][]span, len(loads))}
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

// place packs items (workload shares) into domain n.
func (pk *packer) place(n int32, items []item, root bool) {
	tr := pk.tr
	nd := &tr.nodes[n]
	if len(nd.kids) == 0 {
		for _, it := range items {
			pk.out[it.w] = append(pk.out[it.w], span{nd.lo, nd.hi})
		}
		return
	}
	total := 0.0
	for _, it := range items {
		total += it.portion
	}
	if total > pk.rules.domainThreshold(nd)+eps {
		pk.spreadAll(nd, items, root) // over the threshold: race to idle
		return
	}
	kids := nd.kids
	th := make([]float64, len(kids))
	sumTh := 0.0
	for j, k := range kids {
		th[j] = pk.rules.groupThreshold(&tr.nodes[k], nd)
		sumTh += th[j]
	}
	if sumTh < total-eps {
		pk.spreadAll(nd, items, root) // the groups cannot hold it (rounding)
		return
	}

	// Current load per group (each workload's share spread evenly over its
	// current CPUs in this domain) and each item's home group.
	cur := make([]float64, len(kids))
	home := make([]int, len(items))
	for i, it := range items {
		home[i] = -1
		c := pk.loads[it.w].cur
		inD := countIn(c, nd.lo, nd.hi)
		if inD == 0 {
			continue
		}
		best := 0
		for j, k := range kids {
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
	// Group order: the busiest group with room first (group_leader);
	// inside the LLC, groups not frequency-capped first.
	aboveLLC := nd.level == LevelPKG || nd.level == LevelNUMA || nd.level == LevelSYS
	order := make([]int, len(kids))
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
		return tr.nodes[kids[ja]].first < tr.nodes[kids[jb]].first
	})
	rank := make([]int, len(kids))
	for r, j := range order {
		rank[j] = r
	}
	homeRank := func(i int) int {
		if home[i] < 0 {
			return len(kids)
		}
		return rank[home[i]]
	}
	idx := make([]int, len(items))
	for i := range idx {
		idx[i] = i
	}
	sort.SliceStable(idx, func(a, b int) bool {
		ra, rb := homeRank(idx[a]), homeRank(idx[b])
		if ra != rb {
			return ra < rb
		}
		return items[idx[a]].w < items[idx[b]].w
	})

	allLeaves := true
	for _, k := range kids {
		if len(tr.nodes[k].kids) > 0 {
			allLeaves = false
			break
		}
	}
	if allLeaves {
		pk.placeCPUs(kids, order, rank, items, idx, home)
		return
	}

	// The tape: fill groups in order up to their thresholds.
	fill := make([]float64, len(kids))
	kidItems := make([][]item, len(kids))
	c, last := 0, -1
	for _, i := range idx {
		it := items[i]
		rem := it.portion
		if rem <= eps {
			j := last
			if c < len(order) && (j < 0 || fill[order[c]] > 0) {
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
			room := th[j] - fill[j]
			if room <= eps {
				c++
				continue
			}
			take := math.Min(rem, room)
			if rem-take <= 1e-6 {
				take = rem // no slivers from rounding
			}
			kidItems[j] = append(kidItems[j], item{it.w, take})
			fill[j] += take
			rem -= take
			last = j
		}
		if rem > eps { // cannot happen when Σ th ≥ total; be safe
			j := order[len(order)-1]
			kidItems[j] = append(kidItems[j], item{it.w, rem})
		}
	}
	for j, k := range kids {
		if len(kidItems[j]) > 0 {
			pk.place(k, kidItems[j], false)
		}
	}
}

// placeCPUs places items on the CPUs of a lowest-level domain (kids are
// leaves): a workload that is not small gets ceil(share) CPUs of its own,
// idle ones first (its current ones first); a small workload goes to the
// busy CPU with the smallest positive vacancy (patch 13,
// find_leader_cpu), else to an idle CPU, else to the least loaded one.
func (pk *packer) placeCPUs(kids []int32, order, rank []int, items []item, idx []int, home []int) {
	tr := pk.tr
	m := len(kids)
	load := make([]float64, m)
	nr := make([]int, m)
	maxUtil := pk.rules.maxUtil()
	small := func(p float64) bool { return 4*p*100 < maxUtil }
	inCur := func(w int32, j int) bool {
		p := tr.nodes[kids[j]].lo
		_, ok := slices.BinarySearch(pk.loads[w].cur, p)
		return ok
	}
	assign := func(w int32, j int, share float64) {
		load[j] += share
		nr[j]++
		kd := &tr.nodes[kids[j]]
		pk.out[w] = append(pk.out[w], span{kd.lo, kd.hi})
	}
	// pickIdle returns the first idle CPU in order, current ones first.
	pickIdle := func(w int32, taken []bool) int {
		for pass := 0; pass < 2; pass++ {
			for _, j := range order {
				if nr[j] == 0 && !taken[j] && (pass == 1 || inCur(w, j)) {
					return j
				}
			}
		}
		return -1
	}
	leastLoaded := func(taken []bool) int {
		best := -1
		for _, j := range order {
			if taken[j] {
				continue
			}
			if best < 0 || load[j] < load[best]-eps {
				best = j
			}
		}
		return best
	}
	var large, smalls []int
	for _, i := range idx {
		if small(items[i].portion) {
			smalls = append(smalls, i)
		} else {
			large = append(large, i)
		}
	}
	sort.SliceStable(smalls, func(a, b int) bool { return items[smalls[a]].portion > items[smalls[b]].portion })
	taken := make([]bool, m)
	for _, i := range large {
		it := items[i]
		k := min(max(1, int(math.Ceil(it.portion-1e-6))), m)
		clear(taken)
		var got []int
		for len(got) < k {
			j := pickIdle(it.w, taken)
			if j < 0 {
				j = leastLoaded(taken)
			}
			taken[j] = true
			got = append(got, j)
		}
		for _, j := range got {
			assign(it.w, j, it.portion/float64(k))
		}
	}
	clear(taken)
	for _, i := range smalls {
		it := items[i]
		best, bestV := -1, math.Inf(1)
		for _, j := range order {
			if nr[j] == 0 {
				continue
			}
			v := maxUtil - (load[j]*100*float64(max(nr[j], 1)) + 4*it.portion*100)
			if v > eps && v < bestV-eps {
				best, bestV = j, v
			}
		}
		if best < 0 {
			best = pickIdle(it.w, taken)
		}
		if best < 0 {
			best = leastLoaded(taken)
		}
		assign(it.w, best, it.portion)
	}
	_ = rank
	_ = home
}
