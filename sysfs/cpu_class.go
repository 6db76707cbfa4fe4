package sysfs

import (
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
)

// Efficiency classes of hybrid CPUs (P-cores and E-cores, big.LITTLE),
// found from sysfs alone: no CPUID, no MSR. The ladder and its public
// sources are in docs/HYBRID-PLACEMENT.md.

// Class names. Intel's come from its PMU lists (and an Intel frequency
// ladder), AMD's from amd_pstate machines; other machines get little, mid
// and big. A machine with one class calls it ClassAll.
const (
	ClassLPE    = "LPE"    // Intel low-power E-core (SoC tile; Lunar Lake's E-cores)
	ClassE      = "E"      // Intel E-core (Atom with L3), AMD dense core (Zen5c)
	ClassP      = "P"      // Intel P-core, AMD classic core (Zen5)
	ClassLittle = "little" // big.LITTLE: the smallest cores
	ClassMid    = "mid"    // big.LITTLE: cores between little and big
	ClassBig    = "big"    // big.LITTLE: the biggest cores
	ClassAll    = "all"    // a homogeneous machine's only class
)

// Rules (rungs of the ladder) that separate CPUs into classes, as
// CPUClasses.Rule reports them.
const (
	RulePMU         = "pmu"          // devices/cpu_core, cpu_atom, cpu_lowpower cpus; LPE = Atom without L3
	RuleCapacity    = "cpu_capacity" // cpu_capacity differs by ≥ 1.3×
	RuleL3Frequency = "l3+max_freq"  // L3 domains whose cpuinfo_max_freq differ by ≥ 1.3×
	RuleFrequency   = "max_freq"     // cpuinfo_max_freq tiers differing by ≥ 1.3×
	RuleHomogeneous = "homogeneous"  // no rung separates the CPUs
	hybridRatio     = 1.3            // scx_utils' has_biglittle: max ≥ 1.3 × min
	tierMerge       = 1.1            // hwloc: values within 10 % are one tier
	capacityScale   = 1024           // SCHED_CAPACITY_SCALE
	maxClassesNamed = 3              // little, mid, big
	unknownCapacity = capacityScale  // cpu_capacity's default
	intelPstateDir  = "devices/system/cpu/intel_pstate"
	amdPstateDir    = "devices/system/cpu/amd_pstate"
	pmuCore         = "devices/cpu_core/cpus"
	pmuAtom         = "devices/cpu_atom/cpus"
	pmuLowPower     = "devices/cpu_lowpower/cpus"
)

// CPUEvidence is what sysfs says about one online CPU's kind, below
// <root>/devices/system/cpu/cpuN/. Zero means absent or unreadable: a
// missing rung just does not separate CPUs.
type CPUEvidence struct {
	ID int
	// PMU is the perf PMU whose cpus list holds the CPU: "cpu_core",
	// "cpu_atom" or "cpu_lowpower" (<root>/devices/<pmu>/cpus); "" none.
	PMU string
	// L3 is the shared_cpu_list of the CPU's level-3 cache
	// (cache/indexM/ whose level is 3); empty without one.
	L3 CPUSet
	// Capacity is cpu_capacity (0..1024); 0 when absent.
	Capacity int
	// MaxFreqKHz is cpufreq/cpuinfo_max_freq, the hardware maximum, kHz.
	MaxFreqKHz int64
	// BaseFreqKHz is cpufreq/base_frequency (intel_pstate), kHz.
	BaseFreqKHz int64
	// HighestPerf is acpi_cppc/highest_perf (CPPC abstract performance).
	HighestPerf int64
	// PrefcoreRanking is cpufreq/amd_pstate_prefcore_ranking.
	PrefcoreRanking int64
}

// ClassVendor is the naming a machine's classes get.
type ClassVendor string

// Vendors, from what sysfs shows: Intel's PMU lists or intel_pstate, AMD's
// amd_pstate; anything else is "".
const (
	VendorIntel ClassVendor = "intel"
	VendorAMD   ClassVendor = "amd"
)

