package daemon

import (
	"context"
	"fmt"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/schedpolicyd/schedpolicyd/acpi"
	"github.com/schedpolicyd/schedpolicyd/daemon/bus"
	"github.com/schedpolicyd/schedpolicyd/daemon/energypref"
	"github.com/schedpolicyd/schedpolicyd/policy"
	"github.com/schedpolicyd/schedpolicyd/sysfs"
)

// The energy preferences (EPP, the ACPI platform profile) move with the
// policy in force (package energypref) where no other daemon owns them:
// the installed-unit rule of power_profiles_units (a unit file installed
// and not masked, as the system manager says), over the daemons that
// write each knob, the kernel's own dynamic EPP, and a followed
// power-profiles daemon.

// EPPUnits are the services that write the cpufreq policies'
// energy_performance_preference:
//   - power-profiles-daemon (its intel_pstate and amd_pstate drivers,
//     src/ppd-driver-intel-pstate.c, ppd-driver-amd-pstate.c);
//   - tuned (the cpu plugin's energy_performance_preference option,
//     tuned/plugins/plugin_cpu.py) and tuned-ppd, its power-profiles API;
//   - TLP (CPU_ENERGY_PERF_POLICY_ON_AC/BAT) and tlp-pd;
//   - auto-cpufreq (energy_performance_preference per [charger]/[battery],
//     its auto-cpufreq.conf-example);
//   - intel-lpmd (lp_mode_epp and each state's EPP,
//     intel_lpmd_config.xml(5)).
var EPPUnits = []string{"power-profiles-daemon.service", "tuned.service", "tuned-ppd.service", "tlp.service", "tlp-pd.service", "auto-cpufreq.service", "intel_lpmd.service"}

// PlatformProfileUnits are the services that write
// /sys/firmware/acpi/platform_profile: power-profiles-daemon
// (src/ppd-driver-platform-profile.c), tuned (tuned/plugins/plugin_acpi.py,
// platform_profile) and tuned-ppd, TLP (PLATFORM_PROFILE_ON_AC/BAT, TLP
// 1.4+) and tlp-pd, auto-cpufreq (platform_profile, its PR #752, 2024) and
// system76-power (its platform_profile module).
var PlatformProfileUnits = []string{"power-profiles-daemon.service", "tuned.service", "tuned-ppd.service", "tlp.service", "tlp-pd.service", "auto-cpufreq.service", "system76-power.service"}

// prefState is the loop's side of the energy preferences.
type prefState struct {
	act *energypref.Actuator
	// units is what the system manager last said of EPPUnits and
	// PlatformProfileUnits (bus.InstalledUnitsAt); unitsErr why it
	// could not say; asked: an answer came (before it, nothing is
	// written).
	units    bus.InstalledUnits
	unitsErr string
	asked    bool
	asking   bool // a question is out (askPrefOwners)
	again    bool // ask again once it is answered
	// ctx ends the questions' goroutines with the daemon (start's), and
	// wg joins them (start's stop).
	ctx context.Context
	wg  sync.WaitGroup
	// last is what the last apply was for; an apply for the same is
	// skipped unless forced.
	last    prefKey
	applied bool
	said    map[string]string // file → the last reason logged for it
}

type prefKey struct {
	p         policy.Policy
	src       acpi.Source
	eppAside  string
	platAside string
}

// PrefAside says why kind ("epp", "platform_profile") is not written
// now, "" when it is: off in the configuration, the kernel's amd_pstate
// dynamic EPP (EPP only), a followed power-profiles daemon (ppOwner, ""
// none), an installed unit of units (installed, from the system manager;
// its Systemd false: no unit can be installed), or an unknown answer
// (unknown, why systemd could not say; "" it did).
func PrefAside(fs sysfs.FS, kind string, mode PrefMode, ppOwner string, installed bus.InstalledUnits, unknown string) string {
	if mode == PrefOff {
		return fmt.Sprintf("off (%s = \"off\")", kind)
	}
	if kind == energypref.KindEPP {
		if v, err := sysfs.ReadAttr(fs.Path(amdPstateDynamicEPP)); err == nil && v == "1" {
			return "the kernel's amd_pstate dynamic EPP (" + amdPstateDynamicEPP + " = 1)"
		}
	}
	if ppOwner != "" {
		return "the power-profiles daemon " + ppOwner + ", which this daemon follows"
	}
	if unknown != "" {
		return "unknown: " + unknown
	}
	units := EPPUnits
	if kind == energypref.KindPlatformProfile {
		units = PlatformProfileUnits
	}
	for _, u := range units {
		if st, ok := installed.States[u]; ok {
			return fmt.Sprintf("%s (installed, %s; the installed-unit rule of power_profiles_units)", u, st)
		}
	}
	return ""
}

