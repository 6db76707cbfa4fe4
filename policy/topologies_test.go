package policy

// Topologies as literals, reused across tests. Numbering is Linux's on
// Intel parts: the second thread of core c is CPU c + number of cores.

// intelSMT builds sockets × cores × 2 threads, one LLC and one NUMA node per
// socket (distance 10 local, 21 remote).
func intelSMT(sockets, cores int) Topology {
	n := sockets * cores
	var cs []CPUDesc
	for id := 0; id < 2*n; id++ {
		core := id % n
		pkg := core / cores
		dist := make([]int, sockets)
		for j := range dist {
			dist[j] = 21
		}
		dist[pkg] = 10
		cs = append(cs, CPUDesc{ID: id, Core: core, Cluster: core, LLC: pkg, Package: pkg, Node: pkg, Distance: dist})
	}
	return MustBuildTopology(cs)
}

var (
	// snbLaptop is the seed's Sandy Bridge laptop, 4 cores × 2 threads
	// (patch 17's test machine).
	snbLaptop = intelSMT(1, 4)
	// nhmEP is a 2-socket Nehalem EP, 4 cores × 2 threads per socket.
	nhmEP = intelSMT(2, 4)
	// snbEP is the seed's 2-socket Sandy Bridge EP, 8 cores × 2 threads.
	snbEP = intelSMT(2, 8)
	// twoCPU is this CI machine: 2 cores, no SMT, one package.
	twoCPU = MustBuildTopology([]CPUDesc{{ID: 0, Core: 0, Cluster: 0}, {ID: 1, Core: 1, Cluster: 1}})
)

func seq(a, b int) []int {
	var s []int
	for i := a; i <= b; i++ {
		s = append(s, i)
	}
	return s
}
