package policy

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"

	"pgregory.net/rapid"
)

// Hybrid topologies as literals, from the fixtures under
// sysfs/testdata/topology/ (sources in each tree's README).
var (
	// adlP is an i7-1260P: 4 P-cores with SMT (siblings adjacent, CPUs
	// 0-7, class 1, capacity 1024) and 8 E-cores in two L2 modules (8-11,
	// 12-15, class 0, capacity 580 = 1024 × highest_perf 34 / 60), one
	// LLC.
	adlP = func() Topology {
		var cs []CPUDesc
		for id := range 16 {
			c := CPUDesc{ID: id, Core: id / 2 * 2, Cluster: id / 2 * 2, Class: 1, Capacity: 1024}
			if id >= 8 {
				c = CPUDesc{ID: id, Core: id, Cluster: id / 4 * 4, Class: 0, Capacity: 580}
			}
			cs = append(cs, c)
		}
		return MustBuildTopology(cs)
	}()
	// lnl is a Lunar Lake 226V: 4 P-cores (0-3, own LLC) and 4 LP
	// E-cores (4-7, capacity 689, their L2 their LLC), no SMT.
	lnl = func() Topology {
		var cs []CPUDesc
		for id := range 8 {
			c := CPUDesc{ID: id, Core: id, Cluster: id, LLC: 0, Class: 1, Capacity: 1024}
			if id >= 4 {
				c = CPUDesc{ID: id, Core: id, Cluster: 4, LLC: 4, Class: 0, Capacity: 689}
			}
			cs = append(cs, c)
		}
		return MustBuildTopology(cs)
	}()
	// rk3588 is big.LITTLE: 4 little (0-3, 405) and 4 big (4-7) cores in
	// three clusters, one L3.
	rk3588 = func() Topology {
		var cs []CPUDesc
		for id := range 8 {
			c := CPUDesc{ID: id, Core: id, Cluster: 0, Class: 0, Capacity: 405}
			if id >= 4 {
				c = CPUDesc{ID: id, Core: id, Cluster: id / 2 * 2, Class: 1, Capacity: 1024}
			}
			cs = append(cs, c)
		}
		return MustBuildTopology(cs)
	}()
)

func plansString(p Plan, loads []Load) string {
	var s []string
	for _, l := range loads {
		s = append(s, fmt.Sprintf("%s=%s", l.Name, cpulistOf(p.CPUs[l.Name])))
	}
	return strings.Join(s, " ")
}

// cpulistOf prints CPU IDs like a cpulist (ranges of 3 or more joined).
func cpulistOf(ids []int) string {
	var out []string
	for i := 0; i < len(ids); {
		j := i
		for j+1 < len(ids) && ids[j+1] == ids[j]+1 {
			j++
		}
		switch {
		case j == i:
			out = append(out, fmt.Sprint(ids[i]))
		default:
			out = append(out, fmt.Sprintf("%d-%d", ids[i], ids[j]))
		}
		i = j + 1
	}
	return strings.Join(out, ",")
}

