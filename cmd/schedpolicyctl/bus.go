package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/godbus/dbus/v5"

	"github.com/schedpolicyd/schedpolicyd/internal/bussender"
)

// D-Bus error names the client turns into messages and exit codes.
const (
	errServiceUnknown  = "org.freedesktop.DBus.Error.ServiceUnknown"
	errNameHasNoOwner  = "org.freedesktop.DBus.Error.NameHasNoOwner"
	errAccessDenied    = "org.freedesktop.DBus.Error.AccessDenied"
	errAuthFailed      = "org.freedesktop.DBus.Error.AuthFailed"
	errInteractiveAuth = "org.freedesktop.DBus.Error.InteractiveAuthorizationRequired"
	errNotAuthorized   = "org.freedesktop.PolicyKit1.Error.NotAuthorized"
	errInvalidArgs     = "org.freedesktop.DBus.Error.InvalidArgs"
	errFileExists      = "org.freedesktop.DBus.Error.FileExists"
	errUnknownMethod   = "org.freedesktop.DBus.Error.UnknownMethod"
	errUnknownProperty = "org.freedesktop.DBus.Error.UnknownProperty"
	errUnknownObject   = "org.freedesktop.DBus.Error.UnknownObject"
	errNoReply         = "org.freedesktop.DBus.Error.NoReply"
	errTimeout         = "org.freedesktop.DBus.Error.Timeout"
)

// cliError is an error with the exit code it maps to.
type cliError struct {
	code int
	msg  string
}

func (e *cliError) Error() string { return e.msg }

// busLabel names the bus for messages: "the system bus", "the session bus"
// or "the bus at ADDRESS".
func busLabel(bus string) string {
	switch bus {
	case "system", "session":
		return "the " + bus + " bus"
	}
	return "the bus at " + bus
}

// connect opens a private connection to bus ("system", "session" or an
// address); the caller closes it. A failure is a *cliError with exit 1.
func connect(bus string) (*dbus.Conn, error) {
	var conn *dbus.Conn
	var err error
	switch bus {
	case "system":
		conn, err = dbus.ConnectSystemBus()
	case "session":
		conn, err = dbus.ConnectSessionBus()
	default:
		conn, err = dbus.Connect(bus)
	}
	if err != nil {
		msg := fmt.Sprintf("cannot connect to %s: %v", busLabel(bus), err)
		if bus == "system" && noSystemBus(err) {
			msg += "\n" + noBusHelp(defaultKnobDir)
		}
		return nil, &cliError{exitFailure, msg}
	}
	return conn, nil
}

// systemBusSockets are where a system bus listens when
// DBUS_SYSTEM_BUS_ADDRESS is unset (the D-Bus specification's default
// and its /var/run spelling), as godbus looks for them.
var systemBusSockets = []string{"/run/dbus/system_bus_socket", "/var/run/dbus/system_bus_socket"}

// defaultKnobDir is the knob's directory in the tree the daemon serves by
// default (--tree-dir /run/schedpolicyd/sysfs).
const defaultKnobDir = "/run/schedpolicyd/sysfs/devices/system/cpu/sched_policy"

// noSystemBus reports whether err, from connecting to the system bus,
// means that no system bus runs here: DBUS_SYSTEM_BUS_ADDRESS is unset
// and no socket is at the default places, or one is but nobody listens
// on it (a bus that ended and left it behind).
func noSystemBus(err error) bool {
	if os.Getenv("DBUS_SYSTEM_BUS_ADDRESS") != "" {
		return false
	}
	if errors.Is(err, syscall.ECONNREFUSED) {
		return true
	}
	for _, p := range systemBusSockets {
		if _, err := os.Stat(p); err == nil {
			return false
		}
	}
	return true
}

// noBusHelp says what to do without a system bus: use the tree of the
// daemon, which serves it without a bus (knobDir, its knob's directory
// at the default --tree-dir; whether one is mounted there now is
// checked), or run the daemon on a private bus schedpolicyctl --bus
// reaches.
func noBusHelp(knobDir string) string {
	tree := "A running schedpolicyd serves its tree without a bus (at the default --tree-dir):"
	if _, err := os.Stat(filepath.Join(knobDir, "current_sched_policy")); err == nil {
		tree = "schedpolicyd's tree is there and works without a bus:"
	}
	return `No system bus runs here, so schedpolicyctl cannot reach schedpolicyd.
` + tree + `
  cat ` + knobDir + `/current_sched_policy
  echo powersaving > ` + knobDir + `/current_sched_policy
Or run the daemon on a bus schedpolicyctl can reach, as root:
  dbus-daemon --session --nofork --address=unix:path=/tmp/spd-bus &
  schedpolicyd --bus unix:path=/tmp/spd-bus &
  schedpolicyctl --bus unix:path=/tmp/spd-bus status
(from a checkout: make run ARGS="--bus unix:path=/tmp/spd-bus").`
}

