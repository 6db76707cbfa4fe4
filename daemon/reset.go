package daemon

import (
	"fmt"
	"syscall"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/schedpolicyd/schedpolicyd/daemon/snapshot"
)

// An explicit choice (the tree, D-Bus, schedpolicyctl set or auto) is
// saved and wins over the configuration's knob for good, per power source
// (choices.go); a reset forgets every one of them, and the snapshot says
// where the knob in force comes from and since when a choice is in force.

// choiceTime is when a knob that takes effect at now took effect as an
// explicit choice: now for a choice (chosen), zero otherwise.
func choiceTime(chosen bool, now time.Time) time.Time {
	if !chosen {
		return time.Time{}
	}
	return now
}

// knobFrom says where the knob in force comes from (snapshot.KnobFrom):
// the followed power profile while the knob is the one it selected, else
// a saved choice, else the configuration file's knob or the built-in one.
func (c *decider) knobFrom() string {
	switch {
	case c.follow.name != "" && c.knob == c.follow.knob:
		return snapshot.KnobFromProfile
	case c.knobChosen:
		return snapshot.KnobFromChoice
	case c.set.DefaultKnob != nil:
		return snapshot.KnobFromConfig
	}
	return snapshot.KnobFromDefault
}

// reset forgets every explicit choice, on every power source, and makes
// the base knob the one in force, as if no choice had ever been made;
// holds stay (a reset is not a choice). prev is what restore puts back.
func (c *decider) reset() (prev knobState) {
	prev = knobState{knob: c.knob, chosen: c.knobChosen, chosenAt: c.chosenAt, choices: c.choices, lastChange: c.lastChange}
	c.knob, c.knobChosen, c.choices, c.chosenAt = c.baseKnob(), false, nil, time.Time{}
	return prev
}

// resetKnob is ResetKnob on the loop (bus.Controller): the decider's
// reset, persisted before it applies; a state that cannot be saved
// changes nothing (EIO).
func (d *Daemon) resetKnob() error {
	prev := d.dec.reset()
	d.keepDecision()
	if err := d.save(); err != nil {
		d.dec.restore(prev)
		d.keepDecision()
		d.log.WithError(err).Error("cannot persist the reset; nothing changed")
		return fmt.Errorf("reset: %w: %w", syscall.EIO, err)
	}
	k := d.dec.knob
	d.log.WithFields(logrus.Fields{"power_aware": k.PowerAware, "power_aware_policy": k.PowerAwarePolicy, "from": d.dec.knobFrom()}).Info("explicit choices forgotten; knob reset")
	d.recompute("knob reset", true)
	return nil
}
