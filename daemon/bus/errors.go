package bus

// The D-Bus errors the service answers with.

import (
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

func invalidArgs(format string, a ...any) *dbus.Error {
	return dbus.NewError(errInvalidArgs, []any{fmt.Sprintf(format, a...)})
}
