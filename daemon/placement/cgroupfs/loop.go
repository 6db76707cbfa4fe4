package cgroupfs

import (
	"maps"
	"slices"

	"github.com/schedpolicyd/schedpolicyd/daemon/placement"
	"github.com/schedpolicyd/schedpolicyd/policy"
)

// The cgroupfs placement as the loop sees it (backend).

func (p *Placement) Mode() string { return placement.Cgroupfs }

func (p *Placement) Count() int { return len(p.workloads) }

// Names are the workloads in name order.
func (p *Placement) Names() []string { return slices.Sorted(maps.Keys(p.workloads)) }

// Placed says what the last apply did (nothing while placement is off).
func (p *Placement) Placed() (moved, managed int, applied []string) {
	if p.cg == nil {
		return 0, 0, nil
	}
	for _, w := range p.workloads {
		applied = append(applied, w.rec.Applied)
	}
	return p.e.Written, len(p.workloads), applied
}

// Recheck re-reads every cpuset (one changed by hand is seen now), for
// Rebalance.
func (p *Placement) Recheck() { p.checkAll(nil) }

// Polls: without a watch on the managed parent the loop samples even
// with no workloads, to find new ones (a scan at each sample).
func (p *Placement) Polls() bool {
	return p.watch == nil && (p.e.Cfg.CgroupRoot != "" || len(p.workloads) > 0)
}

// Refresh is the periodic sample's part beyond the load signals: a scan
// where nothing watches the managed parent (with a watch its events drive
// the scans, and a lost event forces one; only without one does each
// sample list the children and stat each of them) and finished workloads
// reaped. A change counts as activity for the back-off.
func (p *Placement) Refresh() (changed, busy bool) {
	changed = p.watch == nil && p.Scan()
	if p.reapFinished() {
		changed = true
	}
	return changed, changed
}

// WakeC: the managed parent's watch (a child made or removed, a cpuset
// written by someone else, a task attached).
func (p *Placement) WakeC(k placement.Wake) <-chan struct{} {
	switch k {
	case placement.WakeChanged:
		return p.cgEvents()
	case placement.WakeWritten:
		return p.cpusC()
	case placement.WakeAttached:
		return p.activityC()
	}
	return nil
}

// EventsC carries the exits of created workloads' watched tasks (reap.go).
func (p *Placement) EventsC() <-chan placement.Event { return p.exits }

// OnWake handles the watch's wakes (WakeC).
func (p *Placement) OnWake(k placement.Wake) (asks placement.Asks) {
	switch k {
	case placement.WakeChanged:
		p.e.Backoff.Reset()
		if p.Scan() {
			asks = append(asks, placement.Ask{Why: "workloads changed", Force: true})
		}
	case placement.WakeWritten:
		names := p.takeWritten()
		if len(p.waiting) > 0 && p.Scan() {
			asks = append(asks, placement.Ask{Why: "workloads changed", Force: true})
		}
		if p.checkAll(names) {
			asks = append(asks, placement.Ask{Why: "cpuset changed by someone else", Force: true})
		}
	case placement.WakeAttached:
		p.e.Backoff.Reset() // a task arrived: look at once, then every period
		p.e.Pressure.Reset()
		p.Sample()
		p.retaskClock()
		p.e.StartConfirm("task attached", false)
		asks = append(asks, placement.Ask{Why: "task attached"})
	}
	return asks
}

// OnMsg handles a watched exit (onExit).
func (p *Placement) OnMsg(msg placement.Event) placement.Asks {
	if ev, ok := msg.(exitEvent); ok && p.onExit(ev) {
		return placement.Asks{{Why: "workload finished", Force: true}}
	}
	return nil
}

// ModelLoads adds the cgroupfs workloads: a released or exempt one keeps its CPUs,
// an override of performance has every allowed CPU, the policy places the
// others; allowed is narrowed to the managed parent's CPUs.
func (p *Placement) ModelLoads(in *placement.ModelInput) {
	if p.cg != nil {
		if a, err := p.cg.Allowed(); err == nil && !a.IsEmpty() {
			in.Allowed = in.Online.Intersect(a).List()
		}
	}
	for _, n := range p.Names() {
		w := p.workloads[n]
		l := policy.Load{Name: n, Util: w.avg.Util, Threads: w.threads}
		switch {
		case !w.placed():
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