// busError maps an error from a call to the daemon (what: "SetPolicy",
// "reading properties", ...) to a clear message and an exit code:
// ServiceUnknown/NameHasNoOwner → "schedpolicyd is not running" (1);
// AccessDenied and polkit refusals → 3; InvalidArgs → 4 with the
// daemon's message; FileExists → 5; UnknownMethod/Property → "too old" (1);
// anything else → 1.
func busError(bus, what string, err error) *cliError {
	var ce *cliError
	if errors.As(err, &ce) {
		return ce
	}
	var de dbus.Error
	if !errors.As(err, &de) {
		var dep *dbus.Error
		if errors.As(err, &dep) {
			de = *dep
		} else {
			return &cliError{exitFailure, fmt.Sprintf("%s: %v", what, err)}
		}
	}
	detail := ""
	if len(de.Body) > 0 {
		if s, ok := de.Body[0].(string); ok {
			detail = s
		}
	}
	switch de.Name {
	case errServiceUnknown, errNameHasNoOwner:
		return &cliError{exitFailure, fmt.Sprintf("schedpolicyd is not running (nobody owns %s on %s)", busName, busLabel(bus))}
	case errAccessDenied, errAuthFailed, errInteractiveAuth, errNotAuthorized:
		msg := fmt.Sprintf("%s: access denied", what)
		if detail != "" && !strings.EqualFold(detail, "access denied") {
			msg += ": " + detail
		}
		return &cliError{exitAccessDenied, msg + " (needs root or authorisation for the polkit action org.schedpolicyd.set-policy)"}
	case errInvalidArgs:
		if detail == "" {
			detail = "invalid argument"
		}
		return &cliError{exitInvalid, fmt.Sprintf("%s: %s", what, detail)}
	case errFileExists:
		if detail == "" {
			detail = "already exists"
		}
		return &cliError{exitExists, fmt.Sprintf("%s: %s", what, detail)}
	case errUnknownMethod, errUnknownProperty, errUnknownObject:
		return &cliError{exitFailure, fmt.Sprintf("%s: the running schedpolicyd does not support this (%s); is it older than schedpolicyctl?", what, strings.TrimPrefix(de.Name, "org.freedesktop.DBus.Error."))}
	case errNoReply, errTimeout:
		return &cliError{exitFailure, fmt.Sprintf("%s: schedpolicyd did not answer: %s", what, detail)}
	}
	if detail == "" {
		detail = de.Name
	}
	return &cliError{exitFailure, fmt.Sprintf("%s: %s (%s)", what, detail, de.Name)}
}

// fail prints err to stderr and returns its exit code.
func (c *cli) fail(err error) int {
	var ce *cliError
	if !errors.As(err, &ce) {
		ce = &cliError{exitFailure, err.Error()}
	}
	fmt.Fprintf(c.stderr, "schedpolicyctl: %s\n", ce.msg)
	return ce.code
}

// client is a connection plus the daemon's object.
type client struct {
	bus  string
	conn *dbus.Conn
	obj  dbus.BusObject
}

func (c *cli) dial() (*client, error) {
	conn, err := connect(c.g.bus)
	if err != nil {
		return nil, err
	}
	return &client{bus: c.g.bus, conn: conn, obj: conn.Object(busName, objectPath)}, nil
}

func (cl *client) Close() { cl.conn.Close() }

// call invokes a setter on the daemon, allowing polkit to ask for a
// password interactively (FlagAllowInteractiveAuthorization), and stores
// the reply into ret. Errors are *cliError, prefixed with the method.
func (cl *client) call(method string, ret []any, args ...any) error {
	return cl.callAs(method, method, ret, args...)
}

// callAs is call with errors prefixed with what instead (e.g. "run"), for
// a command whose user never named the method.
func (cl *client) callAs(what, method string, ret []any, args ...any) error {
	call := cl.obj.Call(iface+"."+method, dbus.FlagAllowInteractiveAuthorization, args...)
	if call.Err != nil {
		return busError(cl.bus, what, call.Err)
	}
	if len(ret) > 0 {
		if err := call.Store(ret...); err != nil {
			return busError(cl.bus, what, fmt.Errorf("unexpected reply: %w", err))
		}
	}
	return nil
}

// properties returns every property of the interface (GetAll). Properties
// an older daemon lacks are simply absent.
func (cl *client) properties() (map[string]dbus.Variant, error) {
	var props map[string]dbus.Variant
	err := cl.obj.Call("org.freedesktop.DBus.Properties.GetAll", 0, iface).Store(&props)
	if err != nil {
		return nil, busError(cl.bus, "reading properties", err)
	}
	return props, nil
}

// subscribe adds the match rules (the caller has registered its signal
// channel already), then follows who owns busName. Signals count only
// from that owner: anyone on the bus may send the client a
// PropertiesChanged or a NameOwnerChanged.
func subscribe(ctx context.Context, conn *dbus.Conn, matches ...[]dbus.MatchOption) (*bussender.Owner, error) {
	for _, m := range matches {
		if err := conn.AddMatchSignalContext(ctx, m...); err != nil {
			return nil, err
		}
	}
	return bussender.WatchOwner(ctx, conn, busName)
}
