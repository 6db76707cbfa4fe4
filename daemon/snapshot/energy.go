package snapshot

import (
	"github.com/schedpolicyd/schedpolicyd/acpi"
	"github.com/schedpolicyd/schedpolicyd/policy"
)

// The energy sources, the values of the EnergySource property.
const (
	EnergySourceRAPL    = "rapl"
	EnergySourceBattery = "battery"
	EnergySourceNone    = "none"
)

// EnergySourceName is EnergySource as the EnergySource property and the
// metrics show it: EnergySourceNone before the first reading.
func (s Snapshot) EnergySourceName() string {
	if s.EnergySource == "" {
		return EnergySourceNone
	}
	return s.EnergySource
}

// EnergyTotal is the measured energy of one policy on one power source,
// summed over every closed segment since the state directory was made (the
// Energy property, state.json).
type EnergyTotal struct {
	// Policy is the policy that was in force: performance, balance or
	// powersaving.
	Policy policy.Policy `json:"policy"`
	// PowerSource is the power source in force: ac, battery or unknown.
	PowerSource acpi.Source `json:"power_source"`
	// Joules is the energy measured (J): the packages' with RAPL, the
	// whole machine's from the batteries.
	Joules float64 `json:"joules"`
	// Seconds is the time Joules was measured over (s), so Joules/Seconds
	// is the average power in W.
	Seconds float64 `json:"seconds"`
}

// PowerEstimate is the energy model's estimate for one policy
// (EstimatePower): the power the managed workloads' current load would
// draw placed by that policy on this machine.
type PowerEstimate struct {
	Policy policy.Policy
	// Watts is the whole machine (W), the model's platform idle power
	// included: what a battery measures.
	Watts float64
	// PackageWatts is the packages alone (W): Watts less the model's
	// platform idle power (policy.EnergyModel.IdleW), what RAPL measures.
	PackageWatts float64
}

// PowerEstimates is EstimatePower's answer.
type PowerEstimates struct {
	// Model names the calibration (policy.ModelFor), e.g. snb-laptop-4c8t.
	Model string
	// Note is "" when the model was fitted on a machine of this one's
	// shape (policy.EnergyModel.Describes), else a sentence saying that
	// its watts only rank the policies here.
	Note string
	// Policies has one estimate per policy, in policy order: Models[0]'s.
	Policies []PowerEstimate
	// Models is the same load priced under every model the estimate is
	// made under (policy.SpreadModels, issue 35): the machine's own first
	// (named "machine", "class-ratios", or its calibration's name on a
	// machine of one class), then each bracketing published model. Every
	// watt of it is modelled, never measured.
	Models []ModelEstimates
	// Spread has one entry per policy, in policy order: the range of
	// Models' estimates and the effect against performance claimed from
	// them.
	Spread []PolicySpread
}

// ModelEstimates is one model's estimate under each policy.
type ModelEstimates struct {
	Model string
	// Policies has one estimate per policy, in policy order (PackageWatts
	// is Watts less this model's platform idle power).
	Policies []PowerEstimate
}

// PolicySpread is one policy's estimates across the models.
type PolicySpread struct {
	Policy policy.Policy
	// LowWatts and HighWatts are the lowest and highest whole-machine
	// estimate across the models (W); LowPackageWatts and
	// HighPackageWatts the same for the packages alone.
	LowWatts, HighWatts               float64
	LowPackageWatts, HighPackageWatts float64
	// VsPerformance is the change from performance's plan of the same
	// load (policy.EffectOf): the smallest across the models (0 when they
	// disagree on its sign), with their spread; zero for performance.
	VsPerformance policy.Effect
}