// TestHybridPlacement: exact placements on hybrid machines. Powersaving
// fills the most efficient class first and spills by its capacity;
// balance gives plain workloads the performance cores first and
// background work, services and unfocused apps the efficient ones; the
// foreground (the focused app, the session) may use every CPU, and
// packed-away work never shares a core (an SMT sibling included) with the
// cores its load is planned on (fg=, Plan.Foreground). Before issue 34
// the focused app was confined to that footprint (game=0,2,4,6,8-9) and
// the sets of the others were the same.
func TestHybridPlacement(t *testing.T) {
	game := Load{Name: "game", Util: 3.5, Threads: 8, Class: ClassFocused}
	bg := []Load{
		{Name: "bg1", Util: 0.3, Threads: 1, Class: ClassBackground},
		{Name: "svc", Util: 0.2, Threads: 1, Class: ClassService},
		{Name: "svc2", Util: 0.5, Threads: 2, Class: ClassService},
	}
	loops := func(n int) []Load {
		var ls []Load
		for i := range n {
			ls = append(ls, Load{Name: fmt.Sprintf("l%d", i+1), Util: 1, Threads: 1})
		}
		return ls
	}
	tests := []struct {
		name   string
		topo   Topology
		policy Policy
		loads  []Load
		want   string
	}{
		// The i7-1260P: the game's load needs the P-cores (one
		// thread each, balance) and two E-cores, and it may run
		// everywhere; background and services on E-cores the game's
		// load does not need.
		{"adl powersaving, focused game", adlP, Powersaving, append([]Load{game}, bg...),
			"game=0-15 bg1=10 svc=10 svc2=11 fg=0-9"},
		{"adl balance, focused game", adlP, Balance, append([]Load{game}, bg...),
			"game=0-15 bg1=10 svc=10 svc2=11 fg=0-9"},
		// The session (the compositor and the sound server, light) is
		// foreground too: unconfined, its footprint one P-core (two small
		// tasks); an unfocused app is packed with the background work on
		// E-cores.
		{"adl powersaving, session and an unfocused app", adlP, Powersaving, append([]Load{
			{Name: "shell", Util: 0.3, Threads: 1, Class: ClassSession},
			{Name: "pipewire", Util: 0.1, Threads: 1, Class: ClassSession},
			{Name: "chat", Util: 0.3, Threads: 1, Class: ClassApp}}, bg...),
			"shell=0-15 pipewire=0-15 chat=8 bg1=9 svc=10 svc2=10-11 fg=0-1"},
		// A desktop that says nothing of the focus: every app is
		// foreground (the editor's two threads on two P-cores, the chat
		// app beside them), the background as without apps.
		{"adl balance, apps of a desktop without focus", adlP, Balance, append([]Load{
			{Name: "ed", Util: 1.5, Threads: 2, Class: ClassAppNoFocus},
			{Name: "chat", Util: 0.3, Threads: 1, Class: ClassAppNoFocus}}, bg...),
			"ed=0-15 chat=0-15 bg1=8 svc=9 svc2=10-11 fg=0-3"},
		// Background work alone: E-cores, never CPU 0. Each is more
		// than a small task on an E-core (0.3 of a CPU measured
		// unconfined is 41 % of an E-core), and svc2's two threads need
		// two.
		{"adl powersaving, background only", adlP, Powersaving, bg,
			"bg1=8 svc=9 svc2=10-11"},
		{"adl balance, background only", adlP, Balance, bg,
			"bg1=8 svc=9 svc2=10-11"},
		// A plain workload under balance gets P-cores first.
		{"adl balance, a build", adlP, Balance, []Load{{Name: "build", Util: 3, Threads: 3}},
			"build=0,2,4"},
		// Busy loops (0.78 of a P-core each, unconfined) go whole to the
		// E modules (2.27 of capacity each: two loops); the fifth and
		// sixth take what room the E-cores have left (4.53 in all) and
		// only the sixth's remainder spills to a P-core.
		{"adl powersaving, 4 loops", adlP, Powersaving, loops(4), "l1=8 l2=9 l3=12 l4=13"},
		{"adl powersaving, 6 loops", adlP, Powersaving, loops(6), "l1=8 l2=9 l3=12 l4=13 l5=10,15 l6=0,14"},
		// Lunar Lake: LP E-cores first under powersaving; the focused
		// app on P-cores.
		{"lnl powersaving", lnl, Powersaving, append([]Load{{Name: "ed", Util: 1.5, Threads: 2, Class: ClassFocused}}, bg...),
			"ed=0-7 bg1=4 svc=4 svc2=5-6 fg=0-1"},
		// big.LITTLE: the focused app on the big cores, background on
		// little ones (CPU 0 is little here, so only the focused app
		// moves compared with a symmetric plan).
		{"rk3588 powersaving", rk3588, Powersaving, append([]Load{{Name: "game", Util: 1.5, Threads: 2, Class: ClassFocused}}, bg[:2]...),
			"game=0-7 bg1=0 svc=1 fg=4-5"},
		// Performance is unchanged: every CPU.
		{"adl performance", adlP, Performance, append([]Load{game}, bg...),
			"game=0-15 bg1=0-15 svc=0-15 svc2=0-15"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := PlanPlacement(Input{Topology: tt.topo, Allowed: all(tt.topo), Policy: tt.policy, Loads: tt.loads, DisableLazy: true})
			got := plansString(p, tt.loads)
			if p.Foreground != nil {
				got += " fg=" + cpulistOf(p.Foreground)
			}
			if got != tt.want {
				t.Errorf("got  %s\nwant %s", got, tt.want)
			}
		})
	}
}

