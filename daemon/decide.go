package daemon

import (
	"fmt"
	"os"
	"reflect"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/schedpolicyd/schedpolicyd/acpi"
	"github.com/schedpolicyd/schedpolicyd/daemon/snapshot"
	"github.com/schedpolicyd/schedpolicyd/policy"
	"github.com/schedpolicyd/schedpolicyd/sysfs"
)

// setKnob applies and persists a new knob; the caller's reply (D-Bus, the
// tree's write) comes after both. On a persist failure the previous knob is
// applied again and the error returned, so nothing changes.
//
// Without holds the knob is applied before it is persisted: persisting is
// a write, fsync and rename of state.json, slow on a busy disk, and the
// policy switch's effect — the cpuset writes — should not wait for it. A
// crash in between loses nothing that was
// acknowledged: the caller had no reply yet, and the originals were saved
// before the first cpuset write. With holds, which an explicit choice
// cancels, it persists first, since a cancelled hold cannot be undone.
func (d *Daemon) setKnob(k policy.Knob, via string) error {
	return d.setKnobAs(k, via, true)
}

// setKnobAs is setKnob; explicit (the user's choice, not a followed
// profile) also remembers k for the current power source (choices.go).
func (d *Daemon) setKnobAs(k policy.Knob, via string, explicit bool) error {
	if err := k.Validate(); err != nil {
		return err
	}
	prevChoices := d.choices
	if explicit {
		d.choices = d.withChoice(k)
	} else {
		d.choices, _ = withSetting(d.choices, k.PowerAwarePolicy) // a setting (choices.go)
	}
	if k == d.knob && d.knobChosen && reflect.DeepEqual(prevChoices, d.choices) {
		if len(d.holds) > 0 {
			d.cancelHolds() // an explicit choice, even of the same value
		}
		return nil
	}
	logChange := func() {
		d.log.WithFields(logrus.Fields{"via": via, "power_aware": k.PowerAware, "power_aware_policy": k.PowerAwarePolicy}).Info("knob changed")
	}
	prevAt := d.chosenAt
	d.chosenAt = choiceTime(explicit)
	if len(d.holds) > 0 {
		st := d.stateWith(k)
		st.Chosen = true
		if err := d.saveState(st); err != nil {
			d.log.WithError(err).Error("cannot persist choice; not applied")
			d.choices, d.chosenAt = prevChoices, prevAt
			return err
		}
		logChange()
		d.knob, d.knobChosen = k, true
		d.cancelHolds() // recomputes
		return nil
	}
	// The cpusets are written first; the new state is published (D-Bus
	// signals, the tree, sd_notify STATUS) only once it is persisted, so
	// a choice that cannot be saved is never announced.
	prev, prevChosen, prevChange := d.knob, d.knobChosen, d.lastChange
	d.knob, d.knobChosen = k, true
	d.unpublished = true
	d.recompute("knob", true)
	// As things are after the writes (a workload may have vanished);
	// nothing to do when the placement already saved exactly that before
	// its writes (one fsync per switch, not two).
	var err error
	if st := d.stateWith(k); !reflect.DeepEqual(st, d.lastSaved) {
		err = d.saveState(st)
	}
	if err != nil {
		d.log.WithError(err).Error("cannot persist choice; the previous one is applied again")
		d.knob, d.knobChosen = prev, prevChosen
		d.choices, d.chosenAt = prevChoices, prevAt
		d.recompute("knob not persisted", true)
		d.lastChange = prevChange
	}
	d.unpublished = false
	held := d.heldLogs
	d.heldLogs = nil
	d.publish()
	if err != nil {
		return err // the policy went back: nothing to say but the error
	}
	logChange()
	for _, log := range held {
		log()
	}
	return nil
}

