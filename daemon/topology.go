package daemon

import (
	"slices"

	"github.com/schedpolicyd/schedpolicyd/daemon/snapshot"
	"github.com/schedpolicyd/schedpolicyd/policy"
	"github.com/schedpolicyd/schedpolicyd/sysfs"
)

// cpuView is what the loop knows of the CPUs, as last read
// (Daemon.readTopology): the online ones, the sched domains the balancer
// plans on, the efficiency classes, and the Topology and CPUClasses
// properties published.
type cpuView struct {
	allowed   sysfs.CPUSet             // the online CPUs
	topo      policy.Topology          // their sched domains
	classes   sysfs.CPUClasses         // their efficiency classes
	topoProp  []snapshot.TopologyEntry // the Topology property (topologyEntries)
	classProp []snapshot.CPUClassEntry // the CPUClasses property (classEntries)
	// classesSaid are the efficiency classes last logged, as update
	// returns them.
	classesSaid string
}

// update takes a new reading: t, the sched domains topo built from it and
// its classes. When the classes differ from the last ones said, say is
// true and said is them in words ("NAME=CPULIST …"), for the caller to log.
func (v *cpuView) update(t sysfs.CPUTopology, topo policy.Topology, classes sysfs.CPUClasses) (said string, say bool) {
	var s string
	for _, cl := range classes.Classes {
		s += cl.Name + "=" + cl.CPUs.String() + " "
	}
	if s != v.classesSaid {
		v.classesSaid = s
		said, say = s[:max(0, len(s)-1)], true
	}
	v.classProp = classEntries(classes, v.classProp)
	v.classes = classes
	v.topo = topo
	v.topoProp = topologyEntries(t, v.topoProp)
	v.allowed = t.Online
	return said, say
}

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
