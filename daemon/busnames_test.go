package daemon

import "github.com/godbus/dbus/v5"

// The D-Bus names the daemon's bus tests use, spelled out as a client
// spells them: the error the service answers with, the power-profiles
// API's names and the system manager's (package bus keeps its own
// unexported).

const errInvalidArgs = "org.freedesktop.DBus.Error.InvalidArgs"

// ppNames are the power-profiles API's two names and their object paths.
var ppNames = []struct {
	name string
	path dbus.ObjectPath
}{
	{"org.freedesktop.UPower.PowerProfiles", "/org/freedesktop/UPower/PowerProfiles"},
	{"net.hadess.PowerProfiles", "/net/hadess/PowerProfiles"},
}

// The system manager (org.freedesktop.systemd1(5)).
const (
	systemdName  = "org.freedesktop.systemd1"
	systemdPath  = dbus.ObjectPath("/org/freedesktop/systemd1")
	systemdIface = "org.freedesktop.systemd1.Manager"
)
