package bus

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/godbus/dbus/v5"
	"github.com/sirupsen/logrus"

	"github.com/schedpolicyd/schedpolicyd/internal/bussender"
)

// ppWatch is the "auto" mode on one connection: it serves the
// power-profiles names while nobody else owns them and follows the owner
// while someone does. It runs in its own goroutine (run); it changes the
// daemon's state only through the Controller (FollowProfile, Unfollow),
// and the power-profiles object served (session.pp) under the service's
// lock.
//
// Who owns a name is learnt only from the bus daemon (GetNameOwner, and
// NameOwnerChanged that the bus daemon sent: any peer may send us a
// forged one), and a profile only from the owner's own PropertiesChanged
// or its answer to Get. The signal reader never waits for the loop on a
// profile: it keeps the latest one (ppMailbox), and an applier hands the
// loop one change at a time, at most one per FollowMinInterval, after asking
// the bus that the owner still owns the name. A daemon that flaps its
// profile a thousand times a second therefore costs a few applications a
// second and no memory, and its stale profiles die with its ownership.
//
// The names are requested with AllowReplacement: power-profiles-daemon
// started with --replace (or any owner that asks for replacement) takes
// them, and we follow it. Without --replace it exits when the name is
// owned ("power-profiles-daemon is already running"): start it before
// schedpolicyd or with --replace (README, schedpolicyd.conf(5)).
type ppWatch struct {
	s   *session
	sig chan *dbus.Signal
	me  string // our unique name
	box ppMailbox

	// mu guards followed and owner, written only by run's goroutine and
	// read by the applier's (current).
	mu sync.Mutex
	// followed is the name followed ("" none), owner its unique name.
	followed, owner string
	// serving: the API is exported and the names requested (run's
	// goroutine only).
	serving bool
	// units follows the power-profiles implementations' units through
	// systemd (nil without systemd on the bus); standbyWhy is the unit the
	// names are left to, "error" when systemd could not say, "" neither
	// (run's goroutine only).
	units      *ppUnits
	standbyWhy string
}

// FollowMinInterval is the least time between two profiles of a followed
// daemon handed to the loop (Controller.FollowProfile); profiles in
// between are coalesced to the latest.
const FollowMinInterval = 250 * time.Millisecond

// busCallTimeout bounds every call the daemon makes to another service on
// the bus (the bus daemon, a followed daemon, polkit without
// interaction): a peer that stopped answering must not park a goroutine
// for ever.
const busCallTimeout = 5 * time.Second

// ppChange is a profile to apply for the followed name's owner; read:
// the profile is not known yet, ask the owner (Properties.Get).
type ppChange struct {
	name, owner, profile string
	read                 bool
}

// ppMailbox holds at most one pending ppChange, the latest: put replaces
// what was there, so a flood costs nothing but the last value.
type ppMailbox struct {
	mu   sync.Mutex
	next *ppChange
	wake chan struct{} // capacity 1: something is pending
}

func (b *ppMailbox) put(c ppChange) {
	b.mu.Lock()
	b.next = &c
	b.mu.Unlock()
	select {
	case b.wake <- struct{}{}:
	default:
	}
}

// take returns the pending change, if any, and empties the box.
func (b *ppMailbox) take() (ppChange, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.next == nil {
		return ppChange{}, false
	}
	c := *b.next
	b.next = nil
	return c, true
}

// drop empties the box (nothing is followed any more).
func (b *ppMailbox) drop() {
	b.mu.Lock()
	b.next = nil
	b.mu.Unlock()
}

