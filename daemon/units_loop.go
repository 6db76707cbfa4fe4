package daemon

import (
	"time"

	"github.com/sirupsen/logrus"

	"github.com/schedpolicyd/schedpolicyd/daemon/statefile"
	"github.com/schedpolicyd/schedpolicyd/policy"
	"github.com/schedpolicyd/schedpolicyd/sysfs"
)

// The units placement as the loop sees it (backend).

func (u *unitPlacement) mode() string { return PlacementSystemd }

// loadRecords takes state.json's unit records (load).
func (u *unitPlacement) loadRecords(st statefile.State) { u.load(st.Units) }

// putRecords sets st's unit records to recordList.
func (u *unitPlacement) putRecords(st *statefile.State) { st.Units = u.recordList() }

func (u *unitPlacement) count() int { return len(u.workloads) }

func (u *unitPlacement) lastPlan() policy.Plan { return u.plan }

// placed says what the last apply did.
func (u *unitPlacement) placed() (moved, managed int, applied []string) {
	for _, w := range u.workloads {
		applied = append(applied, w.rec.Applied)
	}
	return u.written, len(u.workloads), applied
}

// hotplug does nothing: an AllowedCPUs= naming an offline CPU is systemd's
// to apply, and the plan the caller makes follows the online CPUs.
func (u *unitPlacement) hotplug(before, after sysfs.CPUSet) {}

// rebalance scans, samples and forgets the lazy history.
func (u *unitPlacement) rebalance() {
	u.scan()
	u.sample()
	u.plan.Lazy = policy.LazyState{}
}

// onSample is the periodic sample: the load signals and a confirmation
// for units that stalled (wake.go). The units' set changes through their
// managers' signals, and here only when the last scan was cut short: the
// sample then scans again and reports whether the set changed.
func (u *unitPlacement) onSample() (changed bool) {
	if u.rescan {
		changed = u.scan()
	}
	u.backoff.sampled(u.sample())
	u.startConfirm("sample", unitStallCandidate)
	return changed
}

// freshen samples at once once sampling backed off or stopped.
func (u *unitPlacement) freshen() {
	if u.backoff.idle() {
		u.backoff.reset()
		u.sample()
	}
}

// wakeC: the CPU pressure trigger and the task-clock gate; the units'
// changes come through eventsC.
func (u *unitPlacement) wakeC(k wake) <-chan struct{} {
	switch k {
	case wakePressure:
		return u.pressureC()
	case wakePressureDone:
		return u.pressureDone()
	case wakeClock:
		return u.clockC()
	}
	return nil
}

// eventsC is the channel of the managers' and logind's signals and the
// focus watch's events, unitMsg (nil before open).
func (u *unitPlacement) eventsC() <-chan event { return u.msgs }

// onWake logs through the daemon's logger (Config.Log), as the loop did.
func (u *unitPlacement) onWake(k wake, replan replanFunc) {
	switch k {
	case wakePressure:
		u.stats.pressureWakes.Add(1)
		u.backoff.reset() // sample at once, then every period
		u.sample()
		u.cfg.Log.WithField("signal", "cpu pressure").Debug("woken: units sampled")
		u.startConfirm("cpu pressure", unitWakeStall)
		replan("cpu pressure", false)
	case wakePressureDone:
		u.cfg.Log.WithError(u.pressure.Err()).Warn("the CPU pressure trigger of units stopped; while every unit is idle, sampling slows down instead of stopping")
		u.dropPressure()
	case wakeClock:
		u.clockWake()
	case wakeConfirmDue:
		if u.confirmWake() {
			replan("crowded unit confirmed", false)
		}
	}
}

// onMsg follows one message (onEvent); one that took over 2 s is warned
// about.
func (u *unitPlacement) onMsg(msg event, replan replanFunc) {
	ev, ok := msg.(unitMsg)
	if !ok {
		return
	}
	t0 := time.Now()
	if u.onEvent(ev) {
		replan("units changed", true)
	}
	if el := time.Since(t0); el > 2*time.Second {
		u.cfg.Log.WithFields(logrus.Fields{"unit": ev.ev.Name, "uid": ev.ev.UID, "focus": ev.focus, "took": el.String()}).Warn("slow unit event")
	}
}

// modelLoads adds the units as their apply plans them: an override of
// performance has every allowed CPU, an administrator's AllowedCPUs=
// bounds the others (kept as they are here).
func (u *unitPlacement) modelLoads(in *modelInput) {
	for _, n := range u.sortedNames() {
		w := u.workloads[n]
		l := policy.Load{Name: n, Util: w.avg.Util, Class: w.class(), Slice: w.slice}
		if w.override == policy.Performance {
			in.cpus[n] = in.allowed
			in.fixed = append(in.fixed, l)
			continue
		}
		in.placed = append(in.placed, l)
	}
}
