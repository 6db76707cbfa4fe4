package bus

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/godbus/dbus/v5"
	"github.com/sirupsen/logrus"

	"github.com/schedpolicyd/schedpolicyd/internal/bussender"
)

// DefaultPowerProfilesUnits are the systemd units of the power-profiles
// implementations ("auto" leaves the power-profiles names to them while
// one is installed): power-profiles-daemon, tuned's tuned-ppd and TLP's
// tlp-pd. Config.PowerProfilesUnits (power_profiles_units) replaces the
// list.
var DefaultPowerProfilesUnits = []string{"power-profiles-daemon.service", "tuned-ppd.service", "tlp-pd.service"}

// The system manager's names (org.freedesktop.systemd1(5)).
const (
	systemdName  = "org.freedesktop.systemd1"
	systemdPath  = dbus.ObjectPath("/org/freedesktop/systemd1")
	systemdIface = "org.freedesktop.systemd1.Manager"
)

// CheckPowerProfilesUnits normalises the power_profiles_units setting:
// nil is a copy of DefaultPowerProfilesUnits; otherwise units itself, once
// each is checked to be a service unit's name (an error names the first
// that is not).
func CheckPowerProfilesUnits(units []string) ([]string, error) {
	if units == nil {
		return slices.Clone(DefaultPowerProfilesUnits), nil
	}
	for _, u := range units {
		name, ok := strings.CutSuffix(u, ".service")
		if !ok || name == "" || strings.ContainsAny(u, "/ \t\n") {
			return nil, fmt.Errorf("power_profiles_units: %q is not a service unit name (NAME.service)", u)
		}
	}
	return units, nil
}

// ppUnits follows, on a connection of its own (the manager's signals go
// to every channel of a connection, and a desktop's system manager sends
// many), whether a power-profiles implementation is installed or starting,
// as the system manager says: its unit file exists and is not masked
// (GetUnitFileState), systemd reloaded or its unit files changed (a
// package was installed or removed), a start job for one of them was
// queued (JobNew). Only the manager's own connection is believed. It is
// nil where nobody owns org.freedesktop.systemd1 on the bus: without
// systemd the names are served whenever nobody owns them.
type ppUnits struct {
	conn  *dbus.Conn
	owner *bussender.Owner
	units []string
	sig   chan *dbus.Signal
}

// ppUnitsEvent is what a manager signal means for the power-profiles
// names.
type ppUnitsEvent int

const (
	ppUnitsNone     ppUnitsEvent = iota
	ppUnitsChanged               // unit files may have come or gone: look again
	ppUnitsStarting              // one of the units is being started (unit in the event)
)

// dialPPUnits connects to bus, subscribes to the manager's signals and
// follows its owner. It returns nil, nil where the bus has no systemd.
func dialPPUnits(ctx context.Context, bus string, units []string) (*ppUnits, error) {
	conn, err := dialBus(ctx, bus, busDialTimeout)
	if err != nil {
		return nil, err
	}
	u := &ppUnits{conn: conn, units: units, sig: make(chan *dbus.Signal, 256)}
	conn.Signal(u.sig)
	cctx, cancel := context.WithTimeout(ctx, busCallTimeout)
	defer cancel()
	for _, member := range []string{"JobNew", "UnitFilesChanged", "Reloading"} {
		if err := conn.AddMatchSignalContext(cctx, dbus.WithMatchSender(systemdName), dbus.WithMatchObjectPath(systemdPath),
			dbus.WithMatchInterface(systemdIface), dbus.WithMatchMember(member)); err != nil {
			conn.Close()
			return nil, err
		}
	}
	if u.owner, err = bussender.WatchOwner(cctx, conn, systemdName); err != nil {
		conn.Close()
		return nil, err
	}
	if u.owner.Unique() == "" {
		conn.Close()
		return nil, nil
	}
	// Sent to the unique name: never starts anything.
	if err := conn.Object(u.owner.Unique(), systemdPath).CallWithContext(cctx, systemdIface+".Subscribe", dbus.FlagNoAutoStart).Err; err != nil {
		conn.Close()
		return nil, fmt.Errorf("systemd manager: Subscribe: %w", err)
	}
	return u, nil
}

func (u *ppUnits) close() {
	if u != nil {
		u.conn.Close()
	}
}

