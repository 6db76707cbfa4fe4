package placement

import (
	"time"

	"github.com/schedpolicyd/schedpolicyd/daemon/snapshot"
	"github.com/schedpolicyd/schedpolicyd/daemon/statefile"
	"github.com/schedpolicyd/schedpolicyd/policy"
	"github.com/schedpolicyd/schedpolicyd/sysfs"
)

// Backend is a placement back end: how the workloads are found, sampled,
// placed on CPUs and put back. There are two, and the daemon's
// Config.Placement picks one: cgroupfs.Placement (the managed parent's
// children and their cpuset.cpus) and units.Placement (the units of the
// managed slices and their AllowedCPUs=, through systemd). The daemon
// holds one and never asks which; the records state.json holds for the
// other mode are carried from state.json to state.json as they are, so a
// change of placement mode between runs loses nothing.
//
// Both keep one promise, through Journal: a value is recorded in
// state.json (through the save function the daemon gives them) before it
// is written, and Restore puts back only what still holds a value of
// ours. Every method runs on the daemon's loop.
//
// Wakes. A back end wakes the loop through WakeC(k) for each wake kind k
// (nil where it has none of that kind: the loop's case never fires),
// through ConfirmC (its pending confirmation of a crowded workload is
// due: wake kind WakeConfirmDue) and through EventsC (messages of its own
// goroutines: systemd's unit signals, a created workload's task exiting).
// The loop counts the event, then calls OnWake(k) or OnMsg(msg), which
// handle it on the loop and ask for the decisions it calls for through
// replan, at once and in order, as many as it needs (none, one, or a
// scan's and then a check's).
type Backend interface {
	// Mode is the placement's name in logs, Cgroupfs or Systemd.
	Mode() string

	// LoadRecords takes the back end's records of state.json (st.Cgroups or
	// st.Units), before open; PutRecords sets them in st as state.json
	// must hold them now, leaving the other mode's as they are.
	LoadRecords(st statefile.State)
	PutRecords(st *statefile.State)
	// Open opens what the back end places through (the managed parent,
	// the systemd manager); a failure is logged by the back end, which
	// places nothing until a scan opens it. Only ErrAlreadyRunning (the
	// managed parent is another daemon's) ends the start. close releases
	// it all.
	Open() error
	Close()

	// Scan finds the workloads (new ones adopted, gone ones forgotten)
	// and reports whether they changed.
	Scan() bool
	// Apply plans for policy eff on the online CPUs of topo and writes
	// what changed, each value recorded first; force applies a shrinking
	// plan at once (LazyInput).
	Apply(eff policy.Policy, topo policy.Topology, online sysfs.CPUSet, force bool)
	// Restore writes back every original that still holds a value of
	// ours and reports whether everything is back (what is not stays
	// recorded for the next start).
	Restore() bool
	// Hotplug follows a change of the online CPUs (before → after); the
	// caller re-plans.
	Hotplug(before, after sysfs.CPUSet)
	// Rebalance re-reads the workloads, what they hold (a value changed
	// by hand is seen now) and their load, and forgets the lazy history:
	// the next apply plans afresh (Daemon.Rebalance).
	Rebalance()

	// Sampling reports whether the loop samples periodically now, and
	// SampleEvery at which period. OnSample is one periodic sample (load
	// signals, the idle count, a confirmation for crowded workloads); it
	// reports whether the workloads changed. freshen, before a forced
	// decision, samples at once where sampling stopped or backed off.
	Sampling() bool
	SampleEvery() time.Duration
	OnSample() (changed bool)
	Freshen()
	// SyncClock gives the task-clock counters to the workloads the last
	// plan packed and closes the others' (clockwake.go); more: some are
	// left for another call (Daemon.requestClockSync).
	SyncClock() (more bool)

	// WakeC, ConfirmC and EventsC wake the loop, which then calls OnWake
	// or OnMsg (see the type's comment).
	WakeC(k Wake) <-chan struct{}
	ConfirmC() <-chan time.Time
	EventsC() <-chan Event
	OnWake(k Wake, replan ReplanFunc)
	OnMsg(msg Event, replan ReplanFunc)

	// Create makes workload name with pid in it (CreateWorkload), and
	// SetOverride sets or clears a workload's own policy
	// (SetWorkloadPolicy); the caller re-plans.
	Create(name string, pid int) (string, error)
	SetOverride(name string, pol policy.Policy) error
	// Status lists the workloads as published, count says how many there
	// are.
	Status() []snapshot.WorkloadStatus
	Count() int
	// ModelLoads adds the workloads to EstimatePower's input: those the
	// policy places, and those it does not with their CPUs; it may narrow
	// in.allowed to the CPUs the back end can give.
	ModelLoads(in *ModelInput)
	// LastPlan is the plan of the last apply (its Policy says whether it
	// placed for performance, race to idle; its lazy history, whether a
	// packing is deferred). placed says what that apply did: how many
	// workloads it moved, how many there are, and each one's applied
	// value (the "placement changed" log line).
	LastPlan() policy.Plan
	Placed() (moved, managed int, applied []string)
}

// Wake is a kind of Wake-up a back end gives the loop (backend.WakeC).
type Wake int

const (
	// WakeChanged: the back end's workloads may have changed (cgroupfs:
	// the managed parent's directory changed).
	WakeChanged Wake = iota
	// WakeWritten: someone else wrote a value the back end set (cgroupfs:
	// a workload's cpuset.cpus).
	WakeWritten
	// WakeAttached: a task joined a workload (cgroupfs).
	WakeAttached
	// WakePressure: tasks wait for a CPU (the CPU pressure trigger).
	WakePressure
	// WakePressureDone: the kernel dropped the CPU pressure trigger; not
	// counted as an event.
	WakePressureDone
	// WakeClock: a packed workload's task-clock counter signalled
	// (clockwake.go).
	WakeClock
	// WakeConfirmDue: the pending confirmation is due (backend.ConfirmC).
	WakeConfirmDue
	// WakePressureResume: the CPU pressure trigger's back-off ended
	// (PressureGate.ResumeC): the back end arms it again; not counted as
	// an event.
	WakePressureResume
)

// Event is a message of a back end's own goroutines to the loop
// (backend.EventsC): unitMsg for units, exitEvent for cgroupfs.
type Event interface{ BackendEvent() }

// ReplanFunc asks the loop for a decision (Daemon.recompute), made at
// once, before the wake's handler goes on.
type ReplanFunc func(why string, force bool)