// startPPWatch subscribes to NameOwnerChanged of the power-profiles names
// and to PropertiesChanged on their paths, then starts the goroutines.
// Everything on the bus here is a call to the bus daemon or to an owner's
// unique name: nothing is ever activated (dbus.FlagNoAutoStart).
func (s *session) startPPWatch(ctx context.Context, units []string) error {
	w := &ppWatch{s: s, sig: make(chan *dbus.Signal, 64), me: s.conn.Names()[0]}
	w.box.wake = make(chan struct{}, 1)
	s.conn.Signal(w.sig)
	for _, n := range ppNames {
		if err := s.conn.AddMatchSignal(bussender.MatchOwnerChanged(n.name)...); err != nil {
			s.conn.RemoveSignal(w.sig)
			return err
		}
		if err := s.conn.AddMatchSignal(dbus.WithMatchInterface("org.freedesktop.DBus.Properties"),
			dbus.WithMatchMember("PropertiesChanged"), dbus.WithMatchObjectPath(n.path)); err != nil {
			s.conn.RemoveSignal(w.sig)
			return err
		}
	}
	u, err := dialPPUnits(ctx, s.svc.bus, units)
	if err != nil {
		s.conn.RemoveSignal(w.sig)
		// Without an answer from systemd it cannot be told whether a
		// power-profiles daemon is installed: serving could lock it out.
		return fmt.Errorf("following systemd for power-profiles daemons: %w", err)
	}
	w.units = u
	// Goroutines of the service's (spawn): Close ends and waits for them.
	if !s.svc.spawn(ctx, w.run) {
		// Closed: this connection will not serve.
		s.conn.RemoveSignal(w.sig)
		u.close()
		return nil
	}
	s.svc.spawn(ctx, w.applier)
	return nil
}

func (w *ppWatch) run(ctx context.Context) {
	defer w.s.conn.RemoveSignal(w.sig)
	defer w.units.close()
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
		case sig := <-w.units.signals():
			w.onUnits(ctx, sig)
		}
	}
}

// ownerOf is name's unique owner as the bus daemon says, "" when it has
// none (or on error).
func (w *ppWatch) ownerOf(ctx context.Context, name string) string {
	ctx, cancel := context.WithTimeout(ctx, busCallTimeout)
	defer cancel()
	owner, _ := bussender.GetNameOwner(ctx, w.s.conn, name)
	return owner
}

// decide follows the first power-profiles name another connection owns,
// or serves them when none is and no power-profiles daemon is installed;
// nothing once ctx has ended (the watch ends with it).
func (w *ppWatch) decide(ctx context.Context) {
	if ctx.Err() != nil {
		return
	}
	for _, n := range ppNames {
		if o := w.ownerOf(ctx, n.name); o != "" && o != w.me {
			w.startFollowing(n.name, o)
			return
		}
	}
	w.serve(ctx)
}

// current is the followed name and its owner ("" none).
func (w *ppWatch) current() (name, owner string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.followed, w.owner
}

func (w *ppWatch) setFollowed(name, owner string) {
	w.mu.Lock()
	w.followed, w.owner = name, owner
	w.mu.Unlock()
}

