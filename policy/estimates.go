package policy

import "math"

// Estimate names for a machine's own calibration: its own model at
// every operating point, or the published class ratios.
const (
	ModelClassRatios = "class-ratios"
)

// NamedModel is one calibration an estimate is made under.
type NamedModel struct {
	Name  string
	Model EnergyModel
}

// SpreadModels are the calibrations every estimate is made under (issue
// 35, item 3): first the machine's (machine: ModelFor's calibration with
// the machine's own PowerModel, or its class ratios; named ModelMachine,
// ModelClassRatios, or the calibration's name on a machine of one
// class), then base (ModelFor's calibration, classes unpriced) with each
// bracketing model fitted to the machine's class capacities caps, then
// base alone (the Sandy Bridge model, every core alike) when smt and
// the machine's own is not already it. Each is a model: its watts are
// estimates, never measurements.
func SpreadModels(machine, base EnergyModel, caps []int, smt bool) []NamedModel {
	name := machine.Name
	switch {
	case machine.Power != nil:
		name = ModelMachine
	case len(machine.ClassCost) > 0:
		name = ModelClassRatios
	}
	out := []NamedModel{{name, machine}}
	for _, b := range BracketModels() {
		out = append(out, NamedModel{b.Name, base.WithPower(b.Fit(caps))})
	}
	if smt && name != base.Name {
		out = append(out, NamedModel{base.Name, base})
	}
	return out
}

// Effect is a claimed change of power between two plans across models.
type Effect struct {
	// Watts is the smallest change any model gives (W, negative:
	// less power), 0 when the models disagree on its sign.
	Watts float64
	// Spread is the largest change minus the smallest across models (W).
	Spread float64
	// Distinguishable: |Watts| exceeds Spread; otherwise the models
	// cannot tell the two plans apart ("not distinguishable").
	Distinguishable bool
}

// EffectOf is the effect of going from b to a, where a[i] and b[i] are
// the watts model i gives each (same length, at least one).
func EffectOf(a, b []float64) Effect {
	lo, hi := math.Inf(1), math.Inf(-1)
	small := math.Inf(1)
	for i := range a {
		d := a[i] - b[i]
		lo, hi = math.Min(lo, d), math.Max(hi, d)
		if math.Abs(d) < math.Abs(small) {
			small = d
		}
	}
	e := Effect{Watts: small, Spread: hi - lo}
	if lo < 0 && hi > 0 {
		e.Watts = 0
	}
	e.Distinguishable = math.Abs(e.Watts) > e.Spread && e.Watts != 0
	return e
}