// ClassEvidence is the input of the ladder: every online CPU's evidence,
// ascending ID, and the machine's vendor hint.
type ClassEvidence struct {
	CPUs   []CPUEvidence
	Vendor ClassVendor
	// L3Known reports that some CPU has level-3 cache information, so
	// an Atom CPU without one is an LPE core (not merely a tree without
	// cache directories).
	L3Known bool
}

// CPUClass is one efficiency class: CPUs of one kind.
type CPUClass struct {
	// Name is LPE, E or P (Intel), E or P (AMD), little, mid or big
	// (elsewhere), all (a homogeneous machine's only class).
	Name string
	// CPUs is the class's online CPUs.
	CPUs CPUSet
	// Capacity is the class's capacity relative to the machine's
	// biggest CPU, 1..1024 (SCHED_CAPACITY_SCALE): the largest
	// cpu_capacity of its CPUs where cpu_capacity differs; else derived
	// from acpi_cppc/highest_perf (HWP highest perf × 1024 / the
	// machine's largest, intel_pstate's formula), else from
	// cpuinfo_max_freq the same way; 1024 when nothing is known.
	Capacity int
	// CapacityFrom says where Capacity comes from: "cpu_capacity",
	// "highest_perf (derived)", "cpuinfo_max_freq (derived)" or
	// "unknown".
	CapacityFrom string
	// Evidence says which sysfs values put the CPUs in this class.
	Evidence string
	// Order is the class's CPUs, most performant first by
	// acpi_cppc/highest_perf or amd_pstate_prefcore_ranking (binning:
	// favoured cores); ascending ID where those are equal or absent.
	Order []int
}

// CPUClasses is the machine's efficiency classes, most efficient first;
// exactly one class (ClassAll) on a homogeneous machine. Every online CPU
// is in exactly one class.
type CPUClasses struct {
	Classes []CPUClass
	// Rule is the rung that separated the CPUs (Rule*), RuleHomogeneous
	// when none did.
	Rule string
	// Vendor is the naming the classes got (VendorIntel, VendorAMD, or
	// "" for big.LITTLE and unknown machines).
	Vendor ClassVendor
	// Perf is each CPU's CPPC rank inside its class: its
	// amd_pstate_prefcore_ranking, else acpi_cppc/highest_perf; absent
	// (0) when unknown or the same for every CPU of its class.
	Perf map[int]int64
}

// Hybrid reports whether there is more than one class.
func (c CPUClasses) Hybrid() bool { return len(c.Classes) > 1 }

// Of returns the index in Classes of CPU id's class, -1 when no class
// holds it.
func (c CPUClasses) Of(id int) int {
	for i, cl := range c.Classes {
		if cl.CPUs.Contains(id) {
			return i
		}
	}
	return -1
}

// CPUClasses reads each online CPU's evidence (ReadClassEvidence) and
// classifies the CPUs (ClassifyCPUs). It never fails: a file that is
// missing, empty or garbage is no evidence.
func (fsys FS) CPUClasses(t CPUTopology) CPUClasses {
	return ClassifyCPUs(fsys.ReadClassEvidence(t))
}

