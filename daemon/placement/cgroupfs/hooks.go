package cgroupfs

import (
	"time"

	"github.com/schedpolicyd/schedpolicyd/daemon/placement"
)

// Hooks reach inside a Placement for tests that run it under the whole
// daemon (package daemon's), which cannot see its fields: what the back
// end holds, and its wake handlers called directly. Like the back end's
// own methods, each runs on the loop.
type Hooks struct{ p *Placement }

// Hooks returns p's.
func (p *Placement) Hooks() Hooks { return Hooks{p} }

// Clock is the task-clock gate; nil when the wake is off.
func (h Hooks) Clock() *placement.ClockGate { return h.p.e.Clock }

// ClockC is the task-clock gate's channel as the loop selects on it.
func (h Hooks) ClockC() <-chan struct{} { return h.p.e.WakeC(placement.WakeClock) }

// DropPressure closes the CPU pressure trigger: no pressure wake follows
// (none is armed again until the placement is opened again).
func (h Hooks) DropPressure() { h.p.e.Pressure.Close() }

// Pressure is the placement's CPU pressure gate: whether a trigger is
// armed, muted, its back-off.
func (h Hooks) Pressure() *placement.PressureGate { return &h.p.e.Pressure }

// ConfirmPending reports whether a confirmation of a wake is pending.
func (h Hooks) ConfirmPending() bool { return h.p.e.Confirm.C() != nil }

// RunDelay is workload name's threads' run and run-queue wait time
// (sysfs.Cgroup.RunDelay).
func (h Hooks) RunDelay(name string) (run, wait time.Duration, err error) {
	return h.p.cg.RunDelay(name)
}

// Runnable is workload name's runnable threads now (sysfs.Cgroup.Runnable).
func (h Hooks) Runnable(name string) (int, error) { return h.p.cg.Runnable(name) }

// Listed reports whether name is a workload.
func (h Hooks) Listed(name string) bool { return h.p.workloads[name] != nil }

// Load is workload name's runnable threads at the last sample and its
// decayed utilisation, in CPUs (0, 0 if not listed).
func (h Hooks) Load(name string) (threads int, util float64) {
	if w := h.p.workloads[name]; w != nil {
		return w.threads, w.avg.Util
	}
	return 0, 0
}

// Waiting reports whether name is a child seen without its files yet.
func (h Hooks) Waiting(name string) bool { return h.p.waiting[name] }

// PressureWake handles a CPU pressure wake as the loop does.
func (h Hooks) PressureWake() { h.p.e.OnWake(placement.WakePressure) }

// ConfirmWake handles a due confirmation as the loop does and reports
// whether it confirmed a crowded workload.
func (h Hooks) ConfirmWake() bool { return len(h.p.e.OnWake(placement.WakeConfirmDue)) > 0 }

// ReapFinished removes the created workloads whose last task exited.
func (h Hooks) ReapFinished() { h.p.reapFinished() }
