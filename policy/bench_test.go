package policy

import (
	"fmt"
	"slices"
	"testing"
)

// benchInput is a daemon-like decision: W workloads whose utilisation adds
// up to half the machine (so powersaving really packs), one runnable
// thread each, currently placed where the previous decision put them.
func benchInput(topo Topology, w int) Input {
	n := topo.NumCPUs()
	loads := make([]Load, w)
	for i := range loads {
		// deterministic spread of sizes around the mean n/2/w
		f := 0.5 + float64((i*7919)%100)/100
		loads[i] = Load{Name: fmt.Sprintf("w%05d", i), Util: f * float64(n) / 2 / float64(w), Threads: 1}
	}
	in := Input{Topology: topo, Allowed: all(topo), Policy: Powersaving, Loads: loads, DisableLazy: true}
	p := PlanPlacement(in)
	return feed(in, p)
}

var benchTopos = []struct {
	cpus int
	topo func() Topology
}{
	{2, func() Topology { return twoCPU }},
	{64, func() Topology { return intelSMT(2, 16) }},
	{1024, func() Topology { return intelSMT(8, 64) }},
	{4096, func() Topology { return intelSMT(32, 64) }},
}

// BenchmarkPlan measures one decision: cpus × workloads. Run with
// `make bench`, which also writes docs/BENCHMARKS.md.
func BenchmarkPlan(b *testing.B) {
	for _, bt := range benchTopos {
		topo := bt.topo()
		for _, w := range []int{10, 1000, 10000} {
			in := benchInput(topo, w)
			b.Run(fmt.Sprintf("cpus=%d/workloads=%d", bt.cpus, w), func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					PlanPlacement(in)
				}
			})
		}
	}
}

// BenchmarkBuildTopology measures building the domain tree.
func BenchmarkBuildTopology(b *testing.B) {
	descs := intelSMT(32, 64).CPUs()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := BuildTopology(descs); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkPlanClasses is BenchmarkPlan's decision under powersaving with
// every third workload focused (placed as balance places it), beside the
// same decision without classes: the cost of planning a second policy.
func BenchmarkPlanClasses(b *testing.B) {
	for _, bt := range benchTopos[:3] {
		topo := bt.topo()
		for _, w := range []int{10, 1000} {
			in := benchInput(topo, w)
			mixed := in
			mixed.Loads = slices.Clone(in.Loads)
			for i := range mixed.Loads {
				if i%3 == 0 {
					mixed.Loads[i].Class = ClassFocused
				}
			}
			for _, c := range []struct {
				name string
				in   Input
			}{{"none", in}, {"focused", mixed}} {
				b.Run(fmt.Sprintf("cpus=%d/workloads=%d/classes=%s", bt.cpus, w, c.name), func(b *testing.B) {
					b.ReportAllocs()
					for b.Loop() {
						PlanPlacement(c.in)
					}
				})
			}
		}
	}
}

// BenchmarkPlanHybrid measures one decision on hybrid machines: the
// i7-1260P and a 1024-CPU machine of half P-cores with SMT and half
// E-cores in 4-core modules, with a focused app, background work and
// services (each policy planned on its own, the focused app's cores left
// out of the others').
func BenchmarkPlanHybrid(b *testing.B) {
	big := func() Topology {
		var cs []CPUDesc
		for id := range 1024 {
			c := CPUDesc{ID: id, Core: id / 2 * 2, Cluster: id / 2 * 2, LLC: id / 128 * 128, Class: 1, Capacity: 1024}
			if id >= 512 {
				c = CPUDesc{ID: id, Core: id, Cluster: id / 4 * 4, LLC: id / 128 * 128, Class: 0, Capacity: 580}
			}
			cs = append(cs, c)
		}
		return MustBuildTopology(cs)
	}()
	for _, bt := range []struct {
		cpus int
		topo Topology
	}{{16, adlP}, {1024, big}} {
		for _, w := range []int{10, 1000} {
			in := benchInput(bt.topo, w)
			in.Loads[0].Class = ClassFocused
			for i := 1; i < len(in.Loads); i++ {
				in.Loads[i].Class = []string{ClassBackground, ClassService, ClassApp}[i%3]
			}
			b.Run(fmt.Sprintf("cpus=%d/workloads=%d", bt.cpus, w), func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					PlanPlacement(in)
				}
			})
		}
	}
}
