package bus

import (
	"context"
	"fmt"
	"sync"

	"github.com/godbus/dbus/v5"

	"github.com/schedpolicyd/schedpolicyd/daemon/snapshot"
	"github.com/schedpolicyd/schedpolicyd/policy"
)

// The power-profiles D-Bus API that GNOME Settings, KDE and powerprofilesctl
// use (power-profiles-daemon; net.hadess.PowerProfiles is the legacy name,
// org.freedesktop.UPower.PowerProfiles the current one). Served only with
// Config.PowerProfilesAPI, on the same connection, at both names.
//
// Profiles map onto the knob: "performance" ↔ power_aware 0, "balanced" ↔
// power_aware 1 (automatic), "power-saver" ↔ power_aware 2 (with the
// configured power_aware_policy).
var ppNames = []struct {
	name string
	path dbus.ObjectPath
}{
	{"org.freedesktop.UPower.PowerProfiles", "/org/freedesktop/UPower/PowerProfiles"},
	{"net.hadess.PowerProfiles", "/net/hadess/PowerProfiles"},
}

// The power profiles, the values of ActiveProfile.
const (
	ProfilePerformance = "performance"
	ProfileBalanced    = "balanced"
	ProfilePowerSaver  = "power-saver"
)

// Config.PowerProfilesAPI values.
const (
	// PowerProfilesAuto (the command line's default): follow the
	// power-profiles daemon that owns a power-profiles name
	// (power-profiles-daemon, tuned-ppd, tlp-pd, …); serve the API while
	// nobody owns them.
	PowerProfilesAuto = "auto"
	// PowerProfilesServe ("true" in the configuration): always serve the
	// API, never follow (the names stay with whoever owns them first).
	PowerProfilesServe = "on"
	// PowerProfilesOff ("false"; Config's zero value): neither serve nor
	// follow.
	PowerProfilesOff = "off"
)

// ParsePowerProfilesAPI normalises the power_profiles_api setting: "" and
// "false" are PowerProfilesOff, "true" is PowerProfilesServe; the three
// modes are themselves. Anything else is an error naming the value.
func ParsePowerProfilesAPI(s string) (string, error) {
	switch s {
	case "", "false", PowerProfilesOff:
		return PowerProfilesOff, nil
	case "true", PowerProfilesServe:
		return PowerProfilesServe, nil
	case PowerProfilesAuto:
		return PowerProfilesAuto, nil
	}
	return "", fmt.Errorf("power_profiles_api %q: want auto, true or false", s)
}

// powerProfiles is the compatibility service on one connection. A nil
// *powerProfiles ignores every call.
type powerProfiles struct {
	s *session

	// properties serves and publishes the properties at both names.
	properties *propExporter

	mu    sync.Mutex // guards holds
	holds ppHoldsCache
}

// ppObject serves one of the two interface names.
type ppObject struct {
	pp    *powerProfiles
	iface string
}

// exportPowerProfiles exports the API at both paths and requests both names
// (each within busCallTimeout or until ctx ends); a name that cannot be
// owned (power-profiles-daemon itself runs) is logged and skipped.
func exportPowerProfiles(ctx context.Context, s *session) *powerProfiles {
	return exportPowerProfilesFlags(ctx, s, dbus.NameFlagDoNotQueue)
}

// exportPowerProfilesFlags is exportPowerProfiles with the RequestName
// flags ("auto" adds NameFlagAllowReplacement, ppWatch).
func exportPowerProfilesFlags(ctx context.Context, s *session, flags dbus.RequestNameFlags) *powerProfiles {
	pp := &powerProfiles{s: s}
	places := make([]propPlace, len(ppNames))
	for i, n := range ppNames {
		places[i] = propPlace{n.path, n.name}
	}
	pp.properties = newPropExporter(s.conn, places, pp.values(s.svc.latest()), pp.variants, pp.propSetters())
	for _, n := range ppNames {
		o := ppObject{pp: pp, iface: n.name}
		for iface, v := range map[string]any{
			n.name:                                o,
			propsIface:                            pp.properties.handler(n.name),
			"org.freedesktop.DBus.Introspectable": introspectable(ppIntrospection(n.name)),
		} {
			if err := s.conn.Export(v, n.path, iface); err != nil {
				s.log.WithError(err).Error("exporting power-profiles API failed")
				return nil
			}
		}
		reply, err := requestName(ctx, s.conn, n.name, flags)
		if err != nil || reply != dbus.RequestNameReplyPrimaryOwner {
			s.log.WithError(err).WithField("name", n.name).Warn("cannot own the power-profiles name (is power-profiles-daemon running?)")
			continue
		}
		s.log.WithField("name", n.name).Info("serving the power-profiles API")
	}
	return pp
}

