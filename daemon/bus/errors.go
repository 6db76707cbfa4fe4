package bus

// The D-Bus errors the service answers with: their names, the errors
// whose text is always the same (package variables, as godbus's
// prop.ErrReadOnly), and a constructor for each that carries the call's
// detail. Clients (schedpolicyctl among them) are told to expect these
// names, and see these texts.

import (
	"errors"
	"fmt"

	"github.com/godbus/dbus/v5"
)

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

// The errors whose text never changes; shared and read-only (godbus only
// reads an error to send it, and the outgoing interceptor copies what it
// changes: cleanOutgoing).
var (
	// errReasonTooLong: HoldPolicy's or HoldProfile's reason is longer
	// than 256 bytes.
	errReasonTooLong = &dbus.Error{Name: errInvalidArgs, Body: []any{"reason longer than 256 bytes"}}
	// errAppIDTooLong: HoldProfile's application_id is longer than 256
	// bytes.
	errAppIDTooLong = &dbus.Error{Name: errInvalidArgs, Body: []any{"application_id longer than 256 bytes"}}
	// errBadIntrospection: the introspection data has no <node> element
	// (org.freedesktop.DBus.Error.Failed).
	errBadIntrospection = dbus.MakeFailedError(errors.New("bad introspection data"))
)

// invalidArgs is InvalidArgs with the text format gives.
func invalidArgs(format string, a ...any) *dbus.Error {
	return dbus.NewError(errInvalidArgs, []any{fmt.Sprintf(format, a...)})
}

// accessDenied is AccessDenied with the text format gives.
func accessDenied(format string, a ...any) *dbus.Error {
	return dbus.NewError(errAccessDenied, []any{fmt.Sprintf(format, a...)})
}

// unknownInterface is UnknownInterface for a Properties call about iface.
func unknownInterface(iface string) *dbus.Error {
	return dbus.NewError(errUnknownIface, []any{"no interface " + iface})
}

// unknownProperty is UnknownProperty for a property name there is not.
func unknownProperty(name string) *dbus.Error {
	return dbus.NewError(errUnknownProp, []any{"no property " + name})
}

// propertyReadOnly is PropertyReadOnly for a Set of property name.
func propertyReadOnly(name string) *dbus.Error {
	return dbus.NewError(errPropReadOnly, []any{name + " is read-only"})
}

// limitsExceeded is LimitsExceeded with err's text (an error wrapping
// ErrLimitsExceeded).
func limitsExceeded(err error) *dbus.Error {
	return dbus.NewError(errLimitsExceeded, []any{err.Error()})
}

// fileExists is FileExists with err's text (an error wrapping
// fs.ErrExist).
func fileExists(err error) *dbus.Error {
	return dbus.NewError(errFileExists, []any{err.Error()})
}
