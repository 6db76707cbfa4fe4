package daemon

import (
	"maps"
	"reflect"
	"time"

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

// choiceSource is the key of src in decider.choices; "" for unknown.
func choiceSource(src acpi.Source) string {
	switch src {
	case acpi.AC:
		return "ac"
	case acpi.Battery:
		return "battery"
	}
	return ""
}

// withChoice is c.choices with k remembered for the current power source:
// a new map (the saved State shares the old one), or the same map when
// nothing changes.
func (c *decider) withChoice(k policy.Knob) map[string]policy.Knob {
	m, cloned := withSetting(c.choices, k.PowerAwarePolicy)
	src := choiceSource(c.power.Source)
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

// knobState is what a choice changes (choose) and a choice that cannot be
// saved puts back (restore): the knob, whether it is chosen and since
// when, the per-source choices, and when the policy last changed.
type knobState struct {
	knob       policy.Knob
	chosen     bool
	chosenAt   time.Time
	choices    map[string]policy.Knob
	lastChange time.Time
}

// choose makes k the knob in force, chosen: explicit (the user's choice,
// not a followed profile) also remembers it for the current power source;
// either way its power_aware_policy becomes the setting of every
// remembered choice (withSetting). changed is false when nothing changes
// (the same knob was already chosen, the choices are the same); prev is
// what restore puts back. k must be valid. An explicit choice took
// effect at now (chosenAt); a followed profile's has no time.
func (c *decider) choose(k policy.Knob, explicit bool, now time.Time) (prev knobState, changed bool) {
	prev = knobState{knob: c.knob, chosen: c.knobChosen, chosenAt: c.chosenAt, choices: c.choices, lastChange: c.lastChange}
	if explicit {
		c.choices = c.withChoice(k)
	} else {
		c.choices, _ = withSetting(c.choices, k.PowerAwarePolicy) // a setting
	}
	if k == c.knob && c.knobChosen && reflect.DeepEqual(prev.choices, c.choices) {
		return prev, false
	}
	c.knob, c.knobChosen, c.chosenAt = k, true, choiceTime(explicit, now)
	return prev, true
}

// restore puts back the knob, whether it is chosen and since when, and
// the choices of s (not lastChange, which the caller restores once it
// decided again).
func (c *decider) restore(s knobState) {
	c.knob, c.knobChosen, c.chosenAt, c.choices = s.knob, s.chosen, s.chosenAt, s.choices
}

// reloadDefault takes a reload's configured default knob def (nil: none;
// the DefaultKnob setting becomes def). While no explicit choice is in
// force the knob follows the file: a def that differs becomes the knob
// (applied; the caller says so and saves it). While one is, a def that
// differs is not applied (overridden; the caller says so).
func (c *decider) reloadDefault(def *policy.Knob) (applied, overridden bool) {
	c.set.DefaultKnob = def
	if def == nil || *def == c.knob {
		return false, false
	}
	if c.knobChosen {
		return false, true
	}
	c.knob = *def
	return true, false
}

// baseKnob is the knob of a source without a remembered choice.
func (c *decider) baseKnob() policy.Knob {
	switch {
	case c.follow.name != "":
		return c.follow.knob
	case c.set.DefaultKnob != nil:
		return *c.set.DefaultKnob
	}
	return policy.DefaultKnob()
}

// knobForSource makes the knob of source to the one in force (on a change
// from ac to battery or back, when either has a remembered choice): its
// remembered choice, else the base knob, with the current
// power_aware_policy. changed reports a new knob or a change of whether
// it is chosen; the caller says so, saves it and decides again. A
// remembered choice brought back takes effect at now (chosenAt).
func (c *decider) knobForSource(from, to acpi.Source, now time.Time) (changed bool) {
	f, t := choiceSource(from), choiceSource(to)
	if f == "" || t == "" || f == t || len(c.choices) == 0 {
		return false
	}
	k, chosen := c.choices[t]
	if !chosen {
		k = c.baseKnob()
	}
	k.PowerAwarePolicy = c.knob.PowerAwarePolicy // the setting, on every source
	if k == c.knob && chosen == c.knobChosen {
		return false
	}
	c.knob, c.knobChosen, c.chosenAt = k, chosen, choiceTime(chosen, now)
	return true
}

// startKnobForSource is knobForSource at start-up, for the source first
// read: its remembered choice, or the base knob when only the other
// source has one. Another source's choice, or none, takes effect at now
// (chosenAt); the saved one keeps its time.
func (c *decider) startKnobForSource(now time.Time) {
	t := choiceSource(c.power.Source)
	if t == "" || len(c.choices) == 0 {
		return
	}
	setting := c.knob.PowerAwarePolicy // the saved knob's: the latest setting
	saved, savedChosen := c.knob, c.knobChosen
	if k, ok := c.choices[t]; ok {
		c.knob, c.knobChosen = k, true
	} else {
		c.knob, c.knobChosen = c.baseKnob(), false
	}
	c.knob.PowerAwarePolicy = setting
	if c.knob != saved || c.knobChosen != savedChosen {
		c.chosenAt = choiceTime(c.knobChosen, now)
	}
}