// profileOf is the power-profiles view of a snapshot: a winning hold first,
// else the knob.
func profileOf(snap snapshot.Snapshot) string {
	if len(snap.Holds) > 0 {
		if snap.Policy == policy.Performance {
			return ProfilePerformance
		}
		return ProfilePowerSaver
	}
	switch snap.Knob.PowerAware {
	case policy.PowerAwareOff:
		return ProfilePerformance
	case policy.PowerAwareOn:
		return ProfilePowerSaver
	default:
		return ProfileBalanced
	}
}

// ppProfiles is the Profiles property, the same for ever: built once and
// shared (read-only), so update compares it in O(1).
var ppProfiles = func() []map[string]dbus.Variant {
	var profiles []map[string]dbus.Variant
	for _, p := range []string{ProfilePowerSaver, ProfileBalanced, ProfilePerformance} {
		profiles = append(profiles, map[string]dbus.Variant{
			"Profile":        dbus.MakeVariant(p),
			"Driver":         dbus.MakeVariant("schedpolicyd"),
			"PlatformDriver": dbus.MakeVariant("schedpolicyd"),
			"CpuDriver":      dbus.MakeVariant("schedpolicyd"),
		})
	}
	return profiles
}()

// ppHold is one entry of ActiveProfileHolds (a{sv}).
func ppHold(h snapshot.Hold) map[string]dbus.Variant {
	prof := ProfilePowerSaver
	if h.Policy == policy.Performance {
		prof = ProfilePerformance
	}
	return map[string]dbus.Variant{
		"ApplicationId": dbus.MakeVariant(h.AppID),
		"Profile":       dbus.MakeVariant(prof),
		"Reason":        dbus.MakeVariant(h.Reason),
	}
}

// ppHoldsCache converts the snapshot's holds to ActiveProfileHolds and
// keeps the result: while the daemon's list only grows (its holdIndex.list,
// whose published elements are never written) only the new holds are
// converted, and an unchanged list gives the same slice back, which
// update compares in O(1). What it returns is shared and read-only.
type ppHoldsCache struct {
	from []snapshot.Hold           // the list last converted
	val  []map[string]dbus.Variant // its conversion (len(from) entries), room to grow
}

func (c *ppHoldsCache) convert(hs []snapshot.Hold) []map[string]dbus.Variant {
	grown := len(hs) >= len(c.from) && len(c.from) > 0 && &hs[0] == &c.from[0]
	if !grown {
		c.val = make([]map[string]dbus.Variant, 0, len(hs))
		c.from = nil
	}
	for _, h := range hs[len(c.from):] {
		c.val = append(c.val, ppHold(h))
	}
	c.from = hs
	return c.val[:len(c.val):len(c.val)] // an append by a reader copies
}

// ppValuesWith is the power-profiles property values of snap, with holds
// (snap.Holds converted) as ActiveProfileHolds.
func ppValuesWith(snap snapshot.Snapshot, holds []map[string]dbus.Variant) map[string]any {
	return map[string]any{
		"ActiveProfile":        profileOf(snap),
		"PerformanceInhibited": "",
		"PerformanceDegraded":  "",
		"Profiles":             ppProfiles,
		"Actions":              []string{},
		"ActiveProfileHolds":   holds,
		"Version":              "0.12 (schedpolicyd)",
	}
}

// values is the power-profiles property values of snap, with
// ActiveProfileHolds from the cache.
func (pp *powerProfiles) values(snap snapshot.Snapshot) map[string]any {
	pp.mu.Lock()
	defer pp.mu.Unlock()
	return ppValuesWith(snap, pp.holds.convert(snap.Holds))
}

// variants is the current property values as Variants, for Get and
// GetAll.
func (pp *powerProfiles) variants() map[string]dbus.Variant {
	vals := pp.values(pp.s.svc.latest())
	out := make(map[string]dbus.Variant, len(vals))
	for k, v := range vals {
		out[k] = dbus.MakeVariant(v)
	}
	return out
}

// update emits PropertiesChanged on both names for what changed.
func (pp *powerProfiles) update(snap snapshot.Snapshot) {
	if pp == nil {
		return
	}
	pp.properties.publish(pp.values(snap))
}