// ReadClassEvidence reads the class evidence of t's online CPUs below the
// root: the PMU lists devices/{cpu_core,cpu_atom,cpu_lowpower}/cpus, and
// per CPU its level-3 cache, cpu_capacity, cpufreq/{cpuinfo_max_freq,
// base_frequency, amd_pstate_prefcore_ranking} and
// acpi_cppc/highest_perf. Unreadable or malformed files are left out.
func (fsys FS) ReadClassEvidence(t CPUTopology) ClassEvidence {
	var ev ClassEvidence
	pmus := map[string]CPUSet{}
	for name, path := range map[string]string{"cpu_core": pmuCore, "cpu_atom": pmuAtom, "cpu_lowpower": pmuLowPower} {
		if s, err := ReadAttr(fsys.Path(path)); err == nil {
			if set, err := ParseCPUList(s); err == nil {
				pmus[name] = set
			}
		}
	}
	if _, ok := pmus["cpu_atom"]; ok {
		ev.Vendor = VendorIntel
	} else if isDir(fsys.Path(intelPstateDir)) {
		ev.Vendor = VendorIntel
	} else if isDir(fsys.Path(amdPstateDir)) {
		ev.Vendor = VendorAMD
	}
	readInt := func(path string) int64 {
		v, err := ReadIntAttr(path)
		if err != nil || v < 0 {
			return 0
		}
		return v
	}
	for _, c := range t.CPUs {
		dir := fsys.Path("devices/system/cpu", "cpu"+strconv.Itoa(c.ID))
		e := CPUEvidence{ID: c.ID}
		// cpu_lowpower is checked first: those CPUs are also Atom ones.
		for _, name := range []string{"cpu_lowpower", "cpu_core", "cpu_atom"} {
			if set, ok := pmus[name]; ok && set.Contains(c.ID) {
				e.PMU = name
				break
			}
		}
		if l3, ok := readL3(dir + "/cache"); ok {
			e.L3 = l3.Intersect(t.Online).Union(NewCPUSet(c.ID))
			ev.L3Known = true
		}
		if v := readInt(dir + "/cpu_capacity"); v > 0 && v <= capacityScale {
			e.Capacity = int(v)
		}
		e.MaxFreqKHz = readInt(dir + "/cpufreq/cpuinfo_max_freq")
		e.BaseFreqKHz = readInt(dir + "/cpufreq/base_frequency")
		e.HighestPerf = readInt(dir + "/acpi_cppc/highest_perf")
		e.PrefcoreRanking = readInt(dir + "/cpufreq/amd_pstate_prefcore_ranking")
		if e.PrefcoreRanking > 0 || readInt(dir+"/cpufreq/amd_pstate_max_freq") > 0 {
			if ev.Vendor == "" {
				ev.Vendor = VendorAMD
			}
		}
		ev.CPUs = append(ev.CPUs, e)
	}
	return ev
}

func isDir(path string) bool {
	st, err := os.Stat(path)
	return err == nil && st.IsDir()
}

// readL3 returns shared_cpu_list of the cache below dir (cpuN/cache) whose
// level is 3, found by its level file, not its index number.
func readL3(dir string) (CPUSet, bool) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) || err != nil {
		return CPUSet{}, false
	}
	for _, e := range entries {
		if !strings.HasPrefix(e.Name(), "index") {
			continue
		}
		idx := dir + "/" + e.Name()
		if lv, err := ReadIntAttr(idx + "/level"); err != nil || lv != 3 {
			continue
		}
		s, err := ReadAttr(idx + "/shared_cpu_list")
		if err != nil {
			continue
		}
		set, err := ParseCPUList(s)
		if err != nil || set.IsEmpty() {
			continue
		}
		return set, true
	}
	return CPUSet{}, false
}