// TestHybridRaceToIdle: the domain threshold counts capacity: the
// i7-1260P holds 8 + 8 × 0.57 = 12.5 CPUs of powersaving threshold. A
// build of 15 CPUs (no thread count: 16.7 with the saturation headroom,
// 13.1 in capacity at the machine's mean 0.78) races to idle; one of 11
// (9.6) does not.
func TestHybridRaceToIdle(t *testing.T) {
	for _, tt := range []struct {
		util float64
		want Policy
	}{{11, Powersaving}, {15, Performance}} {
		in := Input{Topology: adlP, Allowed: all(adlP), Policy: Powersaving, DisableLazy: true,
			Loads: []Load{{Name: "build", Util: tt.util}}}
		if got := PlanPlacement(in).Policy; got != tt.want {
			t.Errorf("util %v: policy %s, want %s", tt.util, got, tt.want)
		}
	}
}

// TestHybridKeepsCurrentOnlyOnTheRightClass: a background workload left on
// a P-core (1 CPU, as many cores as the fresh plan) is moved to an
// E-core; one already on an E-core stays.
func TestHybridKeepsCurrentOnlyOnTheRightClass(t *testing.T) {
	for _, tt := range []struct {
		cur  []int
		want string
	}{{[]int{6}, "8"}, {[]int{13}, "13"}} {
		in := Input{Topology: adlP, Allowed: all(adlP), Policy: Powersaving, DisableLazy: true,
			Loads: []Load{{Name: "bg", Util: 0.2, Threads: 1, Class: ClassBackground, Current: tt.cur}}}
		if got := cpulistOf(PlanPlacement(in).CPUs["bg"]); got != tt.want {
			t.Errorf("current %v: got %s, want %s", tt.cur, got, tt.want)
		}
	}
}

