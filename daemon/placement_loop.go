package daemon

import (
	"github.com/schedpolicyd/schedpolicyd/daemon/statefile"
	"github.com/schedpolicyd/schedpolicyd/policy"
)

// The cgroupfs placement as the loop sees it (backend).

func (p *placement) mode() string { return PlacementCgroupfs }

// loadRecords takes state.json's cgroup records (load).
func (p *placement) loadRecords(st statefile.State) { p.load(st.Cgroups) }

// putRecords sets st's cgroup records to recordList.
func (p *placement) putRecords(st *statefile.State) { st.Cgroups = p.recordList() }

func (p *placement) count() int { return len(p.workloads) }

func (p *placement) lastPlan() policy.Plan { return p.plan }

// placed says what the last apply did (nothing while placement is off).
func (p *placement) placed() (moved, managed int, applied []string) {
	if p.cg == nil {
		return 0, 0, nil
	}
	for _, w := range p.workloads {
		applied = append(applied, w.rec.Applied)
	}
	return p.written, len(p.workloads), applied
}

// rebalance scans, re-reads every cpuset (one changed by hand is seen
// now) and the load, and forgets the lazy history.
func (p *placement) rebalance() {
	p.scan()
	p.checkAll(nil)
	p.sample()
	p.plan.Lazy = policy.LazyState{}
}

// onSample is the periodic sample: a scan where nothing watches the
// managed parent (with a watch its events drive the scans, and a lost
// event forces one; only without one does each sample list the children
// and stat each of them), finished workloads reaped, the load signals, and
// a confirmation for any that look crowded (wake.go).
func (p *placement) onSample() (changed bool) {
	changed = p.watch == nil && p.scan()
	if p.reapFinished() {
		changed = true
	}
	p.backoff.sampled(p.sample() || changed)
	p.startConfirm("sample")
	return changed
}

// freshen samples at once where sampling stopped while every workload
// looked idle: a workload may have become busy since without tasks
// waiting for a CPU (one busy thread per workload). A policy, power or
// workload change is then planned on fresh load signals, and watched
// closely for a while.
func (p *placement) freshen() {
	if len(p.workloads) > 0 && !p.sampling() {
		p.backoff.reset()
		p.sample()
	}
}

// wakeC: the managed parent's watch (a child made or removed, a cpuset
// written by someone else, a task attached), the CPU pressure trigger and
// the task-clock gate.
func (p *placement) wakeC(k wake) <-chan struct{} {
	switch k {
	case wakeChanged:
		return p.cgEvents()
	case wakeWritten:
		return p.cpusC()
	case wakeAttached:
		return p.activityC()
	case wakePressure:
		return p.pressureC()
	case wakePressureDone:
		return p.pressureDone()
	case wakeClock:
		return p.clockC()
	}
	return nil
}

// eventsC carries the exits of created workloads' watched tasks (reap.go).
func (p *placement) eventsC() <-chan event { return p.exits }

func (p *placement) onWake(k wake, replan replanFunc) {
	switch k {
	case wakeChanged:
		p.backoff.reset()
		if p.scan() {
			replan("workloads changed", true)
		}
	case wakeWritten:
		names := p.takeWritten()
		if len(p.waiting) > 0 && p.scan() {
			replan("workloads changed", true)
		}
		if p.checkAll(names) {
			replan("cpuset changed by someone else", true)
		}
	case wakeAttached:
		p.backoff.reset() // a task arrived: look at once, then every period
		p.sample()
		p.retaskClock()
		p.startConfirm("task attached")
		replan("task attached", false)
	case wakePressure:
		p.stats.pressureWakes.Add(1)
		p.pressureWake()
		replan("cpu pressure", false)
	case wakePressureDone:
		pr := p.pressure
		p.pressure = nil
		p.log.WithError(pr.Err()).Warn("the CPU pressure trigger stopped; while every workload is idle, sampling slows down instead of stopping")
		pr.Close()
	case wakeClock:
		p.clockWake()
	case wakeConfirmDue:
		if p.confirmWake() {
			replan("crowded workload confirmed", false)
		}
	}
}

// onMsg handles a watched exit (onExit).
func (p *placement) onMsg(msg event, replan replanFunc) {
	if ev, ok := msg.(exitEvent); ok && p.onExit(ev) {
		replan("workload finished", true)
	}
}

// modelLoads adds the cgroupfs workloads: a released one keeps its CPUs,
// an override of performance has every allowed CPU, the policy places the
// others; allowed is narrowed to the managed parent's CPUs.
func (p *placement) modelLoads(in *modelInput) {
	if p.cg != nil {
		if a, err := p.cg.Allowed(); err == nil && !a.IsEmpty() {
			in.allowed = in.online.Intersect(a).List()
		}
	}
	for _, n := range p.sortedNames() {
		w := p.workloads[n]
		l := policy.Load{Name: n, Util: w.avg.Util, Threads: w.threads}
		switch {
		case w.rec.Released:
			in.cpus[n] = w.cpus.List()
		case w.override == policy.Performance:
			in.cpus[n] = in.allowed
		default:
			in.placed = append(in.placed, l)
			continue
		}
		in.fixed = append(in.fixed, l)
	}
}