// ClassifyCPUs sorts the CPUs into efficiency classes, most efficient
// first, with the first rung of this ladder that separates them:
//
//  1. Intel's perf PMU lists: cpu_core is P; cpu_lowpower, and an Atom
//     (cpu_atom) CPU without a level-3 cache, is LPE; the other Atom
//     CPUs are E (pepc, hwloc, intel-lpmd).
//  2. cpu_capacity, where it differs by ≥ 1.3× (1024 everywhere means
//     unknown): tiers of capacities within 10 % of each other.
//  3. L3 domains whose median cpuinfo_max_freq differ by ≥ 1.3× (AMD
//     Zen5 vs Zen5c).
//  4. cpuinfo_max_freq tiers (values within 10 % of each other with the
//     same base_frequency are one tier; favoured cores are not a class),
//     when the highest is ≥ 1.3× the lowest.
//
// acpi_cppc/highest_perf and amd_pstate_prefcore_ranking never make a
// class (they differ between cores of one type through binning); they
// order the CPUs inside a class (CPUClass.Order). No rung separating the
// CPUs gives one class, ClassAll. An empty input gives no class.
func ClassifyCPUs(ev ClassEvidence) CPUClasses {
	if len(ev.CPUs) == 0 {
		return CPUClasses{Rule: RuleHomogeneous, Vendor: ev.Vendor}
	}
	cpus := slices.Clone(ev.CPUs)
	slices.SortFunc(cpus, func(a, b CPUEvidence) int { return a.ID - b.ID })
	for _, rung := range []func([]CPUEvidence, ClassEvidence) ([]tier, string){byPMU, byCapacity, byL3Frequency, byFrequency} {
		if tiers, rule := rung(cpus, ev); len(tiers) > 1 {
			return finish(cpus, tiers, rule, ev.Vendor)
		}
	}
	all := tier{evidence: "no rung separates the CPUs: one class"}
	for _, c := range cpus {
		all.ids = append(all.ids, c.ID)
	}
	return finish(cpus, []tier{all}, RuleHomogeneous, ev.Vendor)
}

// tier is a class under construction: its CPUs, a name if the rung gives
// one, and the evidence.
type tier struct {
	ids      []int
	name     string
	evidence string
}

func byPMU(cpus []CPUEvidence, ev ClassEvidence) ([]tier, string) {
	var p, e, lpe tier
	atomNoL3 := false
	for _, c := range cpus {
		switch {
		case c.PMU == "cpu_lowpower":
			lpe.ids = append(lpe.ids, c.ID)
		case c.PMU == "cpu_atom" && ev.L3Known && c.L3.IsEmpty():
			lpe.ids = append(lpe.ids, c.ID)
			atomNoL3 = true
		case c.PMU == "cpu_atom":
			e.ids = append(e.ids, c.ID)
		case c.PMU == "cpu_core":
			p.ids = append(p.ids, c.ID)
		default:
			return nil, "" // a CPU in no list: the lists do not describe this machine
		}
	}
	lpe.name, e.name, p.name = ClassLPE, ClassE, ClassP
	lpe.evidence = "in devices/cpu_lowpower/cpus"
	if atomNoL3 {
		lpe.evidence = "in devices/cpu_atom/cpus without a level-3 cache"
		if slices.ContainsFunc(cpus, func(c CPUEvidence) bool { return c.PMU == "cpu_lowpower" }) {
			lpe.evidence = "in devices/cpu_lowpower/cpus, or in cpu_atom without a level-3 cache"
		}
	}
	e.evidence = "in devices/cpu_atom/cpus with a level-3 cache"
	if !ev.L3Known {
		e.evidence = "in devices/cpu_atom/cpus"
	}
	p.evidence = "in devices/cpu_core/cpus"
	var out []tier
	for _, t := range []tier{lpe, e, p} {
		if len(t.ids) > 0 {
			out = append(out, t)
		}
	}
	return out, RulePMU
}

// valueTiers groups CPUs by a positive value into tiers of values within
// 10 % of the tier's lowest (and, with same, only while same says two
// CPUs may share a tier), lowest first. ok is false when some CPU has no
// value or the highest is below 1.3 × the lowest.
func valueTiers(cpus []CPUEvidence, val func(CPUEvidence) int64, same func(a, b CPUEvidence) bool) (out [][]CPUEvidence, ok bool) {
	sorted := slices.Clone(cpus)
	for _, c := range sorted {
		if val(c) <= 0 {
			return nil, false
		}
	}
	slices.SortStableFunc(sorted, func(a, b CPUEvidence) int {
		if d := val(a) - val(b); d != 0 {
			if d < 0 {
				return -1
			}
			return 1
		}
		return a.ID - b.ID
	})
	lo, hi := val(sorted[0]), val(sorted[len(sorted)-1])
	if float64(hi) < hybridRatio*float64(lo) {
		return nil, false
	}
	for _, c := range sorted {
		if n := len(out); n > 0 {
			first := out[n-1][0]
			if float64(val(c)) <= tierMerge*float64(val(first)) && (same == nil || same(first, c)) {
				out[n-1] = append(out[n-1], c)
				continue
			}
		}
		out = append(out, []CPUEvidence{c})
	}
	return out, true
}