// signals is the channel of the manager's signals, nil without systemd.
func (u *ppUnits) signals() <-chan *dbus.Signal {
	if u == nil {
		return nil
	}
	return u.sig
}

// event interprets sig: the manager's JobNew for one of the units (the
// unit), a reload that finished or a change of unit files; anything else,
// from anyone else, is ppUnitsNone.
func (u *ppUnits) event(sig *dbus.Signal) (ppUnitsEvent, string) {
	if u.owner.Observe(sig) || !u.owner.Sent(sig) || sig.Path != systemdPath {
		return ppUnitsNone, ""
	}
	switch sig.Name {
	case systemdIface + ".JobNew": // (u id, o job, s unit)
		if len(sig.Body) == 3 {
			if unit, ok := sig.Body[2].(string); ok && slices.Contains(u.units, unit) {
				return ppUnitsStarting, unit
			}
		}
	case systemdIface + ".UnitFilesChanged":
		return ppUnitsChanged, ""
	case systemdIface + ".Reloading": // (b active): false once the reload is done
		if len(sig.Body) == 1 {
			if active, ok := sig.Body[0].(bool); ok && !active {
				return ppUnitsChanged, ""
			}
		}
	}
	return ppUnitsNone, ""
}

// installed is installedUnit on the manager's connection; "" without
// systemd.
func (u *ppUnits) installed(ctx context.Context) (unit, state string, err error) {
	if u == nil {
		return "", "", nil
	}
	return installedUnit(ctx, u.conn, u.units)
}

// installedUnit returns the first of units whose unit file is installed
// and not masked, as the system manager on conn says, with its state
// ("enabled", "disabled", "static", …); "" when none is. A unit systemd
// has no file for is not installed; any other error is returned (the
// caller then serves nothing: it cannot tell). Nothing is started.
func installedUnit(ctx context.Context, conn *dbus.Conn, units []string) (unit, state string, err error) {
	ctx, cancel := context.WithTimeout(ctx, busCallTimeout)
	defer cancel()
	for _, name := range units {
		var st string
		err := conn.Object(systemdName, systemdPath).CallWithContext(ctx, systemdIface+".GetUnitFileState", dbus.FlagNoAutoStart, name).Store(&st)
		var de dbus.Error
		switch {
		case errors.As(err, &de) && (de.Name == "org.freedesktop.DBus.Error.FileNotFound" || de.Name == "org.freedesktop.systemd1.NoSuchUnit"):
			continue
		case err != nil:
			return "", "", fmt.Errorf("GetUnitFileState %s: %w", name, err)
		case st == "masked" || st == "masked-runtime":
			continue
		}
		return name, st, nil
	}
	return "", "", nil
}

// leftTo says whether the names are left to an installed implementation
// (and logs why, once per change), or the error that makes it unknown.
func (w *ppWatch) leftTo(ctx context.Context) (string, error) {
	unit, state, err := w.units.installed(ctx)
	switch {
	case err != nil:
		if w.standbyWhy != "error" {
			w.s.log.WithError(err).Warn("cannot ask systemd whether a power-profiles daemon is installed; not serving the power-profiles names until it answers")
		}
		w.standbyWhy = "error"
		return "", err
	case unit != "":
		if w.standbyWhy != unit {
			w.s.log.WithFields(logrus.Fields{"unit": unit, "state": state}).Info("a power-profiles daemon is installed; its names are left to it (power_profiles_api = true serves them anyway)")
		}
		w.standbyWhy = unit
		return unit, nil
	}
	w.standbyWhy = ""
	return "", nil
}

// onUnits handles a manager signal: a start of one of the units releases
// the names at once, before it asks for them; a reload or a change of
// unit files looks again whether one is installed, releasing the names or
// serving them.
func (w *ppWatch) onUnits(ctx context.Context, sig *dbus.Signal) {
	ev, unit := w.units.event(sig)
	switch ev {
	case ppUnitsStarting:
		if w.serving {
			w.unserveFor(ctx, unit+" is starting")
		}
	case ppUnitsChanged:
		followed, _ := w.current()
		switch {
		case w.serving:
			if u, err := w.leftTo(ctx); u != "" || err != nil {
				w.unserveFor(ctx, "a power-profiles daemon is installed now")
			}
		case followed == "":
			w.decide(ctx)
		}
	}
}
