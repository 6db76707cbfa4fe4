package policy

import (
	"errors"
	"reflect"
	"slices"
	"testing"
)

func TestDomainsCapacity2013(t *testing.T) {
	tests := []struct {
		name       string
		topo       Topology
		levels     []string
		rootPower  int
		rootCap    int
		groupCaps  []int // of the root's groups
		groupPower int   // of the first group
	}{
		{"4C/8T laptop: 4712 → sd_capacity 5", snbLaptop, []string{LevelSMT, LevelMC}, 4712, 5, []int{1, 1, 1, 1}, 1178},
		{"2S NHM EP: nodes of 4C/8T", nhmEP, []string{LevelSMT, LevelMC, LevelNUMA}, 9424, 9, []int{5, 5}, 4712},
		{"2 CPUs, no SMT: one MC domain", twoCPU, []string{LevelMC}, 2048, 2, []int{1, 1}, 1024},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.topo.Levels(nil); !reflect.DeepEqual(got, tt.levels) {
				t.Errorf("levels %v, want %v", got, tt.levels)
			}
			d, ok := tt.topo.Domains(nil)
			if !ok {
				t.Fatal("no domains")
			}
			if d.Power != tt.rootPower || d.Capacity != tt.rootCap {
				t.Errorf("root power %d capacity %d, want %d %d", d.Power, d.Capacity, tt.rootPower, tt.rootCap)
			}
			var caps []int
			for _, g := range d.Groups {
				caps = append(caps, g.GroupCapacity)
			}
			if !reflect.DeepEqual(caps, tt.groupCaps) || d.Groups[0].Power != tt.groupPower {
				t.Errorf("group capacities %v power %d, want %v %d", caps, d.Groups[0].Power, tt.groupCaps, tt.groupPower)
			}
		})
	}
}

func TestCapacityArithmetic(t *testing.T) {
	for _, tt := range []struct{ w, power int }{{1, 1024}, {2, 589}, {3, 392}, {4, 294}} {
		if got := cpuPower(capacityScale, tt.w); got != tt.power {
			t.Errorf("cpuPower(1024, %d) = %d, want %d", tt.w, got, tt.power)
		}
	}
	// fix_small_capacity: an SMT4 thread (294 → 0) counts 1 in an SMT domain only.
	if groupCapacity(294, true) != 1 || groupCapacity(294, false) != 0 {
		t.Error("fix_small_capacity")
	}
	// DIV_ROUND_CLOSEST: 10C/20T = 11780 → 12 (rounds half up, not down).
	if got := divRoundClosest(11780, capacityScale); got != 12 {
		t.Errorf("DIV_ROUND_CLOSEST(11780) = %d, want 12", got)
	}
}

// TestDomainsDegenerateAndNUMA: levels are removed when they add no group;
// NUMA levels follow distinct distances; MC below PKG on multi-LLC parts;
// asymmetric capacities come from cpu_capacity.
func TestDomainsDegenerateAndNUMA(t *testing.T) {
	// 4 nodes, 2 LLCs per node of 2 cores, no SMT; distances 10/16/32.
	var cs []CPUDesc
	row := func(n int) []int {
		r := make([]int, 4)
		for j := range r {
			switch {
			case j == n:
				r[j] = 10
			case j/2 == n/2:
				r[j] = 16
			default:
				r[j] = 32
			}
		}
		return r
	}
	for id := range 16 {
		node := id / 4
		cs = append(cs, CPUDesc{ID: id, Core: id, Cluster: id, LLC: id / 2 * 2, Package: node, Node: node, Distance: row(node)})
	}
	topo := MustBuildTopology(cs)
	want := []string{LevelMC, LevelPKG, LevelNUMA, LevelNUMA}
	if got := topo.Levels(nil); !reflect.DeepEqual(got, want) {
		t.Errorf("levels %v, want %v", got, want)
	}
	// Restricting to one LLC leaves a single MC domain.
	if got := topo.Levels([]int{2, 3}); !reflect.DeepEqual(got, []string{LevelMC}) {
		t.Errorf("levels over {2,3}: %v, want [MC]", got)
	}
	// big.LITTLE: 4 little (446) + 2 big (1024) CPUs in one cluster each.
	var bl []CPUDesc
	for id := range 6 {
		c := CPUDesc{ID: id, Core: id, Cluster: 0, LLC: 0, Package: 0, Node: 0, Capacity: 446}
		if id >= 4 {
			c.Cluster, c.Capacity = 4, 1024
		}
		bl = append(bl, c)
	}
	asym := MustBuildTopology(bl)
	d, _ := asym.Domains(nil)
	if !asym.Asymmetric() || d.Power != 4*446+2*1024 || d.Groups[0].GroupCapacity != 2 || d.Groups[1].GroupCapacity != 2 {
		t.Errorf("big.LITTLE domains: %+v", d)
	}
}

func TestBuildTopologyErrors(t *testing.T) {
	for _, cs := range [][]CPUDesc{
		{{ID: -1}},
		{{ID: 1}, {ID: 1}},
		{{ID: 0, Capacity: 2048}},
	} {
		if _, err := BuildTopology(cs); !errors.Is(err, ErrTopology) {
			t.Errorf("BuildTopology(%+v) err = %v, want ErrTopology", cs, err)
		}
	}
}

func TestPELT(t *testing.T) {
	var a UtilAverage
	a = a.Update(0, 0, 0)
	// A fully busy CPU for one half-life: half way to 1.
	a = a.Update(DefaultHalfLife, DefaultHalfLife, DefaultHalfLife)
	if a.Util != 0.5 {
		t.Fatalf("after one half-life at 1 CPU: %v, want 0.5", a.Util)
	}
	// Counter reset counts as idle.
	b := a.Update(0, DefaultHalfLife, DefaultHalfLife)
	if b.Util != 0.25 {
		t.Fatalf("after a counter reset: %v, want 0.25", b.Util)
	}
}

// The root of a set is its smallest member whatever the order of unions,
// which buildTree relies on to sort parts by ID.
func TestUnionFindRootIsSmallest(t *testing.T) {
	u := newUnionFind(6)
	u.union(5, 3)
	u.union(4, 5)
	u.union(3, 4) // already joined
	u.union(2, 1)
	got := make([]int32, 6)
	for k := range got {
		got[k] = u.find(int32(k))
	}
	want := []int32{0, 1, 1, 3, 3, 3}
	if !slices.Equal(got, want) {
		t.Fatalf("roots %v, want %v", got, want)
	}
	u.union(4, 1)
	for k, w := range []int32{0, 1, 1, 1, 1, 1} {
		if r := u.find(int32(k)); r != w {
			t.Errorf("find(%d) = %d after joining {1,2} and {3,4,5}, want %d", k, r, w)
		}
	}
}
