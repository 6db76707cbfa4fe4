// Package bus is schedpolicyd's D-Bus service: the API
// org.schedpolicyd.SchedPolicy1 (its contract is
// org.schedpolicyd.SchedPolicy1.xml, embedded), the power-profiles API
// and the follower of another power-profiles daemon, the watch on
// intel-lpmd's name, polkit authorisation, and the connection kept to the
// bus across its restarts.
//
// It talks to the daemon only through a Controller, and the daemon to it
// through a Service: New, Connect, Keep, Publish, HoldEnded, Reconfigure
// and Close.
package bus

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/godbus/dbus/v5"
	"github.com/godbus/dbus/v5/introspect"
	"github.com/sirupsen/logrus"
	"golang.org/x/sys/unix"

	"github.com/schedpolicyd/schedpolicyd/daemon/snapshot"
	"github.com/schedpolicyd/schedpolicyd/internal/reconnect"
	"github.com/schedpolicyd/schedpolicyd/policy"
)

// The D-Bus names, versioned as "How to Version D-Bus Interfaces Properly"
// recommends: the well-known name, object path and interface all carry 1.
const (
	Name       = "org.schedpolicyd.SchedPolicy1"
	ObjectPath = dbus.ObjectPath("/org/schedpolicyd/SchedPolicy1")
	Interface  = "org.schedpolicyd.SchedPolicy1"
	// PolkitAction authorises every setter for callers other than root.
	PolkitAction = "org.schedpolicyd.set-policy"
)

// IntrospectionXML is the interface contract, committed as
// daemon/bus/org.schedpolicyd.SchedPolicy1.xml and served by Introspect.
//
//go:embed org.schedpolicyd.SchedPolicy1.xml
var IntrospectionXML string

// Named D-Bus errors returned by the service.
const (
	errInvalidArgs  = "org.freedesktop.DBus.Error.InvalidArgs"
	errAccessDenied = "org.freedesktop.DBus.Error.AccessDenied"
	errFileExists   = "org.freedesktop.DBus.Error.FileExists"
	errUnknownProp  = "org.freedesktop.DBus.Error.UnknownProperty"
	errUnknownIface = "org.freedesktop.DBus.Error.UnknownInterface"
	errPropReadOnly = "org.freedesktop.DBus.Error.PropertyReadOnly"
	// errLimitsExceeded: a hold beyond the daemon's bounds
	// (ErrLimitsExceeded).
	errLimitsExceeded = "org.freedesktop.DBus.Error.LimitsExceeded"
)

func invalidArgs(format string, a ...any) *dbus.Error {
	return dbus.NewError(errInvalidArgs, []any{fmt.Sprintf(format, a...)})
}

// Config is how the daemon runs its service.
type Config struct {
	// Bus is the bus served: "system", "session" or a D-Bus address.
	Bus string
	// PowerProfilesAPI is PowerProfilesOff, PowerProfilesServe or
	// PowerProfilesAuto (as ParsePowerProfilesAPI leaves it).
	PowerProfilesAPI string
	// PowerProfilesUnits are the power-profiles implementations' service
	// units "auto" leaves the names to (CheckPowerProfilesUnits).
	PowerProfilesUnits []string
	// Log is where the service logs (the daemon's, with component=dbus);
	// nil: logrus's standard logger.
	Log logrus.FieldLogger
}

// Service is the daemon's D-Bus service on one bus: the connection it
// keeps, and everything exported on it. The daemon makes it with New,
// makes the first connection with Connect, keeps it with Keep, and hands
// it every snapshot it publishes (Publish) and every hold that ends
// (HoldEnded). A nil *Service (bus "none") accepts every call as a no-op.
// Its methods are safe for concurrent use.
type Service struct {
	ctl Controller
	log logrus.FieldLogger
	bus string
	rep *busReporter

	// pub is the snapshot published last, with its property values.
	pub atomic.Pointer[published]

	// mu guards the fields below and the sessions' pp; it is held while a
	// snapshot is published, so that an older one never overtakes a newer
	// one. Nobody waits for the daemon's loop while holding it: the loop
	// takes it (Publish, and the current checks of FollowProfile and
	// SetLpmdOwner).
	mu sync.Mutex
	// pp are the power-profiles settings of the next connection
	// (Reconfigure).
	ppAPI   string
	ppUnits []string
	// cur is the connection serving, nil while there is none.
	cur *session
	// closed: Close was called; no connection is installed any more.
	closed bool
}

