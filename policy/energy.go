package policy

import (
	"cmp"
	"fmt"
	"math"
	"slices"
)

// EnergyModel is a small, documented power model (docs/ENERGY_MODEL.md). It
// is a model, not a measurement: a handful of parameters fitted to the seed's
// table, good for comparing policies on one machine, not for absolute watts
// on another.
//
//	W = IdleW + Σ_packages min(PackageLimitW,
//	        a_p·PackageW + Σ_cores a_c·CoreW·(f(n)/BaseGHz)^Exponent + Σ_threads u_t·ThreadW)
//
// where u_t is a hardware thread's busy fraction, a_c = 1 − Π(1 − u_t) over
// the core's threads, a_p = max a_c over the package, and f(n) the turbo
// frequency with n active cores in the package (fewer active cores, higher
// turbo). A package over its limit is throttled to the limit.
type EnergyModel struct {
	Name          string    `json:"name"`
	IdleW         float64   `json:"idle_w"`          // platform, every package idle (W)
	PackageW      float64   `json:"package_w"`       // per awake package: uncore, LLC, ring (W)
	CoreW         float64   `json:"core_w"`          // per busy core at BaseGHz (W)
	ThreadW       float64   `json:"thread_w"`        // per busy hardware thread (W)
	BaseGHz       float64   `json:"base_ghz"`        // nominal frequency
	TurboGHz      []float64 `json:"turbo_ghz"`       // by active cores: [1 core, 2 cores, …]; the last repeats
	Exponent      float64   `json:"exponent"`        // core power ∝ f^Exponent (P ∝ f·V², V ∝ f → 3)
	PackageLimitW float64   `json:"package_limit_w"` // per package (PL1); 0: none
	// Machine is the shape of the machine the parameters were fitted on.
	// Its watts describe only that shape (Describes); on another machine
	// they compare policies, nothing more.
	Machine Shape `json:"machine"`
	// ClassCost is, on a hybrid machine, each efficiency class's energy
	// per unit of work relative to the most performant class (1), by
	// CPUDesc.Class (WithClasses). A busy core of class c draws
	// ClassCost[c] × its capacity / 1024 of what a P-core of the
	// calibration draws. nil: every core is priced alike, as before.
	ClassCost []float64 `json:"class_cost,omitempty"`
	// Power, when set, prices each class at the state its load forces
	// (PowerModel.State, the busiest CPU of each frequency domain —
	// the CPUs of one class and one cluster — with EAS's 1.25 margin)
	// instead of ClassCost's one figure per class, and adds the wake
	// cost of every cluster while any of its CPUs runs; a busy core of
	// class c then draws the state's relative cost × its capacity / 1024
	// of what a P-core of the calibration draws. It must be fitted to
	// the machine's classes (PowerModel.Fit). nil: ClassCost as before.
	Power *PowerModel `json:"-"`
}

// WithPower returns m pricing each class at its operating point by p
// (fitted to the machine's classes; see Power). A p that is not Valid
// leaves m as it is.
func (m EnergyModel) WithPower(p PowerModel) EnergyModel {
	if p.Valid() {
		m.Power = &p
	}
	return m
}

// WithClasses returns m pricing each efficiency class by cost[c] (energy
// per unit of work relative to the most performant class; see
// ClassCost). A cost that is not positive or not finite counts as 1.
func (m EnergyModel) WithClasses(cost []float64) EnergyModel {
	m.ClassCost = make([]float64, len(cost))
	for i, c := range cost {
		if !(c > 0) || math.IsInf(c, 0) {
			c = 1
		}
		m.ClassCost[i] = c
	}
	return m
}

// Shape is a machine's layout as the energy model counts it: packages,
// physical cores in each, hardware threads per core.
type Shape struct {
	Packages        int `json:"packages"`
	CoresPerPackage int `json:"cores_per_package"`
	ThreadsPerCore  int `json:"threads_per_core"`
}

// String reads like "1 package × 4 cores × 2 threads".
func (s Shape) String() string {
	n := func(v int, word string) string {
		if v == 1 {
			return "1 " + word
		}
		return fmt.Sprintf("%d %ss", v, word)
	}
	return n(s.Packages, "package") + " × " + n(s.CoresPerPackage, "core") + " × " + n(s.ThreadsPerCore, "thread")
}

