package policy

import (
	"slices"
)

// The 2013 capacity arithmetic (docs/SOURCES.md §3: kernel v3.8
// kernel/sched/fair.c update_cpu_power, default_scale_smt_power,
// fix_small_capacity; kernel/sched/topology.c sd->smt_gain).
const (
	powerShift    = 10
	capacityScale = 1 << powerShift // SCHED_POWER_SCALE: one full CPU
	smtGain       = 1178            // sd->smt_gain, ≈ +15 % for an SMT core
)

// divRoundClosest is the kernel's DIV_ROUND_CLOSEST for non-negative
// operands.
func divRoundClosest(x, d int) int { return (x + d/2) / d }

// cpuPower is update_cpu_power for a CPU whose SMT domain spans w CPUs
// (w ≤ 1: no SMT) and whose base capacity is base (1024 on a symmetric
// machine, cpu_capacity on an asymmetric one). With no RT/IRQ time and the
// default frequency factor the result is power_orig: 1024, 589 for 2-way
// SMT, 392 for 3-way, 294 for 4-way. Never below 1.
func cpuPower(base, w int) int {
	p := base
	if w > 1 {
		p = (p * (smtGain / w)) >> powerShift
	}
	return max(p, 1)
}

// groupCapacity is the 2013 group_capacity of a group of the given power:
// DIV_ROUND_CLOSEST(power, SCHED_POWER_SCALE), and when that is 0 in an
// SMT domain, fix_small_capacity's 1 (power × 32 > power_orig × 29 always
// holds here: user space has no scale_rt_power, so power = power_orig).
func groupCapacity(power int, inSMTDomain bool) int {
	c := divRoundClosest(power, capacityScale)
	if c == 0 && inSMTDomain {
		return 1
	}
	return c
}

// Level names, bottom-up, as the kernel names its domain levels
// (kernel/sched/topology.c default_topology[]; "PKG" was "CPU" in 2013
// and "DIE" later).
const (
	LevelSMT  = "SMT"  // SMT siblings (core_cpus_list)
	LevelCLS  = "CLS"  // cluster (L2 sharers)
	LevelMC   = "MC"   // last-level cache sharers
	LevelPKG  = "PKG"  // the NUMA node (cpu_cpu_mask); the package without NUMA
	LevelNUMA = "NUMA" // one per distinct remote distance
	LevelSYS  = "SYS"  // joins what nothing else joins (disconnected nodes)
)

// dnode is one scheduling domain of the tree, or a CPU (a leaf). As a
// child it is also one sched_group of its parent domain: the groups of a
// domain are the spans of its child domains (kernel build_sched_groups).
type dnode struct {
	level  string
	lo, hi int32 // span: positions lo..hi-1 of tree.pos
	kids   []int32
	power  int // Σ cpuPower over the span (sgp->power)
	capped int32
	first  int // lowest CPU id in the span
	smt    bool
	// minClass and maxClass are the lowest and highest CPUDesc.Class in
	// the span.
	minClass, maxClass int32
	// perf is the highest CPUDesc.Perf in the span.
	perf int
	// capw is the span's capacity in CPUs: Σ cpu_capacity / 1024 on a
	// hybrid topology (each SMT thread counts its core's capacity),
	// else the span weight.
	capw float64
}

func (n *dnode) weight() int { return int(n.hi - n.lo) }

// tree is the domain hierarchy over a set of CPUs. Each CPU belongs to
// exactly one leaf; the children of every domain partition its span, and
// the spans of a level's domains are contiguous ranges of pos.
type tree struct {
	topo  *Topology
	pos   []int32 // position → index into topo.cpus (DFS order)
	posOf []int32 // index into topo.cpus → position, -1 if outside
	nodes []dnode
	root  int32   // -1 for an empty tree
	leaf  []int32 // position → node index of that CPU's leaf
	core  []int32 // position → its SMT domain, or its leaf without SMT
}

