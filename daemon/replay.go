package daemon

import (
	"io"

	"github.com/sirupsen/logrus"

	"github.com/schedpolicyd/schedpolicyd/acpi"
	"github.com/schedpolicyd/schedpolicyd/policy"
)

// PolicyReplay replays the daemon's own decision of the effective
// policy over a time line without running a daemon (`schedpolicyd plan
// --scenario`): the knob and the power source through decidePolicy, the
// low-battery tier entered and left as setBatteryPercent does (below
// LowBattery, until LowBatteryHysteresis points above it). No holds, no
// followed power-profiles daemon. Not safe for concurrent use.
type PolicyReplay struct {
	d *Daemon
}

// NewPolicyReplay starts a replay of knob k with the low-battery tier at
// lowBattery percent (0 off), as Config.LowBattery.
func NewPolicyReplay(k policy.Knob, lowBattery int) *PolicyReplay {
	log := logrus.New()
	log.SetOutput(io.Discard)
	return &PolicyReplay{d: &Daemon{cfg: Config{LowBattery: lowBattery}, log: log, knob: k, batteryPct: -1}}
}

// Decide is the effective policy with the machine on source and its
// system batteries at batteryPct percent (-1 unknown), after the
// previous calls' history (the tier's hysteresis).
func (r *PolicyReplay) Decide(source acpi.Source, batteryPct int) policy.Policy {
	r.d.setBatteryPercent(batteryPct)
	p, _ := decidePolicy(knobInputs{Knob: r.d.knob, Source: source, LowBattery: r.d.lowBattery})
	return p
}

// LowBattery reports whether the low-battery tier is in force after the
// last Decide.
func (r *PolicyReplay) LowBattery() bool { return r.d.lowBattery }
