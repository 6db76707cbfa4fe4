package sysfs

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"strconv"
	"strings"
)

// CPUInfo describes one online logical CPU, read from
// <root>/devices/system/cpu/cpuN/ (see the kernel's
// Documentation/ABI/stable/sysfs-devices-system-cpu and
// Documentation/admin-guide/cputopology.rst). Every mask holds online CPUs
// only and always contains ID itself.
type CPUInfo struct {
	ID int // N of cpuN

	// Core is the CPU's SMT siblings: topology/core_cpus_list, else the
	// deprecated topology/thread_siblings_list, else {ID}.
	Core CPUSet
	// Cluster is topology/cluster_cpus_list (on x86 the L2-sharing CPUs),
	// else Core.
	Cluster CPUSet
	// LLC is the CPUs sharing the last-level cache: shared_cpu_list of the
	// highest-level Data or Unified cache/indexM/. Without cache
	// information it is NodeCPUs when the CPU is listed in a NUMA node
	// directory, else Package. This is the x86 MC scheduling-domain span.
	LLC CPUSet
	// Package is topology/package_cpus_list, else the deprecated
	// topology/core_siblings_list, else {ID}.
	Package CPUSet
	// PackageID is topology/physical_package_id, -1 if absent.
	PackageID int
	// Node is the N of the <root>/devices/system/node/nodeN/ whose cpulist
	// holds the CPU; 0 if no node directory lists it.
	Node int
	// NodeCPUs is that node's cpulist. With no node directories at all the
	// machine is one node and NodeCPUs is every online CPU (as on a kernel
	// without CONFIG_NUMA); a CPU missing from existing node directories
	// gets {ID}. This is the kernel's PKG scheduling-domain span.
	NodeCPUs CPUSet
	// NodeDistance is that node's row of the SLIT, nodeN/distance (local =
	// 10; one entry per node in node order); nil when absent or malformed.
	NodeDistance []int
	// Capacity is cpu_capacity, the CPU's compute capacity relative to the
	// biggest CPU (0..1024, SCHED_CAPACITY_SCALE); 1024 when absent.
	Capacity int
	// CurFreqKHz is cpufreq/scaling_cur_freq in kHz, 0 if absent.
	CurFreqKHz int64
	// MaxFreqKHz is cpufreq/scaling_max_freq (the policy cap) in kHz, else
	// cpufreq/cpuinfo_max_freq (the hardware maximum), 0 if both are absent.
	MaxFreqKHz int64
}

// CPUTopology is a snapshot of the online CPUs and their grouping. Read it
// again after every CPU hotplug uevent: offline CPUs have no topology.
type CPUTopology struct {
	Online CPUSet    // <root>/devices/system/cpu/online, cpulist
	CPUs   []CPUInfo // one per online CPU, ascending ID
}

// CPUTopology reads the topology of the online CPUs below the FS root.
//
// It fails when devices/system/cpu/online is missing or is not a valid
// cpulist, and when a topology, cache or node file exists but cannot be read
// or parsed (the error names the file; cpulist errors wrap ErrCPUList).
// Absent optional files take the kernel's defaults documented on CPUInfo, so
// an online CPU whose directory vanished in a hotplug race gets {ID} masks.
// Masks are intersected with Online, so CPUs that went offline never appear.
func (fsys FS) CPUTopology() (CPUTopology, error) {
	onlinePath := fsys.Path("devices/system/cpu/online")
	s, err := ReadAttr(onlinePath)
	if err != nil {
		return CPUTopology{}, fmt.Errorf("read online CPUs: %w", err)
	}
	online, err := ParseCPUList(s)
	if err != nil {
		return CPUTopology{}, &ParseError{Path: onlinePath, Err: err}
	}
	if online.IsEmpty() {
		return CPUTopology{}, &ParseError{Path: onlinePath, Err: errors.New("no online CPUs")}
	}
	nodes, err := fsys.topoNodes(online)
	if err != nil {
		return CPUTopology{}, err
	}
	t := CPUTopology{Online: online}
	for _, id := range online.List() {
		ci, err := fsys.topoCPU(id, online, nodes)
		if err != nil {
			return CPUTopology{}, err
		}
		t.CPUs = append(t.CPUs, ci)
	}
	return t, nil
}

