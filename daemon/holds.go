package daemon

import (
	"fmt"
	"sort"

	"github.com/sirupsen/logrus"

	"github.com/schedpolicyd/schedpolicyd/daemon/bus"
	"github.com/schedpolicyd/schedpolicyd/daemon/snapshot"
	"github.com/schedpolicyd/schedpolicyd/policy"
)

// MaxHoldsPerCaller is the most holds one bus connection (one unique bus
// name) may have at once, made with HoldPolicy and HoldProfile together.
// One more is refused with org.freedesktop.DBus.Error.LimitsExceeded
// (holdLimitError, bus.ErrLimitsExceeded) and changes nothing; releasing
// a hold makes room again. A program needs one hold per activity it runs
// (schedpolicyctl launch makes one); the bound keeps one client from
// making the daemon's memory and every PropertiesChanged it emits grow
// without end.
const MaxHoldsPerCaller = 16

// MaxHolds is the most holds the daemon keeps at once, of all callers
// together; one more is refused like one beyond MaxHoldsPerCaller. Every
// hold added or ended is announced with the whole list (the Holds
// property and, with the power-profiles API, ActiveProfileHolds on both
// names), so this bounds the cost of adding one even for a client that
// opens many connections: BenchmarkHoldAdd measures it.
const MaxHolds = 256

// holdIndex is what the event loop keeps beside Daemon.holds, so that
// adding a hold costs no more than the PropertiesChanged that announces
// it: the cookies, each owner's number of holds (MaxHoldsPerCaller) and the
// list that snapshots publish.
type holdIndex struct {
	last     uint32         // the last cookie handed out
	perOwner map[string]int // holds per unique bus name; no zero entries
	// list is every hold in the order they were made (cookie order until
	// cookies wrap around). Published snapshots share it: an addition
	// writes past the end of every published slice, a removal builds a new
	// array, so no element a snapshot can see is ever written, and a
	// snapshot whose holds did not change carries the same slice (which
	// reflect.DeepEqual, in the bus's publication, compares in O(1)).
	list []snapshot.Hold
}

// holdLimitError refuses a hold beyond MaxHoldsPerCaller (owner set) or
// MaxHolds (owner ""); it matches bus.ErrLimitsExceeded, D-Bus
// org.freedesktop.DBus.Error.LimitsExceeded.
type holdLimitError struct {
	owner string
	n     int
}

func (e *holdLimitError) Is(target error) bool { return target == bus.ErrLimitsExceeded }

func (e *holdLimitError) Error() string {
	if e.owner == "" {
		return fmt.Sprintf("the daemon already keeps %d holds, the most it keeps for all callers together; try again once one ended", e.n)
	}
	return fmt.Sprintf("%s already has %d holds, the most one bus connection may have; release one (ReleasePolicy or ReleaseProfile) first", e.owner, e.n)
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

// addHold records a hold for owner (a unique bus name) and re-plans. It
// returns the new cookie (never 0, never one in use), or a
// *holdLimitError with nothing changed when owner already has
// MaxHoldsPerCaller holds or the daemon MaxHolds.
func (d *Daemon) addHold(p policy.Policy, reason, owner, appID string) (uint32, error) {
	ix := &d.holdIdx
	if n := ix.perOwner[owner]; n >= MaxHoldsPerCaller {
		return 0, &holdLimitError{owner: owner, n: n}
	}
	if n := len(d.holds); n >= MaxHolds {
		return 0, &holdLimitError{n: n}
	}
	for {
		ix.last++
		if _, used := d.holds[ix.last]; ix.last != 0 && !used {
			break
		}
	}
	h := &snapshot.Hold{Cookie: ix.last, Policy: p, Reason: reason, Owner: owner, AppID: appID}
	d.holds[h.Cookie] = h
	if ix.perOwner == nil {
		ix.perOwner = map[string]int{}
	}
	ix.perOwner[owner]++
	ix.list = append(ix.list, *h)
	d.log.WithFields(logrus.Fields{"cookie": h.Cookie, "policy": p, "owner": owner, "reason": reason}).Info("policy hold added")
	d.recompute("hold", true)
	return h.Cookie, nil
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

// endHoldsOf ends every hold of a bus peer (it left the bus), saying why.
func (d *Daemon) endHoldsOf(owner, why string) {
	if d.holdIdx.perOwner[owner] == 0 {
		return // most peers that leave held nothing
	}
	var gone []uint32
	for _, h := range d.holdIdx.list {
		if h.Owner == owner {
			gone = append(gone, h.Cookie)
		}
	}
	d.dropHolds(gone, why)
}

// cancelledByChoice is why holds end when a user's explicit choice wins
// over them; only this end is announced to power-profiles holders
// (bus.Service.HoldEnded).
const cancelledByChoice = "cancelled by an explicit choice"

// cancelHolds ends every hold: a user's explicit choice wins over them.
func (d *Daemon) cancelHolds() { d.cancelHoldsBecause(cancelledByChoice) }

func (d *Daemon) cancelHoldsBecause(why string) {
	var all []uint32
	for _, h := range d.holdIdx.list {
		all = append(all, h.Cookie)
	}
	if len(all) > 0 {
		d.dropHolds(all, why)
	}
}

// dropHolds ends the holds cookies (all of them must exist) and re-plans.
func (d *Daemon) dropHolds(cookies []uint32, why string) {
	sort.Slice(cookies, func(i, j int) bool { return cookies[i] < cookies[j] })
	ix := &d.holdIdx
	for _, c := range cookies {
		owner := d.holds[c].Owner
		delete(d.holds, c)
		if ix.perOwner[owner]--; ix.perOwner[owner] <= 0 {
			delete(ix.perOwner, owner)
		}
		d.log.WithFields(logrus.Fields{"cookie": c, "why": why}).Info("policy hold ended")
		d.bus.HoldEnded(c, why == cancelledByChoice)
	}
	// A new array: published snapshots keep theirs.
	keep := make([]snapshot.Hold, 0, len(ix.list))
	for _, h := range ix.list {
		if _, ok := d.holds[h.Cookie]; ok {
			keep = append(keep, h)
		}
	}
	ix.list = keep
	d.recompute("hold ended", true)
}

// winningHold returns the hold that decides the policy, or nil: the most
// power-saving one, the oldest among equals. The result is read-only.
func (d *Daemon) winningHold() *snapshot.Hold {
	var win *snapshot.Hold
	for i := range d.holdIdx.list {
		if h := &d.holdIdx.list[i]; win == nil || holdRank(h.Policy) > holdRank(win.Policy) {
			win = h
		}
	}
	return win
}

// noHolds is the published list while there is no hold (not nil, so that
// it compares equal to an empty list built elsewhere).
var noHolds = []snapshot.Hold{}

// holdList is the list of holds for the snapshot, in the order they were
// made. It is shared, not copied (holdIndex.list): read-only, and capped
// so that an append by a reader copies it.
func (d *Daemon) holdList() []snapshot.Hold {
	l := d.holdIdx.list
	if len(l) == 0 {
		return noHolds
	}
	return l[:len(l):len(l)]
}
