package daemon

import (
	"github.com/sirupsen/logrus"

	"github.com/schedpolicyd/schedpolicyd/acpi"
	"github.com/schedpolicyd/schedpolicyd/sysfs"
)

// boostState is the loop's view of cpufreq boost.
type boostState struct {
	value string // as last read: "1", "0" or "unsupported" (the tree's boost file)
	// The setting as found, while we manage it, is the store's
	// (statefile.Store.Boost: saved in state.json).
	// uncontrollable: boost cannot be controlled on this machine
	// (sysfs.BoostNotControllable); said once, then left alone.
	uncontrollable bool
}

// applyBoost carries out boost_on_battery after a power-source change (and
// at start): on battery boost is switched off or on as configured; on AC or
// an unknown source the setting found at start-up comes back. The setting
// found is saved in state.json before the first write, so a crash cannot
// lose it. "keep" never touches boost. A machine whose boost cannot be
// controlled (no file, EPERM from a BIOS lock, EAGAIN from intel_pstate
// off) is reported once and left alone, and so is boost while another
// owner manages it (BoostOwner: amd_pstate dynamic EPP, or a followed
// power-profiles daemon with amd-pstate): nothing is written then.
func (d *Daemon) applyBoost() {
	mode := d.cfg.BoostOnBattery
	if mode == BoostKeep || d.boost.uncontrollable {
		return
	}
	owner := d.boostOwner()
	d.stepAside("boost", owner)
	if owner != "" {
		return
	}
	if d.dec.power.Source != acpi.Battery {
		d.restoreBoost()
		return
	}
	if d.store.Boost() == nil {
		snap, err := d.fs.BoostSnapshot()
		if err != nil {
			d.onBoostError(err)
			return
		}
		d.store.SetBoost(snap)
		if err := d.save(); err != nil {
			d.log.WithError(err).Error("cannot save the boost setting; not changing boost")
			d.store.SetBoost(nil)
			return
		}
	}
	on := mode == BoostEnable
	if err := d.fs.SetBoost(on); err != nil {
		d.onBoostError(err)
		return
	}
	d.log.WithFields(logrus.Fields{"boost": mode, "power": d.dec.power.Source}).Info("boost set for battery")
	d.boost.value, _ = d.fs.Boost()
}

// restoreBoost writes back the boost setting found at start-up, if the
// daemon changed it. A failure is logged and the setting stays in
// state.json for the next start.
func (d *Daemon) restoreBoost() {
	orig := d.store.Boost()
	if orig == nil {
		return
	}
	if err := d.fs.RestoreBoost(orig); err != nil {
		d.log.WithError(err).Warn("cannot restore boost; it stays in state.json for the next start")
		return
	}
	d.log.Info("boost restored to its start-up setting")
	d.store.SetBoost(nil)
	d.boost.value, _ = d.fs.Boost()
	if err := d.save(); err != nil {
		d.log.WithError(err).Warn("cannot update state.json after restoring boost")
	}
}

// recoverBoost puts back a boost setting a crashed run saved but did not
// restore, before anything else happens.
func (d *Daemon) recoverBoost(saved []sysfs.BoostSetting) {
	if len(saved) == 0 {
		return
	}
	if err := d.fs.RestoreBoost(saved); err != nil {
		d.log.WithError(err).Warn("cannot restore the boost setting saved by a previous run")
		d.store.SetBoost(saved) // keep trying on exit
		return
	}
	d.log.Info("boost restored to the setting saved by a previous run that did not stop cleanly")
}

// onBoostError reports a failed boost read or write; an error that means
// boost cannot be controlled at all stops every further attempt.
func (d *Daemon) onBoostError(err error) {
	if sysfs.BoostNotControllable(err) {
		d.boost.uncontrollable = true
		d.log.WithError(err).Warn("boost cannot be controlled on this machine; boost_on_battery ignored")
		return
	}
	d.log.WithError(err).Warn("changing boost failed")
}
