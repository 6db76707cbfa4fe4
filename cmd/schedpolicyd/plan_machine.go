package main

// The machines `schedpolicyd plan` places on: a sysfs root read as the
// daemon reads it, or a preset described in Go, whose mock sysfs tree
// --write-sysfs writes.

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/schedpolicyd/schedpolicyd/daemon"
	"github.com/schedpolicyd/schedpolicyd/policy"
	"github.com/schedpolicyd/schedpolicyd/sysfs"
)

// planMachine is the machine a plan is made for.
type planMachine struct {
	name    string           // the preset's name or the sysfs root
	descs   []policy.CPUDesc // its CPUs, as the daemon converts them
	classes sysfs.CPUClasses // its efficiency classes; none for a preset
	model   policy.EnergyModel
	// costFrom says where the classes' costs come from
	// (daemon.ClassModel); "" for a preset.
	costFrom string
	// energy is the machine's own model and the bracketing ones
	// (daemon.MachineEnergy); zero for a preset.
	energy daemon.MachineModels
	topo   policy.Topology
}

// loadPlanMachine reads the machine of --topology preset or --sysfs-root
// root (exactly one is set). An unknown preset is a usageError; a tree
// that cannot be read, or a topology the balancer refuses, is another
// error.
func loadPlanMachine(preset, root string) (planMachine, error) {
	m := planMachine{name: preset, model: policy.SNBLaptop}
	if preset != "" {
		p, ok := presets[preset]
		if !ok {
			return planMachine{}, usagef("unknown preset %q (one of %s)", preset, strings.Join(presetNames(), ", "))
		}
		m.descs, m.model = p.cpus(), p.model
	} else {
		m.name = root
		fsys, err := sysfs.NewFS(root)
		if err != nil {
			return planMachine{}, err
		}
		if m.descs, m.classes, err = readMachine(fsys); err != nil {
			return planMachine{}, err
		}
		m.energy = daemon.MachineEnergy(modelFor(m.descs), fsys, m.classes)
		m.model, m.costFrom = m.energy.Model, m.energy.From
	}
	var err error
	if m.topo, err = policy.BuildTopology(m.descs); err != nil {
		return planMachine{}, err
	}
	// Packing plans fill the cheapest home for their load first, as the
	// daemon's do (daemon.readTopology).
	m.topo = m.topo.WithHomes(m.energy.Homes)
	return m, nil
}

// cpuDescsFromSysfs reads the topology under fsys and converts it as the
// daemon does (daemon.ClassedCPUDescs).
func cpuDescsFromSysfs(fsys sysfs.FS) ([]policy.CPUDesc, error) {
	descs, _, err := readMachine(fsys)
	return descs, err
}

// readMachine reads the topology and the efficiency classes under fsys.
func readMachine(fsys sysfs.FS) ([]policy.CPUDesc, sysfs.CPUClasses, error) {
	t, err := fsys.CPUTopology()
	if err != nil {
		return nil, sysfs.CPUClasses{}, err
	}
	classes := fsys.CPUClasses(t)
	return daemon.ClassedCPUDescs(t, classes), classes, nil
}

// modelFor picks the energy calibration for a machine read from sysfs: the
// server one for multi-package machines, the laptop one otherwise.
func modelFor(descs []policy.CPUDesc) policy.EnergyModel {
	pk := map[int]bool{}
	for _, d := range descs {
		pk[d.Package] = true
	}
	if len(pk) > 1 {
		return policy.SNBServer
	}
	return policy.SNBLaptop
}

// preset is a machine of the seed thread, described in Go; its mock sysfs
// tree under sysfs/testdata/topology/<name>/ is generated from it
// (sysfs/testdata/gen_topology.sh).
type preset struct {
	sockets, nodesPerSocket, llcsPerNode, coresPerLLC, threads int
	// distance(a, b) between nodes; nil: 10 local, 21 remote
	distance func(a, b int) int
	model    policy.EnergyModel
}

var presets = map[string]preset{
	// The seed's SNB laptop, 4 cores × HT (patch 17).
	"snb-laptop-4c8t": {sockets: 1, nodesPerSocket: 1, llcsPerNode: 1, coresPerLLC: 4, threads: 2, model: policy.SNBLaptop},
	// 2-socket Nehalem EP, 4 cores × HT per socket.
	"nhm-ep-2s4c2t": {sockets: 2, nodesPerSocket: 1, llcsPerNode: 1, coresPerLLC: 4, threads: 2, model: policy.SNBServer},
	// The seed's 2-socket SNB EP, 8 cores × HT per socket (patches 17, 18).
	"snb-ep-2s8c2t": {sockets: 2, nodesPerSocket: 1, llcsPerNode: 1, coresPerLLC: 8, threads: 2, model: policy.SNBServer},
	// Mike Galbraith's 4-node 40-core box (aim7 on the cover-letter
	// thread), no SMT.
	"numa-4n10c": {sockets: 4, nodesPerSocket: 1, llcsPerNode: 1, coresPerLLC: 10, threads: 1, model: policy.SNBServer},
	// Scale test: 32 sockets × 4 LLCs × 16 cores × HT = 4096 CPUs, two
	// NUMA distances (16 within a group of 8 sockets, 32 beyond).
	"big-4096": {sockets: 32, nodesPerSocket: 1, llcsPerNode: 4, coresPerLLC: 16, threads: 2, model: policy.SNBServer,
		distance: func(a, b int) int {
			switch {
			case a == b:
				return 10
			case a/8 == b/8:
				return 16
			}
			return 32
		}},
}

