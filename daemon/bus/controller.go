package bus

import (
	"context"
	"errors"

	"github.com/schedpolicyd/schedpolicyd/daemon/snapshot"
	"github.com/schedpolicyd/schedpolicyd/policy"
)

// Controller is what the D-Bus service needs of the daemon: the state it
// published last, and the requests of the service's callers and watchers.
// The daemon implements it with an adapter (package daemon's controller,
// controller.go) that hands each request to its event loop; tests use a
// fake.
//
// The methods that say "on the loop" run on the daemon's event loop, one
// at a time with everything else it does, and wait for it: they return
// ctx's error if ctx ends before the loop takes the request, and an error
// once the loop has stopped (the daemon is stopping: Failed). The service
// never calls them while it holds a lock the loop may take.
//
// Errors are answered by their kind: an error wrapping syscall.EINVAL,
// policy.ErrInvalid or cgroup.ErrCgroupName is the caller's
// (org.freedesktop.DBus.Error.InvalidArgs); one wrapping
// ErrLimitsExceeded is LimitsExceeded, one wrapping fs.ErrExist
// FileExists; anything else is Failed. On an error nothing changed.
type Controller interface {
	// Published returns the snapshot the daemon published last, nil before
	// the first. It is shared and read-only, and the same pointer until
	// the next publication (the service caches by it). Safe for
	// concurrent use; it does not wait for the loop.
	Published() *snapshot.Snapshot

	// WriteKnob writes value to the daemon's tree file named file
	// (current_sched_policy, power_aware or power_aware_policy) exactly as
	// a write(2) of it does — sscanf("%15s"), case-sensitive, an explicit
	// choice that cancels every hold and persists — with via naming the
	// writer in the log ("dbus", "power-profiles"). On the loop. Errors:
	// a bad value (EINVAL), a read-only file (EACCES), a choice that
	// could not be saved (EIO).
	WriteKnob(ctx context.Context, file, value, via string) error
	// WriteKnobUnlessHeld is WriteKnob unless, when the loop takes the
	// request, a hold decides the policy and keep reports true of that
	// (winning) hold's policy: then nothing changes — the holds stay, no
	// choice is saved — and kept is true. The power-profiles API sets
	// ActiveProfile with it: power-profiles-daemon keeps its holds when
	// the profile they made active is set again. On the loop. Errors as
	// WriteKnob's (a bad value or file is refused before keep is asked).
	WriteKnobUnlessHeld(ctx context.Context, file, value, via string, keep func(policy.Policy) bool) (kept bool, err error)

	// AddHold holds policy p for owner (a unique bus name) with reason
	// (at most 256 bytes) and the power-profiles appID ("" for
	// HoldPolicy), and returns its cookie (never 0, never one in use). On
	// the loop. Errors: ErrLimitsExceeded when owner or the daemon has
	// the most holds it may.
	AddHold(ctx context.Context, p policy.Policy, reason, owner, appID string) (cookie uint32, err error)
	// ReleaseHold ends hold cookie if owner made it, or any hold when
	// anyOwner (root). On the loop. Errors: policy.ErrInvalid for a hold
	// that does not exist or is another owner's.
	ReleaseHold(ctx context.Context, cookie uint32, owner string, anyOwner bool) error
	// EndHold ends hold cookie if it still exists, logging why. On the
	// loop.
	EndHold(ctx context.Context, cookie uint32, why string) error
	// EndHoldsOf ends every hold of owner (a unique bus name; "" has
	// none), logging why. On the loop.
	EndHoldsOf(ctx context.Context, owner, why string) error
	// EndAllHolds ends every hold, logging why. On the loop.
	EndAllHolds(ctx context.Context, why string) error

	// CreateWorkload creates workload name (names.Workload's rule, checked
	// by the service first) and moves process pid into it; it returns the
	// workload's cgroup directory (or unit). On the loop. Errors:
	// fs.ErrExist when it exists, policy.ErrInvalid, Failed when
	// placement is disabled.
	CreateWorkload(ctx context.Context, name string, pid int) (path string, err error)
	// SetWorkloadPolicy sets (policy.Performance) or clears ("") workload
	// name's placement override. On the loop. Errors: policy.ErrInvalid
	// for an unknown workload or another policy.
	SetWorkloadPolicy(ctx context.Context, name string, p policy.Policy) error
	// SetExempt adds (on) or removes an entry of the exempt list made
	// over D-Bus (names.ParseExempt's form; the service resolved the
	// caller's name into it and authorised the caller) and plans at
	// once: what the entry names gets its original CPUs back and is not
	// placed, or is placed again. An entry already in the list (made over
	// D-Bus or by the configuration) changes nothing: changed false. The
	// list is kept in state.json, saved before anything is written. On
	// the loop. Errors: policy.ErrInvalid for an entry that is not one,
	// a full list, removing one that is not in it or that the
	// configuration file holds; Failed when state.json cannot be saved.
	SetExempt(ctx context.Context, entry string, on bool) (changed bool, err error)
	// ResetKnob forgets every explicit choice (per power source) and
	// applies the base knob: the configuration's, the followed power
	// profile's while one is followed, else the built-in default; holds
	// stay. On the loop. Errors: the state could not be saved (EIO;
	// nothing changed).
	ResetKnob(ctx context.Context) error
	// Rebalance re-reads the power source, the workloads and their
	// cpusets and load, and plans now. On the loop.
	Rebalance(ctx context.Context) error

	// RefreshEnergy reads the energy counters and closes the running
	// segment into the totals, at most once per second. On the loop.
	RefreshEnergy(ctx context.Context) error
	// EstimatePower is the energy model's estimate for the managed
	// workloads' current load under each policy, in policy order. Its
	// inputs are copied on the loop; the model runs off it.
	EstimatePower(ctx context.Context) (snapshot.PowerEstimates, error)

	// FollowProfile has the daemon follow profile (ProfilePowerSaver,
	// ProfileBalanced or ProfilePerformance; another is logged and
	// ignored), the ActiveProfile of the power-profiles daemon owning
	// name as owner: a new profile or owner sets the knob the daemon's
	// profile map gives, like an explicit choice; the same one again
	// changes nothing. On the loop, and only if current, called there,
	// reports true: a change that waited for the loop while its owner
	// left or its connection was replaced is dropped.
	FollowProfile(ctx context.Context, name, owner, profile string, current func() bool) error
	// Unfollow ends following (the knob stays as it is), logging why;
	// nothing when nothing is followed. On the loop.
	Unfollow(ctx context.Context, why string) error

	// SetLpmdOwner records intel-lpmd's unique bus name (LpmdName's
	// owner; "" not running): the daemon leaves the LP E-cores to it or
	// takes them back. On the loop, and only if current, called there,
	// reports true (as for FollowProfile).
	SetLpmdOwner(ctx context.Context, owner string, current func() bool) error
}

// ErrLimitsExceeded is wrapped by AddHold's error for a hold beyond the
// daemon's bounds (per caller and in all); the caller gets
// org.freedesktop.DBus.Error.LimitsExceeded with the error's text.
var ErrLimitsExceeded = errors.New("limits exceeded")

// holderLeft is why a hold ends when its holder left the bus.
const holderLeft = "holder left the bus"
