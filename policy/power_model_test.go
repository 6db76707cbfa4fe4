package policy

import (
	"fmt"
	"math"
	"testing"
)

// TestDTModelGS101: the kernel's arithmetic on gs101.dtsi's inputs gives
// the capacities 160 / 498 / 1024 and the fixture's powers (sysfs
// testdata gs101, the same derivation in shell).
func TestDTModelGS101(t *testing.T) {
	m := DTModel("gs101", "", GS101Cores)
	var caps []float64
	for _, c := range m.Classes {
		caps = append(caps, c.top().Capacity)
	}
	if fmt.Sprint(caps) != "[160 498 1024]" {
		t.Errorf("capacities %v, want [160 498 1024]", caps)
	}
	for _, tt := range []struct {
		class, state  int
		khz           int64
		capacity, cst float64
	}{
		{0, 0, 300000, 26, 6055.0 / 26},
		{0, 10, 1803000, 160, 103597.0 / 160},
		{1, 0, 400000, 88, 29085.0 / 88},
		{2, 0, 500000, 182, 81250.0 / 182},
		{2, 16, 2802000, 1024, 2030997.0 / 1024},
	} {
		o := m.Classes[tt.class].OPPs[tt.state]
		if o.KHz != tt.khz || o.Capacity != tt.capacity || o.Cost != tt.cst {
			t.Errorf("class %d state %d: %+v, want %d kHz, capacity %v, cost %v", tt.class, tt.state, o, tt.khz, tt.capacity, tt.cst)
		}
	}
	if err := DTPowerUW(650, DTOPP{2802, 1056250}); err != 2030997 {
		t.Errorf("X1 at 2802 MHz: %d µW, want 2030997 (650 × 1056² × 2802 / 10⁶)", err)
	}
}

// cheapest is the class of m whose HomeCost for one task of util
// (capacity units) is least.
func cheapest(m PowerModel, util float64) string {
	best, name := math.Inf(1), ""
	for c, cl := range m.Classes {
		if h := m.HomeCost(c, util, math.Min(util, cl.top().Capacity), true); h < best {
			best, name = h, cl.Name
		}
	}
	return name
}

// TestCostAtOperatingPoint: a class is priced at the lowest state whose
// capacity covers the load × 1.25 (em_cpu_energy), so the cheapest home
// depends on the load, and the published models disagree (the table of
// issue 35, recomputed from their own inputs).
func TestCostAtOperatingPoint(t *testing.T) {
	gs := DTModel("gs101", "", GS101Cores)
	// 40 units on an A55 need 50: 574 MHz (capacity 50).
	if o, rel, _ := gs.State(0, 40.0/160); o.KHz != 574000 || rel != (14464.0/50)/(2030997.0/1024) {
		t.Errorf("gs101 A55 at 40: %+v rel %v", o, rel)
	}
	// 100 units need 125: the A55's 1598 MHz (141), the A76's 696 MHz (153).
	if o, _, _ := gs.State(0, 100.0/160); o.KHz != 1598000 {
		t.Errorf("gs101 A55 at 100: %+v", o)
	}
	for _, tt := range []struct {
		model PowerModel
		util  float64
		want  string
	}{
		{gs, 40, "A55"},  // 289.3 µW per unit vs the A76's 330.5 at 400 MHz
		{gs, 100, "A76"}, // 408.0 at 696 MHz vs the A55's 547.8 at 1598 MHz
		{DTModel("rk", "", RK3588Cores), 40, "A76"},  // 444.2 at 1200 MHz vs 471.7 at 1008 MHz
		{DTModel("rk", "", RK3588Cores), 300, "A76"}, // the A55 at its top: 933.0
		{M1Model(), 100, "Icestorm"},
		{M1Model(), 400, "Icestorm"},
		{JunoModel(), 300, "A53"},
		{IntelHybridModel(), 100, "LPE"},
	} {
		if got := cheapest(tt.model, tt.util); got != tt.want {
			t.Errorf("%s at %v: cheapest %s, want %s", tt.model.Name, tt.util, got, tt.want)
		}
	}
}

