package daemon

import (
	"context"
	"fmt"
	"strings"

	"github.com/godbus/dbus/v5"
	"github.com/sirupsen/logrus"

	"github.com/schedpolicyd/schedpolicyd/policy"
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

// DefaultProfileMap is the knob each power profile selects when another
// daemon's ActiveProfile is followed: power-saver → power_aware 2,
// balanced → 1, performance → 0.
var DefaultProfileMap = map[string]policy.PowerAware{
	ppPowerSaver:  policy.PowerAwareOn,
	ppBalanced:    policy.PowerAwareAuto,
	ppPerformance: policy.PowerAwareOff,
}

// checkPowerProfiles normalises cfg.PowerProfilesAPI ("" and "false" are
// off, "true" is on) and cfg.ProfileMap (nil: DefaultProfileMap; only the
// three profiles, each to 0, 1 or 2; a missing profile keeps its default).
func checkPowerProfiles(cfg *Config) error {
	switch cfg.PowerProfilesAPI {
	case "", "false", PowerProfilesOff:
		cfg.PowerProfilesAPI = PowerProfilesOff
	case "true", PowerProfilesServe:
		cfg.PowerProfilesAPI = PowerProfilesServe
	case PowerProfilesAuto:
	default:
		return fmt.Errorf("power_profiles_api %q: want auto, true or false", cfg.PowerProfilesAPI)
	}
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
	return nil
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

// ppWatch is the "auto" mode on one connection: it serves the
// power-profiles names while nobody else owns them and follows the owner
// while someone does. It runs in its own goroutine (run); the loop state
// it changes (busService.pp, Daemon.follow) is changed through Daemon.do.
//
// The names are requested with AllowReplacement: power-profiles-daemon
// started with --replace (or any owner that asks for replacement) takes
// them, and we follow it. Without --replace it exits when the name is
// owned ("power-profiles-daemon is already running"): start it before
// schedpolicyd or with --replace (README, schedpolicyd.conf(5)).
type ppWatch struct {
	s   *busService
	sig chan *dbus.Signal
	me  string // our unique name
	// followed is the name followed ("" none), owner its unique name;
	// serving: the API is exported and the names requested.
	followed, owner string
	serving         bool
}

// startPPWatch subscribes to NameOwnerChanged of the power-profiles names
// and to PropertiesChanged on their paths, then starts the goroutine.
// Everything on the bus here is a call to the bus daemon or to an owner's
// unique name: nothing is ever activated (dbus.FlagNoAutoStart).
func (s *busService) startPPWatch(ctx context.Context) error {
	w := &ppWatch{s: s, sig: make(chan *dbus.Signal, 64), me: s.conn.Names()[0]}
	s.conn.Signal(w.sig)
	for _, n := range ppNames {
		if err := s.conn.AddMatchSignal(dbus.WithMatchSender("org.freedesktop.DBus"),
			dbus.WithMatchInterface("org.freedesktop.DBus"), dbus.WithMatchMember("NameOwnerChanged"),
			dbus.WithMatchArg(0, n.name)); err != nil {
			return err
		}
		if err := s.conn.AddMatchSignal(dbus.WithMatchInterface("org.freedesktop.DBus.Properties"),
			dbus.WithMatchMember("PropertiesChanged"), dbus.WithMatchObjectPath(n.path)); err != nil {
			return err
		}
	}
	go w.run(ctx)
	return nil
}

func (w *ppWatch) run(ctx context.Context) {
	defer w.s.conn.RemoveSignal(w.sig)
	w.decide(ctx)
	for {
		select {
		case <-ctx.Done():
			return
		case <-w.s.conn.Context().Done():
			return
		case sig, ok := <-w.sig:
			if !ok {
				return
			}
			w.onSignal(ctx, sig)
		}
	}
}

// ownerOf is name's unique owner, "" when it has none (or on error).
func (w *ppWatch) ownerOf(name string) string {
	var owner string
	if err := w.s.conn.BusObject().Call("org.freedesktop.DBus.GetNameOwner", dbus.FlagNoAutoStart, name).Store(&owner); err != nil {
		return ""
	}
	return owner
}

// decide follows the first power-profiles name another connection owns,
// or serves them when none is.
func (w *ppWatch) decide(ctx context.Context) {
	for _, n := range ppNames {
		if o := w.ownerOf(n.name); o != "" && o != w.me {
			w.startFollowing(ctx, n.name, o)
			return
		}
	}
	w.serve(ctx)
}

func (w *ppWatch) onSignal(ctx context.Context, sig *dbus.Signal) {
	switch sig.Name {
	case "org.freedesktop.DBus.NameOwnerChanged":
		if len(sig.Body) != 3 {
			return
		}
		name, _ := sig.Body[0].(string)
		newOwner, _ := sig.Body[2].(string)
		if !isPPName(name) {
			return // every NameOwnerChanged comes here (watchHolders' match)
		}
		switch {
		case w.followed != "" && name == w.followed && newOwner != w.owner:
			// The followed daemon left (or was replaced).
			w.followed, w.owner = "", ""
			w.s.d.do(ctx, func() error { w.s.d.unfollow("its bus name " + name + " changed owner"); return nil })
			w.decide(ctx)
		case w.serving && newOwner != "" && newOwner != w.me:
			// Another daemon took one of our names (--replace): let it
			// have both, and follow it.
			w.unserve(ctx)
			w.startFollowing(ctx, name, newOwner)
		case w.followed == "" && !w.serving && newOwner != "" && newOwner != w.me:
			w.startFollowing(ctx, name, newOwner)
		}
	case "org.freedesktop.DBus.Properties.PropertiesChanged":
		if w.followed == "" || sig.Sender != w.owner || len(sig.Body) < 2 {
			return
		}
		iface, _ := sig.Body[0].(string)
		changed, _ := sig.Body[1].(map[string]dbus.Variant)
		if !strings.HasSuffix(iface, "PowerProfiles") {
			return
		}
		if v, ok := changed["ActiveProfile"]; ok {
			if p, ok := v.Value().(string); ok {
				w.deliver(ctx, p)
			}
		}
	}
}

func isPPName(name string) bool {
	for _, n := range ppNames {
		if n.name == name {
			return true
		}
	}
	return false
}

func (w *ppWatch) startFollowing(ctx context.Context, name, owner string) {
	w.followed, w.owner = name, owner
	var path dbus.ObjectPath
	for _, n := range ppNames {
		if n.name == name {
			path = n.path
		}
	}
	// The call goes to the unique name: it cannot activate anything.
	v, err := w.s.conn.Object(owner, path).GetProperty(name + ".ActiveProfile")
	if err != nil {
		w.s.log.WithError(err).WithField("name", name).Warn("cannot read the power-profiles daemon's ActiveProfile; following its changes")
		return
	}
	if p, ok := v.Value().(string); ok {
		w.deliver(ctx, p)
	}
}

func (w *ppWatch) deliver(ctx context.Context, profile string) {
	name, owner, s := w.followed, w.owner, w.s
	s.d.do(ctx, func() error {
		if s.d.bus == s || s.d.bus == nil {
			s.d.followProfile(name, owner, profile)
		}
		return nil
	})
}

// serve exports the API and requests the names (replaceable).
func (w *ppWatch) serve(ctx context.Context) {
	pp := exportPowerProfilesFlags(w.s, dbus.NameFlagDoNotQueue|dbus.NameFlagAllowReplacement)
	if pp == nil {
		return
	}
	w.serving = true
	w.s.d.do(ctx, func() error {
		w.s.pp = pp
		pp.update(w.s.d.Snapshot())
		return nil
	})
	// A name taken between the GetNameOwner and our request.
	for _, n := range ppNames {
		if o := w.ownerOf(n.name); o != "" && o != w.me {
			w.unserve(ctx)
			w.startFollowing(ctx, n.name, o)
			return
		}
	}
}

// unserve releases both names so that the other daemon can own both.
func (w *ppWatch) unserve(ctx context.Context) {
	w.serving = false
	w.s.d.do(ctx, func() error {
		if w.s.pp != nil {
			w.s.pp.close()
			w.s.pp = nil
		}
		return nil
	})
	w.s.log.Info("another daemon took the power-profiles names; released them, following it")
}

// PowerProfilesProbe is what `schedpolicyd probe` says about the
// power-profiles API: Mode (Config.PowerProfilesAPI), then, read from the
// bus (only GetNameOwner and GetConnectionUnixProcessID to the bus daemon;
// nothing is activated), who owns the names and what the daemon does.
type PowerProfilesProbe struct {
	Mode string `json:"mode"` // auto | on | off
	// Owners maps each owned power-profiles name to "UNIQUE pid N".
	Owners map[string]string `json:"owners,omitempty"`
	// Ours: the owner is schedpolicyd itself (it owns BusName too).
	Ours bool `json:"ours"`
	// Action is "follow NAME", "serve", "served by schedpolicyd",
	// "off" or "unknown: WHY" (no bus).
	Action string `json:"action"`
}

// ProbePowerProfiles looks at bus ("system", "session", an address; "none"
// gives Action "unknown: bus none") for mode, within busDialTimeout.
func ProbePowerProfiles(bus, mode string) PowerProfilesProbe {
	cfg := Config{PowerProfilesAPI: mode}
	if err := checkPowerProfiles(&cfg); err != nil {
		return PowerProfilesProbe{Mode: mode, Action: "unknown: " + err.Error()}
	}
	p := PowerProfilesProbe{Mode: cfg.PowerProfilesAPI}
	if bus == "" {
		bus = "system"
	}
	if bus == "none" {
		p.Action = "unknown: bus none"
		return p
	}
	conn, err := dialBus(context.Background(), bus, busDialTimeout)
	if err != nil {
		p.Action = "unknown: no bus: " + err.Error()
		return p
	}
	defer conn.Close()
	owner := func(name string) string {
		var o string
		conn.BusObject().Call("org.freedesktop.DBus.GetNameOwner", dbus.FlagNoAutoStart, name).Store(&o)
		return o
	}
	ourOwner := owner(BusName)
	var other string
	for _, n := range ppNames {
		o := owner(n.name)
		if o == "" {
			continue
		}
		var pid uint32
		conn.BusObject().Call("org.freedesktop.DBus.GetConnectionUnixProcessID", dbus.FlagNoAutoStart, o).Store(&pid)
		if p.Owners == nil {
			p.Owners = map[string]string{}
		}
		p.Owners[n.name] = fmt.Sprintf("%s pid %d", o, pid)
		if o == ourOwner {
			p.Ours = true
		} else if other == "" {
			other = n.name
		}
	}
	switch {
	case p.Mode == PowerProfilesOff:
		p.Action = "off"
	case p.Mode == PowerProfilesAuto && other != "":
		p.Action = "follow " + other
	case p.Ours:
		p.Action = "served by schedpolicyd"
	default:
		p.Action = "serve"
	}
	return p
}
