package statefile

import (
	"fmt"
	"slices"
	"sort"

	"github.com/schedpolicyd/schedpolicyd/acpi"
	"github.com/schedpolicyd/schedpolicyd/daemon/snapshot"
	"github.com/schedpolicyd/schedpolicyd/policy"
)

// ValidEnergyTotal checks one energy total as LoadState and SaveState do:
// Policy is performance, balance or powersaving, PowerSource is ac,
// battery or unknown, and Joules (J) and Seconds (s) are finite numbers
// from 0 to 10¹⁵. The error names the total and the field.
func ValidEnergyTotal(e snapshot.EnergyTotal) error {
	if _, err := policy.ParsePolicy(string(e.Policy)); err != nil {
		return fmt.Errorf("energy total: policy %q: want performance, balance or powersaving", e.Policy)
	}
	switch e.PowerSource {
	case acpi.AC, acpi.Battery, acpi.Unknown:
	default:
		return fmt.Errorf("energy total: power_source %q: want ac, battery or unknown", e.PowerSource)
	}
	for what, v := range map[string]float64{"joules": e.Joules, "seconds": e.Seconds} {
		if !(v >= 0 && v <= maxEnergyValue) { // NaN fails too
			return fmt.Errorf("energy total %s/%s: %s %v: want a finite number ≥ 0", e.Policy, e.PowerSource, what, v)
		}
	}
	return nil
}

// maxEnergyValue bounds a saved total: 10¹⁵ J is a megawatt for 30 years.
const maxEnergyValue = 1e15

// validEnergy checks the energy totals of a state file: each valid
// (ValidEnergyTotal), no (policy, power source) pair twice. On an
// error none is used.
func validEnergy(es []snapshot.EnergyTotal) ([]snapshot.EnergyTotal, error) {
	type pair struct {
		policy policy.Policy
		source acpi.Source
	}
	seen := map[pair]bool{}
	for _, e := range es {
		if err := ValidEnergyTotal(e); err != nil {
			return nil, err
		}
		k := pair{e.Policy, e.PowerSource}
		if seen[k] {
			return nil, fmt.Errorf("energy total %s/%s given twice", e.Policy, e.PowerSource)
		}
		seen[k] = true
	}
	if len(es) == 0 {
		return nil, nil
	}
	out := slices.Clone(es)
	SortEnergy(out)
	return out, nil
}

// SortEnergy sorts energy totals in place in the order State.Energy keeps
// them: by policy (performance, balance, powersaving), then by power
// source (ac, battery, unknown).
func SortEnergy(ts []snapshot.EnergyTotal) {
	rank := func(t snapshot.EnergyTotal) int {
		p := slices.Index(policy.AvailablePolicies, t.Policy)
		s := slices.Index([]acpi.Source{acpi.AC, acpi.Battery, acpi.Unknown}, t.PowerSource)
		return p*3 + s
	}
	sort.Slice(ts, func(i, j int) bool { return rank(ts[i]) < rank(ts[j]) })
}
