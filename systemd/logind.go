package systemd

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"

	"github.com/godbus/dbus/v5"

	"github.com/schedpolicyd/schedpolicyd/internal/bussender"
)

// logind's D-Bus names (org.freedesktop.login1(5)).
const (
	logindName      = "org.freedesktop.login1"
	logindPath      = dbus.ObjectPath("/org/freedesktop/login1")
	logindInterface = "org.freedesktop.login1.Manager"
)

// ErrNoLogind is returned by ConnectLogind where nobody owns
// org.freedesktop.login1 on the system bus: logind is not running (a
// machine without systemd-logind, or elogind not started). It is never
// started by bus activation on our behalf.
var ErrNoLogind = errors.New("org.freedesktop.login1 has no owner on the system bus (systemd-logind is not running)")

// User is one user logind knows: logged in, or lingering (their manager
// runs without a session, loginctl enable-linger).
type User struct {
	UID  int
	Name string
}

// UserEvent is a user logind added (UserNew: the first session or
// linger began) or removed (UserRemoved: the last session ended and the
// user's manager is gone or going).
type UserEvent struct {
	UID int
	New bool
}

// Logind is a connection to systemd-logind on the system bus. Every call
// carries dbus.FlagNoAutoStart: a daemon that follows users must not
// start logind by activation where the administrator does not run it.
type Logind struct {
	conn   *dbus.Conn
	events chan UserEvent
	done   chan struct{}
	once   sync.Once
}

// ConnectLogind connects to logind on the system bus and subscribes to
// its UserNew and UserRemoved signals, taken only from the connection that
// owns org.freedesktop.login1 (logind, across its restarts). Errors: no system bus, ErrNoLogind
// (nobody owns the name), or the bus refused a match rule.
func ConnectLogind(ctx context.Context) (*Logind, error) {
	c, err := busConn()
	if err != nil {
		return nil, fmt.Errorf("logind: system bus: %w", err)
	}
	// The channel first, then the match rules and the owner: nothing in
	// between is missed.
	ch := make(chan *dbus.Signal, 64)
	c.Signal(ch)
	for _, member := range []string{"UserNew", "UserRemoved"} {
		if err := c.AddMatchSignalContext(ctx, dbus.WithMatchSender(logindName), dbus.WithMatchObjectPath(logindPath),
			dbus.WithMatchInterface(logindInterface), dbus.WithMatchMember(member)); err != nil {
			c.Close()
			return nil, fmt.Errorf("logind: match %s: %w", member, err)
		}
	}
	owner, err := bussender.WatchOwner(ctx, c, logindName)
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("logind: %w", err)
	}
	if owner.Unique() == "" {
		c.Close()
		return nil, ErrNoLogind
	}
	l := &Logind{conn: c, events: make(chan UserEvent, 64), done: make(chan struct{})}
	go func() {
		defer close(l.events)
		for s := range ch {
			// Only logind's own connection speaks for logind: anyone may
			// send us a UserRemoved.
			if owner.Observe(s) || !owner.Sent(s) || s.Path != logindPath {
				continue
			}
			var ev UserEvent
			switch s.Name {
			case logindInterface + ".UserNew":
				ev.New = true
			case logindInterface + ".UserRemoved":
			default:
				continue
			}
			// UserNew/UserRemoved (u uid, o path).
			if len(s.Body) < 1 {
				continue
			}
			uid, ok := s.Body[0].(uint32)
			if !ok {
				continue
			}
			ev.UID = int(uid)
			// Blocking until read or closed: a user event must not be lost
			// (the user would never be followed, or never let go).
			select {
			case l.events <- ev:
			case <-l.done:
				return
			}
		}
	}()
	return l, nil
}

// Users lists the users logind knows (ListUsers), sorted by uid.
func (l *Logind) Users(ctx context.Context) ([]User, error) {
	var list []struct {
		UID  uint32
		Name string
		Path dbus.ObjectPath
	}
	if err := l.conn.Object(logindName, logindPath).CallWithContext(ctx, logindInterface+".ListUsers", dbus.FlagNoAutoStart).Store(&list); err != nil {
		return nil, fmt.Errorf("logind: ListUsers: %w", err)
	}
	out := make([]User, 0, len(list))
	for _, u := range list {
		out = append(out, User{UID: int(u.UID), Name: u.Name})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].UID < out[j].UID })
	return out, nil
}

// Events is the channel of UserNew and UserRemoved, closed when the
// connection closes.
func (l *Logind) Events() <-chan UserEvent { return l.events }

// Close closes the connection; Events' channel is closed.
func (l *Logind) Close() {
	l.once.Do(func() { close(l.done) })
	l.conn.Close()
}
