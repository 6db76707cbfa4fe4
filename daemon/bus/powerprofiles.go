package bus

import (
	"context"
	"errors"
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

	// holders are the holds made with HoldProfile on this connection
	// (ppHolders); guarded by hmu, which nothing holds while it waits.
	hmu     sync.Mutex
	holders ppHolders
}

// ppAction is the polkit action power-profiles-daemon asks about for
// verb ("switch-profile": setting ActiveProfile; "hold-profile":
// HoldProfile) on the power-profiles interface iface: the interface's
// name and the verb, as power-profiles-daemon's clients are granted them
// — org.freedesktop.UPower.PowerProfiles.switch-profile and .hold-profile
// (power-profiles-daemon 0.20 and later), net.hadess.PowerProfiles.*
// (0.12 and before, Debian 12's, which serves only that name). The
// package ships both pairs with power-profiles-daemon's defaults
// (packaging/polkit/org.schedpolicyd.power-profiles.policy), so that the
// rules a distribution or an administrator wrote for the slider apply.
// power-profiles-daemon 0.20 and later ask about the org.freedesktop
// actions on both names; here each name asks about its own, so that a
// rule for Debian 12's actions applies to Debian 12's clients, which use
// the legacy name.
func ppAction(iface, verb string) string { return iface + "." + verb }

// ppHolder is who made a power-profiles hold, and through which
// interface.
type ppHolder struct {
	owner string // its unique bus name
	iface string // the power-profiles interface name it called
}

// ppHolders keeps the holder of each hold made with HoldProfile, from
// the moment the hold exists until it ends, so that a hold a user's
// choice cancels is announced to its holder alone (Service.HoldEnded).
//
// The daemon makes the hold on its loop and may end it there before
// HoldProfile is back to record it: while a HoldProfile call is between
// the two (pending), ends of holds not yet recorded are kept in early
// (cancelled or not) and settled when the call records its cookie; early
// is emptied whenever no call is pending, and holds at most maxEarly
// entries (beyond it an end is forgotten: at worst a ProfileReleased is
// not sent, and nothing is kept for ever).
type ppHolders struct {
	byCookie map[uint32]ppHolder
	pending  int
	early    map[uint32]bool
}

// maxEarly bounds ppHolders.early: more holds than the daemon keeps at
// once (daemon.MaxHolds, 256) ending while one HoldProfile call waits.
const maxEarly = 1024

// holdStarting notes a HoldProfile call about to ask the daemon for a
// hold; holdMade must follow.
func (pp *powerProfiles) holdStarting() {
	pp.hmu.Lock()
	defer pp.hmu.Unlock()
	pp.holders.pending++
}

// holdMade records hold cookie (0: none was made) of h, which
// holdStarting announced; a hold that already ended is not recorded, and
// is announced now if a choice cancelled it.
func (pp *powerProfiles) holdMade(cookie uint32, h ppHolder) {
	pp.hmu.Lock()
	hs := &pp.holders
	hs.pending--
	announce := false
	if cookie != 0 {
		if cancelled, ended := hs.early[cookie]; ended {
			delete(hs.early, cookie)
			announce = cancelled
		} else {
			if hs.byCookie == nil {
				hs.byCookie = map[uint32]ppHolder{}
			}
			hs.byCookie[cookie] = h
		}
	}
	if hs.pending == 0 {
		hs.early = nil
	}
	pp.hmu.Unlock()
	if announce {
		pp.announceReleased(cookie, h)
	}
}

// ended forgets hold cookie, which ended, and announces it to its holder
// if it was a power-profiles hold that a user's choice cancelled
// (Service.HoldEnded). A nil *powerProfiles does nothing.
func (pp *powerProfiles) ended(cookie uint32, cancelled bool) {
	if pp == nil {
		return
	}
	pp.hmu.Lock()
	hs := &pp.holders
	h, ok := hs.byCookie[cookie]
	if ok {
		delete(hs.byCookie, cookie)
	} else if hs.pending > 0 && len(hs.early) < maxEarly {
		if hs.early == nil {
			hs.early = map[uint32]bool{}
		}
		hs.early[cookie] = cancelled
	}
	pp.hmu.Unlock()
	if ok && cancelled {
		pp.announceReleased(cookie, h)
	}
}

