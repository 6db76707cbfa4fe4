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
	"sync"
	"sync/atomic"

	"github.com/godbus/dbus/v5"
	"github.com/sirupsen/logrus"

	"github.com/schedpolicyd/schedpolicyd/daemon/snapshot"
)

// The D-Bus names, versioned as "How to Version D-Bus Interfaces Properly"
// recommends: the well-known name, object path and interface all carry 1.
const (
	Name       = "org.schedpolicyd.SchedPolicy1"
	ObjectPath = dbus.ObjectPath("/org/schedpolicyd/SchedPolicy1")
	Interface  = "org.schedpolicyd.SchedPolicy1"
	// PolkitAction authorises every setter of Interface for callers
	// other than root; the power-profiles names ask polkit about
	// power-profiles-daemon's own actions instead (ppAction).
	PolkitAction = "org.schedpolicyd.set-policy"
)

// IntrospectionXML is the interface contract, committed as
// daemon/bus/org.schedpolicyd.SchedPolicy1.xml and served by Introspect.
//
//go:embed org.schedpolicyd.SchedPolicy1.xml
var IntrospectionXML string

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

	// life ends at Close, and with it the context of every goroutine the
	// service starts (spawn); wg counts those goroutines, and Close waits
	// for them.
	life context.Context
	end  context.CancelFunc
	wg   sync.WaitGroup

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
	life, end := context.WithCancel(context.Background())
	return &Service{
		ctl: ctl, log: log, bus: cfg.Bus,
		rep:  &busReporter{log: log, bus: cfg.Bus},
		life: life, end: end,
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

// HoldEnded tells the service that hold cookie ended; cancelled: a
// user's explicit choice (a profile, a policy or a knob set through any
// of the daemon's interfaces) ended it. Where the power-profiles API is
// served and the hold was made with HoldProfile, a cancelled hold is
// announced to its holder alone, as power-profiles-daemon does: the
// signal ProfileReleased(cookie), sent to the holder's unique name on the
// interface it held the profile through. A hold released by its holder,
// or ended because its holder left the bus, is not announced. Called
// from the daemon's loop.
func (s *Service) HoldEnded(cookie uint32, cancelled bool) {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cur != nil {
		s.cur.pp.ended(cookie, cancelled)
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
// after it is kept. It returns once every goroutine the service started
// has ended: the context of their requests to the daemon ends first
// (spawn), and the connection's close ends their calls on the bus.
// Idempotent.
func (s *Service) Close() {
	if s == nil {
		return
	}
	s.mu.Lock()
	s.closed = true
	c := s.cur
	s.cur = nil
	s.mu.Unlock()
	s.end()
	c.close()
	s.wg.Wait()
}

// spawn runs f in a goroutine of the service's, which Close waits for,
// with ctx ended by Close too; f must return once its ctx ends (its calls
// on the bus are bounded: busCallTimeout). Once the service is closed it
// starts nothing and returns false: the caller undoes what f would have.
func (s *Service) spawn(ctx context.Context, f func(ctx context.Context)) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	// Derived from life, so that Close ends it at once (no goroutine of
	// context.AfterFunc's at Close); ctx's end is passed on.
	parent := ctx
	ctx, cancel := context.WithCancel(s.life)
	stop := context.AfterFunc(parent, cancel)
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer cancel()
		defer stop()
		f(ctx)
	}()
	return true
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