// buildTree builds the domain tree over the CPUs in allowed (IDs; nil means
// every CPU), the way the kernel builds sched domains for a root domain
// (kernel/sched/topology.c: default_topology[], build_sched_domains,
// sd_degenerate, sd_parent_degenerate; docs/SOURCES.md §2):
//
//   - levels bottom-up: SMT (Core), CLS (Cluster), MC (LLC), PKG (NUMA node;
//     the physical package when the machine has a single node), then one
//     NUMA level per distinct node distance above local, joining nodes
//     within that distance;
//   - each span is the level's mask ∩ allowed, ORed with the child's span
//     when the masks do not nest (build_sched_domain does the same);
//   - degenerate domains are removed: a domain with a single group (its
//     span equals its only child's) is replaced by that child, which also
//     drops single-CPU domains (sd_degenerate, sd_parent_degenerate).
//
// Deviation: NUMA levels use the transitive closure of "within distance
// d", so groups partition the span; the kernel's overlapping NUMA groups
// for asymmetric SLITs are approximated.
func buildTree(t Topology, allowed []int) *tree {
	tr := &tree{topo: &t, root: -1}
	sel := tr.selectCPUs(allowed)
	n := len(sel)
	if n == 0 {
		return tr
	}
	levels := treeLevels(tr.topo, sel)
	comp := levelParts(levels, n)
	order := dfsOrder(comp, n)
	tr.pos = make([]int32, n)
	for p, k := range order {
		tr.pos[p] = sel[k]
		tr.posOf[sel[k]] = int32(p)
	}
	b := treeBuilder{tr: tr, levels: levels, comp: comp, order: order, smtW: smtWidths(tr.topo, sel)}
	tr.leaf = make([]int32, n)
	tr.nodes = make([]dnode, 0, 2*n)
	tr.root = b.build(len(levels)-1, 0, int32(n))
	tr.markCores()
	return tr
}

// selectCPUs returns the indices into topo.cpus of the CPUs in allowed
// (IDs; nil: every CPU), ascending, each once; it sizes tr.posOf for every
// CPU, -1 outside the selection.
func (tr *tree) selectCPUs(allowed []int) []int32 {
	t := tr.topo
	tr.posOf = make([]int32, len(t.cpus))
	for i := range tr.posOf {
		tr.posOf[i] = -1
	}
	var sel []int32
	if allowed == nil {
		sel = make([]int32, len(t.cpus))
		for i := range sel {
			sel[i] = int32(i)
		}
	} else {
		for _, id := range allowed {
			if i := t.index(id); i >= 0 && tr.posOf[i] < 0 {
				tr.posOf[i] = 0 // mark
				sel = append(sel, int32(i))
			}
		}
		slices.Sort(sel)
	}
	return sel
}

// treeLevels returns the candidate levels over the selected CPUs (sel:
// indices into t.cpus; the levels' keys take k indexing sel), bottom-up:
// SMT, CLS, MC, PKG, the NUMA levels, SYS.
func treeLevels(t *Topology, sel []int32) []domLevel {
	type level = domLevel
	cpu := func(k int) *CPUDesc { return &t.cpus[sel[k]] }
	nodes := map[int]bool{}
	for k := range sel {
		nodes[cpu(k).Node] = true
	}
	levels := []level{
		{LevelSMT, func(k int) int { return cpu(k).Core }},
		{LevelCLS, func(k int) int { return cpu(k).Cluster }},
		{LevelMC, func(k int) int { return cpu(k).LLC }},
	}
	if len(nodes) > 1 {
		levels = append(levels, level{LevelPKG, func(k int) int { return cpu(k).Node }})
	} else {
		levels = append(levels, level{LevelPKG, func(k int) int { return cpu(k).Package }})
	}
	levels = append(levels, numaLevels(*t, sel, nodes)...)
	return append(levels, level{LevelSYS, func(int) int { return 0 }})
}

// levelParts partitions the n selected CPUs at each level: comp[L][k] is
// the smallest k of CPU k's part at level L (k ascending = ID ascending).
// The union-find is cumulative over the levels, so spans always nest.
func levelParts(levels []domLevel, n int) [][]int32 {
	sets := newUnionFind(n)
	comp := make([][]int32, len(levels))
	first := map[int]int32{}
	for L, lv := range levels {
		clear(first)
		for k := range n {
			key := lv.key(k)
			if f, ok := first[key]; ok {
				sets.union(f, int32(k))
			} else {
				first[key] = int32(k)
			}
		}
		c := make([]int32, n)
		for k := range n {
			c[k] = sets.find(int32(k)) // the root is the part's smallest k
		}
		comp[L] = c
	}
	return comp
}

// dfsOrder returns the n selected CPUs (k) in the tree's DFS order:
// sorted by part (smallest member) from the top level down, then by k.
func dfsOrder(comp [][]int32, n int) []int32 {
	order := make([]int32, n)
	for k := range order {
		order[k] = int32(k)
	}
	slices.SortFunc(order, func(a, b int32) int {
		for L := len(comp) - 1; L >= 0; L-- {
			if d := comp[L][a] - comp[L][b]; d != 0 {
				return int(d)
			}
		}
		return int(a - b)
	})
	return order
}

// smtWidths counts the selected CPUs (sel: indices into t.cpus) of each
// core: the weight of that core's SMT domain within the selection.
func smtWidths(t *Topology, sel []int32) map[int]int {
	smtW := map[int]int{}
	for _, i := range sel {
		smtW[t.cpus[i].Core]++
	}
	return smtW
}

