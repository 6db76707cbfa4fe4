package policy

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
)

// HomeModels price the homes of a hybrid machine's packed work (issue 35,
// item 2): the machine's own model where it has one (the kernel's energy
// model, or one derived from cpufreq's frequencies and published
// coefficients), else the bracketing published models, all fitted to the
// machine's classes (PowerModel.Fit).
type HomeModels struct {
	// Machine is the machine's own model; nil when it has none (only
	// class ratios), and then Bracket decides.
	Machine *PowerModel
	// Bracket are the published models (BracketModels), fitted.
	Bracket []PowerModel
	// ClassNames name the machine's classes in reasons (by
	// CPUDesc.Class); "class N" where absent.
	ClassNames []string
}

// homeSet is a topology's HomeModels with the topology remapped to every
// class order a plan may pick (key: the order as "2,0,1").
type homeSet struct {
	models   HomeModels
	remapped map[string]Topology
}

// WithHomes returns t whose packing plans (powersaving, and the
// background and service work balance packs with it) fill the class
// that is cheapest for their load by h first, instead of the most
// efficient class (see PlanPlacement, "Efficiency classes"). A
// homogeneous t, or h without a Valid model, is returned as it is. The
// orders are prepared here, so plans pay nothing for them; a machine of
// more than 4 classes keeps the class order.
func (t Topology) WithHomes(h HomeModels) Topology {
	if !t.Hybrid() || t.nclass > 4 {
		return t
	}
	keep := HomeModels{ClassNames: h.ClassNames}
	if h.Machine != nil && h.Machine.Valid() && len(h.Machine.Classes) >= t.nclass {
		m := *h.Machine
		keep.Machine = &m
	}
	for _, b := range h.Bracket {
		if b.Valid() && len(b.Classes) >= t.nclass {
			keep.Bracket = append(keep.Bracket, b)
		}
	}
	if keep.Machine == nil && len(keep.Bracket) == 0 {
		return t
	}
	hs := &homeSet{models: keep, remapped: map[string]Topology{}}
	perm := make([]int, t.nclass)
	for i := range perm {
		perm[i] = i
	}
	for {
		if !isIdentity(perm) {
			cs := slices.Clone(t.cpus)
			rank := make([]int, len(perm)) // class → its place in the order
			for r, c := range perm {
				rank[c] = r
			}
			for i := range cs {
				if cs[i].Class < len(rank) {
					cs[i].Class = rank[cs[i].Class]
				}
			}
			if rt, err := BuildTopology(cs); err == nil {
				hs.remapped[orderKey(perm)] = rt
			}
		}
		if !nextPerm(perm) {
			break
		}
	}
	t.homes = hs
	return t
}

// Homes returns the models t's plans price homes with (WithHomes); ok is
// false when none do.
func (t Topology) Homes() (HomeModels, bool) {
	if t.homes == nil {
		return HomeModels{}, false
	}
	return t.homes.models, true
}

func isIdentity(p []int) bool {
	for i, v := range p {
		if i != v {
			return false
		}
	}
	return true
}

func orderKey(p []int) string {
	s := make([]string, len(p))
	for i, v := range p {
		s[i] = strconv.Itoa(v)
	}
	return strings.Join(s, ",")
}

// nextPerm advances p to the next permutation in lexicographic order,
// reporting false after the last.
func nextPerm(p []int) bool {
	i := len(p) - 2
	for i >= 0 && p[i] >= p[i+1] {
		i--
	}
	if i < 0 {
		return false
	}
	j := len(p) - 1
	for p[j] <= p[i] {
		j--
	}
	p[i], p[j] = p[j], p[i]
	slices.Reverse(p[i+1:])
	return true
}

// homeMargin is how much less (a share of its cost) another home must
// cost than the most efficient class to be chosen over it: a band, so
// that loads near the point where two homes cost the same do not flip
// the choice with every sample. 10 % is below the smallest difference
// the kernel's own models give the fixtures' decisions (RK3588 mainline:
// 0.456 vs 0.539, 15 %) and well within the published models' error bars
// (±20 %, docs/ENERGY_MODEL.md).
const homeMargin = 0.10

// homeClass is one candidate home of a plan: a class with allowed CPUs.
type homeClass struct {
	class    int
	capacity float64 // one CPU's, 1..1024
	awake    bool    // other work keeps one of its clusters with allowed CPUs awake
}

// HomeChoice is the decision of a packing plan's home order.
type HomeChoice struct {
	// Order is the classes, cheapest home first (CPUDesc.Class values).
	Order []int
	// Reason says why, when the order is not the class order (most
	// efficient first) or the bracketing models disagree on the
	// cheapest home; "" otherwise.
	Reason string
}