// ShapeOf returns t's shape. uniform is false when its packages do not
// all have the same number of cores, or its cores the same number of
// threads (a hybrid part, CPUs offline); the counts are then the largest.
// An empty topology is the zero Shape, uniform.
func ShapeOf(t Topology) (s Shape, uniform bool) {
	cores := map[int]map[int]bool{} // package → its cores
	threads := map[int]int{}        // core → its threads
	for _, c := range t.cpus {
		if cores[c.Package] == nil {
			cores[c.Package] = map[int]bool{}
		}
		cores[c.Package][c.Core] = true
		threads[c.Core]++
	}
	s.Packages, uniform = len(cores), true
	first := true
	for _, cs := range cores {
		if !first && len(cs) != s.CoresPerPackage {
			uniform = false
		}
		s.CoresPerPackage, first = max(s.CoresPerPackage, len(cs)), false
	}
	first = true
	for _, n := range threads {
		if !first && n != s.ThreadsPerCore {
			uniform = false
		}
		s.ThreadsPerCore, first = max(s.ThreadsPerCore, n), false
	}
	return s, uniform
}

// Describes reports whether t is a machine of the shape the model was
// fitted on (Machine, with every package and core alike). When it is not,
// Simulate's watts still rank policies on t, but are no estimate of t's
// power.
func (m EnergyModel) Describes(t Topology) bool {
	s, uniform := ShapeOf(t)
	return uniform && s == m.Machine
}

// SNBLaptop is calibrated on the seed's Sandy Bridge laptop, 4 cores × HT
// (patch 17: busy loops, 2/4/8 tasks, 40/54/54, 57/64/68, 68/68/68 W for
// powersaving/balance/performance). Turbo bins are those of an i7-2720QM
// class part (2.2 GHz base; 3.3/3.2/3.1/3.0 GHz with 1/2/3/4 cores).
var SNBLaptop = EnergyModel{
	Name: "snb-laptop-4c8t", IdleW: 12, PackageW: 8, CoreW: 5.04, ThreadW: 1.5,
	BaseGHz: 2.2, TurboGHz: []float64{3.3, 3.2, 3.1, 3.0}, Exponent: 3, PackageLimitW: 56,
	Machine: Shape{Packages: 1, CoresPerPackage: 4, ThreadsPerCore: 2},
}

// SNBServer is a rough calibration on the seed's 2-socket Sandy Bridge EP
// (8 cores × HT per socket; patch 17: 4/8/16 tasks, 190/201/238,
// 205/241/268, 271/348/376 W). See docs/ENERGY_MODEL.md for its fit.
var SNBServer = EnergyModel{
	Name: "snb-ep-2s8c2t", IdleW: 110, PackageW: 30, CoreW: 4.5, ThreadW: 5,
	BaseGHz: 2.7, TurboGHz: []float64{3.5, 3.5, 3.4, 3.4, 3.2, 3.2, 3.1, 3.1}, Exponent: 3, PackageLimitW: 150,
	Machine: Shape{Packages: 2, CoresPerPackage: 8, ThreadsPerCore: 2},
}

// Estimate is the model's result for one plan.
type Estimate struct {
	Watts        float64 `json:"watts"`
	BusyThreads  float64 `json:"busy_threads"`  // Σ thread busy fractions
	BusyCores    int     `json:"busy_cores"`    // cores with any busy thread
	BusyPackages int     `json:"busy_packages"` // packages with any busy core
	// ClassWatts is, with ClassCost on a hybrid topology, the watts each
	// class's cores and threads draw (by CPUDesc.Class); the rest of
	// Watts is the platform and the packages' uncore. nil otherwise.
	ClassWatts []float64 `json:"class_watts,omitempty"`
}

// MaxSimulatedThreads bounds the threads of one load Simulate places one
// at a time. A load with more threads than this, each busy less than
// len(cpuset)/MaxSimulatedThreads of a CPU, would take that many steps
// over its cpuset; Simulate spreads it in closed form instead
// (simState.spread), so its cost does not grow with the thread count.
// `schedpolicyd plan` refuses more THREADS than this, so its loads are
// always placed thread by thread.
const MaxSimulatedThreads = 1 << 16

