package policy

import (
	"reflect"
	"strings"
	"testing"
)

// rk3588Topo is RK3588 under mainline Linux as the daemon describes it:
// little 0-3 (capacity 397, one cluster), big 4-5 and 6-7 (1024, two
// clusters), one package and L3.
func rk3588Topo() Topology {
	var cs []CPUDesc
	for id := range 8 {
		c := CPUDesc{ID: id, Core: id, LLC: 0, Package: 0, Capacity: 397, Cluster: 0}
		if id >= 4 {
			c.Class, c.Capacity, c.Cluster = 1, 1024, id/2*2
		}
		cs = append(cs, c)
	}
	return MustBuildTopology(cs)
}

// TestHomesMachineModel: with the machine's own model (RK3588's mainline
// energy model) a light background task goes to a big core the focused
// app's load is not planned on (the app itself may use every CPU), since an A76 at 1200 MHz costs less per unit of work
// than an A55 at any state, and the plan says why; without models the
// class order puts it on a little core, as before.
func TestHomesMachineModel(t *testing.T) {
	base := rk3588Topo()
	own := DTModel(ModelMachine, "test", RK3588Cores)
	in := Input{Policy: Balance, Allowed: []int{0, 1, 2, 3, 4, 5, 6, 7}, DisableLazy: true, Loads: []Load{
		{Name: "game", Util: 1.5, Threads: 2, Class: ClassFocused},
		{Name: "bg", Util: 0.3, Class: ClassBackground},
	}}
	in.Topology = base
	plain := PlanPlacement(in)
	in.Topology = base.WithHomes(HomeModels{Machine: &own, ClassNames: []string{"little", "big"}})
	priced := PlanPlacement(in)
	if !reflect.DeepEqual(plain.CPUs["bg"], []int{0}) || plain.Reasons != nil {
		t.Errorf("class order: bg on %v, reasons %v; want [0] and none", plain.CPUs["bg"], plain.Reasons)
	}
	if !reflect.DeepEqual(priced.CPUs["game"], plain.CPUs["game"]) {
		t.Errorf("the focused app moved: %v, was %v", priced.CPUs["game"], plain.CPUs["game"])
	}
	if !reflect.DeepEqual(priced.Foreground, plain.Foreground) || len(plain.Foreground) == 0 {
		t.Errorf("the focused app's footprint moved: %v, was %v", priced.Foreground, plain.Foreground)
	}
	if got := priced.CPUs["bg"]; len(got) != 1 || got[0] < 4 || slicesContain(priced.Foreground, got[0]) {
		t.Errorf("bg on %v, want one big core the focused app's load (%v) does not use", got, priced.Foreground)
	}
	if why := priced.Reasons["bg"]; !strings.HasPrefix(why, "big cheaper than little by this machine's energy model") {
		t.Errorf("reason %q", why)
	}
}

func slicesContain(s []int, v int) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// TestHomesBracketDisagree: with no model of its own and published models
// that disagree, the home is the one least costly in the worst of them,
// and the reason says the models disagree; where they agree the class
// order stands and nothing is said.
func TestHomesBracketDisagree(t *testing.T) {
	base := rk3588Topo()
	caps := []int{397, 1024}
	var bracket []PowerModel
	for _, m := range BracketModels() {
		bracket = append(bracket, m.Fit(caps))
	}
	topo := base.WithHomes(HomeModels{Bracket: bracket, ClassNames: []string{"little", "big"}})
	ch, ok := topo.chooseHomes([]int{0, 1, 2, 3, 6, 7}, 300, nil, -1)
	if !ok || !strings.HasPrefix(ch.Reason, "models disagree: ") || !strings.Contains(ch.Reason, "little by m1-measured/juno-r0, big by gs101-dt/rk3588-dt/intel-hybrid-em") {
		t.Errorf("choice %+v", ch)
	}
	// Its worst cost is the largest relative cost any model gives it.
	worst := map[int]float64{}
	for _, m := range bracket {
		for c := range 2 {
			worst[c] = max(worst[c], m.HomeCost(c, 300, min(300, float64(caps[c])), false)/300*1024)
		}
	}
	first := 0
	if worst[1] < worst[0] {
		first = 1
	}
	if ch.Order[0] != first {
		t.Errorf("order %v, worst costs %v", ch.Order, worst)
	}
	// Only the M1 model: it agrees with the class order, so nothing to say.
	m1 := base.WithHomes(HomeModels{Bracket: []PowerModel{M1Model().Fit(caps)}})
	if ch, ok := m1.chooseHomes([]int{0, 1, 2, 3, 6, 7}, 300, nil, -1); !ok || ch.Reason != "" || ch.Order[0] != 0 {
		t.Errorf("M1 alone: %+v", ch)
	}
}

// TestHomesWakeCost: under Juno's model a light load (20 units) is
// cheaper on an A57 at 450 MHz, whose cluster costs nothing more awake
// than asleep (24 = 24), than on an A53 whose cluster must wake (26 − 17
// at 450 MHz); once other work keeps the little cluster awake (CPU 0), the
// little cores are the cheaper home.
func TestHomesWakeCost(t *testing.T) {
	base := rk3588Topo()
	j := JunoModel().Fit([]int{397, 1024})
	topo := base.WithHomes(HomeModels{Machine: &j})
	allowed := []int{1, 2, 3, 6, 7}
	asleep, _ := topo.chooseHomes(allowed, 20, nil, -1)
	awake, _ := topo.chooseHomes(allowed, 20, map[int]bool{0: true}, -1)
	if asleep.Order[0] != 1 || awake.Order[0] != 0 || awake.Reason != "" {
		t.Errorf("little cluster asleep %+v, awake %+v", asleep, awake)
	}
}

// TestBackgroundSharesSaid: background work that has to share the focused
// app's cores (no other CPU allowed) gets a reason saying so.
func TestBackgroundSharesSaid(t *testing.T) {
	in := Input{Topology: rk3588Topo(), Policy: Balance, Allowed: []int{4, 5}, DisableLazy: true, Loads: []Load{
		{Name: "game", Util: 1.5, Threads: 2, Class: ClassFocused},
		{Name: "bg", Util: 0.3, Class: ClassBackground},
	}}
	p := PlanPlacement(in)
	if p.Reasons["bg"] != "shares the foreground's cores: no other CPU is allowed" {
		t.Errorf("bg on %v, reasons %v", p.CPUs["bg"], p.Reasons)
	}
}
