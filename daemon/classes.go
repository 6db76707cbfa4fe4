package daemon

import (
	"fmt"
	"slices"

	"github.com/schedpolicyd/schedpolicyd/daemon/snapshot"
	"github.com/schedpolicyd/schedpolicyd/policy"
	"github.com/schedpolicyd/schedpolicyd/sysfs"
)

// ClassedCPUDescs is CPUDescs with the machine's efficiency classes
// (sysfs.CPUClasses): on a hybrid machine each CPU gets its class's index
// (0 the most efficient) as policy.CPUDesc.Class and its class's capacity
// as Capacity, so the balancer packs by class; with one class the result
// is CPUDescs(t), unchanged.
func ClassedCPUDescs(t sysfs.CPUTopology, c sysfs.CPUClasses) []policy.CPUDesc {
	out := CPUDescs(t)
	if !c.Hybrid() {
		return out
	}
	for i := range out {
		if k := c.Of(out[i].ID); k >= 0 {
			out[i].Class, out[i].Capacity = k, c.Classes[k].Capacity
			out[i].Perf = int(min(c.Perf[out[i].ID], 1<<30))
		}
	}
	return out
}

// ClassModel returns m pricing each efficiency class of a hybrid machine
// (MachineEnergy: the machine's own model at every operating point where
// it has one, else the published class ratios); from says where the
// costs come from, "" on a machine of one class, where m is returned as
// it is.
func ClassModel(m policy.EnergyModel, fs sysfs.FS, c sysfs.CPUClasses) (_ policy.EnergyModel, from string) {
	e := MachineEnergy(m, fs, c)
	return e.Model, e.From
}

// Where a machine's class costs come from (MachineModels.From), strongest
// first.
const (
	CostFromKernel  = "the kernel's energy model (debugfs energy_model)"
	CostFromDerived = "derived from cpufreq's frequencies and published per-microarchitecture coefficients (an estimate)"
	CostFromRatios  = "published figures (an estimate; docs/HYBRID-PLACEMENT.md)"
)

// MachineModels is what prices a machine's classes (issue 35, item 1).
type MachineModels struct {
	// Model is the calibration pricing the classes: with Power set to
	// Own where the machine has its own model, else with the published
	// class ratios (ClassCost) only.
	Model policy.EnergyModel
	// From is the strongest source every class's costs come from
	// (CostFrom*); "" on a machine of one class.
	From string
	// ClassFrom says, per class (most efficient first), where its
	// costs come from, naming the domain, the coefficients or the table.
	ClassFrom []string
	// Own is the machine's own model (the kernel's energy model, or one
	// derived), one class per class; nil when only class ratios exist.
	Own *policy.PowerModel
	// Homes are the models placement prices homes by
	// (policy.Topology.WithHomes): Own, and the bracketing models fitted
	// to the machine's classes.
	Homes policy.HomeModels
}

// MachineEnergy reads the machine's own energy model below fs's root,
// first rung that covers every class wins: the kernel's energy model
// (sysfs.FS.ReadEnergyModel, every performance state of the domain
// holding each class's first CPU); else one derived from each class's
// cpufreq frequencies (sysfs.FS.CPUFreqStates) and the published
// coefficients of its core type (MIDR_EL1, policy.UarchPowers); else
// the published class ratios (policy.ClassCostFor), the weakest source.
// On a machine of one class m is returned as it is.
func MachineEnergy(m policy.EnergyModel, fs sysfs.FS, c sysfs.CPUClasses) MachineModels {
	if !c.Hybrid() {
		return MachineModels{Model: m}
	}
	caps := make([]int, len(c.Classes))
	names := make([]string, len(c.Classes))
	for i, cl := range c.Classes {
		caps[i], names[i] = cl.Capacity, cl.Name
	}
	out := MachineModels{Homes: policy.HomeModels{ClassNames: names}}
	for _, b := range policy.BracketModels() {
		out.Homes.Bracket = append(out.Homes.Bracket, b.Fit(caps))
	}
	own, from, classFrom := kernelModel(fs, c)
	if own == nil {
		own, from, classFrom = derivedModel(fs, c)
	}
	if own != nil {
		ratio := make([]float64, len(own.Classes))
		for i := range own.Classes {
			_, ratio[i], _ = own.State(i, 1)
		}
		out.Model, out.From, out.ClassFrom, out.Own = m.WithClasses(ratio).WithPower(*own), from, classFrom, own
		out.Homes.Machine = own
		return out
	}
	cost := make([]float64, len(c.Classes))
	for i, cl := range c.Classes {
		cost[i] = policy.ClassCostFor(string(c.Vendor), cl.Name)
		out.ClassFrom = append(out.ClassFrom, fmt.Sprintf("class ratio %.2f, published figures (the weakest source; docs/HYBRID-PLACEMENT.md)", cost[i]))
	}
	out.Model, out.From = m.WithClasses(cost), CostFromRatios
	return out
}

