package placement

import (
	"time"

	"github.com/sirupsen/logrus"

	"github.com/schedpolicyd/schedpolicyd/daemon/snapshot"
	"github.com/schedpolicyd/schedpolicyd/policy"
	"github.com/schedpolicyd/schedpolicyd/sysfs"
)

// Driver is a placement back end as the Engine drives it: what differs
// between placing the managed parent's cgroups (cgroupfs.Placement) and
// systemd's units (units.Placement). The Engine holds one and everything
// both share (engine.go); a driver reaches the shared state through the
// *Engine it was made with. Every method runs on the daemon's loop.
//
// What a driver can do beyond these it says by implementing the small
// interfaces below (Watcher, EventSource, Confirmer, Clocked,
// Creator, Overrider, Hotplugger, Reporter, Poller, Refresher,
// Rechecker, and Exempter in exempt.go), which the Engine finds by type assertion, as database/sql
// finds a driver's optional capabilities.
type Driver interface {
	// Mode is the placement's name in logs, Cgroupfs or Systemd.
	Mode() string
	// Open opens what the driver places through (the managed parent, the
	// systemd manager); a failure is logged by the driver, which places
	// nothing until a scan opens it. Only ErrAlreadyRunning (the managed
	// parent is another daemon's) ends the start. Close releases it all.
	Open() error
	Close()
	// Scan finds the workloads (new ones adopted, gone ones forgotten)
	// and reports whether they changed.
	Scan() bool
	// Sample reads the workloads' load signals (Engine.OnSample, a
	// pressure wake, Engine.Freshen) and reports whether any was busy.
	Sample() (busy bool)
	// PlanInput is the driver's side of a plan (Engine.Apply): the CPUs
	// its workloads may have within online and the loads the balancer
	// places; ok false when it has nothing to place (not open, or no
	// workloads).
	PlanInput(online sysfs.CPUSet) (in PlanInput, ok bool)
	// Write writes the plan's CPUs to the workloads, want (every one, in
	// name order) where what a workload holds differs, each value
	// recorded first (Journal.WriteAll); plan is the plan they come from
	// (its policies, for the log).
	Write(plan policy.Plan, want []Want)
	// Restore writes back every original that still holds a value of
	// ours and reports whether everything is back (what is not stays
	// recorded for the next start).
	Restore() bool
	// Count is how many workloads there are.
	Count() int
}

// PlanInput is what a driver gives the engine's plan (Driver.PlanInput).
type PlanInput struct {
	// Allowed is the CPUs the driver's workloads may have: the online
	// ones, less what it cannot give (cgroupfs: the managed parent's).
	Allowed sysfs.CPUSet
	// Names are the driver's workloads, in name order (the plan's keys);
	// Loads those the balancer places, in the same order.
	Names []string
	Loads []policy.Load
	// Fixed are workloads placed outside the balancer on every allowed CPU
	// (cgroupfs: an override of performance).
	Fixed []string
	// Slices: the configuration's slice rules apply (Config.Slices:
	// units).
	Slices bool
}

// Want is what the plan wants one workload to hold (Driver.Write): its
// CPUs, empty where the plan gives it none (the driver decides what that
// means: cgroupfs leaves it, units give the unit its original back).
type Want struct {
	Name string
	CPUs sysfs.CPUSet
}

// Watcher: the driver has wakes of its own (cgroupfs: WakeChanged,
// WakeWritten, WakeAttached). WakeC is nil for a kind it has none of;
// OnWake handles one on the loop and returns the decisions it asks for.
type Watcher interface {
	WakeC(k Wake) <-chan struct{}
	OnWake(k Wake) Asks
}

// EventSource: the driver's goroutines send the loop messages
// (systemd's unit signals, a created workload's task exiting), handled
// by OnMsg on the loop.
type EventSource interface {
	EventsC() <-chan Event
	OnMsg(msg Event) Asks
}

// Crowding is what a Confirmer found crowded: the candidates of a
// confirmation (Names, in name order) and, for the log, each as Desc
// under the log field Field.
type Crowding struct {
	Names []string
	Field string
	Desc  []string
}

// Confirmer: the driver's workloads can be confirmed crowded (wake.go).
// Crowded returns the candidates now (atWake: at a CPU pressure wake,
// which says that tasks wait now, else at a sample or a task attached);
// CPUs is a workload's CPU count (0: not placed), RunDelay its threads'
// run and run-queue wait time (cgroup.DirRunDelay); Saturated is told
// which candidates a confirmation found saturated (none too), and raises
// their load so that the decision that follows widens them.
type Confirmer interface {
	Crowded(atWake bool) Crowding
	CPUs(name string) int
	RunDelay(name string) (run, wait time.Duration, err error)
	Saturated(names []string)
}