func idsOf(cs []CPUEvidence) []int {
	ids := make([]int, len(cs))
	for i, c := range cs {
		ids[i] = c.ID
	}
	slices.Sort(ids)
	return ids
}

func byCapacity(cpus []CPUEvidence, _ ClassEvidence) ([]tier, string) {
	groups, ok := valueTiers(cpus, func(c CPUEvidence) int64 { return int64(c.Capacity) }, nil)
	if !ok {
		return nil, ""
	}
	var out []tier
	for _, g := range groups {
		out = append(out, tier{ids: idsOf(g), evidence: fmt.Sprintf("cpu_capacity %s", valueRange(g, func(c CPUEvidence) int64 { return int64(c.Capacity) }))})
	}
	return out, RuleCapacity
}

func byL3Frequency(cpus []CPUEvidence, _ ClassEvidence) ([]tier, string) {
	// L3 domains, each with its median cpuinfo_max_freq.
	var doms []CPUSet
	for _, c := range cpus {
		if c.L3.IsEmpty() {
			return nil, ""
		}
		if !slices.ContainsFunc(doms, c.L3.Equal) {
			doms = append(doms, c.L3)
		}
	}
	if len(doms) < 2 {
		return nil, ""
	}
	// A domain's members are the CPUs that name it as their L3 (a
	// garbled list may not hold its own CPU, or overlap another).
	medians := make([]CPUEvidence, len(doms)) // ID = domain index, MaxFreqKHz = median
	members := make([][]int, len(doms))
	for i, d := range doms {
		var fs []int64
		for _, c := range cpus {
			if c.L3.Equal(d) {
				fs = append(fs, c.MaxFreqKHz)
				members[i] = append(members[i], c.ID)
			}
		}
		slices.Sort(fs)
		medians[i] = CPUEvidence{ID: i, MaxFreqKHz: fs[len(fs)/2]}
	}
	groups, ok := valueTiers(medians, func(c CPUEvidence) int64 { return c.MaxFreqKHz }, nil)
	if !ok {
		return nil, ""
	}
	var out []tier
	for _, g := range groups {
		var ids []int
		var ls []string
		for _, m := range g {
			ids = append(ids, members[m.ID]...)
			ls = append(ls, doms[m.ID].String())
		}
		slices.Sort(ids)
		out = append(out, tier{ids: ids, evidence: fmt.Sprintf("L3 %s, cpuinfo_max_freq %s kHz", strings.Join(ls, " "), valueRange(g, func(c CPUEvidence) int64 { return c.MaxFreqKHz }))})
	}
	return out, RuleL3Frequency
}

func byFrequency(cpus []CPUEvidence, _ ClassEvidence) ([]tier, string) {
	groups, ok := valueTiers(cpus, func(c CPUEvidence) int64 { return c.MaxFreqKHz },
		func(a, b CPUEvidence) bool { return a.BaseFreqKHz == b.BaseFreqKHz })
	if !ok {
		return nil, ""
	}
	var out []tier
	for _, g := range groups {
		out = append(out, tier{ids: idsOf(g), evidence: fmt.Sprintf("cpuinfo_max_freq %s kHz", valueRange(g, func(c CPUEvidence) int64 { return c.MaxFreqKHz }))})
	}
	return out, RuleFrequency
}