func (w *ppWatch) onSignal(ctx context.Context, sig *dbus.Signal) {
	followed, owner := w.current()
	if name, _, newOwner, ok := bussender.NameOwnerChanged(sig); ok {
		if !isPPName(name) {
			return // every NameOwnerChanged comes here (watchHolders' match)
		}
		switch {
		case followed != "" && name == followed && newOwner != owner:
			// The followed daemon left (or was replaced).
			w.setFollowed("", "")
			w.box.drop()
			w.s.ctl.Unfollow(ctx, "its bus name "+name+" changed owner")
			w.decide(ctx)
		case w.serving && newOwner != "" && newOwner != w.me:
			// Another daemon took one of our names (--replace): let it
			// have both, and follow it.
			w.unserveFor(ctx, "another daemon took them")
			w.startFollowing(name, newOwner)
		case followed == "" && !w.serving && newOwner != "" && newOwner != w.me:
			w.startFollowing(name, newOwner)
		}
		return
	}
	if sig.Name != "org.freedesktop.DBus.Properties.PropertiesChanged" || followed == "" || sig.Sender != owner || len(sig.Body) < 2 {
		return
	}
	iface, _ := sig.Body[0].(string)
	changed, _ := sig.Body[1].(map[string]dbus.Variant)
	if !isPPName(iface) {
		return
	}
	if v, ok := changed["ActiveProfile"]; ok {
		if p, ok := v.Value().(string); ok {
			w.box.put(ppChange{name: followed, owner: owner, profile: p})
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

func ppPath(name string) dbus.ObjectPath {
	for _, n := range ppNames {
		if n.name == name {
			return n.path
		}
	}
	return ""
}

// startFollowing follows owner's name; its ActiveProfile is read by the
// applier.
func (w *ppWatch) startFollowing(name, owner string) {
	w.setFollowed(name, owner)
	w.box.put(ppChange{name: name, owner: owner, read: true})
}

// applier hands the pending change to the loop, one at a time and at most
// one per FollowMinInterval, until ctx or the connection ends.
func (w *ppWatch) applier(ctx context.Context) {
	var wait <-chan time.Time
	for {
		if wait != nil {
			select {
			case <-ctx.Done():
				return
			case <-w.s.conn.Context().Done():
				return
			case <-wait:
			}
			wait = nil
		}
		select {
		case <-ctx.Done():
			return
		case <-w.s.conn.Context().Done():
			return
		case <-w.box.wake:
		}
		c, ok := w.box.take()
		if !ok {
			continue
		}
		if w.apply(ctx, c) {
			wait = time.After(FollowMinInterval)
		}
	}
}

// apply checks that c's owner is still followed and still owns the name
// (the bus daemon's word), reads the profile from it where c does not
// carry one, and has the loop follow it. It reports whether the loop was
// asked to.
func (w *ppWatch) apply(ctx context.Context, c ppChange) bool {
	still := func() bool {
		name, owner := w.current()
		return name == c.name && owner == c.owner
	}
	if !still() || w.ownerOf(ctx, c.name) != c.owner {
		w.s.log.WithFields(logrus.Fields{"name": c.name, "owner": c.owner}).Debug("followed daemon's profile dropped: it no longer owns the name")
		return false
	}
	profile := c.profile
	if c.read {
		cctx, cancel := context.WithTimeout(ctx, busCallTimeout)
		var v dbus.Variant
		// The call goes to the unique name: it cannot activate anything.
		err := w.s.conn.Object(c.owner, ppPath(c.name)).CallWithContext(cctx, "org.freedesktop.DBus.Properties.Get",
			dbus.FlagNoAutoStart, c.name, "ActiveProfile").Store(&v)
		cancel()
		p, ok := v.Value().(string)
		if err != nil || !ok {
			if err == nil {
				err = fmt.Errorf("ActiveProfile is of type %s", v.Signature())
			}
			w.s.log.WithError(err).WithField("name", c.name).Warn("cannot read the power-profiles daemon's ActiveProfile; following its changes")
			return false
		}
		profile = p
	}
	// Checked again on the loop: the owner may have left while the change
	// waited for it (unfollow ran first), or the connection been replaced.
	w.s.ctl.FollowProfile(ctx, c.name, c.owner, profile, func() bool { return still() && w.s.isCurrent() })
	return true
}

// serve exports the API and requests the names (replaceable), unless a
// power-profiles daemon is installed (or systemd cannot say): its start
// would fail on names we own (Debian's power-profiles-daemon exits when
// its name is taken), so they are left to it.
func (w *ppWatch) serve(ctx context.Context) {
	if unit, err := w.leftTo(ctx); unit != "" || err != nil {
		return
	}
	pp := exportPowerProfilesFlags(ctx, w.s, dbus.NameFlagDoNotQueue|dbus.NameFlagAllowReplacement)
	if pp == nil {
		return
	}
	w.serving = true
	w.s.svc.setPP(w.s, pp)
	// A name taken between the GetNameOwner and our request.
	for _, n := range ppNames {
		if o := w.ownerOf(ctx, n.name); o != "" && o != w.me {
			w.unserveFor(ctx, "another daemon took them")
			w.startFollowing(n.name, o)
			return
		}
	}
}

// unserveFor releases both names so that the other daemon can own both,
// saying why.
func (w *ppWatch) unserveFor(ctx context.Context, why string) {
	w.serving = false
	w.s.svc.dropPP(ctx, w.s)
	w.s.log.WithField("why", why).Info("released the power-profiles names")
}