// TestPropHybridBackgroundApartFromFocused: on a hybrid machine that
// packs, a foreground workload (the focused app, a session unit) may use
// every allowed CPU; Plan.Foreground, the cores its load is planned on,
// is never empty and holds whole cores (SMT siblings included); and a
// background, service or unfocused app workload never gets a CPU of it,
// unless it covers every core.
func TestPropHybridBackgroundApartFromFocused(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		topo := rapid.SampledFrom([]Topology{adlP, lnl, rk3588}).Draw(t, "topo")
		pol := rapid.SampledFrom([]Policy{Balance, Powersaving}).Draw(t, "policy")
		n := rapid.IntRange(1, 6).Draw(t, "loads")
		fgClass := rapid.SampledFrom([]string{ClassFocused, ClassSession, ClassAppNoFocus, ClassUser}).Draw(t, "foreground class")
		loads := []Load{{Name: "focus", Util: rapid.Float64Range(0, 4).Draw(t, "focus util"), Threads: rapid.IntRange(1, 8).Draw(t, "focus threads"), Class: fgClass}}
		for i := range n {
			loads = append(loads, Load{Name: fmt.Sprint("w", i), Util: rapid.Float64Range(0, 2).Draw(t, "util"), Threads: rapid.IntRange(0, 3).Draw(t, "threads"),
				Class: rapid.SampledFrom([]string{ClassBackground, ClassService, ClassApp, ClassWorkload, ClassSession}).Draw(t, "class")})
		}
		p := PlanPlacement(Input{Topology: topo, Allowed: all(topo), Policy: pol, Loads: loads, DisableLazy: true})
		if !slices.Equal(p.CPUs["focus"], all(topo)) || p.Policies["focus"] != Performance {
			t.Fatalf("the %s workload is confined: %v (%s)", fgClass, p.CPUs["focus"], p.Policies["focus"])
		}
		cpus := topo.CPUs()
		coreOf := func(id int) int { return cpus[slices.IndexFunc(cpus, func(c CPUDesc) bool { return c.ID == id })].Core }
		cores := map[int]bool{}
		for _, id := range p.Foreground {
			cores[coreOf(id)] = true
		}
		if len(cores) == 0 {
			t.Fatalf("no foreground footprint")
		}
		for _, c := range cpus {
			if cores[c.Core] && !slices.Contains(p.Foreground, c.ID) {
				t.Fatalf("footprint %v holds core %d but not its CPU %d", p.Foreground, c.Core, c.ID)
			}
		}
		allCores := map[int]bool{}
		for _, c := range cpus {
			allCores[c.Core] = true
		}
		if len(cores) == len(allCores) {
			return // nothing left to keep apart on
		}
		for _, l := range loads[1:] {
			if len(p.CPUs[l.Name]) == 0 {
				t.Fatalf("%s got no CPU", l.Name)
			}
			if l.Class != ClassBackground && l.Class != ClassService && l.Class != ClassApp {
				continue
			}
			for _, id := range p.CPUs[l.Name] {
				if cores[coreOf(id)] {
					t.Fatalf("%s (%s) got CPU %d, on a core of the foreground (%v)", l.Name, l.Class, id, p.Foreground)
				}
			}
		}
	})
}

// TestHybridClassZeroIsNotHybrid: a machine whose CPUs are all of class 0
// is not hybrid (and so planned as before: the golden tests check the
// bytes); a negative class is refused.
func TestHybridClassZeroIsNotHybrid(t *testing.T) {
	if snbLaptop.Hybrid() || !adlP.Hybrid() || !rk3588.Hybrid() {
		t.Fatalf("Hybrid: snb %v adl %v rk3588 %v", snbLaptop.Hybrid(), adlP.Hybrid(), rk3588.Hybrid())
	}
	if _, err := BuildTopology([]CPUDesc{{ID: 0, Class: -1}}); err == nil {
		t.Error("a negative class was accepted")
	}
}

// TestHybridEnergyPerClass: with class costs, the same light load costs
// less on E-cores than on P-cores, the watts are split by class, and a
// model without class costs prices the machine as before.
func TestHybridEnergyPerClass(t *testing.T) {
	m := SNBLaptop.WithClasses([]float64{0.35, 1})
	loads := []Load{{Name: "bg", Util: 0.5, Threads: 1}}
	onE := m.Simulate(adlP, Plan{CPUs: map[string][]int{"bg": {8}}}, loads)
	onP := m.Simulate(adlP, Plan{CPUs: map[string][]int{"bg": {0}}}, loads)
	if !(onE.Watts < onP.Watts) || len(onE.ClassWatts) != 2 || onE.ClassWatts[1] != 0 || onE.ClassWatts[0] <= 0 || onP.ClassWatts[0] != 0 {
		t.Errorf("on E %+v, on P %+v", onE, onP)
	}
	// 0.5 busy on an E-core (cost 0.35, capacity 580): core 0.5 × 5.04 ×
	// 0.35 × 580/1024 and thread 0.5 × 1.5 × 0.35 × 580/1024.
	if want := 0.5*5.04*0.35*580/1024 + 0.5*1.5*0.35*580/1024; abs(onE.ClassWatts[0]-want) > 1e-9 {
		t.Errorf("E watts %v, want %v", onE.ClassWatts[0], want)
	}
	plain := SNBLaptop.Simulate(snbLaptop, Plan{CPUs: map[string][]int{"bg": {0}}}, loads)
	if plain.ClassWatts != nil {
		t.Errorf("a model without classes split watts: %+v", plain)
	}
	if w := SNBLaptop.WithClasses([]float64{0, -1}).ClassCost; w[0] != 1 || w[1] != 1 {
		t.Errorf("bad costs kept: %v", w)
	}
	if ClassCostFor("intel", "LPE") != 0.25 || ClassCostFor("amd", "E") != 0.5 || ClassCostFor("", "mid2") != 0.45 || ClassCostFor("", "all") != 1 {
		t.Error("ClassCostFor")
	}
}