// valueRange prints a tier's values as "N" or "LO-HI".
func valueRange(g []CPUEvidence, val func(CPUEvidence) int64) string {
	lo, hi := val(g[0]), val(g[0])
	for _, c := range g {
		lo, hi = min(lo, val(c)), max(hi, val(c))
	}
	if lo == hi {
		return strconv.FormatInt(lo, 10)
	}
	return strconv.FormatInt(lo, 10) + "-" + strconv.FormatInt(hi, 10)
}

// finish names the tiers (most efficient first), computes each class's
// capacity and the order of its CPUs.
func finish(cpus []CPUEvidence, tiers []tier, rule string, vendor ClassVendor) CPUClasses {
	byID := map[int]CPUEvidence{}
	for _, c := range cpus {
		byID[c.ID] = c
	}
	names := tierNames(len(tiers), vendor)
	out := CPUClasses{Rule: rule, Vendor: vendor}
	// Capacity source: the first that is known for every CPU and, for
	// cpu_capacity, varies (1024 everywhere means unknown).
	type source struct {
		name string
		val  func(CPUEvidence) int64
	}
	sources := []source{
		{"cpu_capacity", func(c CPUEvidence) int64 { return int64(c.Capacity) }},
		{"highest_perf (derived)", func(c CPUEvidence) int64 { return c.HighestPerf }},
		{"cpuinfo_max_freq (derived)", func(c CPUEvidence) int64 { return c.MaxFreqKHz }},
	}
	var src *source
	var top int64
	for i := range sources {
		s := &sources[i]
		lo, hi := int64(math.MaxInt64), int64(0)
		for _, c := range cpus {
			v := s.val(c)
			lo, hi = min(lo, v), max(hi, v)
		}
		if lo <= 0 || (s.name == "cpu_capacity" && lo == hi) {
			continue
		}
		src, top = s, hi
		break
	}
	for i, t := range tiers {
		cl := CPUClass{Name: names[i], CPUs: NewCPUSet(t.ids...), Evidence: t.evidence, Capacity: unknownCapacity, CapacityFrom: "unknown"}
		if t.name != "" {
			cl.Name = t.name
		}
		if len(tiers) == 1 {
			cl.Name = ClassAll
		}
		if src != nil && len(tiers) > 1 {
			var m int64
			for _, id := range t.ids {
				m = max(m, src.val(byID[id]))
			}
			cl.Capacity = int(max(1, min(capacityScale, m*capacityScale/top)))
			cl.CapacityFrom = src.name
		}
		cl.Order = slices.Clone(t.ids)
		rank := func(c CPUEvidence) int64 {
			if c.PrefcoreRanking > 0 {
				return c.PrefcoreRanking
			}
			return c.HighestPerf
		}
		for _, id := range t.ids {
			if r := rank(byID[id]); r != rank(byID[t.ids[0]]) {
				if out.Perf == nil {
					out.Perf = map[int]int64{}
				}
				for _, id := range t.ids {
					out.Perf[id] = rank(byID[id])
				}
				break
			}
		}
		slices.SortStableFunc(cl.Order, func(a, b int) int {
			ra, rb := rank(byID[a]), rank(byID[b])
			switch {
			case ra > rb:
				return -1
			case ra < rb:
				return 1
			}
			return a - b
		})
		out.Classes = append(out.Classes, cl)
	}
	return out
}

// tierNames names n classes, most efficient first.
func tierNames(n int, vendor ClassVendor) []string {
	switch {
	case vendor == VendorIntel && n == 3:
		return []string{ClassLPE, ClassE, ClassP}
	case (vendor == VendorIntel || vendor == VendorAMD) && n == 2:
		return []string{ClassE, ClassP}
	case n == 2:
		return []string{ClassLittle, ClassBig}
	case n == maxClassesNamed:
		return []string{ClassLittle, ClassMid, ClassBig}
	}
	out := make([]string, n)
	for i := range out {
		switch i {
		case 0:
			out[i] = ClassLittle
		case n - 1:
			out[i] = ClassBig
		default:
			out[i] = ClassMid + strconv.Itoa(i)
		}
	}
	return out
}
