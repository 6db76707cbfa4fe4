package daemon

import (
	"context"
	"fmt"
	"syscall"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/schedpolicyd/schedpolicyd/daemon/snapshot"
)

// An explicit choice (the tree, D-Bus, schedpolicyctl set or auto) is
// saved and wins over the configuration's knob for good, per power source
// (choices.go); ResetKnob forgets every one of them, and the snapshot says
// where the knob in force comes from and since when a choice is in force.

// choiceTime is when an explicit choice that takes effect now took
// effect: now for a choice (chosen), zero otherwise.
func choiceTime(chosen bool) time.Time {
	if !chosen {
		return time.Time{}
	}
	return time.Now()
}

// knobFrom says where the knob in force comes from (snapshot.KnobFrom):
// the followed power profile while the knob is the one it selected, else
// a saved choice, else the configuration file's knob or the built-in one.
func (d *Daemon) knobFrom() string {
	switch {
	case d.follow.name != "" && d.knob == d.follow.knob:
		return snapshot.KnobFromProfile
	case d.knobChosen:
		return snapshot.KnobFromChoice
	case d.cfg.DefaultKnob != nil:
		return snapshot.KnobFromConfig
	}
	return snapshot.KnobFromDefault
}

// ResetKnob forgets every explicit choice, on every power source, and
// applies the base knob: the configuration's (or the followed power
// profile's, or the built-in default), as if no choice had ever been
// made (bus.Controller). Holds stay: a reset is not a choice. Persisted
// before it applies; a state that cannot be saved changes nothing (EIO).
func (d *Daemon) ResetKnob(ctx context.Context) error {
	return d.do(ctx, d.resetKnob)
}

func (d *Daemon) resetKnob() error {
	prevK, prevChosen, prevChoices, prevAt := d.knob, d.knobChosen, d.choices, d.chosenAt
	k := d.baseKnob()
	d.knob, d.knobChosen, d.choices, d.chosenAt = k, false, nil, time.Time{}
	if err := d.saveState(d.stateWith(k)); err != nil {
		d.knob, d.knobChosen, d.choices, d.chosenAt = prevK, prevChosen, prevChoices, prevAt
		d.log.WithError(err).Error("cannot persist the reset; nothing changed")
		return fmt.Errorf("reset: %w: %w", syscall.EIO, err)
	}
	d.log.WithFields(logrus.Fields{"power_aware": k.PowerAware, "power_aware_policy": k.PowerAwarePolicy, "from": d.knobFrom()}).Info("explicit choices forgotten; knob reset")
	d.recompute("knob reset", true)
	return nil
}