func abs(x float64) float64 {
	if x < 0 {
		return -x
	}
	return x
}

// TestReservedCPUs: CPUs another owner confines work to (intel-lpmd's LP
// E-cores) get nothing packed onto them; performance still hands them
// out, and with nothing else allowed they are used.
func TestReservedCPUs(t *testing.T) {
	var cs []CPUDesc
	for _, c := range lnl.CPUs() {
		c.Reserved = c.Class == 0
		cs = append(cs, c)
	}
	topo := MustBuildTopology(cs)
	loads := []Load{{Name: "bg", Util: 0.3, Threads: 1, Class: ClassBackground}}
	for _, tt := range []struct {
		policy  Policy
		allowed []int
		want    string
	}{
		{Powersaving, all(topo), "0"},
		{Balance, all(topo), "0"},
		{Performance, all(topo), "0-7"},
		{Powersaving, []int{4, 5}, "4"},
	} {
		p := PlanPlacement(Input{Topology: topo, Allowed: tt.allowed, Policy: tt.policy, Loads: loads, DisableLazy: true})
		if got := cpulistOf(p.CPUs["bg"]); got != tt.want {
			t.Errorf("%s over %v: %s, want %s", tt.policy, tt.allowed, got, tt.want)
		}
	}
	if got := topo.Reserved(); fmt.Sprint(got) != "[4 5 6 7]" {
		t.Errorf("Reserved() = %v", got)
	}
}

// genHybridInput is genInput on hybrid machines: the literal ones or a
// random one (P-cores with or without SMT, E-core modules, a few LPE),
// with workload classes, current sets and reserved LPE CPUs drawn too.
func genHybridInput(t *rapid.T) Input {
	topo := rapid.SampledFrom([]Topology{adlP, lnl, rk3588}).Draw(t, "topo")
	if rapid.Bool().Draw(t, "random topo") {
		np, smt := rapid.IntRange(1, 4).Draw(t, "p-cores"), rapid.IntRange(1, 2).Draw(t, "smt")
		ne, nl := 4*rapid.IntRange(0, 2).Draw(t, "e-modules"), rapid.IntRange(0, 4).Draw(t, "lpe")
		reserve := rapid.Bool().Draw(t, "reserve lpe")
		var cs []CPUDesc
		id := 0
		for c := range np {
			for range smt {
				cs = append(cs, CPUDesc{ID: id, Core: c * smt, Cluster: c * smt, Class: 2, Capacity: 1024})
				id++
			}
		}
		for range ne {
			cs = append(cs, CPUDesc{ID: id, Core: id, Cluster: 1000 + (id-np*smt)/4, Class: 1, Capacity: rapid.IntRange(400, 800).Draw(t, "e cap")})
			id++
		}
		for range nl {
			cs = append(cs, CPUDesc{ID: id, Core: id, Cluster: 2000, LLC: 2000, Class: 0, Capacity: 300, Reserved: reserve})
			id++
		}
		topo = MustBuildTopology(cs)
	}
	ids := all(topo)
	allowed := ids
	if rapid.Bool().Draw(t, "subset") {
		allowed = rapid.SliceOfNDistinct(rapid.SampledFrom(ids), 1, len(ids), rapid.ID[int]).Draw(t, "allowed")
	}
	n := rapid.IntRange(1, 8).Draw(t, "loads")
	loads := make([]Load, n)
	for i := range loads {
		loads[i] = Load{Name: fmt.Sprintf("w%d", i), Util: rapid.Float64Range(0, 3).Draw(t, "util"), Threads: rapid.IntRange(0, 4).Draw(t, "threads"),
			Class: rapid.SampledFrom([]string{ClassWorkload, ClassFocused, ClassApp, ClassBackground, ClassService}).Draw(t, "class")}
		if rapid.Bool().Draw(t, "has current") {
			loads[i].Current = rapid.SliceOfNDistinct(rapid.SampledFrom(ids), 0, len(ids), rapid.ID[int]).Draw(t, "current")
		}
	}
	return Input{Topology: topo, Allowed: allowed, Loads: loads, Policy: rapid.SampledFrom(AvailablePolicies).Draw(t, "policy"),
		DisableLazy: rapid.Bool().Draw(t, "no lazy")}
}

