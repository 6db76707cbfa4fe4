package snapshot

import (
	"testing"

	"github.com/schedpolicyd/schedpolicyd/policy"
)

func TestStatusText(t *testing.T) {
	s := Snapshot{
		Policy: policy.Powersaving, Knob: policy.Knob{PowerAware: policy.PowerAwareOn, PowerAwarePolicy: policy.Powersaving},
		PowerSource: "battery", Workloads: make([]WorkloadStatus, 3),
	}
	if got, want := s.StatusText(), "policy powersaving (power_aware 2), power source battery, 3 workloads"; got != want {
		t.Errorf("StatusText() = %q, want %q", got, want)
	}
	if got, want := FormatStatus(policy.Performance, policy.PowerAwareAuto, "ac", 0), "policy performance (power_aware 1), power source ac, 0 workloads"; got != want {
		t.Errorf("FormatStatus = %q, want %q", got, want)
	}
}

func TestEnergySourceName(t *testing.T) {
	for _, tc := range []struct{ source, want string }{
		{"", EnergySourceNone}, // before the first reading
		{EnergySourceRAPL, EnergySourceRAPL},
		{EnergySourceBattery, EnergySourceBattery},
		{EnergySourceNone, EnergySourceNone},
	} {
		if got := (Snapshot{EnergySource: tc.source}).EnergySourceName(); got != tc.want {
			t.Errorf("EnergySourceName of %q = %q, want %q", tc.source, got, tc.want)
		}
	}
}