// topoNode is one NUMA node directory.
type topoNode struct {
	id       int
	cpus     CPUSet // online CPUs only
	distance []int  // nodeN/distance, nil if absent or malformed
}

// topoNodes reads <root>/devices/system/node/nodeN/cpulist for every node,
// ascending N. A missing node directory gives no nodes.
func (fsys FS) topoNodes(online CPUSet) ([]topoNode, error) {
	dir := fsys.Path("devices/system/node")
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", dir, err)
	}
	var out []topoNode
	for _, e := range entries {
		n, ok := strings.CutPrefix(e.Name(), "node")
		if !ok {
			continue
		}
		id, err := strconv.Atoi(n)
		if err != nil || id < 0 {
			continue
		}
		cpus, ok, err := topoReadList(dir + "/" + e.Name() + "/cpulist")
		if err != nil {
			return nil, err
		}
		if !ok {
			continue
		}
		out = append(out, topoNode{id: id, cpus: cpus.Intersect(online), distance: topoReadInts(dir + "/" + e.Name() + "/distance")})
	}
	slices.SortFunc(out, func(a, b topoNode) int { return a.id - b.id })
	return out, nil
}

func (fsys FS) topoCPU(id int, online CPUSet, nodes []topoNode) (CPUInfo, error) {
	dir := fsys.Path("devices/system/cpu", "cpu"+strconv.Itoa(id))
	self := NewCPUSet(id)
	ci := CPUInfo{ID: id, PackageID: -1, Capacity: 1024}

	// mask reads the first present file among names, restricted to online
	// CPUs and always holding the CPU itself.
	mask := func(def CPUSet, names ...string) (CPUSet, error) {
		for _, name := range names {
			set, ok, err := topoReadList(dir + "/" + name)
			if err != nil {
				return CPUSet{}, err
			}
			if ok {
				return set.Intersect(online).Union(self), nil
			}
		}
		return def, nil
	}
	var err error
	if ci.Core, err = mask(self, "topology/core_cpus_list", "topology/thread_siblings_list"); err != nil {
		return CPUInfo{}, err
	}
	if ci.Cluster, err = mask(ci.Core, "topology/cluster_cpus_list"); err != nil {
		return CPUInfo{}, err
	}
	if ci.Package, err = mask(self, "topology/package_cpus_list", "topology/core_siblings_list"); err != nil {
		return CPUInfo{}, err
	}
	if v, ok, err := topoReadInt(dir + "/topology/physical_package_id"); err != nil {
		return CPUInfo{}, err
	} else if ok {
		ci.PackageID = int(v)
	}

	ci.NodeCPUs = self
	inNode := false
	for _, n := range nodes {
		if n.cpus.Contains(id) {
			ci.Node, ci.NodeCPUs, ci.NodeDistance, inNode = n.id, n.cpus, n.distance, true
			break
		}
	}
	if len(nodes) == 0 {
		ci.NodeCPUs = online
	}

	llc, ok, err := topoLLC(dir + "/cache")
	switch {
	case err != nil:
		return CPUInfo{}, err
	case ok:
		ci.LLC = llc.Intersect(online).Union(self)
	case inNode:
		ci.LLC = ci.NodeCPUs
	default:
		ci.LLC = ci.Package
	}

	if v, ok, err := topoReadInt(dir + "/cpu_capacity"); err != nil {
		return CPUInfo{}, err
	} else if ok {
		ci.Capacity = int(v)
	}
	if v, ok, err := topoReadInt(dir + "/cpufreq/scaling_cur_freq"); err != nil {
		return CPUInfo{}, err
	} else if ok {
		ci.CurFreqKHz = v
	}
	for _, name := range []string{"scaling_max_freq", "cpuinfo_max_freq"} {
		v, ok, err := topoReadInt(dir + "/cpufreq/" + name)
		if err != nil {
			return CPUInfo{}, err
		}
		if ok {
			ci.MaxFreqKHz = v
			break
		}
	}
	return ci, nil
}