// Simulate estimates the power of the loads running under plan: inside each
// workload's cpuset, CFS spreads its runnable threads (Threads, else
// ceil(Util)) like performance does — least busy package, then core, then
// thread — each thread busy Util/threads of the time, at most 1 per CPU.
// Workloads are simulated in order. CPUs not in the topology are ignored;
// a Util that is NaN or below 0 counts as 0.
//
// A load of more than MaxSimulatedThreads threads, each busy less than
// len(cpuset)/MaxSimulatedThreads of a CPU, is placed in closed form: the
// limit of that spreading as its threads grow and each one's share
// vanishes (simState.spread), whatever the thread count. Every other load
// is placed thread by thread, at most about MaxSimulatedThreads +
// 2 × len(cpuset) threads before its cpuset is saturated. The cost is
// thus O(min(threads, MaxSimulatedThreads + 2·|cpuset|) · |cpuset|) per
// load, never more with more threads.
func (m EnergyModel) Simulate(t Topology, plan Plan, loads []Load) Estimate {
	e, _ := m.simulate(t, plan, loads)
	return e
}

// simulate is Simulate; steps counts the searches for a CPU for one
// thread, all loads together (the closed form makes none).
func (m EnergyModel) simulate(t Topology, plan Plan, loads []Load) (e Estimate, steps int) {
	n := len(t.cpus)
	st := newSimState(t)
	for _, l := range loads {
		u := l.Util
		if math.IsNaN(u) || u <= 0 {
			continue
		}
		var set []int
		for _, id := range plan.CPUs[l.Name] {
			if i := t.index(id); i >= 0 {
				set = append(set, i)
			}
		}
		if len(set) == 0 {
			continue
		}
		// threads is a float64: ceil(Util) of a huge Util does not fit
		// an int.
		threads := float64(l.Threads)
		if l.Threads <= 0 {
			threads = math.Ceil(u - 1e-9)
		}
		if !(threads >= 1) {
			continue // no thread to place (Util of 1e-9 CPUs or less)
		}
		per := math.Min(u/threads, 1)
		if threads > MaxSimulatedThreads && !(per*MaxSimulatedThreads >= float64(len(set))) {
			st.spread(set, u)
			continue
		}
		// Each thread placed either adds per to a CPU, at most 1/per
		// times per CPU, or fills a CPU up and takes it out: with
		// per ≥ len(set)/MaxSimulatedThreads the set is saturated after
		// at most MaxSimulatedThreads + 2·len(set) threads.
		for k := 0; float64(k) < threads; k++ {
			steps++
			if !st.place(set, per) {
				break // the set is saturated
			}
		}
	}
	var weight []float64 // per CPU: the class's cost × capacity, on a hybrid machine
	var class []int
	if m.Power != nil {
		weight, class, wake := m.powerWeights(t, st)
		e := m.watts(st.busy, st.coreIdx, st.pkgIdx, weight, class, st.taskIdle)
		for c, w := range wake {
			e.Watts += w
			if c < len(e.ClassWatts) {
				e.ClassWatts[c] += w
			}
		}
		return e, steps
	}
	if t.Hybrid() && len(m.ClassCost) > 0 {
		weight, class = make([]float64, n), make([]int, n)
		for i, c := range t.cpus {
			cost := 1.0
			if c.Class < len(m.ClassCost) {
				cost = m.ClassCost[c.Class]
			}
			weight[i] = cost * float64(c.Capacity) / capacityScale
			class[i] = c.Class
		}
	}
	return m.watts(st.busy, st.coreIdx, st.pkgIdx, weight, class, st.taskIdle), steps
}

