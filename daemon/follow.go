package daemon

// Following a power-profiles daemon, the loop's side: the profile map, the
// followed daemon's state and what its profiles do to the knob. The bus
// side, which watches the names and reads the profiles, is
// bus/ppfollow.go; it hands each profile to the loop
// (bus.Controller.FollowProfile, Unfollow).

import (
	"fmt"

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

// followState is the decider's view of the power-profiles daemon it follows
// (loop-owned). name is "" while nothing is followed.
type followState struct {
	name    string      // the followed bus name, e.g. net.hadess.PowerProfiles
	owner   string      // its unique name
	profile string      // its ActiveProfile as last seen
	knob    policy.Knob // the knob the profile selected
}

// followChange is what a profile of the followed daemon changes
// (decider.followProfile).
type followChange int

const (
	// followUnknown: a profile the profile map does not know; ignored.
	followUnknown followChange = iota
	// followSame: the profile and owner followed already; nothing changes.
	followSame
	// followNew: a new profile, or a new owner, of the daemon followed.
	followNew
	// followStarted: the first profile since nothing was followed.
	followStarted
)

// followProfile takes the followed daemon's ActiveProfile as first read or
// changed (PropertiesChanged). A new profile, or a new owner, selects the
// knob the profile maps to (the ProfileMap setting; power_aware_policy
// unchanged), k, which the caller applies as a choice that is not
// explicit (choose, then persist: it cancels holds like an explicit
// choice). The same profile again changes nothing: an explicit choice
// made through the tree or D-Bus since then stays in force until the
// profile changes. An unknown profile changes nothing either.
func (c *decider) followProfile(name, owner, profile string) (k policy.Knob, change followChange) {
	pa, ok := c.set.ProfileMap[profile]
	if !ok {
		return policy.Knob{}, followUnknown
	}
	if c.follow.name == name && c.follow.owner == owner && c.follow.profile == profile {
		return policy.Knob{}, followSame
	}
	change = followNew
	if c.follow.name == "" {
		change = followStarted
	}
	k = policy.Knob{PowerAware: pa, PowerAwarePolicy: c.knob.PowerAwarePolicy}
	c.follow = followState{name: name, owner: owner, profile: profile, knob: k}
	return k, change
}

// unfollow ends following (the followed daemon left the bus, or our bus
// connection went); the knob stays as it is. was is what was followed;
// ok is false when nothing was.
func (c *decider) unfollow() (was followState, ok bool) {
	was = c.follow
	c.follow = followState{}
	return was, was.name != ""
}

// followNote is what decide appends to the policy's reason while another
// daemon's profile is followed.
func (c *decider) followNote() string {
	f := c.follow
	if f.name == "" {
		return ""
	}
	if c.knob == f.knob {
		return fmt.Sprintf("; power_aware follows %s (%s) ActiveProfile %s", f.name, f.owner, f.profile)
	}
	return fmt.Sprintf("; an explicit choice overrides %s (%s) ActiveProfile %s until that profile changes", f.name, f.owner, f.profile)
}
