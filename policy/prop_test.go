package policy

import (
	"fmt"
	"math"
	"reflect"
	"slices"
	"testing"

	"pgregory.net/rapid"
)

// genInput draws a machine (one of the literal topologies, or a random
// sockets × cores × SMT one), an allowed subset, a policy and loads.
func genInput(t *rapid.T) Input {
	topo := rapid.SampledFrom([]Topology{snbLaptop, nhmEP, snbEP, twoCPU}).Draw(t, "topo")
	if rapid.Bool().Draw(t, "random topo") {
		topo = intelSMT(rapid.IntRange(1, 4).Draw(t, "sockets"), rapid.IntRange(1, 6).Draw(t, "cores"))
	}
	ids := all(topo)
	allowed := ids
	if rapid.Bool().Draw(t, "subset") {
		allowed = nil
		for _, id := range ids {
			if rapid.IntRange(0, 3).Draw(t, fmt.Sprint("keep", id)) > 0 {
				allowed = append(allowed, id)
			}
		}
		if len(allowed) == 0 {
			allowed = ids[:1]
		}
	}
	n := rapid.IntRange(1, 12).Draw(t, "loads")
	loads := make([]Load, n)
	for i := range loads {
		loads[i] = Load{
			Name:    fmt.Sprintf("w%d", i),
			Util:    rapid.Float64Range(0, 3).Draw(t, "util"),
			Threads: rapid.IntRange(0, 4).Draw(t, "threads"),
		}
		if th := loads[i].Threads; th > 0 {
			loads[i].Util = math.Min(loads[i].Util, float64(th)) // a thread uses at most one CPU
		}
		if rapid.Bool().Draw(t, "has current") {
			loads[i].Current = rapid.SliceOfNDistinct(rapid.SampledFrom(ids), 0, len(ids), rapid.ID[int]).Draw(t, "current")
		}
	}
	return Input{
		Topology: topo, Allowed: allowed, Loads: loads,
		Policy: rapid.SampledFrom(AvailablePolicies).Draw(t, "policy"),
	}
}

func TestPropEveryWorkloadGetsAllowedCPUs(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		in := genInput(t)
		p := PlanPlacement(in)
		allowed := normalize(in.Topology, in.Allowed)
		for _, l := range in.Loads {
			set := p.CPUs[l.Name]
			if len(set) == 0 {
				t.Fatalf("%s got no CPUs", l.Name)
			}
			for _, c := range set {
				if !slices.Contains(allowed, c) {
					t.Fatalf("%s got CPU %d outside allowed %v", l.Name, c, allowed)
				}
			}
			if !slices.IsSorted(set) {
				t.Fatalf("%s: %v not ascending", l.Name, set)
			}
		}
	})
}

func TestPropPerformanceGivesEverything(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		in := genInput(t)
		in.Policy = Performance
		p := PlanPlacement(in)
		allowed := normalize(in.Topology, in.Allowed)
		for _, l := range in.Loads {
			if !slices.Equal(p.CPUs[l.Name], allowed) {
				t.Fatalf("%s got %v, want every allowed CPU %v", l.Name, p.CPUs[l.Name], allowed)
			}
		}
	})
}

func TestPropDeterministic(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		in := genInput(t)
		a, b := PlanPlacement(in), PlanPlacement(in)
		if !reflect.DeepEqual(a, b) {
			t.Fatalf("same input, different plans:\n%+v\n%+v", a, b)
		}
	})
}

// Powersaving on a fresh machine (no current cpusets) never activates more
// packages or cores than the optimum for the demand: ceil(demand / CPUs
// per package) packages and ceil(demand / 2) cores on an SMT2 machine,
// where demand = Σ max(util, threads) (each runnable thread needs a CPU
// of its own unless it is small), unless the load falls back to
// performance.
func TestPropPowersavingOptimal(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		sockets, cores := rapid.IntRange(1, 4).Draw(t, "sockets"), rapid.IntRange(1, 8).Draw(t, "cores")
		topo := intelSMT(sockets, cores)
		n := rapid.IntRange(1, 10).Draw(t, "loads")
		var loads []Load
		demand := 0.0
		for i := range n {
			th := rapid.IntRange(1, 3).Draw(t, "threads")
			u := float64(th) * rapid.Float64Range(0.3, 1).Draw(t, "per-thread util")
			loads = append(loads, Load{Name: fmt.Sprint("w", i), Util: u, Threads: th})
			d := math.Max(math.Ceil(u-1e-6), 1)
			if th >= 2 {
				d = float64(stableSize(u, th, u))
			}
			demand += d
		}
		p := PlanPlacement(Input{Topology: topo, Allowed: all(topo), Policy: Powersaving, Loads: loads})
		if p.Policy == Performance || p.Spread {
			return
		}
		pk, co, _ := active(topo, p)
		wantPk := int(math.Ceil(demand / float64(2*cores)))
		wantCo := int(math.Ceil(demand / 2))
		if pk > wantPk || co > wantCo {
			t.Fatalf("demand %.2f: %d packages, %d cores; optimum %d, %d (plan %v)", demand, pk, co, wantPk, wantCo, p.CPUs)
		}
	})
}

// A steady load settles: once a plan is fed back as the current cpusets
// (the load running at what they allow), the plan stops changing within a
// few decisions and then never changes again.
func TestPropSteadyLoadNoChanges(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		in := genInput(t)
		p := PlanPlacement(in)
		steady := func(p Plan) Input {
			next := feed(in, p)
			for i := range next.Loads {
				next.Loads[i].Util = math.Min(next.Loads[i].Util, float64(len(next.Loads[i].Current)))
			}
			return next
		}
		// A load confined to fewer CPUs than it would use shows less use,
		// so the first decisions may still move cpusets (seen: four on a
		// 2×4×2 machine with 11 loads under powersaving); a steady load
		// must reach a plan that stays, not flap between plans.
		const maxSettle, stay = 12, 3
		settled := -1
		for i := range maxSettle {
			q := PlanPlacement(steady(p))
			same := reflect.DeepEqual(p.CPUs, q.CPUs)
			p = q
			if same {
				settled = i
				break
			}
		}
		if settled < 0 {
			t.Fatalf("steady load still changes cpusets after %d decisions: %v", maxSettle, p.CPUs)
		}
		for range stay {
			q := PlanPlacement(steady(p))
			if !reflect.DeepEqual(p.CPUs, q.CPUs) {
				t.Fatalf("a plan that stood once changed again under the same load:\n%v\n%v", p.CPUs, q.CPUs)
			}
			p = q
		}
	})
}
