package bus

import (
	"errors"
	"fmt"
	"testing"

	"github.com/godbus/dbus/v5"
)

// TestErrorTexts: the errors clients see, by name and text, as they were
// when each was built per call.
func TestErrorTexts(t *testing.T) {
	wrapped := fmt.Errorf("owner :1.7 has 8 holds: %w", ErrLimitsExceeded)
	for _, tc := range []struct {
		err        *dbus.Error
		name, text string
	}{
		{errReasonTooLong, errInvalidArgs, "reason longer than 256 bytes"},
		{errAppIDTooLong, errInvalidArgs, "application_id longer than 256 bytes"},
		{errBadIntrospection, "org.freedesktop.DBus.Error.Failed", "bad introspection data"},
		{invalidArgs("%s takes %q", "SetPolicy", "s"), errInvalidArgs, `SetPolicy takes "s"`},
		{accessDenied("PID %d is not the caller's process (%d)", 1, 2), errAccessDenied, "PID 1 is not the caller's process (2)"},
		{unknownInterface("org.example.Other"), errUnknownIface, "no interface org.example.Other"},
		{unknownProperty("Nope"), errUnknownProp, "no property Nope"},
		{propertyReadOnly("Holds"), errPropReadOnly, "Holds is read-only"},
		{limitsExceeded(wrapped), errLimitsExceeded, wrapped.Error()},
		{fileExists(errors.New("workload job exists")), errFileExists, "workload job exists"},
	} {
		if tc.err.Name != tc.name || tc.err.Error() != tc.text || len(tc.err.Body) != 1 {
			t.Errorf("%s %q (body %d values), want %s %q", tc.err.Name, tc.err.Error(), len(tc.err.Body), tc.name, tc.text)
		}
	}
}
