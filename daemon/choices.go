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
//
// power_aware_policy is a setting, not a choice: which power-aware policy
// modes 1 and 2 use, on every power source. Whatever sets it (a write of
// power_aware_policy, or of balance or powersaving to current_sched_policy)
// sets it in every remembered choice too, and a source's knob always
// carries the current one; only power_aware (with a current_sched_policy
// choice of performance, balance or powersaving) stays per source. Else
// "what to use on battery", set while charging, would apply nowhere.

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
	m, cloned := withSetting(d.choices, k.PowerAwarePolicy)
	src := choiceSource(d.power.Source)
	if src == "" {
		return m
	}
	if old, ok := m[src]; ok && old == k {
		return m
	}
	if !cloned {
		m = maps.Clone(m)
	}
	if m == nil {
		m = map[string]policy.Knob{}
	}
	m[src] = k
	return m
}

// withSetting is choices with power_aware_policy p in every remembered
// choice: a new map (cloned) when any changes, else choices itself.
func withSetting(choices map[string]policy.Knob, p policy.Policy) (m map[string]policy.Knob, cloned bool) {
	m = choices
	for src, k := range choices {
		if k.PowerAwarePolicy == p {
			continue
		}
		if !cloned {
			m, cloned = maps.Clone(choices), true
		}
		k.PowerAwarePolicy = p
		m[src] = k
	}
	return m, cloned
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
	k.PowerAwarePolicy = d.knob.PowerAwarePolicy // the setting, on every source
	if k == d.knob && chosen == d.knobChosen {
		return
	}
	d.knob, d.knobChosen, d.chosenAt = k, chosen, choiceTime(chosen)
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
	setting := d.knob.PowerAwarePolicy // the saved knob's: the latest setting
	saved, savedChosen := d.knob, d.knobChosen
	if k, ok := d.choices[t]; ok {
		d.knob, d.knobChosen = k, true
	} else {
		d.knob, d.knobChosen = d.baseKnob(), false
	}
	d.knob.PowerAwarePolicy = setting
	if d.knob != saved || d.knobChosen != savedChosen {
		d.chosenAt = choiceTime(d.knobChosen) // another source's choice, or none
	}
}