// treeBuilder appends the domains of one tree to tr.nodes, bottom-up.
type treeBuilder struct {
	tr     *tree
	levels []domLevel
	comp   [][]int32   // levelParts
	order  []int32     // position → selected CPU k (dfsOrder)
	smtW   map[int]int // smtWidths
}

// build builds the domain of level L spanning positions lo..hi-1 (L < 0: the
// CPU at lo) and returns its node index. A domain with a single group is
// degenerate and replaced by that group.
func (b *treeBuilder) build(L int, lo, hi int32) int32 {
	if L < 0 {
		return b.leaf(lo)
	}
	var kids []int32
	for s := lo; s < hi; {
		e := s + 1
		if L > 0 {
			for e < hi && b.comp[L-1][b.order[e]] == b.comp[L-1][b.order[s]] {
				e++
			}
		}
		kids = append(kids, b.build(L-1, s, e))
		s = e
	}
	if len(kids) == 1 {
		return kids[0] // degenerate: a single group
	}
	return b.domain(L, lo, hi, kids)
}

// leaf appends the leaf of the CPU at position p.
func (b *treeBuilder) leaf(p int32) int32 {
	tr, t := b.tr, b.tr.topo
	c := &t.cpus[tr.pos[p]]
	base := capacityScale
	if t.asym {
		base = c.Capacity
	}
	nd := dnode{lo: p, hi: p + 1, power: cpuPower(base, b.smtW[c.Core]), first: c.ID,
		minClass: int32(c.Class), maxClass: int32(c.Class), capw: 1, perf: c.Perf}
	if t.Hybrid() {
		nd.capw = float64(c.Capacity) / capacityScale
	}
	if c.Capped {
		nd.capped = 1
	}
	tr.nodes = append(tr.nodes, nd)
	idx := int32(len(tr.nodes) - 1)
	tr.leaf[p] = idx
	return idx
}

// domain appends the level-L domain spanning positions lo..hi-1 whose
// groups are the nodes kids, summing their power, capacity and classes.
func (b *treeBuilder) domain(L int, lo, hi int32, kids []int32) int32 {
	tr := b.tr
	name := b.levels[L].name
	nd := dnode{level: name, lo: lo, hi: hi, kids: kids, first: int(^uint(0) >> 1), smt: name == LevelSMT,
		minClass: tr.nodes[kids[0]].minClass, maxClass: tr.nodes[kids[0]].maxClass}
	for _, k := range kids {
		c := &tr.nodes[k]
		nd.power += c.power
		nd.capped += c.capped
		nd.first = min(nd.first, c.first)
		nd.minClass, nd.maxClass = min(nd.minClass, c.minClass), max(nd.maxClass, c.maxClass)
		nd.perf = max(nd.perf, c.perf)
		nd.capw += c.capw
	}
	tr.nodes = append(tr.nodes, nd)
	return int32(len(tr.nodes) - 1)
}

// markCores sets tr.core: each position's SMT domain, or its leaf when
// its core has no SMT domain in the tree.
func (tr *tree) markCores() {
	tr.core = slices.Clone(tr.leaf)
	for i := range tr.nodes {
		if nd := &tr.nodes[i]; nd.smt {
			for p := nd.lo; p < nd.hi; p++ {
				tr.core[p] = int32(i)
			}
		}
	}
}

// unionFind is a disjoint-set forest over 0..n-1 in which the root of a
// set is always its smallest member, so a root doubles as a stable label
// that sorts like the members.
type unionFind []int32

func newUnionFind(n int) unionFind {
	u := make(unionFind, n)
	for k := range u {
		u[k] = int32(k)
	}
	return u
}

// find returns the smallest member of x's set, halving the path on the way.
func (u unionFind) find(x int32) int32 {
	for u[x] != x {
		u[x] = u[u[x]]
		x = u[x]
	}
	return x
}

// union joins the sets of a and b under the smaller of their roots.
func (u unionFind) union(a, b int32) {
	ra, rb := u.find(a), u.find(b)
	if ra < rb {
		u[rb] = ra
	} else if rb < ra {
		u[ra] = rb
	}
}

// domLevel is one candidate level: CPUs with equal keys share a span.
type domLevel struct {
	name string
	key  func(k int) int // k indexes the selected CPUs
}