// prefUnits is every unit asked about, once each.
func prefUnits() []string {
	var all []string
	for _, u := range append(slices.Clone(EPPUnits), PlatformProfileUnits...) {
		if !slices.Contains(all, u) {
			all = append(all, u)
		}
	}
	return all
}

// askPrefOwners asks the system manager, off the loop, which of the
// knobs' daemons are installed, and applies the preferences once it
// answers. With bus "none" nothing can be asked: where systemd is PID 1
// (sd_booted) the answer is unknown and nothing is written; elsewhere no
// unit can be installed. One question at a time; asked again while one
// is out, it asks once more after.
func (d *Daemon) askPrefOwners(ctx context.Context) {
	if d.cfg.EPP == PrefOff && d.cfg.PlatformProfile == PrefOff {
		d.pref.asked, d.pref.unitsErr = true, ""
		return
	}
	if d.cfg.Bus == "none" {
		d.pref.asked, d.pref.units, d.pref.unitsErr = true, bus.InstalledUnits{}, ""
		if _, err := os.Stat(sdBootedDir); err == nil {
			d.pref.unitsErr = "bus none: systemd is PID 1 but cannot be asked which daemons are installed"
		}
		return
	}
	if d.pref.asking {
		d.pref.again = true
		return
	}
	d.pref.asking = true
	addr := d.cfg.Bus
	d.pref.wg.Go(func() {
		res, err := bus.InstalledUnitsAt(ctx, addr, prefUnits())
		d.do(ctx, func() error {
			d.pref.asking, d.pref.asked = false, true
			d.pref.units, d.pref.unitsErr = res, ""
			if err != nil {
				d.pref.unitsErr = "systemd could not say which daemons are installed: " + err.Error()
			}
			if d.pref.again {
				d.pref.again = false
				d.askPrefOwners(ctx)
			}
			d.applyPrefs(true)
			return nil
		})
	})
}

// prefOwnersRetry is how long followPrefOwners waits before it connects
// again to a system manager it lost or could not reach.
const prefOwnersRetry = 30 * time.Second