// powerWeights prices each CPU by m.Power at the state its frequency
// domain's load forces: the domain is the CPUs of one class and one
// cluster (CPUDesc.Cluster: a cpufreq policy on arm64, a module on x86),
// its load its busiest CPU's busy fraction. weight[i] is CPU i's relative
// cost × capacity / 1024, class[i] its class; wake[c] the watts of class
// c's clusters kept awake (each while any of its CPUs runs, busy periods
// independent) at their states' Wake, in CoreW of a top CPU.
func (m EnergyModel) powerWeights(t Topology, st *simState) (weight []float64, class []int, wake []float64) {
	n := len(t.cpus)
	weight, class = make([]float64, n), make([]int, n)
	type dom struct{ class, cluster int }
	peak, idle := map[dom]float64{}, map[dom]float64{}
	var order []dom // first appearance, so the sums below are deterministic
	for i, c := range t.cpus {
		d := dom{c.Class, c.Cluster}
		peak[d] = math.Max(peak[d], st.busy[i])
		if _, ok := idle[d]; !ok {
			idle[d] = 1
			order = append(order, d)
		}
		idle[d] *= 1 - st.busy[i]
	}
	nclass := 0
	for _, c := range t.cpus {
		nclass = max(nclass, c.Class+1)
	}
	wake = make([]float64, nclass)
	for i, c := range t.cpus {
		d := dom{c.Class, c.Cluster}
		_, rel, _ := m.Power.State(c.Class, peak[d])
		weight[i], class[i] = rel*float64(c.Capacity)/capacityScale, c.Class
	}
	for _, d := range order {
		p := peak[d]
		if p <= 0 {
			continue
		}
		_, _, w := m.Power.State(d.class, p)
		wake[d.class] += (1 - idle[d]) * w * m.CoreW
	}
	return weight, class, wake
}

// simState is Simulate's machine as the loads are placed on it, by CPU
// index (of Topology.cpus) and by dense core and package index.
type simState struct {
	busy            []float64 // per CPU: its busy fraction, 0..1
	coreIdx, pkgIdx []int     // per CPU: its core's and its package's index
	coreLoad        []float64 // per core: Σ busy over its CPUs
	pkgLoad         []float64 // per package: Σ busy over its CPUs
	// taskIdle is, per package, Π(1 − u) over every thread placed: the
	// share of time no thread runs when their busy periods are
	// independent, wherever they run.
	taskIdle []float64
}

// newSimState is t with nothing running.
func newSimState(t Topology) *simState {
	st := &simState{busy: make([]float64, len(t.cpus))}
	st.coreIdx, st.pkgIdx = groupIndex(t, func(c CPUDesc) int { return c.Core }), groupIndex(t, func(c CPUDesc) int { return c.Package })
	st.coreLoad = make([]float64, slices.Max(append(st.coreIdx, 0))+1)
	st.pkgLoad = make([]float64, slices.Max(append(st.pkgIdx, 0))+1)
	st.taskIdle = make([]float64, len(st.pkgLoad))
	for p := range st.taskIdle {
		st.taskIdle[p] = 1
	}
	return st
}

// saturated reports whether CPU i has no room left for a thread.
func (st *simState) saturated(i int) bool { return st.busy[i] >= 1-1e-9 }

// place puts one thread busy per (0..1] of the time on the least busy
// CPU of set (CPU indices, in the plan's order, which breaks ties): least
// busy package, then core, then CPU; a CPU with less room than per gets
// only its room. It reports false, placing nothing, when every CPU of set
// is saturated.
func (st *simState) place(set []int, per float64) bool {
	best := -1
	for _, i := range set {
		if st.saturated(i) {
			continue
		}
		if best < 0 || less3(st.pkgLoad[st.pkgIdx[i]], st.coreLoad[st.coreIdx[i]], st.busy[i], st.pkgLoad[st.pkgIdx[best]], st.coreLoad[st.coreIdx[best]], st.busy[best]) {
			best = i
		}
	}
	if best < 0 {
		return false
	}
	add := math.Min(per, 1-st.busy[best])
	st.busy[best] += add
	st.taskIdle[st.pkgIdx[best]] *= 1 - add
	st.coreLoad[st.coreIdx[best]] += add
	st.pkgLoad[st.pkgIdx[best]] += add
	return true
}

