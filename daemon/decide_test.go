package daemon

import (
	"fmt"
	"testing"

	"github.com/schedpolicyd/schedpolicyd/acpi"
	"github.com/schedpolicyd/schedpolicyd/daemon/snapshot"
	"github.com/schedpolicyd/schedpolicyd/policy"
)

// TestDecidePolicyTruthTable: every combination of hold (none, a
// performance one, a powersaving one), knob (0, 1, 2 with balance and
// with powersaving), power source (ac, battery, unknown) and low battery
// (off, on) gives the policy the precedence says — hold > knob 0/2 > low
// battery > power source — with its reason.
func TestDecidePolicyTruthTable(t *testing.T) {
	holds := []*snapshot.Hold{nil, {Policy: policy.Performance, Owner: ":1.7", Reason: "game"}, {Policy: policy.Powersaving, Owner: ":1.8", AppID: "org.gnome.Settings", Reason: "saver"}}
	var knobs []policy.Knob
	for _, pa := range []policy.PowerAware{policy.PowerAwareOff, policy.PowerAwareAuto, policy.PowerAwareOn} {
		for _, pap := range []policy.Policy{policy.Balance, policy.Powersaving} {
			knobs = append(knobs, policy.Knob{PowerAware: pa, PowerAwarePolicy: pap})
		}
	}
	n := 0
	for _, h := range holds {
		for _, k := range knobs {
			for _, src := range []acpi.Source{acpi.AC, acpi.Battery, acpi.Unknown} {
				for _, low := range []bool{false, true} {
					in := knobInputs{Hold: h, Knob: k, Source: src, SourceReason: "why", LowBattery: low, LowBatteryReason: "low"}
					var want policy.Policy
					var why string
					switch {
					case h != nil:
						want = h.Policy
						who := h.Owner
						if h.AppID != "" {
							who = h.AppID
						}
						why = fmt.Sprintf("held by %s (%s)", who, h.Reason)
					case k.PowerAware == policy.PowerAwareOff:
						want, why = policy.Performance, "power_aware=0: always performance"
					case k.PowerAware == policy.PowerAwareOn:
						want, why = k.PowerAwarePolicy, "power_aware=2: always "+string(k.PowerAwarePolicy)
					case src == acpi.Battery && low:
						want, why = policy.Powersaving, "low"
					case src == acpi.Battery:
						want, why = k.PowerAwarePolicy, "power_aware=1 (automatic) and the machine runs on battery: why"
					default:
						want, why = policy.Performance, fmt.Sprintf("power_aware=1 (automatic) and no positive evidence of battery operation (power source %s): why", src)
					}
					got, gotWhy := decidePolicy(in)
					if got != want || gotWhy != why {
						t.Errorf("hold %v knob %+v source %s low %v: %s %q, want %s %q", h, k, src, low, got, gotWhy, want, why)
					}
					n++
				}
			}
		}
	}
	if n != 3*6*3*2 {
		t.Fatalf("%d rows", n)
	}
}
