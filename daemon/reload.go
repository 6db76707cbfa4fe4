package daemon

import (
	"context"
	"reflect"
	"slices"
	"sort"
	"strings"

	"github.com/sirupsen/logrus"

	"github.com/schedpolicyd/schedpolicyd/daemon/placement"
)

// startOnly names the settings that differ between the running
// configuration old and nc (both as resolveConfig leaves them) and that
// are read only as the daemon starts: the event sources, the roots and
// directories, the bus, the placement. Sorted; nil when none differs.
func startOnly(old, nc Config) []string {
	var out []string
	for name, changed := range map[string]bool{
		"sysfs_root": nc.SysfsRoot != old.SysfsRoot, "cgroup_root": nc.CgroupRoot != old.CgroupRoot,
		"tree_dir": nc.TreeDir != old.TreeDir, "tree_backend": nc.TreeBackend != old.TreeBackend,
		"state_dir": nc.StateDir != old.StateDir, "bus": nc.Bus != old.Bus, "events": nc.Events != old.Events,
		"debounce": nc.Debounce != old.Debounce, "recheck_interval": nc.RecheckInterval != old.RecheckInterval,
		"upower": nc.UPower != old.UPower, "logind": nc.Logind != old.Logind, "acpid_socket": nc.AcpidSocket != old.AcpidSocket,
		"placement": nc.Placement != old.Placement, "manage": !reflect.DeepEqual(nc.Manage, old.Manage),
		"task_clock": nc.NoTaskClock != old.NoTaskClock,
	} {
		if changed {
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out
}

// ReloadNeedsRestart checks cfg as Reload does and names the settings in
// which it differs from the running configuration that only a start
// reads (nil: Reload applies all of cfg). The caller then stops this
// daemon for a restart (PrepareRestart, then ending Run's context) and
// runs a new one with cfg: every workload is restored first and placed
// again by the new one. Errors: an invalid cfg, or a stopped daemon.
func (d *Daemon) ReloadNeedsRestart(ctx context.Context, cfg Config) ([]string, error) {
	nc, _, err := resolveConfig(cfg)
	if err != nil {
		return nil, err
	}
	var names []string
	err = d.do(ctx, func() error { names = startOnly(d.cfg, nc); return nil })
	return names, err
}

// PrepareRestart makes the stop that follows (Run's context ends) one of
// a restart with a new configuration (ReloadNeedsRestart): it restores
// every workload as a stop does, but tells systemd nothing (the new
// daemon's READY=1 ends the reload), and says why.
func (d *Daemon) PrepareRestart(settings []string) {
	d.restartFor.Store(&settings)
}

// Reload applies a new configuration (SIGHUP). The validated cfg replaces
// the running one for what can change at run time — boost_on_battery,
// epp and platform_profile (and which daemons own those are asked again),
// power_profiles_api and power_profiles_units (the bus connection is
// remade), the profile map, the slice rules, low_battery, the sampling
// period, metrics_textfile (the file at the old path is removed), the
// default knob. What only a start reads (ReloadNeedsRestart) is not
// applied here: a warning names it. It returns an error only for an
// invalid cfg or a stopped daemon; nothing changes then.
func (d *Daemon) Reload(ctx context.Context, cfg Config) error {
	nc, _, err := resolveConfig(cfg) // the same validation and defaults as at start
	if err != nil {
		return err
	}
	return d.do(ctx, func() error {
		old := d.cfg
		if restart := startOnly(old, nc); len(restart) > 0 {
			d.log.WithField("settings", restart).Warn("reload: these settings change at the next start")
		}
		d.cfg.SampleInterval = nc.SampleInterval
		d.cfg.ConfigDigest = nc.ConfigDigest
		d.cfg.DefaultKnob = nc.DefaultKnob
		applied, overridden := d.dec.reloadDefault(nc.DefaultKnob)
		d.keepDecision()
		switch {
		case applied:
			d.log.WithFields(logrus.Fields{"power_aware": nc.DefaultKnob.PowerAware, "power_aware_policy": nc.DefaultKnob.PowerAwarePolicy}).Info("reload: default knob changed")
			if err := d.save(); err != nil {
				d.log.WithError(err).Warn("reload: cannot save state")
			}
		case overridden:
			d.log.Info("reload: the configured default knob is not applied: a choice made through the tree, D-Bus or the CLI is in force")
		}
		if nc.BoostOnBattery != old.BoostOnBattery {
			d.cfg.BoostOnBattery = nc.BoostOnBattery
			if nc.BoostOnBattery == BoostKeep {
				d.boost.restore(d.fs, d.store, d.log, d.save)
			}
			d.boost.uncontrollable = false
			d.applyBoost()
		}
		if nc.MetricsTextfile != old.MetricsTextfile {
			d.cfg.MetricsTextfile = nc.MetricsTextfile
			d.setMetricsPath(nc.MetricsTextfile) // written by the recompute below
		}
		if !reflect.DeepEqual(nc.Slices, old.Slices) {
			d.cfg.Slices = nc.Slices
			d.log.WithField("slices", placement.SliceRulesString(nc.Slices)).Info("reload: slice rules changed")
		}
		if !slices.Equal(nc.Exempt, old.Exempt) {
			d.cfg.Exempt = nc.Exempt
			d.log.WithField("exempt", strings.Join(nc.Exempt, ",")).Info("reload: exempt setting changed")
		}
		d.syncPlacementConfig() // the sampling period, the slice rules and the exempt setting
		d.cfg.ProfileMap = nc.ProfileMap
		d.cfg.LowBattery = nc.LowBattery
		d.dec.set = decisionSettingsOf(d.cfg)
		if d.dec.setBatteryPercent(d.dec.batteryPct) {
			d.logLowBattery()
		}
		if nc.PowerProfilesAPI != old.PowerProfilesAPI || !slices.Equal(nc.PowerProfilesUnits, old.PowerProfilesUnits) {
			d.cfg.PowerProfilesAPI, d.cfg.PowerProfilesUnits = nc.PowerProfilesAPI, nc.PowerProfilesUnits
			// The connection closes, and Keep reconnects with the
			// new setting.
			d.bus.Reconfigure(nc.PowerProfilesAPI, nc.PowerProfilesUnits)
		}
		// epp and platform_profile: a kind turned off gets its values
		// back at the apply below; and a reload asks again which daemons
		// are installed.
		d.cfg.EPP, d.cfg.PlatformProfile = nc.EPP, nc.PlatformProfile
		if d.pref.ctx != nil {
			d.askPrefOwners(d.pref.ctx)
		}
		d.recompute("reload", true)
		d.applyPrefs(true)
		return nil
	})
}