// released emits ProfileReleased(cookie) on both names.
func (pp *powerProfiles) released(cookie uint32) {
	if pp == nil {
		return
	}
	for _, n := range ppNames {
		pp.s.conn.Emit(n.path, n.name+".ProfileReleased", cookie)
	}
}

// close releases both names, within ctx (session.close, dropPP).
func (pp *powerProfiles) close(ctx context.Context) {
	for _, n := range ppNames {
		releaseName(ctx, pp.s.conn, n.name)
	}
}

// HoldProfile holds "performance" or "power-saver" (the configured
// power_aware_policy) until ReleaseProfile, until the caller leaves the bus
// or until an explicit choice cancels every hold, and returns the cookie
// (never 0). reason and application_id are at most 256 bytes each. Errors,
// checked in this order: InvalidArgs when the arguments are not three
// strings; AccessDenied unless root or authorised by polkit; InvalidArgs
// for another profile or a longer string; LimitsExceeded when the caller
// already has daemon.MaxHoldsPerCaller holds (HoldPolicy's count too) or
// the daemon keeps daemon.MaxHolds; Failed as for HoldPolicy
// (session.addHold). On an error no hold is kept.
func (o ppObject) HoldProfile(msg dbus.Message, sender dbus.Sender, profile, reason, appID string) (uint32, *dbus.Error) {
	if e := checkSig(msg, "HoldProfile", "sss"); e != nil {
		return 0, e
	}
	if e := o.pp.s.authorize(msg, sender); e != nil {
		return 0, e
	}
	var p policy.Policy
	switch profile {
	case ProfilePerformance:
		p = policy.Performance
	case ProfilePowerSaver:
		p = o.pp.s.svc.latest().Knob.PowerAwarePolicy
	default:
		return 0, invalidArgs("only %q and %q can be held, not %q", ProfilePerformance, ProfilePowerSaver, profile)
	}
	if len(reason) > 256 {
		return 0, errReasonTooLong
	}
	if len(appID) > 256 {
		return 0, errAppIDTooLong
	}
	return o.pp.s.addHold(p, reason, sender, appID)
}

// ReleaseProfile releases a hold made with HoldProfile.
func (o ppObject) ReleaseProfile(msg dbus.Message, sender dbus.Sender, cookie uint32) *dbus.Error {
	if e := checkSig(msg, "ReleaseProfile", "u"); e != nil {
		return e
	}
	uid, _ := o.pp.s.callerUID(sender)
	return toDBusError(o.pp.s.ctl.ReleaseHold(context.Background(), cookie, string(sender), uid == 0))
}

// propSetters makes ActiveProfile writable: performance → power_aware 0,
// balanced → 1, power-saver → 2. It is the user's explicit choice, so it
// cancels holds. A value that is not one of the three is InvalidArgs
// before authorisation.
func (pp *powerProfiles) propSetters() map[string]propSetter {
	return map[string]propSetter{
		"ActiveProfile": func(msg dbus.Message, sender dbus.Sender, v dbus.Variant) *dbus.Error {
			prof, ok := v.Value().(string)
			if !ok {
				return invalidArgs("ActiveProfile is of type s, got %s", v.Signature())
			}
			var mode string
			switch prof {
			case ProfilePerformance:
				mode = "0"
			case ProfileBalanced:
				mode = "1"
			case ProfilePowerSaver:
				mode = "2"
			default:
				return invalidArgs("unknown profile %q (want power-saver, balanced or performance)", prof)
			}
			return pp.s.authorizedWrite(msg, sender, knobPowerAware, mode, "power-profiles")
		},
	}
}

func ppIntrospection(iface string) string {
	return fmt.Sprintf(`<node>
  <interface name=%q>
    <property name="ActiveProfile" type="s" access="readwrite"/>
    <property name="PerformanceInhibited" type="s" access="read"/>
    <property name="PerformanceDegraded" type="s" access="read"/>
    <property name="Profiles" type="aa{sv}" access="read"/>
    <property name="Actions" type="as" access="read"/>
    <property name="ActiveProfileHolds" type="aa{sv}" access="read"/>
    <property name="Version" type="s" access="read"/>
    <method name="HoldProfile">
      <arg name="profile" type="s" direction="in"/>
      <arg name="reason" type="s" direction="in"/>
      <arg name="application_id" type="s" direction="in"/>
      <arg name="cookie" type="u" direction="out"/>
    </method>
    <method name="ReleaseProfile">
      <arg name="cookie" type="u" direction="in"/>
    </method>
    <signal name="ProfileReleased">
      <arg name="cookie" type="u"/>
    </signal>
  </interface>
</node>`, iface)
}