// published is a published snapshot with its D-Bus property values,
// computed once when it is published (Get and GetAll are the hot path);
// read-only.
type published struct {
	snap *snapshot.Snapshot
	vals map[string]any
}

// New returns the service of ctl on cfg.Bus. It starts nothing.
func New(cfg Config, ctl Controller) *Service {
	log := cfg.Log
	if log == nil {
		log = logrus.StandardLogger()
	}
	return &Service{
		ctl: ctl, log: log, bus: cfg.Bus,
		rep:   &busReporter{log: log, bus: cfg.Bus},
		ppAPI: cfg.PowerProfilesAPI, ppUnits: cfg.PowerProfilesUnits,
	}
}

// Connect makes the first connection: it joins the bus, exports the
// object, its properties and introspection (and the power-profiles API
// as configured), then requests Name. It returns nil once Name is owned,
// or the failure, which it has logged (busReporter); Keep then retries.
func (s *Service) Connect(ctx context.Context) error {
	if s == nil {
		return nil
	}
	c, fail := s.connect(ctx)
	if fail != nil {
		s.rep.failed(fail)
		return fail
	}
	if !s.install(c) {
		c.close()
		return errClosed
	}
	return nil
}

// errClosed: the service was closed.
var errClosed = errors.New("the D-Bus service is closed")

// Publish publishes snap, which the daemon has just made its latest
// (Controller.Published): it computes its property values once, and on
// the connection emits one PropertiesChanged carrying every property
// whose value differs from the last published one, PolicyChanged when
// ActivePolicy changed, and the power-profiles API's PropertiesChanged.
// Called from the daemon's loop after every change; snap is read-only.
func (s *Service) Publish(snap *snapshot.Snapshot) {
	if s == nil {
		return
	}
	s.pub.Store(&published{snap: snap, vals: propertyValues(*snap)})
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cur.update(snap)
}

// HoldEnded announces that hold cookie ended: ProfileReleased(cookie) on
// both power-profiles names, where they are served. Called from the
// daemon's loop.
func (s *Service) HoldEnded(cookie uint32) {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cur != nil {
		s.cur.pp.released(cookie)
	}
}

// Reconfigure takes new power-profiles settings (as Config's) and closes
// the connection: Keep reconnects with them at once (the holds end, as
// when the bus is lost).
func (s *Service) Reconfigure(api string, units []string) {
	if s == nil {
		return
	}
	s.mu.Lock()
	s.ppAPI, s.ppUnits = api, units
	c := s.cur
	s.mu.Unlock()
	if c != nil {
		// Keep notices the closed connection and reconnects with the
		// new setting.
		c.conn.Close()
	}
}

// Close releases the names and closes the connection; no connection made
// after it is kept. Idempotent.
func (s *Service) Close() {
	if s == nil {
		return
	}
	s.mu.Lock()
	s.closed = true
	c := s.cur
	s.cur = nil
	s.mu.Unlock()
	c.close()
}

// install makes c the connection serving and publishes the latest
// snapshot on it; false once the service is closed.
func (s *Service) install(c *session) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.cur = c
	if p := s.ctl.Published(); p != nil {
		c.update(p)
	}
	return true
}

// current is the connection serving, nil none.
func (s *Service) current() *session {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cur
}

// latest is the daemon's latest snapshot; the empty one before the first.
func (s *Service) latest() snapshot.Snapshot {
	if p := s.ctl.Published(); p != nil {
		return *p
	}
	return snapshot.Snapshot{}
}

