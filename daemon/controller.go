package daemon

import (
	"context"

	"github.com/schedpolicyd/schedpolicyd/daemon/bus"
	"github.com/schedpolicyd/schedpolicyd/daemon/snapshot"
	"github.com/schedpolicyd/schedpolicyd/policy"
)

// The daemon as its D-Bus service sees it (bus.Controller): each request
// is handed to the event loop (do), which owns the state it changes.

var _ bus.Controller = (*Daemon)(nil)

// Published returns the snapshot published last, nil before the first;
// shared and read-only (bus.Controller). Safe for concurrent use.
func (d *Daemon) Published() *snapshot.Snapshot { return d.snap.Load() }

// WriteKnob writes value to the tree file named file as a write(2) of it
// does (writeFile), on the loop; via names the writer in the log.
func (d *Daemon) WriteKnob(ctx context.Context, file, value, via string) error {
	return d.writeFile(ctx, file, []byte(value), via)
}

// WriteKnobUnlessHeld is WriteKnob unless, on the loop, a hold decides
// the policy and keep reports true of its policy: then nothing changes
// (bus.Controller).
func (d *Daemon) WriteKnobUnlessHeld(ctx context.Context, file, value, via string, keep func(policy.Policy) bool) (bool, error) {
	apply, err := parseKnobWrite(file, []byte(value))
	if err != nil {
		return false, err
	}
	kept := false
	err = d.do(ctx, func() error {
		if h := d.winningHold(); h != nil && keep(h.Policy) {
			kept = true
			return nil
		}
		return d.applyKnobWrite(file, apply, via)
	})
	return kept, err
}

// AddHold adds a hold of p for owner and re-plans, on the loop (addHold).
func (d *Daemon) AddHold(ctx context.Context, p policy.Policy, reason, owner, appID string) (uint32, error) {
	var cookie uint32
	err := d.do(ctx, func() error {
		var err error
		cookie, err = d.addHold(p, reason, owner, appID)
		return err
	})
	return cookie, err
}

// ReleaseHold ends hold cookie if owner made it (any when anyOwner), on
// the loop (releaseHold).
func (d *Daemon) ReleaseHold(ctx context.Context, cookie uint32, owner string, anyOwner bool) error {
	return d.do(ctx, func() error { return d.releaseHold(cookie, owner, anyOwner) })
}

// EndHold ends hold cookie if it still exists, saying why, on the loop.
func (d *Daemon) EndHold(ctx context.Context, cookie uint32, why string) error {
	return d.do(ctx, func() error {
		d.endHold(cookie, why)
		return nil
	})
}

// EndHoldsOf ends every hold of owner, saying why, on the loop.
func (d *Daemon) EndHoldsOf(ctx context.Context, owner, why string) error {
	return d.do(ctx, func() error {
		d.endHoldsOf(owner, why)
		return nil
	})
}

// EndAllHolds ends every hold, saying why, on the loop.
func (d *Daemon) EndAllHolds(ctx context.Context, why string) error {
	return d.do(ctx, func() error {
		d.cancelHoldsBecause(why)
		return nil
	})
}

// CreateWorkload makes workload name with pid in it and re-plans, on the
// loop (createWorkload).
func (d *Daemon) CreateWorkload(ctx context.Context, name string, pid int) (string, error) {
	var path string
	err := d.do(ctx, func() error {
		var err error
		path, err = d.createWorkload(name, pid)
		return err
	})
	return path, err
}

// SetWorkloadPolicy sets or clears workload name's override and re-plans,
// on the loop (setWorkloadOverride).
func (d *Daemon) SetWorkloadPolicy(ctx context.Context, name string, p policy.Policy) error {
	return d.do(ctx, func() error { return d.setWorkloadOverride(name, p) })
}

// Rebalance re-reads the power source, the workloads (a cpuset changed by
// hand is seen now) and their load, and re-plans, on the loop.
func (d *Daemon) Rebalance(ctx context.Context) error {
	return d.do(ctx, func() error {
		if d.mon != nil {
			d.mon.Poke()
		}
		// A value changed by hand is seen now, and an explicit request
		// plans afresh: no lazy history holds it back.
		d.place.Rebalance()
		d.recompute("rebalance", true)
		return nil
	})
}

// RefreshEnergy closes the running energy segment, on the loop
// (refreshEnergy).
func (d *Daemon) RefreshEnergy(ctx context.Context) error {
	return d.do(ctx, func() error {
		d.refreshEnergy()
		return nil
	})
}

// FollowProfile follows the power-profiles daemon's profile
// (followProfile), on the loop, if current reports true there.
func (d *Daemon) FollowProfile(ctx context.Context, name, owner, profile string, current func() bool) error {
	return d.do(ctx, func() error {
		if current() {
			d.followProfile(name, owner, profile)
		}
		return nil
	})
}

// Unfollow ends following, saying why, on the loop (unfollow).
func (d *Daemon) Unfollow(ctx context.Context, why string) error {
	return d.do(ctx, func() error {
		d.unfollow(why)
		return nil
	})
}

// SetLpmdOwner records intel-lpmd's owner (setLpmd), on the loop, if
// current reports true there.
func (d *Daemon) SetLpmdOwner(ctx context.Context, owner string, current func() bool) error {
	return d.do(ctx, func() error {
		if current() {
			d.setLpmd(owner)
		}
		return nil
	})
}
