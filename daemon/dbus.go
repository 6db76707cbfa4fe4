package daemon

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"syscall"
	"time"

	"github.com/godbus/dbus/v5"
	"github.com/godbus/dbus/v5/introspect"
	"github.com/godbus/dbus/v5/prop"
	"github.com/sirupsen/logrus"
)

// The D-Bus names, versioned as "How to Version D-Bus Interfaces Properly"
// recommends: the well-known name, object path and interface all carry 1.
const (
	BusName    = "org.schedpolicyd.SchedPolicy1"
	ObjectPath = dbus.ObjectPath("/org/schedpolicyd/SchedPolicy1")
	Interface  = "org.schedpolicyd.SchedPolicy1"
)

// Named D-Bus errors returned by the service.
var (
	errInvalidArgs  = "org.freedesktop.DBus.Error.InvalidArgs"
	errAccessDenied = "org.freedesktop.DBus.Error.AccessDenied"
)

// busService is the exported object. A nil *busService (no bus reachable)
// accepts every call as a no-op, so the loop need not care.
type busService struct {
	d     *Daemon
	conn  *dbus.Conn
	props *prop.Properties
	log   logrus.FieldLogger

	mu   sync.Mutex // guards last
	last map[string]any
}

// busObject carries the exported methods; godbus calls each in its own
// goroutine, so they only forward to the event loop.
type busObject struct{ s *busService }

// connectBus joins the bus chosen by Config.Bus, exports the object, its
// properties and introspection, then requests the well-known name. It
// returns nil when the bus cannot be reached or the name cannot be owned;
// loud says so at warning level (the first attempt), later retries log at
// debug level so an absent bus is reported once.
func (d *Daemon) connectBus(loud bool) *busService {
	log := d.log.WithField("component", "dbus")
	warn := log.Warn
	if !loud {
		warn = log.Debug
	}
	if d.cfg.Bus == "none" {
		if loud {
			log.Info("D-Bus disabled")
		}
		return nil
	}
	var conn *dbus.Conn
	var err error
	switch d.cfg.Bus {
	case "system":
		conn, err = dbus.ConnectSystemBus()
	case "session":
		conn, err = dbus.ConnectSessionBus()
	default:
		conn, err = dbus.Connect(d.cfg.Bus)
	}
	if err != nil {
		log.WithError(err).WithField("bus", d.cfg.Bus).Log(levelOf(loud), "no D-Bus connection; running without D-Bus and retrying in the background")
		return nil
	}
	s := &busService{d: d, conn: conn, log: log, last: map[string]any{}}
	pm := prop.Map{Interface: {}}
	for name, v := range s.values(d.Snapshot()) {
		pm[Interface][name] = &prop.Prop{Value: v, Writable: false, Emit: prop.EmitTrue}
		s.last[name] = v
	}
	props, err := prop.Export(conn, ObjectPath, pm)
	if err != nil {
		log.WithError(err).Error("exporting properties failed")
		conn.Close()
		return nil
	}
	s.props = props
	obj := busObject{s: s}
	if err := conn.Export(obj, ObjectPath, Interface); err != nil {
		log.WithError(err).Error("exporting object failed")
		conn.Close()
		return nil
	}
	node := &introspect.Node{
		Name: string(ObjectPath),
		Interfaces: []introspect.Interface{
			introspect.IntrospectData,
			prop.IntrospectData,
			{
				Name:       Interface,
				Methods:    introspect.Methods(obj),
				Properties: props.Introspection(Interface),
			},
		},
	}
	if err := conn.Export(introspect.NewIntrospectable(node), ObjectPath, "org.freedesktop.DBus.Introspectable"); err != nil {
		log.WithError(err).Error("exporting introspection failed")
	}
	reply, err := conn.RequestName(BusName, dbus.NameFlagDoNotQueue)
	if err != nil {
		warn(fmt.Sprintf("cannot own %s: %v; retrying in the background (is the bus policy file installed?)", BusName, err))
		conn.Close()
		return nil
	}
	if reply != dbus.RequestNameReplyPrimaryOwner {
		warn(fmt.Sprintf("cannot own %s: another process owns it; retrying in the background", BusName))
		conn.Close()
		return nil
	}
	log.WithField("name", BusName).Info("owning bus name")
	return s
}