// values returns snap's D-Bus property values: computed once at
// publication, or now for a snapshot that was not published (nil: the
// empty one).
func (s *Service) values(snap *snapshot.Snapshot) map[string]any {
	if snap == nil {
		return propertyValues(snapshot.Snapshot{})
	}
	if p := s.pub.Load(); p != nil && p.snap == snap {
		return p.vals
	}
	return propertyValues(*snap)
}

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
		svc.setPP(s, exportPowerProfiles(s))
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

// dropPP closes and forgets the power-profiles object served on c.
func (svc *Service) dropPP(c *session) {
	svc.mu.Lock()
	defer svc.mu.Unlock()
	if c.pp != nil {
		c.pp.close()
		c.pp = nil
	}
}

// The steps of connect that can fail, for busFailure.
const (
	busConnect     = "connect"      // dial, authenticate, Hello
	busExport      = "export"       // exporting the object
	busNameRefused = "name refused" // RequestName returned an error (bus policy)
	busNameTaken   = "name taken"   // another connection owns Name
)

// busFailure is why connect made no connection: the step that failed and
// its error.
type busFailure struct {
	step string
	err  error
}

func (f *busFailure) Error() string { return f.step + ": " + f.err.Error() }
func (f *busFailure) Unwrap() error { return f.err }

// kind tells one cause of failure from another: the step, and the D-Bus
// error name or the errno when there is one ("connect: ENOENT" while the
// socket is missing, "connect: ECONNREFUSED" once a dead bus left it,
// "name refused: org.freedesktop.DBus.Error.AccessDenied" without the
// policy file).
func (f *busFailure) kind() string {
	var de dbus.Error
	var dep *dbus.Error
	var errno syscall.Errno
	switch {
	case errors.As(f.err, &de):
		return f.step + ": " + de.Name
	case errors.As(f.err, &dep):
		return f.step + ": " + dep.Name
	case errors.As(f.err, &errno):
		return f.step + ": " + unix.ErrnoName(errno)
	}
	return f.step
}

// busReporter logs the bus connection's failures: each new kind of
// failure (busFailure.kind) at warning level with its cause, the same kind
// again at debug level, so a retry loop neither floods the log nor hides a
// new cause — a bus that was missing at start and then refuses the name
// says so when it first refuses it. A connection that succeeds resets it.
// Only Connect and Keep use it, one after the other.
type busReporter struct {
	log  logrus.FieldLogger
	bus  string
	last string // kind of the last failure; "" after a success
}

// failed logs a failure of connect.
func (r *busReporter) failed(f *busFailure) {
	kind := f.kind()
	lvl := logrus.WarnLevel
	if kind == r.last {
		lvl = logrus.DebugLevel
	}
	r.last = kind
	e := r.log.WithField("bus", r.bus).WithError(f.err)
	switch f.step {
	case busConnect:
		e.Log(lvl, "no D-Bus connection; running without D-Bus (no bus name, no UPower or resume hints) and connecting when the bus is there")
	case busNameRefused:
		e.Log(lvl, fmt.Sprintf("the bus refused us %s; retrying in the background (on the system bus, is the policy file org.schedpolicyd.SchedPolicy1.conf installed in /usr/share/dbus-1/system.d? see the README)", Name))
	case busNameTaken:
		e.Log(lvl, fmt.Sprintf("cannot own %s: another process owns it; retrying in the background", Name))
	default:
		e.Log(lvl, "cannot serve on D-Bus; retrying in the background")
	}
}

// connected forgets the last failure: the next one is news.
func (r *busReporter) connected() { r.last = "" }

// busDialTimeout bounds connecting and the Hello call: a bus that accepts
// the socket but never answers must not keep the daemon from starting.
const busDialTimeout = 5 * time.Second

