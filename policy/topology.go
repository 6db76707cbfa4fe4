package policy

import (
	"errors"
	"fmt"
	"slices"
)

// CPUDesc describes one online logical CPU as the balancer needs it. The
// group fields are identifiers: two CPUs share a core, cluster, LLC, package
// or node exactly when the field is equal. Any integers will do; the natural
// choice is the first CPU of the matching sysfs mask (core_cpus_list,
// cluster_cpus_list, the LLC's shared_cpu_list, package_cpus_list,
// nodeN/cpulist), since core_id is only unique within a package
// (Documentation/admin-guide/cputopology.rst).
type CPUDesc struct {
	ID      int // N of /sys/devices/system/cpu/cpuN
	Core    int // SMT siblings share it (core_cpus_list)
	Cluster int // CPUs sharing an L2 (cluster_cpus_list); = Core when absent
	LLC     int // CPUs sharing the last-level cache (x86 MC span)
	Package int // physical package (package_cpus_list)
	Node    int // NUMA node number (N of nodeN); the kernel's PKG span
	// Capacity is cpu_capacity, 0..1024 (SCHED_CAPACITY_SCALE); 0 means
	// absent and counts as 1024. It is used only when the CPUs' capacities
	// differ (big.LITTLE, hybrid P/E cores): a symmetric machine gets the
	// 2013 arithmetic, since cpu_capacity has no SMT discount
	// (docs/SOURCES.md §3).
	Capacity int
	// Capped reports that the CPU runs frequency-capped (scaling_cur_freq
	// well below the maximum). Packing prefers CPUs that are not capped.
	Capped bool
	// Class is the CPU's efficiency class, 0 for the most efficient
	// (LP E-cores, E-cores, little) and rising towards the most
	// performant (P-cores, big); every CPU of a homogeneous machine is
	// in class 0. With more than one class the balancer packs by class
	// (PlanPlacement, "Efficiency classes") and the CPUs' Capacity should
	// be their class's capacity. Negative is invalid.
	Class int
	// Perf orders CPUs inside a class: CPPC highest_perf or
	// amd_pstate_prefcore_ranking (favoured cores rank higher); 0
	// unknown. On a hybrid topology ties between otherwise equal groups
	// go to the highest Perf for the performance cores first, to the
	// lowest for the efficient ones first; it never makes a class.
	Perf int
	// Reserved marks a CPU another owner confines work to by itself
	// (intel-lpmd's LP E-cores): the power-aware policies pack nothing
	// onto it while any other CPU is allowed; performance still gives
	// it to every workload.
	Reserved bool
	// Distance is the node's row of the SLIT (nodeN/distance), indexed by
	// node number; local is usually 10. Nil means unknown: every other
	// node is at one and the same remote distance. Only the row of the
	// first CPU seen on each node is used.
	Distance []int
}

// Topology is an immutable, validated machine description built by
// BuildTopology. The zero value is an empty machine on which every plan is
// empty. Safe for concurrent use.
type Topology struct {
	cpus  []CPUDesc // ascending ID
	dense []int32   // ID → index into cpus (-1: none), when IDs are dense enough
	asym  bool      // capacities differ
	// nclass is the number of efficiency classes (distinct Class values);
	// with more than one the machine is hybrid.
	nclass int
	full   *tree // the domain tree over every CPU, built once
	// reserved is the Reserved CPUs' IDs, ascending.
	reserved []int
	// homes prices packing plans' homes (WithHomes); nil: class order.
	homes *homeSet
}

// ErrTopology is wrapped by BuildTopology's errors.
var ErrTopology = errors.New("invalid topology")

// BuildTopology validates the CPU descriptions and precomputes the
// scheduling-domain tree over all of them (see Domains). CPUs may come in
// any order. It fails, wrapping ErrTopology, on a negative or duplicate ID
// a capacity outside 0..1024 or a negative class.
func BuildTopology(cpus []CPUDesc) (Topology, error) {
	cs := slices.Clone(cpus)
	slices.SortFunc(cs, func(a, b CPUDesc) int { return a.ID - b.ID })
	var caps []int
	for i, c := range cs {
		if c.ID < 0 {
			return Topology{}, fmt.Errorf("%w: negative CPU id %d", ErrTopology, c.ID)
		}
		if i > 0 && cs[i-1].ID == c.ID {
			return Topology{}, fmt.Errorf("%w: CPU %d listed twice", ErrTopology, c.ID)
		}
		if c.Capacity < 0 || c.Capacity > capacityScale {
			return Topology{}, fmt.Errorf("%w: CPU %d capacity %d not in 0..%d", ErrTopology, c.ID, c.Capacity, capacityScale)
		}
		if c.Class < 0 {
			return Topology{}, fmt.Errorf("%w: CPU %d class %d is negative", ErrTopology, c.ID, c.Class)
		}
		if c.Capacity == 0 {
			cs[i].Capacity = capacityScale
		}
		caps = append(caps, cs[i].Capacity)
	}
	t := Topology{cpus: cs}
	if n := len(cs); n > 0 && cs[n-1].ID < 4*n+1024 {
		t.dense = make([]int32, cs[n-1].ID+1)
		for i := range t.dense {
			t.dense[i] = -1
		}
		for i, c := range cs {
			t.dense[c.ID] = int32(i)
		}
	}
	for _, c := range caps {
		if c != caps[0] {
			t.asym = true
		}
	}
	classes := map[int]bool{}
	for _, c := range cs {
		classes[c.Class] = true
	}
	t.nclass = len(classes)
	for _, c := range cs {
		if c.Reserved {
			t.reserved = append(t.reserved, c.ID)
		}
	}
	t.full = buildTree(t, nil)
	return t, nil
}

// MustBuildTopology is BuildTopology for literals in tests and presets; it
// panics on error.
func MustBuildTopology(cpus []CPUDesc) Topology {
	t, err := BuildTopology(cpus)
	if err != nil {
		panic(err)
	}
	return t
}

// CPUs returns the CPU descriptions, ascending ID (a copy).
func (t Topology) CPUs() []CPUDesc { return slices.Clone(t.cpus) }

// NumCPUs is the number of CPUs.
func (t Topology) NumCPUs() int { return len(t.cpus) }

// Asymmetric reports whether the CPUs' capacities differ, in which case
// group capacity comes from cpu_capacity instead of smt_gain.
func (t Topology) Asymmetric() bool { return t.asym }

// Hybrid reports whether the CPUs are of more than one efficiency class
// (CPUDesc.Class).
func (t Topology) Hybrid() bool { return t.nclass > 1 }

// Reserved returns the CPUs marked CPUDesc.Reserved, ascending (a copy).
func (t Topology) Reserved() []int { return slices.Clone(t.reserved) }

// index returns the position of CPU id in t.cpus, or -1.
func (t Topology) index(id int) int {
	if t.dense != nil {
		if id < 0 || id >= len(t.dense) {
			return -1
		}
		return int(t.dense[id])
	}
	i, ok := slices.BinarySearchFunc(t.cpus, id, func(c CPUDesc, id int) int { return c.ID - id })
	if !ok {
		return -1
	}
	return i
}
