package bus

// One bus connection and what is exported on it.

import (
	"context"
	"fmt"
	"sync/atomic"

	"github.com/godbus/dbus/v5"
	"github.com/sirupsen/logrus"
)

// session is one bus connection with everything exported on it. A nil
// *session (no connection) accepts every call as a no-op.
type session struct {
	svc  *Service
	ctl  Controller
	conn *dbus.Conn
	log  logrus.FieldLogger
	// pp is the power-profiles compatibility object, nil unless served
	// (guarded by svc.mu).
	pp *powerProfiles

	// properties serves and publishes Interface's properties.
	properties *propExporter

	// props caches the Variants of the last snapshot Properties was asked
	// about (fast.go).
	props atomic.Pointer[propCache]
}

// busObject carries the exported methods of Interface; godbus calls each in
// its own goroutine, so they only validate, authorise and forward to the
// daemon (Controller).
type busObject struct{ s *session }

// isCurrent reports whether s is the connection serving or none is: a
// change that a watcher of a replaced connection reports is dropped.
// Called on the daemon's loop (Controller.FollowProfile, SetLpmdOwner).
func (s *session) isCurrent() bool {
	cur := s.svc.current()
	return cur == s || cur == nil
}

// connect joins the bus, exports the object, its properties and
// introspection, then requests the well-known name. It returns the
// connection, or nil and a *busFailure saying which step failed and why
// (the bus cannot be reached, exporting failed, the bus refused the name,
// another process owns it). It logs nothing about a failure: busReporter
// decides what is worth saying.
func (svc *Service) connect(ctx context.Context) (*session, *busFailure) {
	svc.mu.Lock()
	ppAPI, ppUnits := svc.ppAPI, svc.ppUnits
	svc.mu.Unlock()
	log := svc.log
	fast := new(fastProps)
	// Every reply, error and signal leaves with its strings valid for the
	// bus (fastProps.outgoing).
	conn, err := dialBus(ctx, svc.bus, busDialTimeout, dbus.WithIncomingInterceptor(fast.intercept), dbus.WithOutgoingInterceptor(fast.outgoing))
	if err != nil {
		return nil, &busFailure{step: busConnect, err: err}
	}
	s := &session{svc: svc, ctl: svc.ctl, conn: conn, log: log}
	s.properties = newPropExporter(conn, []propPlace{{ObjectPath, Interface}}, svc.values(svc.ctl.Published()), s.propVariants, s.propSetters())
	// Before anything is exported: a hold made on this connection must be
	// able to see its holder leave (session.addHold).
	if err := s.watchHolders(); err != nil {
		log.WithError(err).Warn("cannot watch hold owners; holds are released only explicitly")
	}
	if err := s.watchLpmd(ctx); err != nil {
		log.WithError(err).Warn("cannot watch for intel-lpmd; its LP E-cores are packed as any")
	}
	obj := busObject{s: s}
	for iface, v := range map[string]any{
		Interface:                             obj,
		propsIface:                            s.properties.handler(Interface),
		"org.freedesktop.DBus.Introspectable": introspectable(IntrospectionXML),
	} {
		if err := conn.Export(v, ObjectPath, iface); err != nil {
			conn.Close()
			return nil, &busFailure{step: busExport, err: fmt.Errorf("exporting %s: %w", iface, err)}
		}
	}
	fast.s.Store(s)
	// The compatibility names come first, so that once Name is owned
	// everything is served.
	switch ppAPI {
	case PowerProfilesServe:
		svc.setPP(s, exportPowerProfiles(ctx, s))
	case PowerProfilesAuto:
		// Follow or serve, decided and changed in the background.
		if err := s.startPPWatch(ctx, ppUnits); err != nil {
			log.WithError(err).Warn("cannot watch the power-profiles names; neither following nor serving them")
		}
	}
	reply, err := conn.RequestName(Name, dbus.NameFlagDoNotQueue)
	if err != nil {
		conn.Close()
		return nil, &busFailure{step: busNameRefused, err: err}
	}
	if reply != dbus.RequestNameReplyPrimaryOwner {
		conn.Close()
		return nil, &busFailure{step: busNameTaken, err: fmt.Errorf("RequestName answered %d, not primary owner", reply)}
	}
	log.WithField("name", Name).Info("owning bus name")
	return s, nil
}

// setPP makes pp the power-profiles object served on c (nil: none) and
// publishes the latest snapshot on it.
func (svc *Service) setPP(c *session, pp *powerProfiles) {
	svc.mu.Lock()
	defer svc.mu.Unlock()
	c.pp = pp
	pp.update(svc.latest())
}

// dropPP closes and forgets the power-profiles object served on c,
// releasing its names within ctx.
func (svc *Service) dropPP(ctx context.Context, c *session) {
	svc.mu.Lock()
	defer svc.mu.Unlock()
	if c.pp != nil {
		c.pp.close(ctx)
		c.pp = nil
	}
}

// close releases the names, all within busCallTimeout, and closes the
// connection.
func (s *session) close() {
	if s == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), busCallTimeout)
	defer cancel()
	s.svc.mu.Lock()
	pp := s.pp
	s.svc.mu.Unlock()
	if pp != nil {
		pp.close(ctx)
	}
	releaseName(ctx, s.conn, Name)
	s.conn.Close()
}

// requestName is conn.RequestName within busCallTimeout or until ctx
// ends.
func requestName(ctx context.Context, conn *dbus.Conn, name string, flags dbus.RequestNameFlags) (dbus.RequestNameReply, error) {
	ctx, cancel := context.WithTimeout(ctx, busCallTimeout)
	defer cancel()
	var r uint32
	err := conn.BusObject().CallWithContext(ctx, "org.freedesktop.DBus.RequestName", 0, name, flags).Store(&r)
	return dbus.RequestNameReply(r), err
}

// releaseName is conn.ReleaseName within ctx, its answer ignored.
func releaseName(ctx context.Context, conn *dbus.Conn, name string) {
	conn.BusObject().CallWithContext(ctx, "org.freedesktop.DBus.ReleaseName", 0, name)
}