// dialBus connects to bus ("system", "session" or an address) within
// timeout or until ctx ends; a connection that completes later is closed.
func dialBus(ctx context.Context, bus string, timeout time.Duration, opts ...dbus.ConnOption) (*dbus.Conn, error) {
	type result struct {
		conn *dbus.Conn
		err  error
	}
	ch := make(chan result, 1)
	go func() {
		var r result
		switch bus {
		case "system":
			r.conn, r.err = dbus.ConnectSystemBus(opts...)
		case "session":
			r.conn, r.err = dbus.ConnectSessionBus(opts...)
		default:
			r.conn, r.err = dbus.Connect(bus, opts...)
		}
		ch <- r
	}()
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case r := <-ch:
		return r.conn, r.err
	case <-t.C:
	case <-ctx.Done():
	}
	go func() {
		if r := <-ch; r.conn != nil {
			r.conn.Close()
		}
	}()
	return nil, fmt.Errorf("the bus did not answer within %v", timeout)
}

// busBackoff is the wait between attempts to reach the daemon's bus.
var busBackoff = reconnect.Backoff{Min: time.Second, Max: 30 * time.Second}

// Keep watches the bus connection and reconnects with busBackoff whenever
// it is lost or was never made (Connect failed), e.g. when dbus-daemon
// restarts. There is no timer while the bus socket is missing: an idle
// daemon on a machine without the bus does not wake to retry, and
// connects as soon as the socket appears (reconnect.WaitSocket). Every
// failure goes to the reporter Connect's failure went to. When a
// connection is lost every hold ends and nothing is followed any more
// (Controller.EndAllHolds, Unfollow): the holders' and the followed daemon's
// unique names died with it. It returns when ctx ends or the service is
// closed; the daemon runs it in a goroutine of its own.
func (s *Service) Keep(ctx context.Context) {
	if s == nil {
		return
	}
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	busSocket := func() string { return reconnect.BusSocket(s.bus) }
	first := true
	busBackoff.Keep(ctx, busSocket, func(ctx context.Context) (bool, error) {
		var cur *session
		if first {
			first = false
			if cur = s.current(); cur == nil {
				return false, nil // Connect made the first attempt, and the reporter has its failure
			}
		} else {
			c, fail := s.connect(ctx)
			if fail != nil {
				if ctx.Err() == nil {
					s.rep.failed(fail)
				}
				return false, fail
			}
			s.rep.connected()
			if !s.install(c) {
				c.close()
				stop() // the service is closed
				return true, errClosed
			}
			cur = c
		}
		select {
		case <-ctx.Done():
			return true, ctx.Err()
		case <-cur.conn.Context().Done():
		}
		s.log.Warn("lost the D-Bus connection; reconnecting")
		s.mu.Lock()
		if s.cur == cur {
			s.cur = nil
		}
		s.mu.Unlock()
		// Every holder's unique name died with the old bus.
		s.ctl.EndAllHolds(ctx, "the bus connection was lost")
		s.ctl.Unfollow(ctx, "the bus connection was lost")
		cur.conn.Close()
		return true, errBusLost
	}, nil)
}

// errBusLost ends a bus session: the connection's context ended.
var errBusLost = errors.New("lost the D-Bus connection")

// The published lists while they are empty (no hold yet, before the
// topology could be read): not nil, so that they compare equal
// (equalValue) to an empty list built elsewhere.
var (
	noHolds    = []snapshot.Hold{}
	noTopology = []snapshot.TopologyEntry{}
	noClasses  = []snapshot.CPUClassEntry{}
)

// propertyValues maps a snapshot to the D-Bus property values of Interface,
// with the Go types godbus encodes as the XML's signatures.
func propertyValues(snap snapshot.Snapshot) map[string]any {
	avail := make([]string, len(policy.AvailablePolicies))
	for i, p := range policy.AvailablePolicies {
		avail[i] = string(p)
	}
	ws := make([]workloadEntry, 0, len(snap.Workloads))
	for _, w := range snap.Workloads {
		ws = append(ws, workloadEntry{w.Name, w.Path, w.CPUs, w.Util, string(w.Override), w.Class})
	}
	// A hold is its own (usss) entry, and the snapshot's list is shared
	// from one publication to the next while the holds do not change (the
	// daemon's holdIndex): no per-hold work here, and update compares it
	// in O(1).
	holds := snap.Holds
	if holds == nil {
		holds = noHolds
	}
	topo := snap.Topology
	if topo == nil {
		topo = noTopology
	}
	classes := snap.CPUClasses
	if classes == nil {
		classes = noClasses
	}
	return map[string]any{
		"CPUClasses":        classes,
		"ConfigDigest":      snap.ConfigDigest,
		"ActivePolicy":      string(snap.Policy),
		"AvailablePolicies": avail,
		"PowerAware":        uint32(snap.Knob.PowerAware),
		"PowerAwarePolicy":  string(snap.Knob.PowerAwarePolicy),
		"PowerSource":       string(snap.PowerSource),
		"OnBattery":         snap.PowerSource == "battery",
		"Boost":             snap.Boost,
		"Reason":            snap.PolicyReason,
		"Workloads":         ws,
		"LastChange":        uint64(snap.LastChange.UnixMicro()),
		"Holds":             holds,
		"Topology":          topo,
		"EnergySource":      snap.EnergySourceName(),
		"Energy":            energyEntries(snap.Energy),
	}
}