// kernelModel is the kernel's energy model as a policy.PowerModel, one
// class per class (the domain holding its first CPU); nil when it is
// unreadable or leaves a class out.
func kernelModel(fs sysfs.FS, c sysfs.CPUClasses) (*policy.PowerModel, string, []string) {
	pds, err := fs.ReadEnergyModel()
	if err != nil {
		return nil, "", nil
	}
	pm := policy.PowerModel{Name: policy.ModelMachine, Source: "debugfs energy_model"}
	var classFrom []string
	for _, cl := range c.Classes {
		i := slices.IndexFunc(pds, func(d sysfs.EMPerfDomain) bool { return d.CPUs.Contains(cl.CPUs.First()) })
		if i < 0 {
			return nil, "", nil
		}
		d := pds[i]
		top := d.States[len(d.States)-1]
		cp := policy.ClassPower{Name: cl.Name}
		for _, st := range d.States {
			perf := float64(st.Performance)
			if perf <= 0 && top.KHz > 0 {
				perf = float64(int64(cl.Capacity) * st.KHz / top.KHz) // em_init_performance
			}
			if perf <= 0 {
				continue
			}
			cost := float64(st.Cost)
			if cost <= 0 || (!d.Artificial() && st.Performance <= 0) {
				cost = float64(st.Power) * 10 / perf // em_compute_costs
			}
			skip := st.Inefficient && d.Flags > 0 && d.Flags&sysfs.EMFlagSkipInefficiencies != 0
			cp.OPPs = append(cp.OPPs, policy.OPP{KHz: st.KHz, Capacity: perf, Cost: cost, Inefficient: skip})
		}
		pm.Classes = append(pm.Classes, cp)
		kind := "µW"
		if d.Artificial() {
			kind = "artificial costs"
		}
		classFrom = append(classFrom, fmt.Sprintf("the kernel's energy model, domain %s (CPUs %s, %d states, %s)", d.Name, d.CPUs, len(cp.OPPs), kind))
	}
	if !pm.Valid() {
		return nil, "", nil
	}
	return &pm, CostFromKernel, classFrom
}

// derivedModel prices each class at its cpufreq frequencies by the
// published coefficients of its core type; nil when a class's core type
// or frequencies are unknown.
func derivedModel(fs sysfs.FS, c sysfs.CPUClasses) (*policy.PowerModel, string, []string) {
	pm := policy.PowerModel{Name: policy.ModelMachine, Source: "cpufreq frequencies × published coefficients"}
	var classFrom []string
	for _, cl := range c.Classes {
		part, err := fs.CPUPartOf(cl.CPUs.First())
		if err != nil {
			return nil, "", nil
		}
		u, ok := policy.UarchPowers[[2]int{int(part.Implementer), int(part.Part)}]
		if !ok {
			return nil, "", nil
		}
		khz, from, err := fs.CPUFreqStates(cl.CPUs.First())
		if err != nil {
			return nil, "", nil
		}
		pm.Classes = append(pm.Classes, policy.DerivedClass(u, cl.Capacity, khz))
		classFrom = append(classFrom, fmt.Sprintf("derived: %d frequencies (%s) × %s's dynamic-power-coefficient %d and voltages from %s (an estimate)", len(khz), from, u.Name, u.DPC, u.Source))
	}
	if !pm.Valid() {
		return nil, "", nil
	}
	return &pm, CostFromDerived, classFrom
}

// classEntries maps the classes to the CPUClasses property; prev itself
// when equal, so the published slice stays the same until a hotplug
// changes it (see topologyEntries).
func classEntries(c sysfs.CPUClasses, prev []snapshot.CPUClassEntry) []snapshot.CPUClassEntry {
	out := make([]snapshot.CPUClassEntry, 0, len(c.Classes))
	for _, cl := range c.Classes {
		out = append(out, snapshot.CPUClassEntry{Name: cl.Name, CPUs: cl.CPUs.String(), Capacity: uint32(cl.Capacity)})
	}
	if slices.Equal(out, prev) {
		return prev
	}
	return out
}

// SpreadModelsFor is policy.SpreadModels for a machine with classes c and
// topology t: the bracketing models are fitted to its classes'
// capacities (one class of 1024 on a machine of one class), and the
// Sandy Bridge calibration base joins them where t has SMT. machine is
// the machine's own calibration (MachineModels.Model), base
// policy.ModelFor's (or a preset's own).
func SpreadModelsFor(machine, base policy.EnergyModel, c sysfs.CPUClasses, t policy.Topology) []policy.NamedModel {
	caps := make([]int, 0, len(c.Classes))
	for _, cl := range c.Classes {
		caps = append(caps, cl.Capacity)
	}
	if len(caps) == 0 {
		caps = []int{1024}
	}
	shape, _ := policy.ShapeOf(t)
	return policy.SpreadModels(machine, base, caps, shape.ThreadsPerCore > 1)
}
