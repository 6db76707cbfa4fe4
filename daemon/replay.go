package daemon

import (
	"github.com/schedpolicyd/schedpolicyd/acpi"
	"github.com/schedpolicyd/schedpolicyd/policy"
)

// PolicyReplay replays the daemon's own decision of the effective
// policy over a time line without running a daemon (`schedpolicyd plan
// --scenario`): the decider itself (decider.go), with the knob and the
// power source decided as the loop has it decide, the low-battery tier
// entered and left as setBatteryPercent does (below LowBattery, until
// LowBatteryHysteresis points above it). No holds, no followed
// power-profiles daemon. Not safe for concurrent use.
type PolicyReplay struct {
	c *decider
}

// NewPolicyReplay starts a replay of knob k with the low-battery tier at
// lowBattery percent (0 off), as Config.LowBattery.
func NewPolicyReplay(k policy.Knob, lowBattery int) *PolicyReplay {
	c := newDecider(decisionSettings{LowBattery: lowBattery})
	c.knob = k
	return &PolicyReplay{c: c}
}

// Decide is the effective policy with the machine on source and its
// system batteries at batteryPct percent (-1 unknown), after the
// previous calls' history (the tier's hysteresis).
func (r *PolicyReplay) Decide(source acpi.Source, batteryPct int) policy.Policy {
	r.c.setPower(acpi.Decision{Source: source}, batteryPct)
	p, _ := r.c.decide()
	return p
}

// LowBattery reports whether the low-battery tier is in force after the
// last Decide.
func (r *PolicyReplay) LowBattery() bool { return r.c.lowBattery }
