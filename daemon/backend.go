package daemon

import (
	"time"

	"github.com/schedpolicyd/schedpolicyd/daemon/statefile"
	"github.com/schedpolicyd/schedpolicyd/policy"
	"github.com/schedpolicyd/schedpolicyd/sysfs"
)

// backend is a placement back end: how the workloads are found, sampled,
// placed on CPUs and put back. There are two, and Config.Placement picks
// one at New: placement (cgroupfs: the managed parent's children and
// their cpuset.cpus; placement*.go) and unitPlacement (systemd: the units
// of the managed slices and their AllowedCPUs=; units.go). The daemon
// holds one (Daemon.place) and never asks which; the records state.json
// holds for the other mode are carried from state.json to state.json as
// they are (Daemon.kept), so a change of placement mode between runs
// loses nothing.
//
// Both keep one promise, through journal.go: a value is recorded in
// state.json (through the save function the daemon gives them) before it
// is written, and restore puts back only what still holds a value of
// ours. Every method runs on the loop.
//
// Wakes. A back end wakes the loop through wakeC(k) for each wake kind k
// (nil where it has none of that kind: the loop's case never fires),
// through confirmC (its pending confirmation of a crowded workload is
// due: wake kind wakeConfirmDue) and through eventsC (messages of its own
// goroutines: systemd's unit signals, a created workload's task exiting).
// The loop counts the event, then calls onWake(k) or onMsg(msg), which
// handle it on the loop and ask for the decisions it calls for through
// replan (Daemon.recompute), at once and in order, as many as it needs
// (none, one, or a scan's and then a check's).
type backend interface {
	// mode is the placement's name in logs, PlacementCgroupfs or
	// PlacementSystemd.
	mode() string

	// loadRecords takes the back end's records of state.json (st.Cgroups or
	// st.Units), before open; putRecords sets them in st as state.json
	// must hold them now, leaving the other mode's as they are.
	loadRecords(st statefile.State)
	putRecords(st *statefile.State)
	// open opens what the back end places through (the managed parent,
	// the systemd manager); a failure is logged by the back end, which
	// places nothing until a scan opens it. Only ErrAlreadyRunning (the
	// managed parent is another daemon's) ends the start. close releases
	// it all.
	open() error
	close()

	// scan finds the workloads (new ones adopted, gone ones forgotten)
	// and reports whether they changed.
	scan() bool
	// apply plans for policy eff on the online CPUs of topo and writes
	// what changed, each value recorded first; force applies a shrinking
	// plan at once (lazyInput).
	apply(eff policy.Policy, topo policy.Topology, online sysfs.CPUSet, force bool)
	// restore writes back every original that still holds a value of
	// ours and reports whether everything is back (what is not stays
	// recorded for the next start).
	restore() bool
	// hotplug follows a change of the online CPUs (before → after); the
	// caller re-plans.
	hotplug(before, after sysfs.CPUSet)
	// rebalance re-reads the workloads, what they hold (a value changed
	// by hand is seen now) and their load, and forgets the lazy history:
	// the next apply plans afresh (Daemon.Rebalance).
	rebalance()

	// sampling reports whether the loop samples periodically now, and
	// sampleEvery at which period. onSample is one periodic sample (load
	// signals, the idle count, a confirmation for crowded workloads); it
	// reports whether the workloads changed. freshen, before a forced
	// decision, samples at once where sampling stopped or backed off.
	sampling() bool
	sampleEvery() time.Duration
	onSample() (changed bool)
	freshen()
	// syncClock gives the task-clock counters to the workloads the last
	// plan packed and closes the others' (clockwake.go); more: some are
	// left for another call (Daemon.requestClockSync).
	syncClock() (more bool)

	// wakeC, confirmC and eventsC wake the loop, which then calls onWake
	// or onMsg (see the type's comment).
	wakeC(k wake) <-chan struct{}
	confirmC() <-chan time.Time
	eventsC() <-chan event
	onWake(k wake, replan replanFunc)
	onMsg(msg event, replan replanFunc)

	// create makes workload name with pid in it (CreateWorkload), and
	// setOverride sets or clears a workload's own policy
	// (SetWorkloadPolicy); the caller re-plans.
	create(name string, pid int) (string, error)
	setOverride(name string, pol policy.Policy) error
	// status lists the workloads as published, count says how many there
	// are.
	status() []WorkloadStatus
	count() int
	// modelLoads adds the workloads to EstimatePower's input: those the
	// policy places, and those it does not with their CPUs; it may narrow
	// in.allowed to the CPUs the back end can give.
	modelLoads(in *modelInput)
	// lastPlan is the plan of the last apply (its Policy says whether it
	// placed for performance, race to idle; its lazy history, whether a
	// packing is deferred). placed says what that apply did: how many
	// workloads it moved, how many there are, and each one's applied
	// value (the "placement changed" log line).
	lastPlan() policy.Plan
	placed() (moved, managed int, applied []string)
}

// wake is a kind of wake-up a back end gives the loop (backend.wakeC).
type wake int

const (
	// wakeChanged: the back end's workloads may have changed (cgroupfs:
	// the managed parent's directory changed).
	wakeChanged wake = iota
	// wakeWritten: someone else wrote a value the back end set (cgroupfs:
	// a workload's cpuset.cpus).
	wakeWritten
	// wakeAttached: a task joined a workload (cgroupfs).
	wakeAttached
	// wakePressure: tasks wait for a CPU (the CPU pressure trigger).
	wakePressure
	// wakePressureDone: the kernel dropped the CPU pressure trigger; not
	// counted as an event.
	wakePressureDone
	// wakeClock: a packed workload's task-clock counter signalled
	// (clockwake.go).
	wakeClock
	// wakeConfirmDue: the pending confirmation is due (backend.confirmC).
	wakeConfirmDue
)

// event is a message of a back end's own goroutines to the loop
// (backend.eventsC): unitMsg for units, exitEvent for cgroupfs.
type event interface{ isEvent() }

func (unitMsg) isEvent()   {}
func (exitEvent) isEvent() {}

// replanFunc asks the loop for a decision (Daemon.recompute), made at
// once, before the wake's handler goes on.
type replanFunc func(why string, force bool)

// newBackend makes the back end Config.Placement names, saving state.json
// through saveBackground.
func (d *Daemon) newBackend() backend {
	if d.cfg.Placement == PlacementSystemd {
		u := newUnitPlacement(&d.cfg, d.log, &d.stats)
		u.save = d.saveBackground
		return u
	}
	p := newPlacement(&d.cfg, d.log, &d.stats, d.done)
	p.save = d.saveBackground
	return p
}

// loadRecords takes state.json's records: the back end's own, and the
// other placement mode's to save back as they are (kept).
func (d *Daemon) loadRecords(st statefile.State) {
	d.kept = statefile.State{Cgroups: st.Cgroups, Units: st.Units}
	d.place.loadRecords(st)
}
