package daemon

// Following a power-profiles daemon, the loop's side: the profile map, the
// followed daemon's state and what its profiles do to the knob. The bus
// side, which watches the names and reads the profiles, is
// bus/ppfollow.go; it hands each profile to the loop
// (bus.Controller.FollowProfile, Unfollow).

import (
	"fmt"

	"github.com/sirupsen/logrus"

	"github.com/schedpolicyd/schedpolicyd/daemon/bus"
	"github.com/schedpolicyd/schedpolicyd/policy"
)

// DefaultProfileMap is the knob each power profile selects when another
// daemon's ActiveProfile is followed: power-saver → power_aware 2,
// balanced → 1, performance → 0.
var DefaultProfileMap = map[string]policy.PowerAware{
	bus.ProfilePowerSaver:  policy.PowerAwareOn,
	bus.ProfileBalanced:    policy.PowerAwareAuto,
	bus.ProfilePerformance: policy.PowerAwareOff,
}

// checkPowerProfiles normalises cfg.PowerProfilesAPI ("" and "false" are
// off, "true" is on: bus.ParsePowerProfilesAPI), cfg.ProfileMap (nil:
// DefaultProfileMap; only the three profiles, each to 0, 1 or 2; a
// missing profile keeps its default) and cfg.PowerProfilesUnits
// (bus.CheckPowerProfilesUnits).
func checkPowerProfiles(cfg *Config) error {
	api, err := bus.ParsePowerProfilesAPI(cfg.PowerProfilesAPI)
	if err != nil {
		return err
	}
	cfg.PowerProfilesAPI = api
	m := map[string]policy.PowerAware{}
	for p, v := range DefaultProfileMap {
		m[p] = v
	}
	for p, v := range cfg.ProfileMap {
		if _, ok := DefaultProfileMap[p]; !ok {
			return fmt.Errorf("profile map: unknown profile %q (want power-saver, balanced or performance)", p)
		}
		if v < policy.PowerAwareOff || v > policy.PowerAwareOn {
			return fmt.Errorf("profile map: %s → power_aware %d: want 0, 1 or 2", p, v)
		}
		m[p] = v
	}
	cfg.ProfileMap = m
	cfg.PowerProfilesUnits, err = bus.CheckPowerProfilesUnits(cfg.PowerProfilesUnits)
	return err
}

// followState is the loop's view of the power-profiles daemon it follows
// (loop-owned). name is "" while nothing is followed.
type followState struct {
	name    string      // the followed bus name, e.g. net.hadess.PowerProfiles
	owner   string      // its unique name
	profile string      // its ActiveProfile as last seen
	knob    policy.Knob // the knob the profile selected
}

// followProfile is called on the loop when the followed daemon's
// ActiveProfile is first read or changes (PropertiesChanged). A new
// profile, or a new owner, sets the knob the profile maps to
// (Config.ProfileMap; power_aware_policy unchanged) as setKnob does, so
// it persists and cancels holds like an explicit choice. The same profile
// again changes nothing: an explicit choice made through the tree or
// D-Bus since then stays in force until the profile changes. An unknown
// profile is logged and ignored.
func (d *Daemon) followProfile(name, owner, profile string) {
	pa, ok := d.cfg.ProfileMap[profile]
	if !ok {
		d.log.WithFields(logrus.Fields{"name": name, "profile": profile}).Warn("followed power profile unknown; ignored")
		return
	}
	if d.follow.name == name && d.follow.owner == owner && d.follow.profile == profile {
		return
	}
	if d.follow.name == "" {
		d.log.WithFields(logrus.Fields{"name": name, "owner": owner}).Info("following the power-profiles daemon's ActiveProfile")
	}
	k := policy.Knob{PowerAware: pa, PowerAwarePolicy: d.knob.PowerAwarePolicy}
	d.follow = followState{name: name, owner: owner, profile: profile, knob: k}
	if err := d.setKnobAs(k, "power-profiles "+name+" ActiveProfile "+profile, false); err != nil {
		d.log.WithError(err).Warn("cannot apply the followed power profile")
	}
	d.recompute("power profile followed", true)
}

// unfollow ends following (the followed daemon left the bus, or our bus
// connection went); the knob stays as it is.
func (d *Daemon) unfollow(why string) {
	if d.follow.name == "" {
		return
	}
	d.log.WithFields(logrus.Fields{"name": d.follow.name, "why": why}).Info("no longer following the power-profiles daemon")
	d.follow = followState{}
	d.recompute("power profile no longer followed", true)
}

// followNote is what decide appends to the policy's reason while another
// daemon's profile is followed.
func (d *Daemon) followNote() string {
	f := d.follow
	if f.name == "" {
		return ""
	}
	if d.knob == f.knob {
		return fmt.Sprintf("; power_aware follows %s (%s) ActiveProfile %s", f.name, f.owner, f.profile)
	}
	return fmt.Sprintf("; an explicit choice overrides %s (%s) ActiveProfile %s until that profile changes", f.name, f.owner, f.profile)
}
