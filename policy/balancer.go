package policy

import (
	"math"
	"slices"
	"sort"
)

// Topology is the CPU hierarchy the balancer packs over: packages (the
// kernel's PKG level) made of cores (the SMT level's groups) made of
// hardware threads (logical CPU numbers). Every CPU appears in exactly one
// core and every core in exactly one package. Build it with NewTopology.
type Topology struct {
	Packages []Package
}

// Package is one package's cores, ordered by their first CPU.
type Package struct {
	Cores []Core
}

// Core is one physical core's SMT threads (logical CPU numbers, ascending).
type Core struct {
	Threads []int
}

// NewTopology builds a Topology from the kernel's masks: cores are the
// distinct core_cpus_list sets and packages the distinct package_cpus_list
// sets (sysfs, Documentation/admin-guide/cputopology.rst). A core belongs
// to the package that contains its first thread; a core found in no package
// gets a package of its own. Output order is by first CPU, so the result is
// deterministic whatever the input order.
func NewTopology(cores, packages [][]int) Topology {
	pkgOf := map[int]int{}
	for i, p := range packages {
		for _, c := range p {
			pkgOf[c] = i
		}
	}
	byPkg := map[int][]Core{}
	next := len(packages)
	for _, c := range cores {
		if len(c) == 0 {
			continue
		}
		th := slices.Clone(c)
		slices.Sort(th)
		p, ok := pkgOf[th[0]]
		if !ok {
			p = next
			next++
		}
		byPkg[p] = append(byPkg[p], Core{Threads: th})
	}
	var t Topology
	for _, cs := range byPkg {
		sort.Slice(cs, func(i, j int) bool { return cs[i].Threads[0] < cs[j].Threads[0] })
		t.Packages = append(t.Packages, Package{Cores: cs})
	}
	sort.Slice(t.Packages, func(i, j int) bool {
		return t.Packages[i].Cores[0].Threads[0] < t.Packages[j].Cores[0].Threads[0]
	})
	return t
}

// restrict keeps only the CPUs in allowed, dropping cores and packages left
// empty.
func (t Topology) restrict(allowed []int) Topology {
	var out Topology
	for _, p := range t.Packages {
		var np Package
		for _, c := range p.Cores {
			var th []int
			for _, x := range c.Threads {
				if slices.Contains(allowed, x) {
					th = append(th, x)
				}
			}
			if len(th) > 0 {
				np.Cores = append(np.Cores, Core{Threads: th})
			}
		}
		if len(np.Cores) > 0 {
			out.Packages = append(out.Packages, np)
		}
	}
	return out
}

// Load is one managed workload as the balancer sees it.
type Load struct {
	Name string
	// Util is the workload's decayed CPU utilisation in CPUs (1.0 = one
	// CPU fully busy; may exceed 1 for multi-threaded workloads).
	Util float64
	// Current is the workload's cpuset now (logical CPUs, any order).
	Current []int
}

// Input is everything one balancing decision depends on.
type Input struct {
	Topology Topology
	// Allowed is the set of CPUs the managed parent may hand out (online
	// CPUs of the parent cpuset).
	Allowed []int
	// Policy is the effective policy from the knob (Knob.Effective).
	Policy Policy
	Loads  []Load
}

// Plan is a placement: the CPUs each workload may run on.
type Plan struct {
	// Policy is the policy the plan was made with: the input policy, or
	// Performance when a power-aware policy fell back because the load
	// exceeds the domain's threshold ("race to idle").
	Policy Policy
	// CPUs maps each workload name to its CPUs (ascending).
	CPUs map[string][]int
	// Active is the union of all workloads' CPUs (ascending).
	Active []int
}

// Packing thresholds of the patch set's vacancy rule (patch 13,
// find_leader_cpu): a CPU is filled up to max_util percent.
const (
	powersavingMaxUtil = 1.00 // powersaving packs a CPU until it is fully busy
	balanceMaxUtil     = 0.60 // balance leaves 40 % headroom per core
	// saturationRatio: a workload using this share of its cpuset may be
	// held back by it; its demand is unknown, so it is grown at once.
	saturationRatio = 0.90
)