// Clocked: the driver's packed workloads have task-clock counters
// (clockwake.go) in Engine.Clock. SyncClock gives them to the workloads
// the last plan packed and closes the others'; more: some are left for
// another call (Daemon.requestClockSync). Names are the workloads in
// name order; ClockCrowded reports whether one counts as crowded at a
// signal of its counters (k: its CPU count).
type Clocked interface {
	SyncClock() (more bool)
	Names() []string
	ClockCrowded(name string, k int) bool
}

// Creator: CreateWorkload makes workload name with pid in it; the caller
// re-plans.
type Creator interface {
	Create(name string, pid int) (string, error)
}

// Overrider: SetWorkloadPolicy sets or clears a workload's own policy;
// the caller re-plans.
type Overrider interface {
	SetOverride(name string, pol policy.Policy) error
}

// Hotplugger: the driver follows a change of the online CPUs (before →
// after); the caller re-plans.
type Hotplugger interface {
	Hotplug(before, after sysfs.CPUSet)
}

// Reporter: the driver's workloads as published. Status lists them;
// ModelLoads adds them to EstimatePower's input (those the policy places,
// and those it does not with their CPUs; it may narrow in.Allowed to the
// CPUs the driver can give); Placed says what the last apply did: how
// many workloads it moved, how many there are, and each one's applied
// value (the "placement changed" log line).
type Reporter interface {
	Status() []snapshot.WorkloadStatus
	ModelLoads(in *ModelInput)
	Placed() (moved, managed int, applied []string)
}

// Poller: the driver needs the periodic sample whatever the back-off
// (cgroupfs: nothing watches the managed parent; units: the last scan was
// cut short) while Polls.
type Poller interface {
	Polls() bool
}

// Refresher: the periodic sample does more than sample (cgroupfs: a scan
// where nothing watches, created workloads reaped; units: a scan cut
// short done again). Refresh runs before the sample and reports whether
// the workloads changed and whether that counts as activity for the
// sampling back-off.
type Refresher interface {
	Refresh() (changed, busy bool)
}

// Rechecker: Rebalance re-reads what the workloads hold (cgroupfs: every
// cpuset.cpus, so that a value changed by hand is seen now).
type Rechecker interface {
	Recheck()
}

// Wake is a kind of Wake-up the Engine gives the loop (Engine.WakeC).
type Wake int

const (
	// WakeChanged: the driver's workloads may have changed (cgroupfs:
	// the managed parent's directory changed).
	WakeChanged Wake = iota
	// WakeWritten: someone else wrote a value the driver set (cgroupfs:
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
	// WakeConfirmDue: the pending confirmation is due (Engine.ConfirmC).
	WakeConfirmDue
	// WakePressureResume: the CPU pressure trigger's back-off ended
	// (PressureGate.ResumeC): the Engine arms it again; not counted as
	// an event.
	WakePressureResume
)

// Event is a message of a driver's own goroutines to the loop
// (EventSource.EventsC): unitMsg for units, exitEvent for cgroupfs.
type Event interface{ BackendEvent() }

// Ask is a decision a wake asks the loop for (Daemon.recompute): why, for
// the log, and whether it is forced.
type Ask struct {
	Why   string
	Force bool
}

// Asks are the decisions a wake asks for, made in order once it is
// handled.
type Asks []Ask

// Do makes each decision, in order, through decide.
func (a Asks) Do(decide func(why string, force bool)) {
	for _, x := range a {
		decide(x.Why, x.Force)
	}
}

// Traits is how a driver's wakes are worded in the log, where the two
// differ: the logger and message of a pressure wake's "woken" line
// (WokenDesc: it lists the crowded workloads too), the warning when the
// kernel drops the pressure trigger, the reason of a decision a
// confirmation asks for; FreshenIdle: Freshen samples whenever the
// sampling backed off (units), not only once it stopped (cgroupfs);
// RaceToIdleLog: an apply whose plan falls back to performance says so
// at info level (cgroupfs).
type Traits struct {
	WakeLog       func() logrus.FieldLogger
	WokenMsg      string
	WokenDesc     bool
	DroppedMsg    string
	ConfirmedWhy  string
	FreshenIdle   bool
	RaceToIdleLog bool
}
