package bus

// Authorisation: root, or polkit's answer about an action: PolkitAction
// on Interface, power-profiles-daemon's actions on the power-profiles
// names (ppAction).

import (
	"context"
	"errors"
	"fmt"
	"os/user"
	"strconv"
	"time"

	"github.com/godbus/dbus/v5"
	"github.com/sirupsen/logrus"

	"github.com/schedpolicyd/schedpolicyd/internal/bussender"
)

// callerUID returns the Unix uid of a bus peer, as the bus daemon says.
func (s *session) callerUID(sender dbus.Sender) (uint32, error) {
	ctx, cancel := context.WithTimeout(context.Background(), busCallTimeout)
	defer cancel()
	return busUID(ctx, s.conn, string(sender))
}

// busUID is the Unix uid the bus daemon credits connection name with
// (GetConnectionUnixUser).
func busUID(ctx context.Context, conn *dbus.Conn, name string) (uint32, error) {
	var uid uint32
	err := conn.BusObject().CallWithContext(ctx, "org.freedesktop.DBus.GetConnectionUnixUser", 0, name).Store(&uid)
	return uid, err
}

// polkit's names; polkitInteractiveTimeout bounds a check that lets polkit
// ask the user (an authentication dialog waits for a person), and
// polkitStartTimeout the start of polkitd by activation (dbus-daemon's
// own service_start_timeout is 25 s).
const (
	polkitName               = "org.freedesktop.PolicyKit1"
	polkitPath               = dbus.ObjectPath("/org/freedesktop/PolicyKit1/Authority")
	polkitInteractiveTimeout = 2 * time.Minute
	polkitStartTimeout       = 25 * time.Second
)

// polkitAuthority returns the unique name of polkit's authority: the owner
// of org.freedesktop.PolicyKit1, started by activation when nobody owns it
// (see authorize), and only if that owner runs as root or as the polkitd
// system user (polkitTrusted). The system bus lets only polkitd's user own
// the name, but another bus (Config.Bus) may let anyone: an answer from
// another owner would be anyone's word. Calls then go to the unique name,
// so that only that connection can answer them.
func (s *session) polkitAuthority() (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), polkitStartTimeout)
	defer cancel()
	owner, err := bussender.GetNameOwner(ctx, s.conn, polkitName)
	if err == nil && owner == "" {
		var r uint32
		if err = s.conn.BusObject().CallWithContext(ctx, "org.freedesktop.DBus.StartServiceByName", 0, polkitName, uint32(0)).Store(&r); err == nil {
			owner, err = bussender.GetNameOwner(ctx, s.conn, polkitName)
		}
	}
	if err != nil {
		return "", err
	}
	if owner == "" {
		return "", errors.New(polkitName + " has no owner")
	}
	uid, err := busUID(ctx, s.conn, owner)
	if err != nil {
		return "", err
	}
	if !polkitTrusted(uid) {
		return "", fmt.Errorf("%s is owned by %s, which runs as uid %d, neither root nor the polkitd system user: its answer would not be polkit's", polkitName, owner, uid)
	}
	return owner, nil
}

// polkitTrusted reports whether uid may be polkit's authority: root, or
// the system user polkitd (uid below 1000), as which Debian's polkitd runs
// and which alone its bus policy (org.freedesktop.PolicyKit1.conf) lets
// own the name.
func polkitTrusted(uid uint32) bool {
	if uid == 0 {
		return true
	}
	u, err := user.Lookup("polkitd")
	if err != nil {
		return false
	}
	id, err := strconv.ParseUint(u.Uid, 10, 32)
	return err == nil && id < 1000 && uint32(id) == uid
}

// authorize is authorizeAction of PolkitAction: every setter of
// Interface.
func (s *session) authorize(msg dbus.Message, sender dbus.Sender) *dbus.Error {
	return s.authorizeAction(msg, sender, PolkitAction)
}

// authorizeAction allows uid 0 and, for anyone else, asks polkit
// (org.freedesktop.PolicyKit1.Authority.CheckAuthorization) about action
// for the caller's bus name, letting polkit interact with the user only
// when the message allows it. Returns AccessDenied when refused
// or when polkit cannot be reached, does not answer in time
// (polkitInteractiveTimeout with interaction, busCallTimeout without) or
// is not root (polkitAuthority).
//
// Asking may start polkitd by D-Bus activation, the one exception to the
// daemon's no-activation rule: polkit is the system's authority and is
// activated on demand by design (Debian's polkitd runs only when
// activated), so refusing to start it would refuse every non-root caller.
// Root callers never reach it.
func (s *session) authorizeAction(msg dbus.Message, sender dbus.Sender, action string) *dbus.Error {
	uid, err := s.callerUID(sender)
	if err != nil {
		return dbus.MakeFailedError(fmt.Errorf("cannot identify the caller: %w", err))
	}
	if uid == 0 {
		return nil
	}
	var flags uint32
	timeout := busCallTimeout
	if msg.Flags&dbus.FlagAllowInteractiveAuthorization != 0 {
		flags = 1 // AllowUserInteraction
		timeout = polkitInteractiveTimeout
	}
	subject := struct {
		Kind    string
		Details map[string]dbus.Variant
	}{"system-bus-name", map[string]dbus.Variant{"name": dbus.MakeVariant(string(sender))}}
	var result struct {
		IsAuthorized, IsChallenge bool
		Details                   map[string]string
	}
	authority, err := s.polkitAuthority()
	if err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		err = s.conn.Object(authority, polkitPath).CallWithContext(ctx,
			"org.freedesktop.PolicyKit1.Authority.CheckAuthorization", dbus.FlagNoAutoStart,
			subject, action, map[string]string{}, flags, "").Store(&result)
		cancel()
	}
	if err != nil {
		s.log.WithError(err).WithFields(logrus.Fields{"uid": uid, "action": action}).Info("polkit check failed; refusing")
		return accessDenied("not authorised: uid %d is not root and polkit could not be asked (%v)", uid, err)
	}
	if !result.IsAuthorized {
		return accessDenied("not authorised: polkit refused %s for uid %d", action, uid)
	}
	return nil
}
