package bus

import (
	"context"
	"errors"
	"fmt"

	"github.com/godbus/dbus/v5"

	"github.com/schedpolicyd/schedpolicyd/internal/bussender"
)

// InstalledUnits is what the system manager says of some units' files
// (InstalledUnitsAt).
type InstalledUnits struct {
	// Systemd: org.freedesktop.systemd1 has an owner on the bus. Without
	// it no unit can be installed as systemd means it, and States is nil.
	Systemd bool
	// States maps each unit whose file is installed and not masked to its
	// state ("enabled", "disabled", "static", …), as
	// GetUnitFileState says (installedUnit's rule).
	States map[string]string
}

// InstalledUnitsAt asks the system manager on bus ("system", "session",
// an address) which of units are installed and not masked, starting
// nothing (NO_AUTO_START, the bus daemon and the manager's unique name
// only), within busDialTimeout and busCallTimeout, or until ctx ends. Errors: the bus cannot
// be reached, or systemd answered something else than a state or
// "no such file" for a unit (the caller cannot tell then).
func InstalledUnitsAt(ctx context.Context, bus string, units []string) (InstalledUnits, error) {
	conn, err := dialBus(ctx, bus, busDialTimeout)
	if err != nil {
		return InstalledUnits{}, fmt.Errorf("no bus: %w", err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, busCallTimeout)
	defer cancel()
	owner, err := bussender.GetNameOwner(ctx, conn, systemdName)
	if err != nil {
		return InstalledUnits{}, fmt.Errorf("asking the bus for %s: %w", systemdName, err)
	}
	if owner == "" {
		return InstalledUnits{}, nil
	}
	out := InstalledUnits{Systemd: true, States: map[string]string{}}
	for _, name := range units {
		var st string
		err := conn.Object(owner, systemdPath).CallWithContext(ctx, systemdIface+".GetUnitFileState", dbus.FlagNoAutoStart, name).Store(&st)
		var de dbus.Error
		switch {
		case errors.As(err, &de) && (de.Name == "org.freedesktop.DBus.Error.FileNotFound" || de.Name == "org.freedesktop.systemd1.NoSuchUnit"):
			continue
		case err != nil:
			return InstalledUnits{}, fmt.Errorf("GetUnitFileState %s: %w", name, err)
		case st == "masked" || st == "masked-runtime":
			continue
		}
		out.States[name] = st
	}
	return out, nil
}
