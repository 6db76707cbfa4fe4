package daemon

import (
	"context"

	"github.com/sirupsen/logrus"

	"github.com/schedpolicyd/schedpolicyd/daemon/bus"
	"github.com/schedpolicyd/schedpolicyd/daemon/snapshot"
	"github.com/schedpolicyd/schedpolicyd/policy"
)

// controller is the daemon as its D-Bus service sees it (bus.Controller):
// each request is handed to the event loop (Daemon.do), which owns the
// state it changes. Only the bus holds one.
type controller struct{ d *Daemon }

var _ bus.Controller = controller{}

// Published returns the snapshot published last, nil before the first;
// shared and read-only. Safe for concurrent use.
func (c controller) Published() *snapshot.Snapshot { return c.d.snap.Load() }

// WriteKnob writes value to the tree file named file as a write(2) of it
// does (writeFile), on the loop; via names the writer in the log.
func (c controller) WriteKnob(ctx context.Context, file, value, via string) error {
	return c.d.writeFile(ctx, file, []byte(value), via)
}

// WriteKnobUnlessHeld is WriteKnob unless, on the loop, a hold decides
// the policy and keep reports true of its policy: then nothing changes.
func (c controller) WriteKnobUnlessHeld(ctx context.Context, file, value, via string, keep func(policy.Policy) bool) (bool, error) {
	apply, err := knobWrite(file, []byte(value))
	if err != nil {
		return false, err
	}
	kept := false
	err = c.d.do(ctx, func() error {
		if h := c.d.dec.winningHold(); h != nil && keep(h.Policy) {
			kept = true
			return nil
		}
		return c.d.applyKnobWrite(file, apply, via)
	})
	return kept, err
}

// ResetKnob forgets every explicit choice and applies the base knob, on
// the loop (resetKnob).
func (c controller) ResetKnob(ctx context.Context) error {
	return c.d.do(ctx, c.d.resetKnob)
}

// AddHold adds a hold of p for owner and re-plans, on the loop (addHold).
func (c controller) AddHold(ctx context.Context, p policy.Policy, reason, owner, appID string) (uint32, error) {
	var cookie uint32
	err := c.d.do(ctx, func() error {
		var err error
		cookie, err = c.d.addHold(p, reason, owner, appID)
		return err
	})
	return cookie, err
}

// ReleaseHold ends hold cookie if owner made it (any when anyOwner), on
// the loop (decider.releasable).
func (c controller) ReleaseHold(ctx context.Context, cookie uint32, owner string, anyOwner bool) error {
	return c.d.do(ctx, func() error {
		cookies, err := c.d.dec.releasable(cookie, owner, anyOwner)
		if err != nil {
			return err
		}
		c.d.endHolds(cookies, "released")
		return nil
	})
}

// EndHold ends hold cookie if it still exists, saying why, on the loop.
func (c controller) EndHold(ctx context.Context, cookie uint32, why string) error {
	return c.d.do(ctx, func() error {
		c.d.endHolds(c.d.dec.held(cookie), why)
		return nil
	})
}

// EndHoldsOf ends every hold of owner, saying why, on the loop.
func (c controller) EndHoldsOf(ctx context.Context, owner, why string) error {
	return c.d.do(ctx, func() error {
		c.d.endHolds(c.d.dec.holdsOf(owner), why)
		return nil
	})
}

// EndAllHolds ends every hold, saying why, on the loop.
func (c controller) EndAllHolds(ctx context.Context, why string) error {
	return c.d.do(ctx, func() error {
		c.d.endHolds(c.d.dec.allHolds(), why)
		return nil
	})
}

// CreateWorkload makes workload name with pid in it and re-plans, on the
// loop (createWorkload).
func (c controller) CreateWorkload(ctx context.Context, name string, pid int) (string, error) {
	var path string
	err := c.d.do(ctx, func() error {
		var err error
		path, err = c.d.createWorkload(name, pid)
		return err
	})
	return path, err
}

// SetWorkloadPolicy sets or clears workload name's override and re-plans,
// on the loop (setWorkloadOverride).
func (c controller) SetWorkloadPolicy(ctx context.Context, name string, p policy.Policy) error {
	return c.d.do(ctx, func() error { return c.d.setWorkloadOverride(name, p) })
}

// SetExempt adds (on) or removes entry from the exempt list made over
// D-Bus and re-plans, on the loop (setExempt).
func (c controller) SetExempt(ctx context.Context, entry string, on bool) (bool, error) {
	var changed bool
	err := c.d.do(ctx, func() error {
		var err error
		changed, err = c.d.setExempt(entry, on)
		return err
	})
	return changed, err
}

// Rebalance re-reads the power source, the workloads (a cpuset changed by
// hand is seen now) and their load, and re-plans, on the loop.
func (c controller) Rebalance(ctx context.Context) error {
	d := c.d
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
// (energyLoop.refresh), and publishes what it read.
func (c controller) RefreshEnergy(ctx context.Context) error {
	d := c.d
	return d.do(ctx, func() error {
		if d.energy.refresh(d.dec.energyKey(), d.dec.onBattery(), d.place, d.store) {
			d.publish()
		}
		return nil
	})
}

// FollowProfile follows the power-profiles daemon's profile, on the loop,
// if current reports true there (decider.followProfile): a new profile, or
// a new owner, sets the knob the profile maps to as setKnob does, so it
// persists and cancels holds like an explicit choice; an unknown profile
// is logged and ignored.
func (c controller) FollowProfile(ctx context.Context, name, owner, profile string, current func() bool) error {
	d := c.d
	return d.do(ctx, func() error {
		if !current() {
			return nil
		}
		k, change := d.dec.followProfile(name, owner, profile)
		switch change {
		case followUnknown:
			d.log.WithFields(logrus.Fields{"name": name, "profile": profile}).Warn("followed power profile unknown; ignored")
			return nil
		case followSame:
			return nil
		case followStarted:
			d.log.WithFields(logrus.Fields{"name": name, "owner": owner}).Info("following the power-profiles daemon's ActiveProfile")
		}
		if err := d.setKnobAs(k, "power-profiles "+name+" ActiveProfile "+profile, false); err != nil {
			d.log.WithError(err).Warn("cannot apply the followed power profile")
		}
		d.recompute("power profile followed", true)
		return nil
	})
}

// Unfollow ends following, saying why, on the loop (decider.unfollow); the
// knob stays as it is.
func (c controller) Unfollow(ctx context.Context, why string) error {
	d := c.d
	return d.do(ctx, func() error {
		if was, ok := d.dec.unfollow(); ok {
			d.log.WithFields(logrus.Fields{"name": was.name, "why": why}).Info("no longer following the power-profiles daemon")
			d.recompute("power profile no longer followed", true)
		}
		return nil
	})
}

// SetLpmdOwner records intel-lpmd's owner (setLpmd), on the loop, if
// current reports true there.
func (c controller) SetLpmdOwner(ctx context.Context, owner string, current func() bool) error {
	return c.d.do(ctx, func() error {
		if current() {
			c.d.setLpmd(owner)
		}
		return nil
	})
}