// topoLLC returns shared_cpu_list of the highest-level Data or Unified
// cache below dir (cpuN/cache); ok is false without such a cache.
func topoLLC(dir string) (set CPUSet, ok bool, err error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return CPUSet{}, false, nil
	}
	if err != nil {
		return CPUSet{}, false, fmt.Errorf("list %s: %w", dir, err)
	}
	best := -1
	for _, e := range entries {
		if !strings.HasPrefix(e.Name(), "index") {
			continue
		}
		idx := dir + "/" + e.Name()
		typ, err := ReadAttr(idx + "/type")
		if err != nil || (typ != "Data" && typ != "Unified") {
			continue // Instruction caches, or an entry without a type
		}
		level, lok, err := topoReadInt(idx + "/level")
		if err != nil {
			return CPUSet{}, false, err
		}
		if !lok || int(level) <= best {
			continue
		}
		shared, sok, err := topoReadList(idx + "/shared_cpu_list")
		if err != nil {
			return CPUSet{}, false, err
		}
		if !sok {
			continue
		}
		best, set, ok = int(level), shared, true
	}
	return set, ok, nil
}

// topoReadList reads a cpulist attribute; ok is false when it is absent.
func topoReadList(path string) (set CPUSet, ok bool, err error) {
	s, err := ReadAttr(path)
	if errors.Is(err, fs.ErrNotExist) {
		return CPUSet{}, false, nil
	}
	if err != nil {
		return CPUSet{}, false, err
	}
	set, err = ParseCPUList(s)
	if err != nil {
		return CPUSet{}, false, &ParseError{Path: path, Err: err}
	}
	return set, true, nil
}

// topoReadInt reads a decimal attribute; ok is false when it is absent.
func topoReadInt(path string) (v int64, ok bool, err error) {
	v, err = ReadIntAttr(path)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, err
	}
	return v, true, nil
}

// Cores returns the distinct Core (SMT sibling) sets, ordered by first CPU.
func (t CPUTopology) Cores() []CPUSet {
	return t.distinct(func(c CPUInfo) CPUSet { return c.Core })
}

// Clusters returns the distinct Cluster sets, ordered by first CPU.
func (t CPUTopology) Clusters() []CPUSet {
	return t.distinct(func(c CPUInfo) CPUSet { return c.Cluster })
}

// LLCs returns the distinct last-level-cache sets, ordered by first CPU.
func (t CPUTopology) LLCs() []CPUSet {
	return t.distinct(func(c CPUInfo) CPUSet { return c.LLC })
}

// Packages returns the distinct Package sets, ordered by first CPU.
func (t CPUTopology) Packages() []CPUSet {
	return t.distinct(func(c CPUInfo) CPUSet { return c.Package })
}

// Nodes returns the distinct NUMA node CPU sets, ordered by first CPU.
func (t CPUTopology) Nodes() []CPUSet {
	return t.distinct(func(c CPUInfo) CPUSet { return c.NodeCPUs })
}

// CPU returns the CPUInfo of an online CPU, and false for any other id.
func (t CPUTopology) CPU(id int) (CPUInfo, bool) {
	i, ok := slices.BinarySearchFunc(t.CPUs, id, func(c CPUInfo, id int) int { return c.ID - id })
	if !ok {
		return CPUInfo{}, false
	}
	return t.CPUs[i], true
}

func (t CPUTopology) distinct(get func(CPUInfo) CPUSet) []CPUSet {
	var out []CPUSet
	for _, c := range t.CPUs {
		s := get(c)
		if !slices.ContainsFunc(out, s.Equal) {
			out = append(out, s)
		}
	}
	slices.SortStableFunc(out, func(a, b CPUSet) int { return a.First() - b.First() })
	return out
}

// topoReadInts reads a file of space-separated decimals (nodeN/distance);
// nil when absent or malformed.
func topoReadInts(path string) []int {
	s, err := ReadAttr(path)
	if err != nil {
		return nil
	}
	var out []int
	for _, f := range strings.Fields(s) {
		v, err := strconv.Atoi(f)
		if err != nil {
			return nil
		}
		out = append(out, v)
	}
	return out
}
