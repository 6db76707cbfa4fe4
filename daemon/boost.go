package daemon

import (
	"github.com/sirupsen/logrus"

	"github.com/schedpolicyd/schedpolicyd/acpi"
	"github.com/schedpolicyd/schedpolicyd/daemon/statefile"
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
	owner := BoostOwner(d.fs, d.dec.ppOwner())
	d.stepAside("boost", owner)
	if owner != "" {
		return
	}
	if d.dec.power.Source != acpi.Battery {
		d.boost.restore(d.fs, d.store, d.log, d.save)
		return
	}
	if d.store.Boost() == nil {
		snap, err := d.fs.BoostSnapshot()
		if err != nil {
			d.boost.onError(err, d.log)
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
		d.boost.onError(err, d.log)
		return
	}
	d.log.WithFields(logrus.Fields{"boost": mode, "power": d.dec.power.Source}).Info("boost set for battery")
	d.boost.value, _ = d.fs.Boost()
}

// restore writes back the boost setting found at start-up (store.Boost),
// if the daemon changed it, and saves state.json without it (save). A
// failure is logged and the setting stays in state.json for the next
// start.
func (b *boostState) restore(fs sysfs.FS, store *statefile.Store, log logrus.FieldLogger, save func() error) {
	orig := store.Boost()
	if orig == nil {
		return
	}
	if err := fs.RestoreBoost(orig); err != nil {
		log.WithError(err).Warn("cannot restore boost; it stays in state.json for the next start")
		return
	}
	log.Info("boost restored to its start-up setting")
	store.SetBoost(nil)
	b.value, _ = fs.Boost()
	if err := save(); err != nil {
		log.WithError(err).Warn("cannot update state.json after restoring boost")
	}
}

// recoverBoost puts back a boost setting a crashed run saved but did not
// restore, before anything else happens; one it cannot put back is kept
// in store, to be tried again on exit.
func recoverBoost(fs sysfs.FS, store *statefile.Store, log logrus.FieldLogger, saved []sysfs.BoostSetting) {
	if len(saved) == 0 {
		return
	}
	if err := fs.RestoreBoost(saved); err != nil {
		log.WithError(err).Warn("cannot restore the boost setting saved by a previous run")
		store.SetBoost(saved) // keep trying on exit
		return
	}
	log.Info("boost restored to the setting saved by a previous run that did not stop cleanly")
}

// onError reports a failed boost read or write; an error that means
// boost cannot be controlled at all stops every further attempt.
func (b *boostState) onError(err error, log logrus.FieldLogger) {
	if sysfs.BoostNotControllable(err) {
		b.uncontrollable = true
		log.WithError(err).Warn("boost cannot be controlled on this machine; boost_on_battery ignored")
		return
	}
	log.WithError(err).Warn("changing boost failed")
}
