package daemon

import (
	"time"

	"github.com/schedpolicyd/schedpolicyd/acpi"
	"github.com/schedpolicyd/schedpolicyd/daemon/snapshot"
	"github.com/schedpolicyd/schedpolicyd/daemon/statefile"
	"github.com/schedpolicyd/schedpolicyd/policy"
)

// decider is the knob's decision: everything the effective policy depends
// on — the knob and the per-source choices (choices.go), the holds
// (holds.go), the power source and the low-battery tier (lowbattery.go),
// the followed power-profiles daemon (follow.go) — and the rules that
// change it. It does no I/O: no file, bus, log or clock (the time of a
// change is handed in). Its methods report what changed; the loop
// (Daemon.dec, knob.go) persists, logs, applies and publishes it.
type decider struct {
	set decisionSettings

	knob       policy.Knob
	knobChosen bool                   // knob is an explicit choice, not the configured default
	chosenAt   time.Time              // when the explicit choice in force took effect (reset.go); zero unknown
	choices    map[string]policy.Knob // explicit choice per power source (choices.go); copy on write
	holds      map[uint32]*snapshot.Hold
	holdIdx    holdIndex   // beside holds: cookies, holds per owner (holds.go)
	follow     followState // the power-profiles daemon followed (follow.go)
	power      acpi.Decision
	batteryPct int  // the system batteries' charge, percent; -1 unknown
	lowBattery bool // the low-battery tier is in force (lowbattery.go)

	effective    policy.Policy // the policy in force, "" before the first decision
	policyReason string        // why, in words (decide)
	lastChange   time.Time     // when effective last changed
}

// decisionSettings are the settings of the configuration the decision
// reads (Config's fields of the same names, as resolveConfig leaves them;
// a reload replaces them).
type decisionSettings struct {
	// DefaultKnob is the configured knob used until a choice is made; nil:
	// policy.DefaultKnob.
	DefaultKnob *policy.Knob
	// LowBattery is the low-battery tier's threshold, percent; 0 off.
	LowBattery int
	// ProfileMap is the power_aware each followed profile selects.
	ProfileMap map[string]policy.PowerAware
}

// decisionSettingsOf is what the decision reads of cfg.
func decisionSettingsOf(cfg Config) decisionSettings {
	return decisionSettings{DefaultKnob: cfg.DefaultKnob, LowBattery: cfg.LowBattery, ProfileMap: cfg.ProfileMap}
}

// newDecider is a decider with settings set and nothing known yet: the
// built-in default knob, no choice, no hold, an unknown charge.
func newDecider(set decisionSettings) *decider {
	return &decider{set: set, knob: policy.DefaultKnob(), holds: map[uint32]*snapshot.Hold{}, batteryPct: -1}
}

// loadState takes the knob and the per-source choices state.json holds
// (statefile.State.StartKnob: the saved knob, else the configured default).
func (c *decider) loadState(st statefile.State) {
	c.knob, c.knobChosen, c.chosenAt = st.StartKnob(c.set.DefaultKnob), st.Chosen, st.ChosenAt
	c.choices = st.Choices
}

// putState writes what state.json must hold of the decision into s: the
// knob in force, whether it is chosen and since when, and the per-source
// choices. The loop calls it after each change of them (Daemon.keepDecision).
func (c *decider) putState(s *statefile.Store) {
	s.SetDecision(c.knob, c.knobChosen, c.chosenAt, c.choices)
}

// setPower takes a new reading of the power source and of the system
// batteries' charge (percent, -1 unknown). tierChanged reports that the
// low-battery tier began or ended (setBatteryPercent). A change of source
// between ac and battery changes the knob only through knobForSource,
// which the caller calls next.
func (c *decider) setPower(p acpi.Decision, pct int) (tierChanged bool) {
	c.power = p
	return c.setBatteryPercent(pct)
}

// settle decides (decide) and makes the answer the policy in force as of
// now. changed reports a new policy; from is the one before ("" at the
// first decision).
func (c *decider) settle(now time.Time) (from policy.Policy, changed bool) {
	eff, reason := c.decide()
	c.policyReason = reason
	if eff == c.effective {
		return "", false
	}
	from, c.effective, c.lastChange = c.effective, eff, now
	return from, true
}

// placedFor notes in the reason that the plan was made for p (the
// balancer's race to idle) when p is not the policy in force.
func (c *decider) placedFor(p policy.Policy) {
	if p != "" && p != c.effective {
		c.policyReason += "; placing for performance: the load exceeds the packing threshold (race to idle)"
	}
}

// inForce is the decision as the snapshot publishes it.
func (c *decider) inForce(s *snapshot.Snapshot) {
	s.Policy, s.Knob, s.PowerSource, s.Reason = c.effective, c.knob, c.power.Source, c.power.Reason
	s.PolicyReason, s.LastChange, s.Holds = c.policyReason, c.lastChange, c.holdList()
}