// numaLevels returns one level per distinct node distance above local, in
// ascending order, each joining the nodes within that distance. Without
// distance information a single level joins all nodes.
func numaLevels(t Topology, sel []int32, nodes map[int]bool) []domLevel {
	type level = domLevel
	if len(nodes) < 2 {
		return nil
	}
	ids := make([]int, 0, len(nodes))
	for id := range nodes {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	row := map[int][]int{}
	for _, i := range sel {
		c := &t.cpus[i]
		if _, ok := row[c.Node]; !ok {
			row[c.Node] = c.Distance
		}
	}
	dist := func(a, b int) (int, bool) {
		r := row[a]
		if b < 0 || b >= len(r) || r[b] <= 0 {
			return 0, false
		}
		return r[b], true
	}
	var ds []int
	for _, a := range ids {
		for _, b := range ids {
			if a == b {
				continue
			}
			d, ok := dist(a, b)
			if !ok {
				return []level{{LevelNUMA, func(int) int { return 0 }}}
			}
			ds = append(ds, d)
		}
	}
	slices.Sort(ds)
	ds = slices.Compact(ds)
	var out []level
	for _, d := range ds {
		// Connected components of nodes within distance d, over indices
		// into the ascending ids, so a component's root is its smallest
		// node ID.
		sets := newUnionFind(len(ids))
		for i, a := range ids {
			for j, b := range ids {
				if dd, _ := dist(a, b); a != b && dd <= d {
					sets.union(int32(i), int32(j))
				}
			}
		}
		label := map[int]int{}
		for i, a := range ids {
			label[a] = ids[sets.find(int32(i))]
		}
		out = append(out, level{LevelNUMA, func(k int) int { return label[t.cpus[sel[k]].Node] }})
	}
	return out
}

// treeFor returns the domain tree over allowed (deduplicated IDs), reusing
// the precomputed full tree when allowed is every CPU.
func (t Topology) treeFor(allowed []int) *tree {
	if t.full != nil && len(allowed) == len(t.cpus) {
		all := true
		for i, id := range allowed {
			if t.cpus[i].ID != id {
				all = false
				break
			}
		}
		if all {
			return t.full
		}
	}
	return buildTree(t, allowed)
}

// Domain describes one scheduling domain (or, with no Groups, one CPU) for
// diagnostics and tests.
type Domain struct {
	Level string `json:"level,omitempty"` // LevelSMT … LevelSYS; "" for a CPU
	CPUs  []int  `json:"cpus"`            // the span, ascending
	// Power is Σ of the CPUs' 2013 cpu_power (SCHED_POWER_SCALE 1024 = one
	// CPU; 589 per thread of a 2-way SMT core).
	Power int `json:"power"`
	// Capacity is DIV_ROUND_CLOSEST(Power, 1024): the domain's sd_capacity,
	// the balance policy's domain threshold.
	Capacity int `json:"capacity"`
	// GroupCapacity is the capacity of this domain as a group of its
	// parent (Capacity, or fix_small_capacity's 1 for a thread in an SMT
	// domain): the balance policy's group threshold.
	GroupCapacity int      `json:"group_capacity"`
	Groups        []Domain `json:"groups,omitempty"`
}

// Domains returns the domain tree over the allowed CPUs (nil: all), root
// first, degenerate levels removed. ok is false when no CPU is allowed.
func (t Topology) Domains(allowed []int) (root Domain, ok bool) {
	tr := t.treeFor(normalize(t, allowed))
	if tr.root < 0 {
		return Domain{}, false
	}
	var conv func(i int32, parentSMT bool) Domain
	conv = func(i int32, parentSMT bool) Domain {
		nd := &tr.nodes[i]
		d := Domain{Level: nd.level, Power: nd.power, Capacity: divRoundClosest(nd.power, capacityScale),
			GroupCapacity: groupCapacity(nd.power, parentSMT)}
		for p := nd.lo; p < nd.hi; p++ {
			d.CPUs = append(d.CPUs, t.cpus[tr.pos[p]].ID)
		}
		slices.Sort(d.CPUs)
		for _, k := range nd.kids {
			d.Groups = append(d.Groups, conv(k, nd.smt))
		}
		return d
	}
	return conv(tr.root, false), true
}

// Levels returns the level names of the domains a CPU belongs to, bottom-up,
// for the first allowed CPU (nil: all CPUs).
func (t Topology) Levels(allowed []int) []string {
	tr := t.treeFor(normalize(t, allowed))
	if tr.root < 0 {
		return nil
	}
	var out []string
	var walk func(i int32)
	walk = func(i int32) {
		nd := &tr.nodes[i]
		if len(nd.kids) == 0 {
			return
		}
		walk(nd.kids[0])
		out = append(out, nd.level)
	}
	walk(tr.root)
	return out
}

// normalize returns allowed ∩ the topology's CPUs, ascending and
// deduplicated; nil allowed means every CPU.
func normalize(t Topology, allowed []int) []int {
	if allowed == nil {
		out := make([]int, len(t.cpus))
		for i, c := range t.cpus {
			out[i] = c.ID
		}
		return out
	}
	out := make([]int, 0, len(allowed))
	for _, id := range allowed {
		if t.index(id) >= 0 {
			out = append(out, id)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}
