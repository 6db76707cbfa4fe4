package policy

import (
	"math"
	"testing"
)

// TestEnergySeedTable: the model, run on the planner's plans for the seed's
// experiment, reproduces every value of patch 17's tables within ±10 % and
// their ordering powersaving ≤ balance ≤ performance.
func TestEnergySeedTable(t *testing.T) {
	tests := []struct {
		name  string
		topo  Topology
		model EnergyModel
		want  map[int][3]float64 // i → powersaving, balance, performance (W)
	}{
		{"SNB laptop 4C/8T", snbLaptop, SNBLaptop, map[int][3]float64{2: {40, 54, 54}, 4: {57, 64, 68}, 8: {68, 68, 68}}},
		{"SNB EP 2S×8C×2T", snbEP, SNBServer, map[int][3]float64{4: {190, 201, 238}, 8: {205, 241, 268}, 16: {271, 348, 376}}},
	}
	for _, tt := range tests {
		for i, want := range tt.want {
			var got [3]float64
			for k, pol := range []Policy{Powersaving, Balance, Performance} {
				p := PlanPlacement(Input{Topology: tt.topo, Allowed: all(tt.topo), Policy: pol, Loads: busyLoops(i)})
				got[k] = tt.model.Simulate(tt.topo, p, busyLoops(i)).Watts
				if dev := math.Abs(got[k]-want[k]) / want[k]; dev > 0.10 {
					t.Errorf("%s i=%d %s: %.1f W, seed %.0f W (%.1f %% off)", tt.name, i, pol, got[k], want[k], 100*dev)
				}
			}
			if got[0] > got[1]+1e-9 || got[1] > got[2]+1e-9 {
				t.Errorf("%s i=%d: %.1f/%.1f/%.1f W, want powersaving ≤ balance ≤ performance", tt.name, i, got[0], got[1], got[2])
			}
		}
	}
}

func TestEnergyExactLaptop(t *testing.T) {
	// The laptop calibration is exact except balance i=4, which the seed
	// says "may change in 57~68 Watt".
	p := PlanPlacement(Input{Topology: snbLaptop, Allowed: all(snbLaptop), Policy: Powersaving, Loads: busyLoops(2)})
	if w := SNBLaptop.Simulate(snbLaptop, p, busyLoops(2)).Watts; math.Abs(w-40) > 0.05 {
		t.Fatalf("powersaving i=2: %.2f W, want 40", w)
	}
	e := SNBLaptop.Simulate(snbLaptop, Plan{}, nil)
	if e.Watts != SNBLaptop.IdleW || e.BusyCores != 0 {
		t.Fatalf("idle machine: %+v, want %.0f W", e, SNBLaptop.IdleW)
	}
}

// TestEnergyModelDescribes: each model describes exactly the machine it was
// fitted on; another shape, or a machine whose packages or cores differ,
// is not described.
func TestEnergyModelDescribes(t *testing.T) {
	hybrid := MustBuildTopology([]CPUDesc{{ID: 0, Core: 0}, {ID: 1, Core: 0}, {ID: 2, Core: 2}}) // one core with SMT, one without
	for _, c := range []struct {
		name    string
		topo    Topology
		shape   string
		uniform bool
		laptop  bool // SNBLaptop.Describes
		server  bool // SNBServer.Describes
	}{
		{"SNB laptop", snbLaptop, "1 package × 4 cores × 2 threads", true, true, false},
		{"SNB EP", snbEP, "2 packages × 8 cores × 2 threads", true, false, true},
		{"NHM EP", nhmEP, "2 packages × 4 cores × 2 threads", true, false, false},
		{"2 vCPUs", twoCPU, "1 package × 2 cores × 1 thread", true, false, false},
		{"hybrid", hybrid, "1 package × 2 cores × 2 threads", false, false, false},
	} {
		s, uniform := ShapeOf(c.topo)
		if s.String() != c.shape || uniform != c.uniform {
			t.Errorf("%s: ShapeOf = %s, uniform %v; want %s, %v", c.name, s, uniform, c.shape, c.uniform)
		}
		if got := SNBLaptop.Describes(c.topo); got != c.laptop {
			t.Errorf("%s: SNBLaptop.Describes = %v", c.name, got)
		}
		if got := SNBServer.Describes(c.topo); got != c.server {
			t.Errorf("%s: SNBServer.Describes = %v", c.name, got)
		}
	}
}

func TestModelFor(t *testing.T) {
	laptop := MustBuildTopology([]CPUDesc{{ID: 0, Core: 0, Package: 0}, {ID: 1, Core: 0, Package: 0}})
	server := MustBuildTopology([]CPUDesc{{ID: 0, Core: 0, Package: 0}, {ID: 1, Core: 1, Package: 1}})
	if m := ModelFor(laptop); m.Name != SNBLaptop.Name {
		t.Errorf("one package: %s, want %s", m.Name, SNBLaptop.Name)
	}
	if m := ModelFor(server); m.Name != SNBServer.Name {
		t.Errorf("two packages: %s, want %s", m.Name, SNBServer.Name)
	}
	if m := ModelFor(Topology{}); m.Name != SNBLaptop.Name {
		t.Errorf("empty machine: %s, want %s", m.Name, SNBLaptop.Name)
	}
}
