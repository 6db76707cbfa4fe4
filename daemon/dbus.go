package daemon

import (
	"context"
	"errors"
	"sync"
	"syscall"

	"github.com/godbus/dbus/v5"
	"github.com/godbus/dbus/v5/introspect"
	"github.com/godbus/dbus/v5/prop"
	"github.com/sirupsen/logrus"

	"github.com/schedpolicyd/schedpolicyd/policy"
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
// properties and introspection, then requests the well-known name. When no
// bus can be reached it says so once and returns nil: the daemon keeps
// running without D-Bus.
func (d *Daemon) connectBus() *busService {
	log := d.log.WithField("component", "dbus")
	if d.cfg.Bus == "none" {
		log.Info("D-Bus disabled")
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
		log.WithError(err).WithField("bus", d.cfg.Bus).Warn("no D-Bus connection; running without D-Bus")
		return nil
	}
	s := &busService{d: d, conn: conn, log: log, last: map[string]any{}}
	snap := d.Snapshot()
	vals := s.values(snap)
	pm := prop.Map{Interface: {}}
	for name, v := range vals {
		pm[Interface][name] = &prop.Prop{Value: v, Writable: false, Emit: prop.EmitTrue}
		s.last[name] = v
	}
	props, err := prop.Export(conn, ObjectPath, pm)
	if err != nil {
		log.WithError(err).Warn("exporting properties failed; running without D-Bus")
		conn.Close()
		return nil
	}
	s.props = props
	obj := busObject{s: s}
	if err := conn.Export(obj, ObjectPath, Interface); err != nil {
		log.WithError(err).Warn("exporting object failed; running without D-Bus")
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
		log.WithError(err).Warn("exporting introspection failed")
	}
	reply, err := conn.RequestName(BusName, dbus.NameFlagDoNotQueue)
	if err != nil || reply != dbus.RequestNameReplyPrimaryOwner {
		log.WithError(err).WithField("reply", reply).Warn("cannot own " + BusName + "; running without D-Bus (is another instance running, or is the bus policy file installed?)")
		conn.Close()
		return nil
	}
	log.WithField("name", BusName).Info("owning bus name")
	return s
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

// SetPolicy behaves exactly like writing policy to current_sched_policy:
// "performance" sets PowerAware to 0; "balance"/"powersaving" set PowerAware
// to 2 and PowerAwarePolicy to it. Errors: InvalidArgs for any other value
// (nothing changes), AccessDenied for callers other than root (polkit
// authorisation arrives with the full service API), Failed if the choice
// cannot be persisted.
func (o busObject) SetPolicy(sender dbus.Sender, p string) *dbus.Error {
	if _, err := policy.ParsePolicy(p); err != nil {
		return dbus.NewError(errInvalidArgs, []any{err.Error()})
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
