package cgroupfs

import (
	"github.com/schedpolicyd/schedpolicyd/daemon/placement"
	"github.com/schedpolicyd/schedpolicyd/daemon/statefile"
	"github.com/schedpolicyd/schedpolicyd/policy"
)

// The cgroupfs placement as the loop sees it (backend).

func (p *Placement) Mode() string { return placement.Cgroupfs }

// LoadRecords takes state.json's cgroup records (load).
func (p *Placement) LoadRecords(st statefile.State) { p.load(st.Cgroups) }

// PutRecords sets st's cgroup records to recordList.
func (p *Placement) PutRecords(st *statefile.State) { st.Cgroups = p.recordList() }

func (p *Placement) Count() int { return len(p.workloads) }

func (p *Placement) LastPlan() policy.Plan { return p.plan }

// Placed says what the last apply did (nothing while placement is off).
func (p *Placement) Placed() (moved, managed int, applied []string) {
	if p.cg == nil {
		return 0, 0, nil
	}
	for _, w := range p.workloads {
		applied = append(applied, w.rec.Applied)
	}
	return p.written, len(p.workloads), applied
}

// Rebalance scans, re-reads every cpuset (one changed by hand is seen
// now) and the load, and forgets the lazy history.
func (p *Placement) Rebalance() {
	p.Scan()
	p.checkAll(nil)
	p.sample()
	p.plan.Lazy = policy.LazyState{}
}

// OnSample is the periodic sample: a scan where nothing watches the
// managed parent (with a watch its events drive the scans, and a lost
// event forces one; only without one does each sample list the children
// and stat each of them), finished workloads reaped, the load signals, and
// a confirmation for any that look crowded (wake.go).
func (p *Placement) OnSample() (changed bool) {
	changed = p.watch == nil && p.Scan()
	if p.reapFinished() {
		changed = true
	}
	p.backoff.Sampled(p.sample() || changed)
	p.startConfirm("sample")
	return changed
}

// Freshen samples at once where sampling stopped while every workload
// looked idle: a workload may have become busy since without tasks
// waiting for a CPU (one busy thread per workload). A policy, power or
// workload change is then planned on fresh load signals, and watched
// closely for a while.
func (p *Placement) Freshen() {
	if len(p.workloads) > 0 && !p.Sampling() {
		p.backoff.Reset()
		p.sample()
	}
}

// WakeC: the managed parent's watch (a child made or removed, a cpuset
// written by someone else, a task attached), the CPU pressure trigger
// (and the end of its back-off) and the task-clock gate.
func (p *Placement) WakeC(k placement.Wake) <-chan struct{} {
	switch k {
	case placement.WakeChanged:
		return p.cgEvents()
	case placement.WakeWritten:
		return p.cpusC()
	case placement.WakeAttached:
		return p.activityC()
	case placement.WakePressure:
		return p.pressure.C()
	case placement.WakePressureDone:
		return p.pressure.Done()
	case placement.WakePressureResume:
		return p.pressure.ResumeC()
	case placement.WakeClock:
		return p.clockC()
	}
	return nil
}

// EventsC carries the exits of created workloads' watched tasks (reap.go).
func (p *Placement) EventsC() <-chan placement.Event { return p.exits }

func (p *Placement) OnWake(k placement.Wake, replan placement.ReplanFunc) {
	switch k {
	case placement.WakeChanged:
		p.backoff.Reset()
		if p.Scan() {
			replan("workloads changed", true)
		}
	case placement.WakeWritten:
		names := p.takeWritten()
		if len(p.waiting) > 0 && p.Scan() {
			replan("workloads changed", true)
		}
		if p.checkAll(names) {
			replan("cpuset changed by someone else", true)
		}
	case placement.WakeAttached:
		p.backoff.Reset() // a task arrived: look at once, then every period
		p.pressure.Reset()
		p.sample()
		p.retaskClock()
		p.startConfirm("task attached")
		replan("task attached", false)
	case placement.WakePressure:
		p.stats.PressureWakes.Add(1)
		p.pressureWake()
		replan("cpu pressure", false)
	case placement.WakePressureDone:
		err := p.pressure.Dropped()
		p.log.WithError(err).Warn("the CPU pressure trigger stopped; while every workload is idle, sampling slows down instead of stopping")
	case placement.WakePressureResume:
		p.pressure.Resume()
	case placement.WakeClock:
		p.clockWake()
	case placement.WakeConfirmDue:
		if p.confirmWake() {
			replan("crowded workload confirmed", false)
		}
	}
}

// OnMsg handles a watched exit (onExit).
func (p *Placement) OnMsg(msg placement.Event, replan placement.ReplanFunc) {
	if ev, ok := msg.(exitEvent); ok && p.onExit(ev) {
		replan("workload finished", true)
	}
}

// ModelLoads adds the cgroupfs workloads: a released one keeps its CPUs,
// an override of performance has every allowed CPU, the policy places the
// others; allowed is narrowed to the managed parent's CPUs.
func (p *Placement) ModelLoads(in *placement.ModelInput) {
	if p.cg != nil {
		if a, err := p.cg.Allowed(); err == nil && !a.IsEmpty() {
			in.Allowed = in.Online.Intersect(a).List()
		}
	}
	for _, n := range p.sortedNames() {
		w := p.workloads[n]
		l := policy.Load{Name: n, Util: w.avg.Util, Threads: w.threads}
		switch {
		case w.rec.Released:
			in.CPUs[n] = w.cpus.List()
		case w.override == policy.Performance:
			in.CPUs[n] = in.Allowed
		default:
			in.Placed = append(in.Placed, l)
			continue
		}
		in.Fixed = append(in.Fixed, l)
	}
}