// TestPropHybridPlans: on hybrid machines every workload gets a non-empty
// ascending set of allowed CPUs, performance gives every allowed CPU, and
// the same input gives the same plan.
func TestPropHybridPlans(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		in := genHybridInput(t)
		p := PlanPlacement(in)
		allowed := normalize(in.Topology, in.Allowed)
		for _, l := range in.Loads {
			set := p.CPUs[l.Name]
			if len(set) == 0 || !slices.IsSorted(set) {
				t.Fatalf("%s got %v", l.Name, set)
			}
			for _, c := range set {
				if !slices.Contains(allowed, c) {
					t.Fatalf("%s got CPU %d outside allowed %v", l.Name, c, allowed)
				}
			}
			if in.Policy == Performance && !slices.Equal(set, allowed) {
				t.Fatalf("performance: %s got %v, want %v", l.Name, set, allowed)
			}
		}
		if q := PlanPlacement(in); !reflect.DeepEqual(p, q) {
			t.Fatalf("same input, different plans:\n%+v\n%+v", p, q)
		}
	})
}

// TestHybridPerfOrdersInsideAClass: CPPC ranks (binning, favoured cores)
// break ties inside a class — the performance-first plan takes the
// favoured P-core, the efficient-first plan the lowest-ranked E-core —
// and never make a class.
func TestHybridPerfOrdersInsideAClass(t *testing.T) {
	var cs []CPUDesc
	for _, c := range adlP.CPUs() {
		switch c.ID {
		case 0, 1:
			c.Perf = 60
		case 4, 5:
			c.Perf = 64 // the favoured core
		case 8:
			c.Perf = 36
		default:
			if c.Class == 1 {
				c.Perf = 60
			} else {
				c.Perf = 34
			}
		}
		cs = append(cs, c)
	}
	topo := MustBuildTopology(cs)
	bal := PlanPlacement(Input{Topology: topo, Allowed: all(topo), Policy: Balance, DisableLazy: true,
		Loads: []Load{{Name: "build", Util: 1, Threads: 1}}})
	ps := PlanPlacement(Input{Topology: topo, Allowed: all(topo), Policy: Powersaving, DisableLazy: true,
		Loads: []Load{{Name: "bg", Util: 0.3, Threads: 1, Class: ClassBackground}}})
	// A group ranks by its best CPU: the module 12-15 (34) before 8-11,
	// which holds the better binned CPU 8 (36).
	if got := cpulistOf(bal.CPUs["build"]) + " " + cpulistOf(ps.CPUs["bg"]); got != "4 12" {
		t.Errorf("got %s, want 4 (the favoured P-core) 12 (the E module without CPU 8's higher rank)", got)
	}
}
