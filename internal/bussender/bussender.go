// Package bussender decides whether a D-Bus signal may be believed, by who
// sent it and never by what it says.
//
// godbus hands every signal a connection receives to every channel
// registered with Conn.Signal, and match rules filter only broadcasts: on
// the system bus any user may send a unicast signal with any path,
// interface, member and body to any connection (system.conf allows
// send_type="signal" for everyone). The one field a client cannot forge is
// the header's sender, which the bus daemon sets to the sending
// connection's unique name. So a signal counts only when its sender is the
// one entitled to send it: the bus daemon itself for NameOwnerChanged
// (FromBus), the current owner of a well-known name for a service's
// signals (Owner).
//
// A peer-to-peer connection (systemd's private socket) has no bus and no
// sender header: only the peer can write to it, and the caller knows that
// without this package.
//
// It imports nothing of the project's.
package bussender

import (
	"context"
	"errors"
	"fmt"

	"github.com/godbus/dbus/v5"
)

// The bus daemon's own name, object path and interface.
const (
	Bus      = "org.freedesktop.DBus"
	BusPath  = dbus.ObjectPath("/org/freedesktop/DBus")
	nocName  = Bus + ".NameOwnerChanged"
	errNoOwn = "org.freedesktop.DBus.Error.NameHasNoOwner"
)

// FromBus reports whether sig was sent by the bus daemon itself: sender
// org.freedesktop.DBus (no client can own that name, so no client can
// send as it) on /org/freedesktop/DBus.
func FromBus(sig *dbus.Signal) bool {
	return sig != nil && sig.Sender == Bus && sig.Path == BusPath
}

// NameOwnerChanged parses sig as the bus daemon's
// NameOwnerChanged(name, old_owner, new_owner). ok is false for any other
// signal, for a body that is not three strings, and for a
// NameOwnerChanged that the bus daemon did not send.
func NameOwnerChanged(sig *dbus.Signal) (name, oldOwner, newOwner string, ok bool) {
	if !FromBus(sig) || sig.Name != nocName || len(sig.Body) != 3 {
		return "", "", "", false
	}
	var ok0, ok1, ok2 bool
	name, ok0 = sig.Body[0].(string)
	oldOwner, ok1 = sig.Body[1].(string)
	newOwner, ok2 = sig.Body[2].(string)
	if !ok0 || !ok1 || !ok2 {
		return "", "", "", false
	}
	return name, oldOwner, newOwner, true
}

// MatchOwnerChanged is the match rule for the bus daemon's
// NameOwnerChanged about name (arg0), for AddMatchSignal.
func MatchOwnerChanged(name string) []dbus.MatchOption {
	return []dbus.MatchOption{
		dbus.WithMatchSender(Bus), dbus.WithMatchObjectPath(BusPath),
		dbus.WithMatchInterface(Bus), dbus.WithMatchMember("NameOwnerChanged"),
		dbus.WithMatchArg(0, name),
	}
}

// GetNameOwner asks the bus daemon for name's unique owner; "" with a nil
// error when it has none. The call carries NO_AUTO_START (asking never
// starts a service). Errors: the bus did not answer (ctx's deadline) or
// answered with another error.
func GetNameOwner(ctx context.Context, conn *dbus.Conn, name string) (string, error) {
	var owner string
	err := conn.BusObject().CallWithContext(ctx, Bus+".GetNameOwner", dbus.FlagNoAutoStart, name).Store(&owner)
	var de dbus.Error
	if errors.As(err, &de) && de.Name == errNoOwn {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("GetNameOwner %s: %w", name, err)
	}
	return owner, nil
}

// Owner follows which connection owns the well-known name Name, from the
// bus daemon's answers and NameOwnerChanged signals only, so that a
// service's signals can be checked against it (Sent). It is not safe for
// concurrent use: the goroutine that reads the connection's signals feeds
// it (Observe) and asks it (Sent), in the order the signals came, so that
// a signal is judged by who owned the name when it was sent.
type Owner struct {
	Name   string
	unique string
}

// WatchOwner adds the match rule for Name's NameOwnerChanged on conn, then
// asks for its current owner (in that order, so that no change is missed
// between the two). Register conn's signal channel before calling it.
// Errors: the match rule was refused, or the bus did not answer.
func WatchOwner(ctx context.Context, conn *dbus.Conn, name string) (*Owner, error) {
	if err := conn.AddMatchSignalContext(ctx, MatchOwnerChanged(name)...); err != nil {
		return nil, fmt.Errorf("match NameOwnerChanged for %s: %w", name, err)
	}
	u, err := GetNameOwner(ctx, conn, name)
	if err != nil {
		return nil, err
	}
	return &Owner{Name: name, unique: u}, nil
}

// Unique is the owner's unique name, "" while Name has no owner.
func (o *Owner) Unique() string { return o.unique }

// Observe takes sig into account when it is the bus daemon's
// NameOwnerChanged for Name, and then reports true. A change whose old
// owner is not the owner known is one already reflected in WatchOwner's
// answer (it was queued before that answer was read) and is skipped, so
// the owner never steps back to an earlier one.
func (o *Owner) Observe(sig *dbus.Signal) bool {
	name, old, owner, ok := NameOwnerChanged(sig)
	if !ok || name != o.Name {
		return false
	}
	if old == o.unique {
		o.unique = owner
	}
	return true
}

// Sent reports whether sig came from the connection that owns Name now:
// false while Name has no owner.
func (o *Owner) Sent(sig *dbus.Signal) bool {
	return sig != nil && o.unique != "" && sig.Sender == o.unique
}
