package policy

import (
	"reflect"
	"testing"
)

// Topologies as literals. snbLaptop is the seed's Sandy Bridge laptop, 4
// cores × 2 threads, Intel numbering (siblings n and n+4; patch 17's test
// machine). twoCPU is this CI machine: 2 cores, no SMT, one package.
var (
	snbLaptop = NewTopology(
		[][]int{{0, 4}, {1, 5}, {2, 6}, {3, 7}},
		[][]int{{0, 1, 2, 3, 4, 5, 6, 7}},
	)
	twoCPU  = NewTopology([][]int{{0}, {1}}, [][]int{{0, 1}})
	twoSock = NewTopology(
		[][]int{{0, 8}, {1, 9}, {2, 10}, {3, 11}, {4, 12}, {5, 13}, {6, 14}, {7, 15}},
		[][]int{{0, 1, 2, 3, 8, 9, 10, 11}, {4, 5, 6, 7, 12, 13, 14, 15}},
	)
)

func seq(a, b int) []int {
	var s []int
	for i := a; i <= b; i++ {
		s = append(s, i)
	}
	return s
}

func TestNewTopologyOrdersAndGroups(t *testing.T) {
	got := NewTopology([][]int{{5, 1}, {0, 4}}, [][]int{{0, 1, 4, 5}})
	want := Topology{Packages: []Package{{Cores: []Core{{Threads: []int{0, 4}}, {Threads: []int{1, 5}}}}}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %+v, want %+v", got, want)
	}
}

func TestPlanPlacement(t *testing.T) {
	tests := []struct {
		name       string
		topo       Topology
		allowed    []int
		policy     Policy
		loads      []Load
		wantPolicy Policy
		wantSet    []int // every workload's CPUs
	}{
		// performance spreads
		{"performance gives all allowed CPUs", snbLaptop, seq(0, 7), Performance,
			[]Load{{Name: "a", Util: 0.1}, {Name: "b", Util: 3}}, Performance, seq(0, 7)},
		{"performance honours the allowed set", snbLaptop, []int{1, 2, 5}, Performance,
			[]Load{{Name: "a", Util: 0.1}}, Performance, []int{1, 2, 5}},
		// powersaving packs threads
		{"powersaving packs two light loads onto one CPU", twoCPU, []int{0, 1}, Powersaving,
			[]Load{{Name: "a", Util: 0.1}, {Name: "b", Util: 0.1}}, Powersaving, []int{0}},
		{"powersaving fills SMT siblings first", snbLaptop, seq(0, 7), Powersaving,
			[]Load{{Name: "a", Util: 0.8}, {Name: "b", Util: 0.9}}, Powersaving, []int{0, 4}},
		{"powersaving needs three threads", snbLaptop, seq(0, 7), Powersaving,
			[]Load{{Name: "a", Util: 2.5}}, Powersaving, []int{0, 1, 4}},
		{"powersaving stays in one socket", twoSock, seq(0, 15), Powersaving,
			[]Load{{Name: "a", Util: 5}}, Powersaving, []int{0, 1, 2, 8, 9}},
		{"powersaving keeps the CPU a workload already has", twoCPU, []int{0, 1}, Powersaving,
			[]Load{{Name: "a", Util: 0.1, Current: []int{1}}}, Powersaving, []int{1}},
		// balance packs cores, 60 % each
		{"balance uses one whole core for a light load", snbLaptop, seq(0, 7), Balance,
			[]Load{{Name: "a", Util: 0.3}}, Balance, []int{0, 4}},
		{"balance needs two cores above 60 %", snbLaptop, seq(0, 7), Balance,
			[]Load{{Name: "a", Util: 0.7}}, Balance, []int{0, 1, 4, 5}},
		// saturation and race to idle
		{"a saturated workload grows at once", twoCPU, []int{0, 1}, Powersaving,
			[]Load{{Name: "a", Util: 0.95, Current: []int{0}}}, Powersaving, []int{0, 1}},
		{"overload falls back to performance", twoCPU, []int{0, 1}, Powersaving,
			[]Load{{Name: "a", Util: 1.5}, {Name: "b", Util: 1}}, Performance, []int{0, 1}},
		{"balance overload falls back to performance", snbLaptop, seq(0, 7), Balance,
			[]Load{{Name: "a", Util: 2.5}}, Performance, seq(0, 7)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := Input{Topology: tt.topo, Allowed: tt.allowed, Policy: tt.policy, Loads: tt.loads}
			got := PlanPlacement(in)
			if got.Policy != tt.wantPolicy {
				t.Errorf("policy = %q, want %q", got.Policy, tt.wantPolicy)
			}
			for _, l := range tt.loads {
				if !reflect.DeepEqual(got.CPUs[l.Name], tt.wantSet) {
					t.Errorf("%s → %v, want %v", l.Name, got.CPUs[l.Name], tt.wantSet)
				}
			}
			if !reflect.DeepEqual(got.Active, tt.wantSet) {
				t.Errorf("active = %v, want %v", got.Active, tt.wantSet)
			}
			if again := PlanPlacement(in); !reflect.DeepEqual(again, got) {
				t.Errorf("not deterministic: %+v vs %+v", again, got)
			}
		})
	}
}

func TestPlanPlacementNoLoads(t *testing.T) {
	got := PlanPlacement(Input{Topology: twoCPU, Allowed: []int{0, 1}, Policy: Powersaving})
	if len(got.CPUs) != 0 || got.Active != nil || got.Policy != Powersaving {
		t.Fatalf("got %+v, want an empty plan", got)
	}
}