func presetNames() []string {
	var out []string
	for n := range presets {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

// cpus lays the machine out with Linux's Intel numbering: first thread of
// every core in order, then the second threads (sibling of c is c + cores).
func (p preset) cpus() []policy.CPUDesc {
	nodes := p.sockets * p.nodesPerSocket
	coresPerNode := p.llcsPerNode * p.coresPerLLC
	cores := nodes * coresPerNode
	dist := p.distance
	if dist == nil {
		dist = func(a, b int) int {
			if a == b {
				return 10
			}
			return 21
		}
	}
	rows := make([][]int, nodes)
	for a := range nodes {
		for b := range nodes {
			rows[a] = append(rows[a], dist(a, b))
		}
	}
	var out []policy.CPUDesc
	for t := range p.threads {
		for c := range cores {
			node := c / coresPerNode
			llc := c / p.coresPerLLC
			pkg := node / p.nodesPerSocket
			out = append(out, policy.CPUDesc{
				ID: t*cores + c, Core: c, Cluster: c,
				LLC: llc * p.coresPerLLC, Package: pkg * p.nodesPerSocket * coresPerNode, Node: node,
				Distance: rows[node],
			})
		}
	}
	return out
}

// writePresetTree writes the mock sysfs tree of preset (--write-sysfs
// dir). An unknown or missing preset is a usageError.
func writePresetTree(preset, dir string) error {
	p, ok := presets[preset]
	if !ok {
		return usagef("--write-sysfs needs --topology PRESET (one of %s)", strings.Join(presetNames(), ", "))
	}
	return writeSysfsTree(dir, p.cpus())
}

// writeSysfsTree writes a minimal kernel-shaped sysfs tree for the CPUs:
// cpu/online, per CPU topology/{core_cpus_list,thread_siblings_list,
// package_cpus_list,core_siblings_list,physical_package_id},
// cache/index3/{level,type,shared_cpu_list}, cpufreq/{scaling_cur_freq,
// scaling_max_freq}, and node/nodeN/{cpulist,distance}. Group ids must be
// the first CPU of their group (as cpus() makes them).
func writeSysfsTree(dir string, cpus []policy.CPUDesc) error {
	// Precompute masks per group for speed on big machines.
	maskOf := func(key func(policy.CPUDesc) int) map[int]string {
		groups := map[int][]int{}
		for _, c := range cpus {
			groups[key(c)] = append(groups[key(c)], c.ID)
		}
		out := map[int]string{}
		for k, ids := range groups {
			out[k] = sysfs.NewCPUSet(ids...).String()
		}
		return out
	}
	core := maskOf(func(c policy.CPUDesc) int { return c.Core })
	pkg := maskOf(func(c policy.CPUDesc) int { return c.Package })
	llc := maskOf(func(c policy.CPUDesc) int { return c.LLC })
	node := maskOf(func(c policy.CPUDesc) int { return c.Node })
	put := func(path, v string) error {
		p := filepath.Join(dir, path)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		return os.WriteFile(p, []byte(v+"\n"), 0o644)
	}
	var ids []int
	pkgNum := map[int]int{}
	for _, c := range cpus {
		ids = append(ids, c.ID)
		if _, ok := pkgNum[c.Package]; !ok {
			pkgNum[c.Package] = len(pkgNum)
		}
	}
	all := sysfs.NewCPUSet(ids...).String()
	for _, f := range []string{"online", "possible", "present"} {
		if err := put("devices/system/cpu/"+f, all); err != nil {
			return err
		}
	}
	for _, c := range cpus {
		d := fmt.Sprintf("devices/system/cpu/cpu%d/", c.ID)
		files := [][2]string{
			{"topology/core_cpus_list", core[c.Core]},
			{"topology/thread_siblings_list", core[c.Core]},
			{"topology/package_cpus_list", pkg[c.Package]},
			{"topology/core_siblings_list", pkg[c.Package]},
			{"topology/physical_package_id", strconv.Itoa(pkgNum[c.Package])},
			{"cache/index3/level", "3"},
			{"cache/index3/type", "Unified"},
			{"cache/index3/shared_cpu_list", llc[c.LLC]},
			{"cpufreq/scaling_cur_freq", "3000000"},
			{"cpufreq/scaling_max_freq", "3000000"},
		}
		for _, f := range files {
			if err := put(d+f[0], f[1]); err != nil {
				return err
			}
		}
	}
	seen := map[int]bool{}
	var nodes []int
	for _, c := range cpus {
		if !seen[c.Node] {
			seen[c.Node] = true
			nodes = append(nodes, c.Node)
			var row []string
			for _, v := range c.Distance {
				row = append(row, strconv.Itoa(v))
			}
			d := fmt.Sprintf("devices/system/node/node%d/", c.Node)
			if err := put(d+"cpulist", node[c.Node]); err != nil {
				return err
			}
			if err := put(d+"distance", strings.Join(row, " ")); err != nil {
				return err
			}
		}
	}
	return put("devices/system/node/online", sysfs.NewCPUSet(nodes...).String())
}