// spread places u CPUs of load (u > 0; +Inf saturates) on set (CPU
// indices) in closed form, as place would with infinitely many threads
// each busy a vanishing share: the load fills the least loaded packages
// up to a common level (or until their CPUs of set are saturated), inside
// each package the least loaded cores likewise, inside each core the
// least busy CPUs (waterFill at each level). A package that takes x CPUs
// of it has its taskIdle multiplied by e^−x, the limit of Π(1 − share).
// Its cost is O(len(set) · log len(set)), whatever the thread count.
func (st *simState) spread(set []int, u float64) {
	cpus := slices.Clone(set)
	slices.Sort(cpus)
	cpus = slices.Compact(cpus)
	room := func(i int) float64 {
		if st.saturated(i) {
			return 0
		}
		return 1 - st.busy[i]
	}
	// The CPUs of set by package, then by core, each in index order.
	type core struct {
		idx  int
		cpus []int
	}
	type pkg struct {
		idx   int
		cores []core
	}
	var pkgs []pkg
	pkgAt, coreAt := map[int]int{}, map[int][2]int{}
	for _, i := range cpus {
		p, c := st.pkgIdx[i], st.coreIdx[i]
		if _, ok := pkgAt[p]; !ok {
			pkgAt[p] = len(pkgs)
			pkgs = append(pkgs, pkg{idx: p})
		}
		pp := &pkgs[pkgAt[p]]
		at, ok := coreAt[c]
		if !ok {
			at = [2]int{pkgAt[p], len(pp.cores)}
			coreAt[c] = at
			pp.cores = append(pp.cores, core{idx: c})
		}
		cc := &pkgs[at[0]].cores[at[1]]
		cc.cpus = append(cc.cpus, i)
	}
	coreRoom := func(c core) float64 {
		r := 0.0
		for _, i := range c.cpus {
			r += room(i)
		}
		return r
	}
	pkgBase, pkgRoom := make([]float64, len(pkgs)), make([]float64, len(pkgs))
	for k, p := range pkgs {
		pkgBase[k] = st.pkgLoad[p.idx]
		for _, c := range p.cores {
			pkgRoom[k] += coreRoom(c)
		}
	}
	for k, x := range waterFill(pkgBase, pkgRoom, u) {
		if x <= 0 {
			continue
		}
		p := pkgs[k]
		coreBase, coreRooms := make([]float64, len(p.cores)), make([]float64, len(p.cores))
		for j, c := range p.cores {
			coreBase[j], coreRooms[j] = st.coreLoad[c.idx], coreRoom(c)
		}
		for j, y := range waterFill(coreBase, coreRooms, x) {
			if y <= 0 {
				continue
			}
			c := p.cores[j]
			cpuBase, cpuRoom := make([]float64, len(c.cpus)), make([]float64, len(c.cpus))
			for h, i := range c.cpus {
				cpuBase[h], cpuRoom[h] = st.busy[i], room(i)
			}
			for h, z := range waterFill(cpuBase, cpuRoom, y) {
				st.busy[c.cpus[h]] += z
			}
			st.coreLoad[c.idx] += y
		}
		st.pkgLoad[p.idx] += x
		st.taskIdle[p.idx] *= math.Exp(-x)
	}
}

// waterFill pours amount (≥ 0; +Inf fills everything) into vessels k
// whose levels are base[k] and which hold room[k] (≥ 0) more, always
// into the lowest: it returns what each takes, x[k] = clamp(L − base[k],
// 0, room[k]) for the level L at which they add up to amount, or room
// itself when amount is at least their sum. Its cost is
// O(len(base) · log len(base)).
func waterFill(base, room []float64, amount float64) []float64 {
	x := make([]float64, len(base))
	total := 0.0
	for _, r := range room {
		total += r
	}
	if !(amount < total) {
		copy(x, room)
		return x
	}
	if !(amount > 0) {
		return x
	}
	// Between two events the level rises at 1/slope per unit poured,
	// slope the number of vessels filling.
	type event struct {
		at    float64
		slope int // +1: a vessel starts filling here, −1: it is full
	}
	var evs []event
	for k := range base {
		if room[k] > 0 {
			evs = append(evs, event{base[k], 1}, event{base[k] + room[k], -1})
		}
	}
	slices.SortFunc(evs, func(a, b event) int { return cmp.Compare(a.at, b.at) })
	level, poured, slope := evs[0].at, 0.0, 0
	found := false
	for _, ev := range evs {
		if slope > 0 {
			if need := float64(slope) * (ev.at - level); poured+need >= amount {
				level += (amount - poured) / float64(slope)
				found = true
				break
			} else {
				poured += need
			}
		}
		level = ev.at
		slope += ev.slope
	}
	if !found { // rounding: amount is all but the whole room
		copy(x, room)
		return x
	}
	for k := range base {
		x[k] = math.Min(math.Max(level-base[k], 0), room[k])
	}
	return x
}

