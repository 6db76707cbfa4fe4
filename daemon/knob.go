package daemon

import (
	"fmt"
	"os"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/schedpolicyd/schedpolicyd/acpi"
	"github.com/schedpolicyd/schedpolicyd/policy"
	"github.com/schedpolicyd/schedpolicyd/sysfs"
)

// The loop's side of the decision (decider): it persists what the decider
// changed, logs it, applies the policy in force and publishes it.

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
// profile) also remembers k for the current power source (decider.choose).
func (d *Daemon) setKnobAs(k policy.Knob, via string, explicit bool) error {
	if err := k.Validate(); err != nil {
		return err
	}
	holding := len(d.dec.holds) > 0
	prev, changed := d.dec.choose(k, explicit, time.Now())
	if !changed {
		if holding {
			d.endHolds(d.dec.allHolds(), holdsCancelled) // an explicit choice, even of the same value
		}
		return nil
	}
	logChange := func() {
		d.log.WithFields(logrus.Fields{"via": via, "power_aware": k.PowerAware, "power_aware_policy": k.PowerAwarePolicy}).Info("knob changed")
	}
	d.keepDecision()
	if holding {
		if err := d.save(); err != nil {
			d.log.WithError(err).Error("cannot persist choice; not applied")
			d.dec.restore(prev)
			d.keepDecision()
			return err
		}
		logChange()
		d.endHolds(d.dec.allHolds(), holdsCancelled) // recomputes
		return nil
	}
	// The cpusets are written first; the new state is published (D-Bus
	// signals, the tree, sd_notify STATUS) only once it is persisted, so
	// a choice that cannot be saved is never announced.
	d.unpublished = true
	d.recompute("knob", true)
	// As things are after the writes (a workload may have vanished);
	// nothing to do when the placement already saved exactly that before
	// its writes (one fsync per switch, not two).
	var err error
	if d.place.PutRecords(); d.store.Changed() {
		err = d.store.Save()
	}
	if err != nil {
		d.log.WithError(err).Error("cannot persist choice; the previous one is applied again")
		d.dec.restore(prev)
		d.keepDecision()
		d.recompute("knob not persisted", true)
		d.dec.lastChange = prev.lastChange
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

// holdsCancelled is why an explicit choice ends every hold: a user's
// explicit choice wins over them. Only this end is announced to
// power-profiles holders (bus.Service.HoldEnded's cancelled).
const holdsCancelled = "cancelled by an explicit choice"

// addHold records a hold for owner (decider.addHold), says so and
// re-plans; a hold refused (*holdLimitError) changes nothing.
func (d *Daemon) addHold(p policy.Policy, reason, owner, appID string) (uint32, error) {
	cookie, err := d.dec.addHold(p, reason, owner, appID)
	if err != nil {
		return 0, err
	}
	d.log.WithFields(logrus.Fields{"cookie": cookie, "policy": p, "owner": owner, "reason": reason}).Info("policy hold added")
	d.recompute("hold", true)
	return cookie, nil
}

// endHolds ends the holds cookies (each must exist; none: nothing
// happens), says why for each, tells the bus (a power-profiles hold's
// ProfileReleased) and re-plans.
func (d *Daemon) endHolds(cookies []uint32, why string) {
	if len(cookies) == 0 {
		return
	}
	for _, c := range d.dec.dropHolds(cookies) {
		d.log.WithFields(logrus.Fields{"cookie": c, "why": why}).Info("policy hold ended")
		d.bus.HoldEnded(c, why == holdsCancelled) // only a user's choice is announced to power-profiles holders
	}
	d.recompute("hold ended", true)
}

// logLowBattery says that the low-battery tier began or ended.
func (d *Daemon) logLowBattery() {
	d.log.WithFields(logrus.Fields{"battery_percent": d.dec.batteryPct, "low_battery": d.dec.set.LowBattery, "in_force": d.dec.lowBattery}).Info("low-battery tier changed")
}

// onPowerState takes the power monitor's new state: the decision's power
// source and charge, boost's value, and on a change between sources
// boost_on_battery and the knob of the new source (saved); then a
// decision.
func (d *Daemon) onPowerState(st acpi.State) {
	// The monitor already logged the change with its reason.
	from := d.dec.power.Source
	tier := d.dec.setPower(st.Power, st.BatteryPercent)
	d.boost.value = st.Boost
	if tier {
		d.logLowBattery()
	}
	if from != st.Power.Source {
		d.log.WithFields(logrus.Fields{"from": from, "to": st.Power.Source, "trigger": st.Trigger}).Debug("power source applied")
		d.applyBoost()
		// A failed save is logged: the knob still follows the source
		// (nothing the user chose is lost, the choices are unchanged in
		// memory).
		if d.dec.knobForSource(from, st.Power.Source, time.Now()) {
			d.keepDecision()
			k := d.dec.knob
			d.log.WithFields(logrus.Fields{"power_source": choiceSource(st.Power.Source), "power_aware": k.PowerAware, "power_aware_policy": k.PowerAwarePolicy, "remembered": d.dec.knobChosen}).Info("knob of the new power source")
			if err := d.save(); err != nil {
				d.log.WithError(err).Warn("cannot save the knob of the new power source")
			}
		}
	}
	d.recompute("power source", true)
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
	if from, changed := d.dec.settle(time.Now()); changed {
		if from != "" {
			entry := d.log.WithFields(logrus.Fields{"from": from, "to": d.dec.effective, "why": why, "reason": d.dec.policyReason})
			if d.unpublished {
				d.heldLogs = append(d.heldLogs, func() { entry.Info("policy changed") })
			} else {
				entry.Info("policy changed")
			}
		}
		force = true
		d.writeKernelKnob()
	}
	// EPP and the platform profile follow the policy in force and, for
	// balance, the power source (energypref.go); nothing when neither
	// changed since.
	d.applyPrefs(false)
	// The segment of the old policy or power source ends now, before the
	// new plan's writes take effect.
	d.energy.follow(d.dec.energyKey(), d.dec.onBattery(), d.store)
	d.place.Apply(d.dec.effective, d.cpus.topo, d.cpus.allowed, force)
	d.requestClockSync()
	d.dec.placedFor(d.place.LastPlan().Policy)
	for _, e := range d.placementChanges(why) {
		if d.unpublished {
			d.heldLogs = append(d.heldLogs, func() { e.Info("placement changed") })
		} else {
			e.Info("placement changed")
		}
	}
	if !d.unpublished {
		d.energy.save(d.place, d.store)
		d.publish()
	}
}

// writeKernelKnob mirrors the effective policy into a kernel that has the
// real sched_policy knob (the 2013 patch set's ABI).
//
// Once written, the file is read before every write: a value that is
// neither ours nor absent means another writer owns it, and the daemon
// steps aside (says so once, writes nothing) until the file holds our
// last value again.
func (d *Daemon) writeKernelKnob() {
	eff := d.dec.effective
	p := d.fs.Path("devices/system/cpu/sched_policy/current_sched_policy")
	if _, err := os.Stat(p); err != nil || d.kernelPolicy == string(eff) {
		return
	}
	if d.kernelPolicy != "" {
		if cur, err := sysfs.ReadAttr(p); err == nil && cur != d.kernelPolicy {
			d.stepAside("sched_policy", fmt.Sprintf("another writer (%s holds %q, we wrote %q)", p, cur, d.kernelPolicy))
			return
		}
		d.stepAside("sched_policy", "")
	}
	if err := sysfs.WriteAttr(p, string(eff)); err != nil {
		d.log.WithError(err).Warn("cannot write kernel sched_policy")
		return
	}
	d.kernelPolicy = string(eff)
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
