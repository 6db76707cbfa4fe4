package units

import (
	"time"

	"github.com/sirupsen/logrus"

	"github.com/schedpolicyd/schedpolicyd/daemon/placement"
	"github.com/schedpolicyd/schedpolicyd/daemon/statefile"
	"github.com/schedpolicyd/schedpolicyd/policy"
	"github.com/schedpolicyd/schedpolicyd/sysfs"
)

// The units placement as the loop sees it (backend).

func (u *Placement) Mode() string { return placement.Systemd }

// LoadRecords takes state.json's unit records (load).
func (u *Placement) LoadRecords(st statefile.State) { u.load(st.Units) }

// PutRecords sets st's unit records to recordList.
func (u *Placement) PutRecords(st *statefile.State) { st.Units = u.recordList() }

func (u *Placement) Count() int { return len(u.workloads) }

func (u *Placement) LastPlan() policy.Plan { return u.plan }

// Placed says what the last apply did.
func (u *Placement) Placed() (moved, managed int, applied []string) {
	for _, w := range u.workloads {
		applied = append(applied, w.rec.Applied)
	}
	return u.written, len(u.workloads), applied
}

// Hotplug does nothing: an AllowedCPUs= naming an offline CPU is systemd's
// to apply, and the plan the caller makes follows the online CPUs.
func (u *Placement) Hotplug(before, after sysfs.CPUSet) {}

// Rebalance scans, samples and forgets the lazy history.
func (u *Placement) Rebalance() {
	u.Scan()
	u.sample()
	u.plan.Lazy = policy.LazyState{}
}

// OnSample is the periodic sample: the load signals and a confirmation
// for units that stalled (wake.go). The units' set changes through their
// managers' signals, and here only when the last scan was cut short: the
// sample then scans again and reports whether the set changed.
func (u *Placement) OnSample() (changed bool) {
	if u.rescan {
		changed = u.Scan()
	}
	u.backoff.Sampled(u.sample())
	u.startConfirm("sample", unitStallCandidate)
	return changed
}

// Freshen samples at once once sampling backed off or stopped.
func (u *Placement) Freshen() {
	if u.backoff.Idle() {
		u.backoff.Reset()
		u.sample()
	}
}

// WakeC: the CPU pressure trigger (and the end of its back-off) and the
// task-clock gate; the units' changes come through EventsC.
func (u *Placement) WakeC(k placement.Wake) <-chan struct{} {
	switch k {
	case placement.WakePressure:
		return u.pressure.C()
	case placement.WakePressureDone:
		return u.pressure.Done()
	case placement.WakePressureResume:
		return u.pressure.ResumeC()
	case placement.WakeClock:
		return u.clockC()
	}
	return nil
}

// EventsC is the channel of the managers' and logind's signals and the
// focus watch's events, unitMsg (nil before open).
func (u *Placement) EventsC() <-chan placement.Event { return u.msgs }

// OnWake logs through the daemon's logger (Config.Log), as the loop did.
func (u *Placement) OnWake(k placement.Wake, replan placement.ReplanFunc) {
	switch k {
	case placement.WakePressure:
		u.stats.PressureWakes.Add(1)
		u.pressureWake()
		replan("cpu pressure", false)
	case placement.WakePressureDone:
		err := u.pressure.Dropped()
		u.cfg.Log.WithError(err).Warn("the CPU pressure trigger of units stopped; while every unit is idle, sampling slows down instead of stopping")
	case placement.WakePressureResume:
		u.pressure.Resume()
	case placement.WakeClock:
		u.clockWake()
	case placement.WakeConfirmDue:
		if u.confirmWake() {
			replan("crowded unit confirmed", false)
		}
	}
}

// OnMsg follows one message: of the system manager, logind or the focus
// watch (onEvent), or of a user's link (onLink); one that took over 2 s
// is warned about.
func (u *Placement) OnMsg(msg placement.Event, replan placement.ReplanFunc) {
	t0 := time.Now()
	log := u.cfg.Log
	switch m := msg.(type) {
	case unitMsg:
		if u.onEvent(m) {
			replan("units changed", true)
		}
		log = log.WithFields(logrus.Fields{"unit": m.ev.Name, "focus": m.focus})
	case linkMsg:
		if u.mgr != nil && u.onLink(m) {
			replan("a user's units changed", true)
		}
		log = log.WithField("uid", m.uid)
	default:
		return
	}
	if el := time.Since(t0); el > 2*time.Second {
		log.WithField("took", el.String()).Warn("slow unit event")
	}
}

// ModelLoads adds the units as their apply plans them: an override of
// performance has every allowed CPU, an administrator's AllowedCPUs=
// bounds the others (kept as they are here).
func (u *Placement) ModelLoads(in *placement.ModelInput) {
	for _, n := range u.sortedNames() {
		w := u.workloads[n]
		l := policy.Load{Name: n, Util: w.avg.Util, Class: w.class(), Slice: w.slice}
		if w.override == policy.Performance {
			in.CPUs[n] = in.Allowed
			in.Fixed = append(in.Fixed, l)
			continue
		}
		in.Placed = append(in.Placed, l)
	}
}
