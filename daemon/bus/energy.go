package bus

import (
	"context"

	"github.com/godbus/dbus/v5"

	"github.com/schedpolicyd/schedpolicyd/daemon/snapshot"
)

// The energy part of Interface: the EnergySource and Energy
// properties, RefreshEnergy and EstimatePower.

// energyEntry is one element of the Energy property, signature (ssdd):
// policy, power source, joules (J), seconds (s).
type energyEntry struct {
	Policy, PowerSource string
	Joules, Seconds     float64
}

// estimateEntry is one element of EstimatePower's answer, signature (sdd):
// policy, whole-machine watts (W), package watts (W).
type estimateEntry struct {
	Policy              string
	Watts, PackageWatts float64
}

func energyEntries(ts []snapshot.EnergyTotal) []energyEntry {
	out := make([]energyEntry, 0, len(ts))
	for _, t := range ts {
		out = append(out, energyEntry{string(t.Policy), string(t.PowerSource), t.Joules, t.Seconds})
	}
	return out
}

// RefreshEnergy reads the energy counters now and closes the running
// segment into the totals (a new one starts under the same policy and
// power source); Energy then changes, with PropertiesChanged, if anything
// was measured. It changes no setting, so anyone may call it. Calls within
// EnergyRefreshInterval (1 s) of the previous refresh return at once
// without reading. Errors: InvalidArgs when given arguments; Failed when
// the daemon is stopping.
func (o busObject) RefreshEnergy(msg dbus.Message) *dbus.Error {
	if e := checkSig(msg, "RefreshEnergy", ""); e != nil {
		return e
	}
	return toDBusError(o.s.ctl.RefreshEnergy(context.Background()))
}

// EstimatePower returns the energy model's estimate for the managed
// workloads' current load under each policy (Controller.EstimatePower): the
// model's name, a note ("" when the model was fitted on a machine of this
// shape, else why its watts only rank the policies) and one (policy,
// watts, package watts) entry per policy, in policy order. It changes
// nothing; anyone may call it. Errors: InvalidArgs when given arguments;
// Failed when the daemon is stopping.
func (o busObject) EstimatePower(msg dbus.Message) (string, string, []estimateEntry, *dbus.Error) {
	if e := checkSig(msg, "EstimatePower", ""); e != nil {
		return "", "", nil, e
	}
	r, err := o.s.ctl.EstimatePower(context.Background())
	if err != nil {
		return "", "", nil, toDBusError(err)
	}
	out := make([]estimateEntry, 0, len(r.Policies))
	for _, e := range r.Policies {
		out = append(out, estimateEntry{string(e.Policy), e.Watts, e.PackageWatts})
	}
	return r.Model, r.Note, out, nil
}

// modelEstimateEntry is one element of EstimatePowerModels' estimates,
// signature (ssdd): model, policy, whole-machine watts (W), package watts
// (W).
type modelEstimateEntry struct {
	Model, Policy       string
	Watts, PackageWatts float64
}

// policySpreadEntry is one element of EstimatePowerModels' spread,
// signature (sddddddb): policy, the lowest and highest whole-machine
// estimate across the models (W), the same for the packages alone (W),
// the change from performance claimed (W: the smallest across the
// models, 0 when they disagree on its sign), the spread of that change
// across the models (W), and whether the change is larger than its
// spread (distinguishable).
type policySpreadEntry struct {
	Policy                            string
	LowWatts, HighWatts               float64
	LowPackageWatts, HighPackageWatts float64
	VsPerformanceWatts, SpreadWatts   float64
	Distinguishable                   bool
}

// EstimatePowerModels is EstimatePower under every model the daemon
// prices the load with (issue 35; Controller.EstimatePower's Models and
// Spread): MODEL and NOTE as EstimatePower's; ESTIMATES one (model,
// policy, watts, package watts) entry per model and policy, the machine's
// own model first, each model's policies in policy order; SPREAD one
// entry per policy, in policy order. Every watt is modelled, never
// measured. It changes nothing; anyone may call it. Errors: InvalidArgs
// when given arguments; Failed when the daemon is stopping.
func (o busObject) EstimatePowerModels(msg dbus.Message) (string, string, []modelEstimateEntry, []policySpreadEntry, *dbus.Error) {
	if e := checkSig(msg, "EstimatePowerModels", ""); e != nil {
		return "", "", nil, nil, e
	}
	r, err := o.s.ctl.EstimatePower(context.Background())
	if err != nil {
		return "", "", nil, nil, toDBusError(err)
	}
	est := make([]modelEstimateEntry, 0, len(r.Models)*len(r.Policies))
	for _, m := range r.Models {
		for _, e := range m.Policies {
			est = append(est, modelEstimateEntry{m.Model, string(e.Policy), e.Watts, e.PackageWatts})
		}
	}
	spread := make([]policySpreadEntry, 0, len(r.Spread))
	for _, s := range r.Spread {
		spread = append(spread, policySpreadEntry{string(s.Policy), s.LowWatts, s.HighWatts, s.LowPackageWatts, s.HighPackageWatts,
			s.VsPerformance.Watts, s.VsPerformance.Spread, s.VsPerformance.Distinguishable})
	}
	return r.Model, r.Note, est, spread, nil
}