func less3(a1, a2, a3, b1, b2, b3 float64) bool {
	if a1 != b1 {
		return a1 < b1
	}
	if a2 != b2 {
		return a2 < b2
	}
	return a3 < b3
}

// groupIndex maps each CPU (by index) to a dense index of its group.
func groupIndex(t Topology, key func(CPUDesc) int) []int {
	ids := map[int]int{}
	out := make([]int, len(t.cpus))
	for i, c := range t.cpus {
		k := key(c)
		j, ok := ids[k]
		if !ok {
			j = len(ids)
			ids[k] = j
		}
		out[i] = j
	}
	return out
}

// watts applies the model to per-CPU busy fractions; weight (nil: 1
// each) scales each CPU's core and thread power by its class's cost and
// capacity, and class (with weight) says which class's watts it adds to.
// taskIdle is, per package, the share of time no thread runs (used with
// classes only).
func (m EnergyModel) watts(busy []float64, coreIdx, pkgIdx []int, weight []float64, class []int, taskIdle []float64) Estimate {
	var e Estimate
	s := sumThreads(busy, coreIdx, pkgIdx, weight, class, &e)
	s.sumCores(weight != nil, &e)
	if weight != nil {
		e.ClassWatts = make([]float64, len(s.classThread))
		for k := range s.classThread {
			e.ClassWatts[k] = s.classThread[k] * m.ThreadW
		}
	}
	e.Watts = m.IdleW
	for p := range s.act {
		if s.nact[p] == 0 {
			continue
		}
		e.BusyPackages++
		e.Watts += m.packageWatts(&s, p, weight != nil, taskIdle, e.ClassWatts)
	}
	return e
}

// energySums holds the model's terms summed per core and per package.
type energySums struct {
	// Per core.
	idle      []float64 // Π(1 − u_t) over its threads
	corePkg   []int     // its package
	coreW     []float64 // its class weight (1 without classes)
	coreClass []int     // its class (with classes)
	// Per package.
	thread    []float64   // Σ u_t (× weight with classes)
	act       []float64   // a_p: max a_c over its cores
	nact      []int       // busy cores
	coreSum   []float64   // Σ a_c (× weight with classes)
	classCore [][]float64 // per class: Σ a_c × weight; nil without classes
	// Per class: Σ u_t × weight.
	classThread []float64
}

// sumThreads sums the threads' busy fractions per core, package and
// class (arguments as for watts), adding them to e.BusyThreads.
func sumThreads(busy []float64, coreIdx, pkgIdx []int, weight []float64, class []int, e *Estimate) energySums {
	np := 0
	for _, p := range pkgIdx {
		np = max(np, p+1)
	}
	nc := 0
	for _, c := range coreIdx {
		nc = max(nc, c+1)
	}
	s := energySums{
		idle:      make([]float64, nc),
		corePkg:   make([]int, nc),
		coreW:     make([]float64, nc),
		coreClass: make([]int, nc),
		thread:    make([]float64, np),
	}
	for i := range s.idle {
		s.idle[i] = 1
	}
	nclass := 0
	for _, c := range class {
		nclass = max(nclass, c+1)
	}
	s.classThread = make([]float64, nclass)
	for i, u := range busy {
		s.idle[coreIdx[i]] *= 1 - u
		s.corePkg[coreIdx[i]] = pkgIdx[i]
		s.coreW[coreIdx[i]] = 1
		if weight != nil {
			s.coreW[coreIdx[i]], s.coreClass[coreIdx[i]] = weight[i], class[i]
			s.thread[pkgIdx[i]] += u * weight[i]
			s.classThread[class[i]] += u * weight[i]
		} else {
			s.thread[pkgIdx[i]] += u
		}
		e.BusyThreads += u
	}
	return s
}

// sumCores sums the busy cores (a_c = 1 − Π(1 − u_t)) per package, and
// per class when classes is set, adding them to e.BusyCores.
func (s *energySums) sumCores(classes bool, e *Estimate) {
	np, nclass := len(s.thread), len(s.classThread)
	s.act = make([]float64, np)
	s.nact = make([]int, np)
	s.coreSum = make([]float64, np)
	s.classCore = make([][]float64, np)
	for c := range s.idle {
		a := 1 - s.idle[c]
		if a <= 1e-12 {
			continue
		}
		p := s.corePkg[c]
		s.nact[p]++
		if classes {
			s.coreSum[p] += a * s.coreW[c]
			if s.classCore[p] == nil {
				s.classCore[p] = make([]float64, nclass)
			}
			s.classCore[p][s.coreClass[c]] += a * s.coreW[c]
		} else {
			s.coreSum[p] += a
		}
		s.act[p] = math.Max(s.act[p], a)
		e.BusyCores++
	}
}

