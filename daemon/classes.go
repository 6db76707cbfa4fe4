package daemon

import (
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
// (policy.EnergyModel.WithClasses): from the kernel's energy model where
// it is readable (sysfs.FS.ClassEnergyFromEM), else from the published
// figures (policy.ClassCostFor). from says which, "" on a machine of one
// class, where m is returned as it is.
func ClassModel(m policy.EnergyModel, fs sysfs.FS, c sysfs.CPUClasses) (_ policy.EnergyModel, from string) {
	if !c.Hybrid() {
		return m, ""
	}
	if cost, ok := fs.ClassEnergyFromEM(c); ok {
		return m.WithClasses(cost), "the kernel's energy model (debugfs energy_model)"
	}
	cost := make([]float64, len(c.Classes))
	for i, cl := range c.Classes {
		cost[i] = policy.ClassCostFor(string(c.Vendor), cl.Name)
	}
	return m.WithClasses(cost), "published figures (an estimate; docs/HYBRID-PLACEMENT.md)"
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