// recompute derives the effective policy, plans, writes changed cpusets and
// publishes the new state. force applies a shrinking plan at once (policy
// or workload changes); periodic samples shrink only after shrinkAfter
// consecutive proposals, so a flapping load does not rewrite cpusets every
// tick.
func (d *Daemon) recompute(why string, force bool) {
	d.stats.Decisions.Add(1)
	if force {
		// Sampling stopped (or backed off) while every workload looked
		// idle: plan on fresh load signals.
		d.place.Freshen()
	}
	eff, reason := d.decide()
	d.policyReason = reason
	if eff != d.effective {
		if d.effective != "" {
			entry := d.log.WithFields(logrus.Fields{"from": d.effective, "to": eff, "why": why, "reason": reason})
			if d.unpublished {
				d.heldLogs = append(d.heldLogs, func() { entry.Info("policy changed") })
			} else {
				entry.Info("policy changed")
			}
		}
		d.effective = eff
		d.lastChange = time.Now()
		force = true
		d.writeKernelKnob()
	}
	// The segment of the old policy or power source ends now, before the
	// new plan's writes take effect.
	d.followEnergy()
	d.place.Apply(d.effective, d.topo, d.allowed, force)
	d.requestClockSync()
	if placedFor := d.place.LastPlan().Policy; placedFor != "" && placedFor != d.effective {
		d.policyReason += "; placing for performance: the load exceeds the packing threshold (race to idle)"
	}
	for _, e := range d.placementChanges(why) {
		if d.unpublished {
			d.heldLogs = append(d.heldLogs, func() { e.Info("placement changed") })
		} else {
			e.Info("placement changed")
		}
	}
	if !d.unpublished {
		d.saveEnergy()
		d.publish()
	}
}

// decide returns the effective policy and why: a hold (the most
// power-saving one wins) overrides the knob; otherwise the knob and the
// power source decide (policy.Knob.Effective). The reason says too
// whether the knob follows another power-profiles daemon (followNote).
func (d *Daemon) decide() (policy.Policy, string) {
	p, why := d.decideKnob()
	return p, why + d.followNote()
}

func (d *Daemon) decideKnob() (policy.Policy, string) {
	in := knobInputs{Knob: d.knob, Source: d.power.Source, SourceReason: d.power.Reason, LowBattery: d.lowBattery}
	if h := d.winningHold(); h != nil {
		in.Hold = h
	}
	if d.lowBattery {
		in.LowBatteryReason = d.lowBatteryReason()
	}
	return decidePolicy(in)
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

// writeKernelKnob mirrors the effective policy into a kernel that has the
// real sched_policy knob (the 2013 patch set's ABI).
//
// Once written, the file is read before every write: a value that is
// neither ours nor absent means another writer owns it, and the daemon
// steps aside (says so once, writes nothing) until the file holds our
// last value again.
func (d *Daemon) writeKernelKnob() {
	p := d.fs.Path("devices/system/cpu/sched_policy/current_sched_policy")
	if _, err := os.Stat(p); err != nil || d.kernelPolicy == string(d.effective) {
		return
	}
	if d.kernelPolicy != "" {
		if cur, err := sysfs.ReadAttr(p); err == nil && cur != d.kernelPolicy {
			d.stepAside("sched_policy", fmt.Sprintf("another writer (%s holds %q, we wrote %q)", p, cur, d.kernelPolicy))
			return
		}
		d.stepAside("sched_policy", "")
	}
	if err := sysfs.WriteAttr(p, string(d.effective)); err != nil {
		d.log.WithError(err).Warn("cannot write kernel sched_policy")
		return
	}
	d.kernelPolicy = string(d.effective)
}

// placementChanges are the info log entries of the last apply: one if
// the back end moved workloads, saying how many it moved (moved), how
// many of the managed workloads now hold CPUs the daemon set and which
// (placed; onto, the union of their cpulists, "none" when every workload
// has its original back), the policy placed for and why (the decision's
// trigger, as recompute was given it).
func (d *Daemon) placementChanges(why string) []*logrus.Entry {
	moved, managed, applied := d.place.Placed()
	if moved == 0 {
		return nil
	}
	onto, placed := sysfs.CPUSet{}, 0
	for _, a := range applied {
		if c, err := sysfs.ParseCPUList(a); err == nil && !c.IsEmpty() {
			onto = onto.Union(c)
			placed++
		}
	}
	ontoS := onto.String()
	if placed == 0 {
		ontoS = "none"
	}
	return []*logrus.Entry{d.log.WithFields(logrus.Fields{
		"placement": d.place.Mode(), "moved": moved, "managed": managed, "placed": placed,
		"onto": ontoS, "policy": d.place.LastPlan().Policy, "why": why,
	})}
}