// packageWatts is the watts of busy package p, capped at PackageLimitW;
// with classes it adds its cores' watts to classWatts (by class).
func (m EnergyModel) packageWatts(s *energySums, p int, classes bool, taskIdle, classWatts []float64) float64 {
	f := m.BaseGHz
	if len(m.TurboGHz) > 0 && !classes {
		f = m.TurboGHz[min(s.nact[p], len(m.TurboGHz))-1]
	}
	act := s.act[p]
	if classes {
		// With classes the package is awake while any thread runs,
		// their busy periods taken as independent (not as overlapping
		// fully), wherever they run: packing decides the class, not the
		// uncore; and the classes' costs stand for their frequencies, so
		// no turbo bin applies.
		act = 1
		if p < len(taskIdle) {
			act = 1 - taskIdle[p]
		}
	}
	scale := 1.0
	if m.BaseGHz > 0 {
		scale = math.Pow(f/m.BaseGHz, m.Exponent)
	}
	w := act*m.PackageW + s.coreSum[p]*m.CoreW*scale + s.thread[p]*m.ThreadW
	if classes {
		for k, v := range s.classCore[p] {
			classWatts[k] += v * m.CoreW * scale
		}
	}
	if m.PackageLimitW > 0 {
		w = math.Min(w, m.PackageLimitW)
	}
	return w
}

// ModelFor picks the calibration for machine t: SNBServer when it has
// several packages, SNBLaptop otherwise (docs/ENERGY_MODEL.md, Limits: for
// machines other than the two measured the ranking of policies means
// something, the watts do not).
func ModelFor(t Topology) EnergyModel {
	pk := map[int]bool{}
	for _, c := range t.cpus {
		pk[c.Package] = true
	}
	if len(pk) > 1 {
		return SNBServer
	}
	return SNBLaptop
}

// Relative energy per unit of work of each efficiency class (the most
// performant class = 1), from published figures; estimates, not
// measurements (docs/HYBRID-PLACEMENT.md §3 and its sources). Where the kernel's energy model is
// readable (debugfs energy_model), the caller uses its ratios instead.
var (
	// IntelClassCost: LP E-core, E-core, P-core. A default model drawn from
	// Apple's and Intel's published figures (docs/HYBRID-PLACEMENT.md §3): LPE 1, E 1.4, P about 4
	// per unit of work at high frequency; the kernel's 6.19 hybrid
	// energy model orders them the same way (LPE < E < P).
	IntelClassCost = map[string]float64{"LPE": 0.25, "E": 0.35, "P": 1}
	// AMDClassCost: Zen5c (dense, "E") and Zen5 ("P") are one
	// microarchitecture at different voltage-frequency ceilings (5.15 vs
	// 3.3 GHz on Strix Point); no per-core figure is published, so the
	// dense core is priced at half, an inference.
	AMDClassCost = map[string]float64{"E": 0.5, "P": 1}
	// BigLittleClassCost: Apple M1's measured OPPs give the E-core 0.90
	// mW and the P-core 4.84 mW per unit of capacity at the top state
	// (t8103.dtsi opp-microwatt, capacity 459/1024): little ≈ 0.2 of big;
	// mid classes take the geometric middle, an inference.
	BigLittleClassCost = map[string]float64{"little": 0.2, "mid": 0.45, "big": 1}
)

// ClassCostFor returns the published cost of a class named name (LPE, E,
// P; little, mid*, big), vendor "intel", "amd" or "" for others; 1 for
// any other name.
func ClassCostFor(vendor, name string) float64 {
	table := BigLittleClassCost
	switch vendor {
	case "intel":
		table = IntelClassCost
	case "amd":
		table = AMDClassCost
	}
	if c, ok := table[name]; ok {
		return c
	}
	if len(name) > 3 && name[:3] == "mid" {
		return BigLittleClassCost["mid"]
	}
	return 1
}
