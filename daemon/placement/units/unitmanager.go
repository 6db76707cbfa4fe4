package units

import (
	"context"
	"fmt"

	"github.com/schedpolicyd/schedpolicyd/systemd"
)

// unitManager is what Placement asks of one systemd manager, the
// system's or a user's: exactly the methods of *systemd.Manager it calls,
// so that its logic can be driven by an in-memory manager in tests.
// Errors wrap what the manager answered: a dbus.Error (a value, not a
// pointer) named org.freedesktop.systemd1.NoSuchUnit for a unit it does
// not have loaded (isNoSuchUnit), org.freedesktop.systemd1.UnitExists for
// a scope name taken; else the connection's error. See *systemd.Manager
// for each method's shapes and cases.
type unitManager interface {
	// Events subscribes to the manager's unit signals (once) and returns
	// them in the order sent: UnitLoaded, UnitDropped, JobFinished,
	// ReloadStarted and ReloadFinished. The channel is closed when the
	// connection closes. A unit event that finds it full is dropped and
	// Overflowed says so; ReloadFinished is never dropped.
	Events(ctx context.Context) (<-chan systemd.UnitEvent, error)
	// Overflowed reports whether a unit event was dropped since the last
	// call, and clears it.
	Overflowed() bool
	// Units lists the loaded units whose names match one of the
	// shell-style patterns, with their properties, sorted by name.
	Units(ctx context.Context, patterns ...string) ([]systemd.UnitInfo, error)
	// UnitInfo reads a service's or scope's properties; a unit the
	// manager does not know reads as LoadState "not-found".
	UnitInfo(ctx context.Context, name string) (systemd.UnitInfo, error)
	// LoadedUnitInfo is UnitInfo for a unit loaded now; NoSuchUnit for
	// any other (it never loads one).
	LoadedUnitInfo(ctx context.Context, name string) (systemd.UnitInfo, error)
	// DropInPaths is the unit's DropInPaths property alone: absolute
	// paths of the drop-in files in force.
	DropInPaths(ctx context.Context, name string) ([]string, error)
	// SetAllowedCPUs sets the unit's AllowedCPUs= at runtime
	// (SetUnitProperties, runtime=true); cpus are CPU numbers, nil or
	// empty resets it.
	SetAllowedCPUs(ctx context.Context, name string, cpus []int) error
	// StartScope starts transient scope name in slice with pids and
	// returns once it is active.
	StartScope(ctx context.Context, name, slice, description string, pids ...uint32) error
	// Version is the manager's version string, "252.39-1~deb12u2".
	Version(ctx context.Context) (string, error)
	// TakeRefused returns the values the manager sent that systemd cannot
	// have (systemd.InvalidError; those units were left out or their
	// calls failed) since the last call, and how many more.
	TakeRefused() (errs []error, more int)
	// Close closes the connection; Events' channel is closed.
	Close()
}

var _ unitManager = (*systemd.Manager)(nil)

// dialManager connects to the system manager over D-Bus
// (Placement.connect by default): through the system bus or, with bus
// "none", its private socket only. A user's manager is never reached
// this way (userlink.go). Errors: as systemd.ConnectSystem and
// systemd.ConnectSystemPrivate, and for uid ≥ 0. The manager is nil
// exactly when the error is not.
func dialManager(ctx context.Context, bus string, uid int) (unitManager, error) {
	var m *systemd.Manager
	var err error
	switch {
	case uid >= 0:
		return nil, fmt.Errorf("user %d: a user's manager is reached through its link only", uid)
	case bus == "none":
		m, err = systemd.ConnectSystemPrivate(ctx) // no D-Bus means no bus daemon either
	default:
		m, err = systemd.ConnectSystem(ctx)
	}
	if err != nil {
		return nil, err // not a nil *systemd.Manager in a non-nil interface
	}
	return m, nil
}