// followPrefOwners follows the system manager on addr (bus.WatchUnitFiles)
// and asks again which of the knobs' daemons are installed whenever its
// unit files may have changed: power-profiles-daemon or TLP installed
// while this daemon runs gets its knobs at once (the daemon steps aside,
// giving back what it wrote), and a purge or a mask gives them back to
// the policy. Off the loop; the question goes through the loop
// (askPrefOwners, one at a time). A lost or unreachable manager is tried
// again every prefOwnersRetry, said once; a bus without systemd ends it.
func (d *Daemon) followPrefOwners(ctx context.Context, addr string) {
	said := false
	for {
		err := bus.WatchUnitFiles(ctx, addr, prefUnits(), func() {
			d.do(ctx, func() error {
				d.askPrefOwners(ctx)
				return nil
			})
		})
		if ctx.Err() != nil || err == nil {
			return
		}
		if !said {
			d.log.WithError(err).Warn("cannot follow the system manager's unit files; which daemons own the energy preferences is asked again only at a reload until it answers")
			said = true
		}
		t := time.NewTimer(prefOwnersRetry)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// asides are PrefAside for both kinds on fs, for the modes epp and plat,
// with the power-profiles daemon followed (pp, "" none) and what the
// system manager said.
func (p *prefState) asides(fs sysfs.FS, epp, plat PrefMode, pp string) (eppAside, platAside string) {
	unknown := p.unitsErr
	if !p.asked {
		unknown = "systemd has not said yet which daemons are installed"
	}
	return PrefAside(fs, energypref.KindEPP, epp, pp, p.units, unknown),
		PrefAside(fs, energypref.KindPlatformProfile, plat, pp, p.units, unknown)
}

// applyPrefs moves the energy preferences to the policy in force and the
// power source, unless that was done already (force: again anyway, after
// a hotplug, a reload or the owners' answer). It says once per file why a
// file is not written, and logs what was.
func (d *Daemon) applyPrefs(force bool) {
	if d.pref.act == nil || d.dec.effective == "" {
		return
	}
	if !d.pref.asked {
		return // the answer applies them (askPrefOwners)
	}
	eppAside, platAside := d.pref.asides(d.fs, d.cfg.EPP, d.cfg.PlatformProfile, d.dec.ppOwner())
	for knob, aside := range map[string]string{"energy_performance_preference": eppAside, "platform_profile": platAside} {
		if strings.HasPrefix(aside, "off (") {
			aside = "" // the configuration's word, not an owner
		}
		d.stepAside(knob, aside)
	}
	key := prefKey{p: d.dec.effective, src: d.dec.power.Source, eppAside: eppAside, platAside: platAside}
	if !force && d.pref.applied && key == d.pref.last {
		return
	}
	d.pref.last, d.pref.applied = key, true
	rep, err := d.pref.act.Apply(key.p, key.src, energypref.Settings{EPPAside: eppAside, PlatformAside: platAside})
	if err != nil {
		d.log.WithError(err).Error("cannot save the energy preferences' records; not changing them")
	}
	d.pref.report(d.log, rep, key.p, key.src, "energy preferences changed (the policy's values, or those found where the daemon steps aside)")
}

// report logs what rep wrote (info: msg, with the policy in force pol
// and the power source src) and, once per file and reason, why a file was
// not written (warning for a refused write or a value someone else wrote,
// debug otherwise).
func (p *prefState) report(log logrus.FieldLogger, rep energypref.Report, pol policy.Policy, src acpi.Source, msg string) {
	if len(rep.Written) > 0 {
		log.WithFields(logrus.Fields{"policy": pol, "power": src, "written": summarise(rep.Written)}).Info(msg)
	}
	if p.said == nil {
		p.said = map[string]string{}
	}
	files := make([]string, 0, len(rep.Skipped))
	for f := range rep.Skipped {
		files = append(files, f)
	}
	sort.Strings(files)
	for _, f := range files {
		why := rep.Skipped[f]
		if p.said[f] == why {
			continue
		}
		p.said[f] = why
		e := log.WithFields(logrus.Fields{"file": f, "why": why})
		if strings.HasPrefix(why, "refused") || strings.HasPrefix(why, "left alone") || strings.HasPrefix(why, "not restored") {
			e.Warn("energy preference not written")
		} else {
			e.Debug("energy preference not written")
		}
	}
}

// summarise is "VALUE: FILE, FILE; VALUE: FILE" of written, by value.
func summarise(written map[string]string) string {
	byVal := map[string][]string{}
	for f, v := range written {
		byVal[v] = append(byVal[v], f)
	}
	vals := make([]string, 0, len(byVal))
	for v := range byVal {
		vals = append(vals, v)
	}
	sort.Strings(vals)
	var parts []string
	for _, v := range vals {
		sort.Strings(byVal[v])
		parts = append(parts, fmt.Sprintf("%s: %d files (%s)", v, len(byVal[v]), strings.Join(byVal[v], ", ")))
	}
	return strings.Join(parts, "; ")
}

// restore puts back every energy preference the daemon wrote that is
// still its own (the stop; and the start, for what a run that did not stop
// cleanly left), and reports it (msg; pol and src are the policy in
// force and the power source).
func (p *prefState) restore(log logrus.FieldLogger, pol policy.Policy, src acpi.Source, msg string) {
	if p.act == nil || len(p.act.Records()) == 0 {
		return
	}
	rep, err := p.act.RestoreAll()
	if err != nil {
		log.WithError(err).Warn("cannot update state.json after restoring the energy preferences")
	}
	p.report(log, rep, pol, src, msg)
}

// PrefProbe is what `schedpolicyd probe` says of one energy preference
// knob.
type PrefProbe struct {
	// Knob is "epp" or "platform_profile"; Mode its setting.
	Knob string `json:"knob"`
	Mode string `json:"mode"`
	// Offered says what the machine offers: the policies with an EPP (how
	// many, their driver and list, those under the performance governor)
	// or the platform profile's choices; "" nothing.
	Offered string `json:"offered,omitempty"`
	// Owner is who else owns the knob and why (PrefAside), "" nobody.
	Owner string `json:"owner,omitempty"`
	// Action is "moved with the policy", "left to OWNER", "off" or "not
	// offered: WHY".
	Action string `json:"action"`
}

// ProbePrefs describes both knobs on fs for the modes of cfg, asking
// cfg.Bus's system manager which daemons are installed (bus.InstalledUnitsAt,
// nothing started; "none": not asked) and taking ppOwner, the
// power-profiles daemon the daemon would follow ("" none).
func ProbePrefs(fs sysfs.FS, cfg Config, ppOwner string) []PrefProbe {
	var units bus.InstalledUnits
	unknown := ""
	switch {
	case cfg.Bus == "none":
		if _, err := os.Stat(sdBootedDir); err == nil {
			unknown = "bus none: systemd is PID 1 but cannot be asked which daemons are installed"
		}
	default:
		addr := cfg.Bus
		if addr == "" {
			addr = "system"
		}
		var err error
		if units, err = bus.InstalledUnitsAt(context.Background(), addr, prefUnits()); err != nil {
			unknown = "systemd could not say which daemons are installed: " + err.Error()
		}
	}
	mode := func(m PrefMode) PrefMode {
		if m == "" {
			return PrefAuto
		}
		return m
	}
	var out []PrefProbe
	for _, k := range []struct {
		kind string
		mode PrefMode
	}{{energypref.KindEPP, mode(cfg.EPP)}, {energypref.KindPlatformProfile, mode(cfg.PlatformProfile)}} {
		p := PrefProbe{Knob: k.kind, Mode: string(k.mode)}
		var none string
		if k.kind == energypref.KindEPP {
			p.Offered, none = eppOffered(fs)
		} else if pp := fs.PlatformProfile(); pp.Present {
			p.Offered = sysfs.PlatformProfileFile + ", choices " + strings.Join(pp.Choices, " ")
		} else {
			none = "no " + sysfs.PlatformProfileFile + " with choices (no ACPI platform profile handler)"
		}
		p.Owner = PrefAside(fs, k.kind, k.mode, ppOwner, units, unknown)
		switch {
		case k.mode == PrefOff:
			p.Action, p.Owner = "off", ""
		case none != "":
			p.Action = "not offered: " + none
		case strings.HasPrefix(p.Owner, "unknown: "):
			p.Action = "not written: " + p.Owner
		case p.Owner != "":
			p.Action = "left to " + p.Owner
		default:
			p.Action = "moved with the policy"
		}
		out = append(out, p)
	}
	return out
}

// eppOffered describes the policies offering an EPP, or says why none is
// (the second result, "" when some are).
func eppOffered(fs sysfs.FS) (offered, none string) {
	pols, _ := fs.EPPPolicies()
	if len(pols) == 0 {
		drv, err := sysfs.ReadAttr(fs.Path(scalingDriver0))
		if err != nil {
			return "", "no cpufreq driver (no " + scalingDriver0 + ")"
		}
		return "", "no cpufreq policy has energy_performance_preference with available preferences (driver " + drv + ": intel_pstate and amd-pstate offer it in active mode only)"
	}
	drivers, perf := []string{}, []string{}
	for _, p := range pols {
		if !slices.Contains(drivers, p.Driver) {
			drivers = append(drivers, p.Driver)
		}
		if p.Governor == "performance" {
			perf = append(perf, p.Name)
		}
	}
	offered = fmt.Sprintf("%d cpufreq policies (driver %s): %s", len(pols), strings.Join(drivers, ", "), strings.Join(pols[0].Available, " "))
	if len(perf) > 0 {
		offered += fmt.Sprintf("; %d under the performance governor keep performance (%s)", len(perf), strings.Join(perf, " "))
	}
	return offered, ""
}
