package daemon

import (
	"fmt"
	"sort"

	"github.com/sirupsen/logrus"

	"github.com/schedpolicyd/schedpolicyd/policy"
)

// hold is one HoldPolicy (or power-profiles HoldProfile) request. Loop-owned.
type hold struct {
	Cookie uint32
	Policy policy.Policy
	Reason string
	// Owner is the holder's unique bus name; the hold ends when it leaves.
	Owner string
	// AppID is the power-profiles application_id ("" for HoldPolicy).
	AppID string
}

// holdRank orders policies for conflicting holds: the power-saving one
// wins, as power-profiles-daemon resolves its holds.
func holdRank(p policy.Policy) int {
	switch p {
	case policy.Powersaving:
		return 2
	case policy.Balance:
		return 1
	default:
		return 0
	}
}

// addHold records a hold and re-plans; it returns the new cookie (never 0).
func (d *Daemon) addHold(p policy.Policy, reason, owner, appID string) uint32 {
	d.nextCookie++
	if d.nextCookie == 0 {
		d.nextCookie = 1
	}
	h := &hold{Cookie: d.nextCookie, Policy: p, Reason: reason, Owner: owner, AppID: appID}
	d.holds[h.Cookie] = h
	d.log.WithFields(logrus.Fields{"cookie": h.Cookie, "policy": p, "owner": owner, "reason": reason}).Info("policy hold added")
	d.recompute("hold", true)
	return h.Cookie
}

// releaseHold ends hold cookie if owner made it (any owner when anyOwner).
func (d *Daemon) releaseHold(cookie uint32, owner string, anyOwner bool) error {
	h, ok := d.holds[cookie]
	if !ok || (!anyOwner && h.Owner != owner) {
		return fmt.Errorf("%w: no hold %d of yours", policy.ErrInvalid, cookie)
	}
	d.dropHolds([]uint32{cookie}, "released")
	return nil
}

// endHold ends hold cookie, if it still exists, saying why.
func (d *Daemon) endHold(cookie uint32, why string) {
	if _, ok := d.holds[cookie]; ok {
		d.dropHolds([]uint32{cookie}, why)
	}
}

// releaseHoldsOf ends every hold of a bus peer that left the bus.
func (d *Daemon) releaseHoldsOf(owner string) {
	var gone []uint32
	for c, h := range d.holds {
		if h.Owner == owner {
			gone = append(gone, c)
		}
	}
	if len(gone) > 0 {
		d.dropHolds(gone, "holder left the bus")
	}
}

// cancelHolds ends every hold: a user's explicit choice wins over them.
func (d *Daemon) cancelHolds() { d.cancelHoldsBecause("cancelled by an explicit choice") }

func (d *Daemon) cancelHoldsBecause(why string) {
	var all []uint32
	for c := range d.holds {
		all = append(all, c)
	}
	if len(all) > 0 {
		d.dropHolds(all, why)
	}
}

func (d *Daemon) dropHolds(cookies []uint32, why string) {
	sort.Slice(cookies, func(i, j int) bool { return cookies[i] < cookies[j] })
	for _, c := range cookies {
		delete(d.holds, c)
		d.log.WithFields(logrus.Fields{"cookie": c, "why": why}).Info("policy hold ended")
		if d.bus != nil {
			d.bus.pp.released(c)
		}
	}
	d.recompute("hold ended", true)
}

// winningHold returns the hold that decides the policy, or nil: the most
// power-saving one, the oldest among equals.
func (d *Daemon) winningHold() *hold {
	var win *hold
	for _, h := range d.holds {
		if win == nil || holdRank(h.Policy) > holdRank(win.Policy) ||
			holdRank(h.Policy) == holdRank(win.Policy) && h.Cookie < win.Cookie {
			win = h
		}
	}
	return win
}

// holdList is the sorted list of holds for the snapshot.
func (d *Daemon) holdList() []hold {
	out := make([]hold, 0, len(d.holds))
	for _, h := range d.holds {
		out = append(out, *h)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Cookie < out[j].Cookie })
	return out
}
