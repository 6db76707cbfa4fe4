package daemon

import "github.com/godbus/dbus/v5"

// The D-Bus names the daemon's bus tests use, spelled out as a client
// spells them: the error the service answers with and the power-profiles
// API's names (package bus keeps its own unexported; the system manager's
// are testutil's).

const errInvalidArgs = "org.freedesktop.DBus.Error.InvalidArgs"

// ppNames are the power-profiles API's two names and their object paths.
var ppNames = []struct {
	name string
	path dbus.ObjectPath
}{
	{"org.freedesktop.UPower.PowerProfiles", "/org/freedesktop/UPower/PowerProfiles"},
	{"net.hadess.PowerProfiles", "/net/hadess/PowerProfiles"},
}