func levelOf(loud bool) logrus.Level {
	if loud {
		return logrus.WarnLevel
	}
	return logrus.DebugLevel
}

// keepBus watches the bus connection and reconnects with exponential
// backoff (1 s doubling to 30 s) whenever it is lost or was never made,
// e.g. when dbus-daemon restarts. The new connection is handed to the
// event loop, which owns d.bus. It returns when ctx ends.
func (d *Daemon) keepBus(ctx context.Context, cur *busService) {
	if d.cfg.Bus == "none" {
		return
	}
	const maxBackoff = 30 * time.Second
	backoff := time.Second
	for {
		if cur != nil {
			select {
			case <-ctx.Done():
				return
			case <-cur.conn.Context().Done():
			}
			d.log.WithField("component", "dbus").Warn("lost the D-Bus connection; reconnecting")
			lost := cur
			d.do(ctx, func() error {
				if d.bus == lost {
					d.bus = nil
				}
				return nil
			})
			lost.conn.Close()
			cur, backoff = nil, time.Second
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		s := d.connectBus(false)
		if s == nil {
			backoff = min(2*backoff, maxBackoff)
			continue
		}
		if err := d.do(ctx, func() error {
			d.bus = s
			s.update(d.Snapshot())
			return nil
		}); err != nil {
			s.close()
			return
		}
		cur = s
	}
}

// values maps a snapshot to the D-Bus property values.
func (s *busService) values(snap Snapshot) map[string]any {
	return map[string]any{
		"ActivePolicy":     string(snap.Policy),
		"PowerAware":       uint32(snap.Knob.PowerAware),
		"PowerAwarePolicy": string(snap.Knob.PowerAwarePolicy),
		"PowerSource":      string(snap.PowerSource),
		"Boost":            snap.Boost,
	}
}

// update sets the properties that changed; each SetMust emits
// PropertiesChanged. Called from the event loop.
func (s *busService) update(snap Snapshot) {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for name, v := range s.values(snap) {
		if s.last[name] == v {
			continue
		}
		s.last[name] = v
		s.props.SetMust(Interface, name, v)
	}
}

func (s *busService) close() {
	if s == nil {
		return
	}
	s.conn.ReleaseName(BusName)
	s.conn.Close()
}

// SetPolicy behaves exactly like writing policy to current_sched_policy
// (the same parser: sscanf("%15s"), case-sensitive names): "performance"
// sets PowerAware to 0; "balance"/"powersaving" set PowerAware to 2 and
// PowerAwarePolicy to it. Errors, checked in this order:
// org.freedesktop.DBus.Error.InvalidArgs when the argument is not a single
// string (signature "s"); AccessDenied for callers other than root (polkit
// authorisation arrives with the full service API); InvalidArgs for any
// other value; Failed if the choice cannot be persisted. On any error
// nothing changes.
func (o busObject) SetPolicy(msg dbus.Message, sender dbus.Sender, p string) *dbus.Error {
	if sig, _ := msg.Headers[dbus.FieldSignature].Value().(dbus.Signature); sig.String() != "s" {
		return dbus.NewError(errInvalidArgs, []any{fmt.Sprintf("SetPolicy takes one string (signature \"s\"), got %q", sig.String())})
	}
	var uid uint32
	if err := o.s.conn.BusObject().Call("org.freedesktop.DBus.GetConnectionUnixUser", 0, string(sender)).Store(&uid); err != nil {
		return dbus.MakeFailedError(err)
	}
	if uid != 0 {
		return dbus.NewError(errAccessDenied, []any{"SetPolicy is allowed for root only"})
	}
	err := o.s.d.writeFile(context.Background(), fileCurrent, []byte(p), "dbus")
	switch {
	case err == nil:
		return nil
	case errors.Is(err, syscall.EINVAL):
		return dbus.NewError(errInvalidArgs, []any{err.Error()})
	default:
		return dbus.MakeFailedError(err)
	}
}