// workloadEntry is one element of the Workloads property, signature
// (sssdss): name, cgroup directory, cpulist, utilisation (CPUs),
// override, class (WorkloadStatus.Class).
type workloadEntry struct {
	Name, Path, CPUs string
	Util             float64
	Override         string
	Class            string
}

// update emits one PropertiesChanged carrying every property whose value
// differs from the last published one, and PolicyChanged when ActivePolicy
// changed. Called with svc.mu held (Publish, install).
func (s *session) update(snap *snapshot.Snapshot) {
	if s == nil {
		return
	}
	vals := s.svc.values(snap)
	prev := s.properties.publish(vals)
	if prev["ActivePolicy"] != vals["ActivePolicy"] {
		s.conn.Emit(ObjectPath, Interface+".PolicyChanged", string(snap.Policy), snap.PolicyReason)
	}
	s.pp.update(*snap)
}

// equalValue compares two property values (strings, numbers, slices of
// the entry structs). reflect.DeepEqual, not a formatted comparison: with
// 1,000 workloads formatting both Workloads lists on every publish was 5 %
// of a policy switch's CPU.
func equalValue(a, b any) bool {
	return reflect.DeepEqual(a, b)
}

// close releases the names and closes the connection.
func (s *session) close() {
	if s == nil {
		return
	}
	s.svc.mu.Lock()
	pp := s.pp
	s.svc.mu.Unlock()
	if pp != nil {
		pp.close()
	}
	s.conn.ReleaseName(Name)
	s.conn.Close()
}

// introspectable serves the committed XML plus the standard interfaces.
type introspectable string

func (x introspectable) Introspect() (string, *dbus.Error) {
	body := string(x)
	i := strings.Index(body, "<node>")
	j := strings.LastIndex(body, "</node>")
	if i < 0 || j < 0 {
		return "", dbus.MakeFailedError(errors.New("bad introspection data"))
	}
	std := introspect.IntrospectDataString + `<interface name="org.freedesktop.DBus.Properties">
  <method name="Get"><arg name="interface" type="s" direction="in"/><arg name="property" type="s" direction="in"/><arg name="value" type="v" direction="out"/></method>
  <method name="GetAll"><arg name="interface" type="s" direction="in"/><arg name="props" type="a{sv}" direction="out"/></method>
  <method name="Set"><arg name="interface" type="s" direction="in"/><arg name="property" type="s" direction="in"/><arg name="value" type="v" direction="in"/></method>
  <signal name="PropertiesChanged"><arg name="interface" type="s"/><arg name="changed_properties" type="a{sv}"/><arg name="invalidated_properties" type="as"/></signal>
</interface>
<interface name="org.freedesktop.DBus.Peer">
  <method name="Ping"/>
  <method name="GetMachineId"><arg name="machine_uuid" type="s" direction="out"/></method>
</interface>
`
	return `<!DOCTYPE node PUBLIC "-//freedesktop//DTD D-BUS Object Introspection 1.0//EN" "http://www.freedesktop.org/standards/dbus/1.0/introspect.dtd">
<node>
` + std + body[i+len("<node>"):j] + "</node>\n", nil
}
