package daemon

import "github.com/godbus/dbus/v5"

// The D-Bus names the daemon's bus tests use, spelled out as a client
// spells them: the errors the service answers with, the power-profiles
// API's names, polkit's and the system manager's (package bus keeps its
// own unexported).

const (
	errInvalidArgs  = "org.freedesktop.DBus.Error.InvalidArgs"
	errAccessDenied = "org.freedesktop.DBus.Error.AccessDenied"
)

// ppNames are the power-profiles API's two names and their object paths.
var ppNames = []struct {
	name string
	path dbus.ObjectPath
}{
	{"org.freedesktop.UPower.PowerProfiles", "/org/freedesktop/UPower/PowerProfiles"},
	{"net.hadess.PowerProfiles", "/net/hadess/PowerProfiles"},
}

// ppPath is the object path of the power-profiles name.
func ppPath(name string) dbus.ObjectPath {
	for _, n := range ppNames {
		if n.name == name {
			return n.path
		}
	}
	return ""
}

// polkit's authority and the system manager (org.freedesktop.systemd1(5)).
const (
	polkitName   = "org.freedesktop.PolicyKit1"
	polkitPath   = dbus.ObjectPath("/org/freedesktop/PolicyKit1/Authority")
	systemdName  = "org.freedesktop.systemd1"
	systemdPath  = dbus.ObjectPath("/org/freedesktop/systemd1")
	systemdIface = "org.freedesktop.systemd1.Manager"
)
