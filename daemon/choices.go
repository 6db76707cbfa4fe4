package daemon

import (
	"maps"

	"github.com/sirupsen/logrus"

	"github.com/schedpolicyd/schedpolicyd/acpi"
	"github.com/schedpolicyd/schedpolicyd/policy"
)

// Per-power-source choices (TLP's "smart" switching): the
// user's last explicit choice (tree, D-Bus, CLI) is remembered for the
// power source it was made on, "ac" or "battery", in state.json's
// optional "choices". When the source changes between the two and either
// has a remembered choice, the knob becomes the new source's choice, or,
// if it has none, the base knob: the followed power profile's while one is
// followed (follow.go), else the configured default. So a choice made on
// battery is not carried over to AC. A choice made while the source is
// unknown, and a followed profile, are not remembered per source. Without
// any remembered choice (a state file from before) the knob carries over,
// as before.

// choiceSource is the key of src in Daemon.choices; "" for unknown.
func choiceSource(src acpi.Source) string {
	switch src {
	case acpi.AC:
		return "ac"
	case acpi.Battery:
		return "battery"
	}
	return ""
}

// withChoice is d.choices with k remembered for the current power source:
// a new map (the saved State shares the old one), or the same map when
// nothing changes.
func (d *Daemon) withChoice(k policy.Knob) map[string]policy.Knob {
	src := choiceSource(d.power.Source)
	if src == "" {
		return d.choices
	}
	if old, ok := d.choices[src]; ok && old == k {
		return d.choices
	}
	m := maps.Clone(d.choices)
	if m == nil {
		m = map[string]policy.Knob{}
	}
	m[src] = k
	return m
}

// baseKnob is the knob of a source without a remembered choice.
func (d *Daemon) baseKnob() policy.Knob {
	switch {
	case d.follow.name != "":
		return d.follow.knob
	case d.cfg.DefaultKnob != nil:
		return *d.cfg.DefaultKnob
	}
	return policy.DefaultKnob()
}

// knobForSource applies the knob of source to (on a change from ac to
// battery or back, when either has a remembered choice), saves it and
// says so; the caller recomputes. A failed save is logged: the knob still
// follows the source (nothing the user chose is lost, the choices are
// unchanged in memory).
func (d *Daemon) knobForSource(from, to acpi.Source) {
	f, t := choiceSource(from), choiceSource(to)
	if f == "" || t == "" || f == t || len(d.choices) == 0 {
		return
	}
	k, chosen := d.choices[t]
	if !chosen {
		k = d.baseKnob()
	}
	if k == d.knob && chosen == d.knobChosen {
		return
	}
	d.knob, d.knobChosen = k, chosen
	d.log.WithFields(logrus.Fields{"power_source": t, "power_aware": k.PowerAware, "power_aware_policy": k.PowerAwarePolicy, "remembered": chosen}).Info("knob of the new power source")
	if err := d.saveState(d.stateWith(d.knob)); err != nil {
		d.log.WithError(err).Warn("cannot save the knob of the new power source")
	}
}

// startKnobForSource is knobForSource at start-up, for the source first
// read: its remembered choice, or the base knob when only the other
// source has one.
func (d *Daemon) startKnobForSource() {
	t := choiceSource(d.power.Source)
	if t == "" || len(d.choices) == 0 {
		return
	}
	if k, ok := d.choices[t]; ok {
		d.knob, d.knobChosen = k, true
	} else {
		d.knob, d.knobChosen = d.baseKnob(), false
	}
}
