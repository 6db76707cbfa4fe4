package bus

import (
	"context"
	"errors"
)

// ErrManagerGone is WatchUnitFiles' error when the connection to the
// system manager's bus ends (the bus restarted, the connection closed).
var ErrManagerGone = errors.New("the bus connection to the system manager ended")

// WatchUnitFiles calls changed on the caller's goroutine each time the
// system manager on bus ("system", "session", an address) may have
// installed, removed, masked or unmasked a unit: its UnitFilesChanged, a
// daemon-reload that finished (Reloading(false), as every package
// installation runs one), or a start job for one of units (JobNew). Only
// signals from the manager's own unique name count (the bus routes by the
// match's sender and each is checked again, so a local user's forged
// signal wakes nothing); signals queued while changed runs are taken as
// one. It starts nothing (Subscribe goes to the unique name).
//
// It returns nil at once where the bus has no systemd, ctx.Err() when ctx
// ends, ErrManagerGone when the connection ends, or the error of
// connecting and subscribing (within busDialTimeout and busCallTimeout).
func WatchUnitFiles(ctx context.Context, bus string, units []string, changed func()) error {
	u, err := dialPPUnits(ctx, bus, units)
	if err != nil || u == nil {
		return err
	}
	defer u.close()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case sig, ok := <-u.signals():
			if !ok {
				return ErrManagerGone
			}
			if ev, _ := u.event(sig); ev == ppUnitsNone {
				continue
			}
		}
		// Coalesce what is already queued (a package's reload comes with
		// its UnitFilesChanged).
	drain:
		for {
			select {
			case sig, ok := <-u.signals():
				if !ok {
					changed()
					return ErrManagerGone
				}
				u.event(sig) // keeps the owner followed
			default:
				break drain
			}
		}
		changed()
	}
}