// TestWakeCost: Juno's clusters cost their active power above
// cluster-sleep while awake; work on a cluster other work keeps awake
// pays none of it.
func TestWakeCost(t *testing.T) {
	j := JunoModel()
	ref := 616.0 / 1023 // A57 at 1100 MHz, per unit of work
	o, _, wake := j.State(0, 1)
	if o.KHz != 850000 || wake != 40/(ref*1024) {
		t.Errorf("A53 at its top: %+v wake %v, want 850 MHz and 40/(ref × 1024)", o, wake)
	}
	asleep := j.HomeCost(0, 447, 447, false)
	awake := j.HomeCost(0, 447, 447, true)
	if want := (93.0/447)/ref*447/1024 + 40/(ref*1024); asleep != want || awake != (93.0/447)/ref*447/1024 {
		t.Errorf("A53 busy at its top: %v asleep, %v awake; want %v and no wake", asleep, awake, want)
	}
	// The A57 cluster at 450 MHz is no dearer awake than asleep (24 = 24).
	if _, _, w := j.State(1, 0.1); w != 0 {
		t.Errorf("A57 at 450 MHz wake %v, want 0", w)
	}
}

// TestFit: a model is mapped onto a machine's classes by rank and
// nearest capacity, its capacities rescaled to the machine's.
func TestFit(t *testing.T) {
	names := func(m PowerModel) string {
		s := ""
		for _, c := range m.Classes {
			s += fmt.Sprintf("%s@%.0f ", c.Name, c.top().Capacity)
		}
		return s
	}
	for _, tt := range []struct {
		model PowerModel
		caps  []int
		want  string
	}{
		{IntelHybridModel(), []int{580, 1024}, "E@580 P@1024 "},   // ADL: E-cores are the model's E
		{IntelHybridModel(), []int{405, 1024}, "LPE@405 P@1024 "}, // an A55 is nearest the LPE
		{M1Model(), []int{358, 648, 1024}, "Icestorm@358 Icestorm@648 Firestorm@1024 "},
		{DTModel("gs", "", GS101Cores), []int{1024}, "X1@1024 "},
		{DTModel("gs", "", GS101Cores), []int{160, 498, 1024}, "A55@160 A76@498 X1@1024 "},
	} {
		if got := names(tt.model.Fit(tt.caps)); got != tt.want {
			t.Errorf("%s on %v: %q, want %q", tt.model.Name, tt.caps, got, tt.want)
		}
	}
	// Relative costs survive the rescaling: the fitted ADL E-core at 40 %
	// costs 3 of the P-core's top 7.
	f := IntelHybridModel().Fit([]int{580, 1024})
	if o, rel, _ := f.State(0, 0.3); o.KHz != 2 || rel != 3.0/7 {
		t.Errorf("fitted E at 30 %%: %+v rel %v, want state 2 at 3/7", o, rel)
	}
}

// TestEffectOf: the claimed effect is the smallest change across models,
// none when they disagree on its sign, distinguishable only when larger
// than the spread.
func TestEffectOf(t *testing.T) {
	for _, tt := range []struct {
		a, b []float64
		want Effect
	}{
		{[]float64{40, 28}, []float64{54, 33}, Effect{Watts: -5, Spread: 9, Distinguishable: false}},
		{[]float64{10, 10.5}, []float64{12, 12.25}, Effect{Watts: -1.75, Spread: 0.25, Distinguishable: true}},
		{[]float64{10, 13}, []float64{11, 12}, Effect{Watts: 0, Spread: 2, Distinguishable: false}},
	} {
		if got := EffectOf(tt.a, tt.b); got != tt.want {
			t.Errorf("EffectOf(%v, %v) = %+v, want %+v", tt.a, tt.b, got, tt.want)
		}
	}
}