// chooseHomes orders the classes of allowed (CPU IDs of t) by what it
// costs to run util units of capacity (1024 = one biggest CPU fully
// busy) in each: at the state that work forces on one CPU of the class
// (all of it on one CPU when it fits, else CPUs at their top), plus the
// wake cost of a cluster no CPU of awake (other work's CPUs) keeps up.
// The machine's model decides where there is one; else the bracketing
// models do: the class order they agree on, or where they disagree on
// the cheapest, the order by each class's worst relative cost across
// them (the home that costs least in the worst of them first), said in
// Reason. The class the work is on now (current, a CPUDesc.Class; -1
// none: the most efficient class) stays first unless another home costs
// at least homeMargin less (by the deciding cost): a hysteresis, so that
// a load near where two homes cost the same does not move the work with
// every sample.
func (t Topology) chooseHomes(allowed []int, util float64, awake map[int]bool, current int) (HomeChoice, bool) {
	if t.homes == nil || !(util > 0) {
		return HomeChoice{}, false
	}
	byClass := map[int]*homeClass{}
	allowedCluster := map[[2]int]bool{}
	for _, id := range allowed {
		i := t.index(id)
		if i < 0 {
			continue
		}
		c := t.cpus[i]
		if byClass[c.Class] == nil {
			byClass[c.Class] = &homeClass{class: c.Class, capacity: float64(c.Capacity)}
		}
		allowedCluster[[2]int{c.Class, c.Cluster}] = true
	}
	if len(byClass) < 2 {
		return HomeChoice{}, false
	}
	for _, c := range t.cpus {
		if awake[c.ID] && allowedCluster[[2]int{c.Class, c.Cluster}] && byClass[c.Class] != nil {
			byClass[c.Class].awake = true
		}
	}
	var homes []homeClass
	for c := range t.nclass {
		if h := byClass[c]; h != nil {
			homes = append(homes, *h)
		}
	}
	costs := func(m PowerModel) []float64 {
		out := make([]float64, len(homes))
		for k, h := range homes {
			out[k] = m.HomeCost(h.class, util, math.Min(util, h.capacity), h.awake)
		}
		return out
	}
	byCost := func(cost []float64) []int {
		idx := make([]int, len(homes))
		for k := range idx {
			idx[k] = k
		}
		slices.SortStableFunc(idx, func(a, b int) int {
			switch {
			case cost[a] < cost[b]-1e-12:
				return -1
			case cost[b] < cost[a]-1e-12:
				return 1
			}
			return 0
		})
		return idx
	}
	// pick is byCost with the home the work is on now (current; else
	// the most efficient class) kept first unless another home costs at
	// least homeMargin less: near the load where
	// two homes cost the same, a load that wanders by a hair (a decayed
	// average, an idle desktop's wakeups) must not move the work back
	// and forth (it did, several times a second, in the idle-desktop
	// scenario on strix-point-hx370).
	stay := 0 // the home kept unless another costs homeMargin less
	for k, h := range homes {
		if h.class == current {
			stay = k
		}
	}
	pick := func(cost []float64) []int {
		idx := byCost(cost)
		if idx[0] != stay && cost[idx[0]] >= cost[stay]*(1-homeMargin) {
			idx = append([]int{stay}, slices.DeleteFunc(idx, func(v int) bool { return v == stay })...)
		}
		return idx
	}
	order := func(idx []int) []int {
		out := make([]int, 0, t.nclass)
		for _, k := range idx {
			out = append(out, homes[k].class)
		}
		for c := range t.nclass { // classes without allowed CPUs keep their place at the end
			if byClass[c] == nil {
				out = append(out, c)
			}
		}
		return out
	}
	name := func(k int) string {
		if c := homes[k].class; c < len(t.homes.models.ClassNames) {
			return t.homes.models.ClassNames[c]
		}
		return "class " + strconv.Itoa(homes[k].class)
	}
	if m := t.homes.models.Machine; m != nil {
		cost := costs(*m)
		idx := pick(cost)
		ch := HomeChoice{Order: order(idx)}
		if idx[0] != 0 {
			ch.Reason = fmt.Sprintf("%s cheaper than %s by this machine's energy model: %.3f vs %.3f per unit of work",
				name(idx[0]), name(0), cost[idx[0]]/util*capacityScale, cost[0]/util*capacityScale)
		}
		return ch, true
	}
	worst := make([]float64, len(homes))
	cheapest := map[int][]string{}
	for _, m := range t.homes.models.Bracket {
		cost := costs(m)
		first := byCost(cost)[0] // what this model says, without the hysteresis
		cheapest[first] = append(cheapest[first], m.Name)
		for k, c := range cost {
			worst[k] = math.Max(worst[k], c/util*capacityScale)
		}
	}
	idx := pick(worst)
	if len(cheapest) == 1 {
		for k := range cheapest { // they agree: that home first, past the same hysteresis
			if k == stay || worst[k] < worst[stay]*(1-homeMargin) {
				idx = append([]int{k}, slices.DeleteFunc(idx, func(v int) bool { return v == k })...)
			}
		}
	}
	ch := HomeChoice{Order: order(idx)}
	if len(cheapest) > 1 {
		var says []string
		for k := range homes {
			if ms := cheapest[k]; len(ms) > 0 {
				says = append(says, fmt.Sprintf("%s by %s", name(k), strings.Join(ms, "/")))
			}
		}
		ch.Reason = fmt.Sprintf("models disagree: %s; %s costs least in the worst (%.3f per unit of work)",
			strings.Join(says, ", "), name(idx[0]), worst[idx[0]])
	} else if idx[0] != 0 {
		ch.Reason = fmt.Sprintf("%s cheapest by every published model", name(idx[0]))
	}
	return ch, true
}