// PlanPlacement computes a placement plan. It is pure and deterministic.
//
// This is the first version of the balancer (the faithful per-level
// algorithm of patches 11–18 is a later issue):
//   - Performance: every workload gets all allowed CPUs (CFS spreads).
//   - Powersaving: the workloads' total utilisation, in CPUs, is covered
//     by the fewest logical CPUs filled to 100 %, taken thread by thread,
//     core by core, package by package (pack until group weight).
//   - Balance: the total is covered by the fewest physical cores filled to
//     60 %, each core with all its threads (pack until group capacity,
//     one busy task per core).
//   - A saturated workload (Util ≥ 90 % of its current cpuset) counts as
//     needing one CPU more than it has: its real demand is unknown.
//   - If the demand exceeds every allowed CPU (or core), the plan falls
//     back to Performance (race to idle).
//
// Packing prefers packages, cores and threads that the workloads already
// use, then lower CPU numbers, so a stable load keeps its CPUs. Every
// workload of a packed plan shares the same packed set. With no allowed
// CPUs the plan is empty.
func PlanPlacement(in Input) Plan {
	allowed := slices.Clone(in.Allowed)
	slices.Sort(allowed)
	allowed = slices.Compact(allowed)
	topo := in.Topology.restrict(allowed)

	set := allowed
	pol := in.Policy
	if pol != Performance && len(in.Loads) > 0 && len(allowed) > 0 {
		var used []int
		demand := 0.0
		for _, l := range in.Loads {
			d := math.Max(l.Util, 0)
			cur := intersect(l.Current, allowed)
			if len(cur) > 0 && len(cur) < len(allowed) && d >= saturationRatio*float64(len(cur)) {
				d = math.Max(d, float64(len(cur)+1))
			}
			demand += d
			if len(cur) < len(allowed) {
				used = append(used, cur...)
			}
		}
		if packed, ok := pack(topo, pol, demand, used); ok {
			set = packed
		} else {
			pol = Performance
		}
	}
	p := Plan{Policy: pol, CPUs: map[string][]int{}}
	for _, l := range in.Loads {
		p.CPUs[l.Name] = slices.Clone(set)
	}
	if len(in.Loads) > 0 {
		p.Active = slices.Clone(set)
	}
	return p
}

// pack chooses the CPUs for a power-aware policy; ok is false when the
// demand does not fit (the caller falls back to performance).
func pack(topo Topology, pol Policy, demand float64, used []int) ([]int, bool) {
	const eps = 1e-9
	var cores []Core
	for _, p := range orderPackages(topo.Packages, used) {
		cores = append(cores, orderCores(p.Cores, used)...)
	}
	var out []int
	switch pol {
	case Balance:
		need := max(1, int(math.Ceil(demand/balanceMaxUtil-eps)))
		if need > len(cores) {
			return nil, false
		}
		for _, c := range cores[:need] {
			out = append(out, c.Threads...)
		}
	default: // Powersaving
		need := max(1, int(math.Ceil(demand/powersavingMaxUtil-eps)))
		for _, c := range cores {
			for _, th := range orderThreads(c.Threads, used) {
				if len(out) < need {
					out = append(out, th)
				}
			}
		}
		if len(out) < need {
			return nil, false
		}
	}
	slices.Sort(out)
	return out, true
}

func countUsed(cpus, used []int) int {
	n := 0
	for _, c := range cpus {
		if slices.Contains(used, c) {
			n++
		}
	}
	return n
}

func orderPackages(ps []Package, used []int) []Package {
	out := slices.Clone(ps)
	cpusOf := func(p Package) []int {
		var c []int
		for _, core := range p.Cores {
			c = append(c, core.Threads...)
		}
		return c
	}
	sort.SliceStable(out, func(i, j int) bool {
		return countUsed(cpusOf(out[i]), used) > countUsed(cpusOf(out[j]), used)
	})
	return out
}

func orderCores(cs []Core, used []int) []Core {
	out := slices.Clone(cs)
	sort.SliceStable(out, func(i, j int) bool {
		return countUsed(out[i].Threads, used) > countUsed(out[j].Threads, used)
	})
	return out
}

func orderThreads(th []int, used []int) []int {
	out := slices.Clone(th)
	sort.SliceStable(out, func(i, j int) bool {
		return slices.Contains(used, out[i]) && !slices.Contains(used, out[j])
	})
	return out
}

func intersect(a, allowed []int) []int {
	var out []int
	for _, x := range a {
		if slices.Contains(allowed, x) && !slices.Contains(out, x) {
			out = append(out, x)
		}
	}
	slices.Sort(out)
	return out
}