// announceReleased sends ProfileReleased(cookie) to h's holder alone (a
// unicast signal: the message names it as destination), on the interface
// and path it held the profile through.
func (pp *powerProfiles) announceReleased(cookie uint32, h ppHolder) {
	path := ppNames[0].path
	for _, n := range ppNames {
		if n.name == h.iface {
			path = n.path
		}
	}
	msg := &dbus.Message{
		Type: dbus.TypeSignal,
		Headers: map[dbus.HeaderField]dbus.Variant{
			dbus.FieldPath:        dbus.MakeVariant(path),
			dbus.FieldInterface:   dbus.MakeVariant(h.iface),
			dbus.FieldMember:      dbus.MakeVariant("ProfileReleased"),
			dbus.FieldDestination: dbus.MakeVariant(h.owner),
			dbus.FieldSignature:   dbus.MakeVariant(dbus.SignatureOf(cookie)),
		},
		Body: []any{cookie},
	}
	if call := pp.s.conn.Send(msg, nil); call.Err != nil {
		pp.s.log.WithError(call.Err).WithField("cookie", cookie).Debug("cannot send ProfileReleased")
	}
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
		if errors.Is(err, dbus.ErrClosed) || ctx.Err() != nil {
			// The session ended under the request (the bus refused our
			// own name, the daemon stops): that failure is said where
			// it happened, once (busReporter), not as this name's.
			s.log.WithError(err).WithField("name", n.name).Debug("power-profiles name not requested: the connection ended")
			return pp
		}
		var de dbus.Error
		if errors.As(err, &de) && de.Name == "org.freedesktop.DBus.Error.AccessDenied" {
			// The bus's policy refuses it: the policy file is missing,
			// as the refusal of our own name says (once, busReporter).
			s.log.WithError(err).WithField("name", n.name).Debug("the bus refused the power-profiles name")
			continue
		}
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
		return holdProfile(snap.Policy)
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

// holdProfile is the profile a hold of policy p makes active:
// performance for performance, power-saver for the power-aware policies.
func holdProfile(p policy.Policy) string {
	if p == policy.Performance {
		return ProfilePerformance
	}
	return ProfilePowerSaver
}

// ppHold is one entry of ActiveProfileHolds (a{sv}).
func ppHold(h snapshot.Hold) map[string]dbus.Variant {
	return map[string]dbus.Variant{
		"ApplicationId": dbus.MakeVariant(h.AppID),
		"Profile":       dbus.MakeVariant(holdProfile(h.Policy)),
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

// close releases both names, within ctx (session.close, dropPP).
func (pp *powerProfiles) close(ctx context.Context) {
	for _, n := range ppNames {
		releaseName(ctx, pp.s.conn, n.name)
	}
}

// HoldProfile holds "performance" or "power-saver" (the configured
// power_aware_policy) until ReleaseProfile, until the caller leaves the bus
// or until an explicit choice cancels every hold, and returns the cookie
// (never 0). Only a cancellation is announced, with ProfileReleased to the
// holder alone (Service.HoldEnded). reason and application_id are at most
// 256 bytes each. Errors, checked in this order: InvalidArgs when the
// arguments are not three strings; AccessDenied unless root or authorised
// by polkit for the interface's hold-profile action (ppAction);
// InvalidArgs for another profile or a longer string; LimitsExceeded when
// the caller already has daemon.MaxHoldsPerCaller holds (HoldPolicy's
// count too) or the daemon keeps daemon.MaxHolds; Failed as for
// HoldPolicy (session.addHold). On an error no hold is kept.
func (o ppObject) HoldProfile(msg dbus.Message, sender dbus.Sender, profile, reason, appID string) (uint32, *dbus.Error) {
	if e := checkSig(msg, "HoldProfile", "sss"); e != nil {
		return 0, e
	}
	if e := o.pp.s.authorizeAction(msg, sender, ppAction(o.iface, "hold-profile")); e != nil {
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
	o.pp.holdStarting()
	cookie, e := o.pp.s.addHold(p, reason, sender, appID)
	o.pp.holdMade(cookie, ppHolder{owner: string(sender), iface: o.iface})
	return cookie, e
}

// ReleaseProfile releases a hold the caller made (root may release any),
// without polkit, as power-profiles-daemon does. Unlike
// power-profiles-daemon, which lets any client release any cookie, a hold
// of another connection is refused (InvalidArgs, as for a cookie that is
// not in use): a client must not be able to end another program's hold
// by guessing its cookie, which is a small counter. It is not announced
// with ProfileReleased.
func (o ppObject) ReleaseProfile(msg dbus.Message, sender dbus.Sender, cookie uint32) *dbus.Error {
	if e := checkSig(msg, "ReleaseProfile", "u"); e != nil {
		return e
	}
	uid, _ := o.pp.s.callerUID(sender)
	return toDBusError(o.pp.s.ctl.ReleaseHold(context.Background(), cookie, string(sender), uid == 0))
}

// propSetters makes ActiveProfile writable: performance → power_aware 0,
// balanced → 1, power-saver → 2, the user's explicit choice, which cancels
// every hold — but setting the profile a hold made active changes
// nothing and keeps the holds, as power-profiles-daemon does. A value
// that is not a string is InvalidArgs before authorisation (GDBus checks
// the type against the introspection before power-profiles-daemon sees
// it); then the caller must be root or authorised by polkit for the
// interface's switch-profile action (ppAction); then a name that is not
// one of the three is Failed, as power-profiles-daemon answers.
func (pp *powerProfiles) propSetters() map[string]propSetter {
	return map[string]propSetter{
		"ActiveProfile": func(msg dbus.Message, sender dbus.Sender, iface string, v dbus.Variant) *dbus.Error {
			prof, ok := v.Value().(string)
			if !ok {
				return invalidArgs("ActiveProfile is of type s, got %s", v.Signature())
			}
			if e := pp.s.authorizeAction(msg, sender, ppAction(iface, "switch-profile")); e != nil {
				return e
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
				return dbus.MakeFailedError(fmt.Errorf("invalid profile name %q (want power-saver, balanced or performance)", prof))
			}
			_, err := pp.s.ctl.WriteKnobUnlessHeld(context.Background(), knobPowerAware, mode, "power-profiles",
				func(held policy.Policy) bool { return holdProfile(held) == prof })
			return toDBusError(err)
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
