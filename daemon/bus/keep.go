package bus

// Reaching the bus and keeping the connection: dialBus, the failures
// of connect and their reporter, and Keep.

import (
	"context"
	"errors"
	"fmt"
	"syscall"
	"time"

	"github.com/godbus/dbus/v5"
	"github.com/sirupsen/logrus"
	"golang.org/x/sys/unix"

	"github.com/schedpolicyd/schedpolicyd/internal/reconnect"
)

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
		e.Log(lvl, fmt.Sprintf("the bus refused us %s; retrying in the background (on the system bus, is the policy file org.schedpolicyd.SchedPolicy1.conf installed in /usr/share/dbus-1/system.d? the package installs it; from a checkout see docs/USAGE.md, \"D-Bus from a checkout\")", Name))
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
// timeout or until ctx ends. A dial that does not complete in time is
// abandoned: the connection being made is closed (its context is
// dialCtx's child, dbus.WithContext), which ends its authentication or
// Hello at once, and dialBus returns once the dial's goroutine has.
// Only connecting the socket itself is not cut short, which for a unix
// socket never waits.
func dialBus(ctx context.Context, bus string, timeout time.Duration, opts ...dbus.ConnOption) (*dbus.Conn, error) {
	type result struct {
		conn *dbus.Conn
		err  error
	}
	dialCtx, abandon := context.WithCancel(context.Background())
	handedOut := false // dialCtx then lives as long as the connection
	defer func() {
		if !handedOut {
			abandon()
		}
	}()
	opts = append(opts[:len(opts):len(opts)], dbus.WithContext(dialCtx))
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
		handedOut = r.err == nil
		return r.conn, r.err
	case <-t.C:
	case <-ctx.Done():
	}
	abandon()
	if r := <-ch; r.conn != nil {
		r.conn.Close() // completed as it was abandoned
	}
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
