package daemon

import (
	"slices"

	"github.com/schedpolicyd/schedpolicyd/daemon/snapshot"
	"github.com/schedpolicyd/schedpolicyd/policy"
	"github.com/schedpolicyd/schedpolicyd/sysfs"
)

// cappedRatio: a CPU whose scaling_cur_freq is below 90 % of its maximum
// counts as frequency-capped; packing prefers CPUs that are not.
const cappedRatio = 0.9

// CPUDescs maps a topology read from sysfs to the balancer's description:
// group ids are the first CPU of each kernel mask (core_cpus, cluster, LLC
// shared_cpu_list, package_cpus), plus the NUMA node and its distance row,
// cpu_capacity, and whether the CPU is frequency-capped now. Used by the
// daemon and by `schedpolicyd plan`.
func CPUDescs(t sysfs.CPUTopology) []policy.CPUDesc {
	out := make([]policy.CPUDesc, 0, len(t.CPUs))
	for _, c := range t.CPUs {
		out = append(out, policy.CPUDesc{
			ID: c.ID, Core: c.Core.First(), Cluster: c.Cluster.First(), LLC: c.LLC.First(),
			Package: c.Package.First(), Node: c.Node, Capacity: c.Capacity,
			Capped:   c.CurFreqKHz > 0 && c.MaxFreqKHz > 0 && float64(c.CurFreqKHz) < cappedRatio*float64(c.MaxFreqKHz),
			Distance: c.NodeDistance,
		})
	}
	return out
}

// topologyEntries maps a topology read from sysfs to the Topology
// property (groups named as in CPUDescs), one entry per online CPU in ascending order. When the result
// equals prev, prev itself is returned: the published slice stays the same
// from one snapshot to the next until a hotplug changes it, so comparing
// it before each PropertiesChanged costs nothing (reflect.DeepEqual stops
// at the same backing array).
func topologyEntries(t sysfs.CPUTopology, prev []snapshot.TopologyEntry) []snapshot.TopologyEntry {
	out := make([]snapshot.TopologyEntry, 0, len(t.CPUs))
	for _, c := range t.CPUs {
		out = append(out, snapshot.TopologyEntry{
			CPU: uint32(c.ID), Package: uint32(c.Package.First()),
			LLC: uint32(c.LLC.First()), Core: uint32(c.Core.First()),
		})
	}
	if slices.Equal(out, prev) {
		return prev
	}
	return out
}
