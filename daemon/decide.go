package daemon

import (
	"fmt"

	"github.com/schedpolicyd/schedpolicyd/acpi"
	"github.com/schedpolicyd/schedpolicyd/daemon/snapshot"
	"github.com/schedpolicyd/schedpolicyd/policy"
)

// decide returns the effective policy and why: a hold (the most
// power-saving one wins) overrides the knob; otherwise the knob and the
// power source decide (policy.Knob.Effective). The reason says too
// whether the knob follows another power-profiles daemon (followNote).
func (c *decider) decide() (policy.Policy, string) {
	p, why := decidePolicy(c.inputs())
	return p, why + c.followNote()
}

// inputs are the decision's inputs as they are now.
func (c *decider) inputs() knobInputs {
	in := knobInputs{Knob: c.knob, Source: c.power.Source, SourceReason: c.power.Reason, LowBattery: c.lowBattery}
	if h := c.winningHold(); h != nil {
		in.Hold = h
	}
	if c.lowBattery {
		in.LowBatteryReason = c.lowBatteryReason()
	}
	return in
}

// knobInputs is everything the effective policy depends on.
type knobInputs struct {
	// Hold is the winning hold (the power-saving one when holds
	// disagree), nil without one.
	Hold *snapshot.Hold
	// Knob is the knob in force: the explicit choice made for this power
	// source, else the configured or built-in default (choices.go).
	Knob policy.Knob
	// Source and SourceReason are the power source and why (acpi).
	Source       acpi.Source
	SourceReason string
	// LowBattery: on battery below low_battery (with its hysteresis);
	// LowBatteryReason says so in words.
	LowBattery       bool
	LowBatteryReason string
}

// decidePolicy is the effective policy and why, in this order of
// precedence: a hold wins over everything; then the knob — power_aware 0
// is always performance and 2 always power_aware_policy; power_aware 1
// (automatic) is powersaving below low_battery on battery, whatever
// power_aware_policy says, else power_aware_policy on positive evidence of
// battery operation and performance on anything else (AC, unknown). It is
// pure: the same inputs give the same answer.
func decidePolicy(in knobInputs) (policy.Policy, string) {
	if h := in.Hold; h != nil {
		who := h.Owner
		if h.AppID != "" {
			who = h.AppID
		}
		return h.Policy, fmt.Sprintf("held by %s (%s)", who, h.Reason)
	}
	eff := in.Knob.Effective(string(in.Source))
	switch in.Knob.PowerAware {
	case policy.PowerAwareOff:
		return eff, "power_aware=0: always performance"
	case policy.PowerAwareOn:
		return eff, fmt.Sprintf("power_aware=2: always %s", eff)
	}
	if in.Source == acpi.Battery {
		if in.LowBattery {
			return policy.Powersaving, in.LowBatteryReason
		}
		return eff, "power_aware=1 (automatic) and the machine runs on battery: " + in.SourceReason
	}
	return eff, fmt.Sprintf("power_aware=1 (automatic) and no positive evidence of battery operation (power source %s): %s", in.Source, in.SourceReason)
}
