package cgroupfs

import (
	"fmt"
	"time"

	"github.com/schedpolicyd/schedpolicyd/cgroup"
	"github.com/schedpolicyd/schedpolicyd/daemon/placement"
)

// Crowded returns the placed workloads with more runnable threads at the
// last sample than CPUs, in name order, each as NAME:THREADS/CPUS for the
// log (at a pressure wake as at a sample).
func (p *Placement) Crowded(bool) placement.Crowding {
	c := placement.Crowding{Field: "runnable_over_cpus"}
	for _, n := range p.Names() {
		w := p.workloads[n]
		if k := w.cpus.Size(); k > 0 && w.threads > k && w.placed() {
			c.Names = append(c.Names, n)
			c.Desc = append(c.Desc, fmt.Sprintf("%s:%d/%d", n, w.threads, k))
		}
	}
	return c
}

// CPUs is workload n's CPU count; 0 when it is gone, released or exempt.
func (p *Placement) CPUs(n string) int {
	if w := p.workloads[n]; w != nil && w.placed() {
		return w.cpus.Size()
	}
	return 0
}

// RunDelay is workload n's threads' run and run-queue wait time
// (cgroup.Cgroup.RunDelay).
func (p *Placement) RunDelay(n string) (run, wait time.Duration, err error) {
	return p.cg.RunDelay(n)
}

// Saturated raises each confirmed workload's utilisation to its CPU
// count.
func (p *Placement) Saturated(names []string) {
	for _, n := range names {
		w := p.workloads[n]
		w.avg.Util = max(w.avg.Util, float64(w.cpus.Size()))
		// More threads runnable than CPUs, as the confirmation measured:
		// the decision that follows must see them, not the last sample's
		// count (one busy thread, say, to which a second was added since;
		// with a count of 1 the plan keeps it on its one CPU until the
		// next sample).
		w.threads = max(w.threads, w.cpus.Size()+1)
	}
}

// ClockCrowded: at a signal of its counters, a workload with more threads
// runnable right then than its k CPUs is crowded.
func (p *Placement) ClockCrowded(n string, k int) bool {
	r, err := p.cg.Runnable(n)
	return err == nil && r > k
}

// SyncClock gives packed, placed workloads counters (at most
// ClockSyncBatch of those without) and closes those of the others. The
// task-counted (cgroup v1) workloads in p.clockRetask get theirs again:
// tasks were attached to them. On cgroup v2 a workload's counters follow
// its cpuset. It reports whether workloads are left to arm (the caller
// asks for another call).
func (p *Placement) SyncClock() (more bool) {
	if p.e.Clock == nil || p.cg == nil {
		return false
	}
	allowed, opened := p.e.Allowed, 0
	for _, n := range p.Names() {
		w := p.workloads[n]
		if !w.placed() || !placement.Packed(w.cpus, allowed) {
			p.e.Clock.Remove(n)
			continue
		}
		dir, err := p.cg.ChildPath(n)
		if err != nil {
			continue
		}
		if opened >= placement.ClockSyncBatch && !p.e.Clock.Armed(n) {
			more = true
			continue
		}
		if p.cg.Version() == cgroup.CgroupV2 {
			if !p.e.Clock.Armed(n) {
				opened++
			}
			p.e.Clock.SetCgroup(n, dir, w.cpus)
			continue
		}
		if p.clockRetask[n] {
			if opened >= placement.ClockSyncBatch {
				more = true
				continue
			}
			delete(p.clockRetask, n)
			p.e.Clock.Stale(n) // new tasks: list them, or try again
		} else if p.e.Clock.Armed(n) || p.e.Clock.Refused[n] == "tasks" {
			continue
		}
		opened++
		// The tasks are listed at each (re)open, until a listing names no
		// new one: threads created since the last were counted through
		// inheritance only.
		p.e.Clock.Set(n, "tasks", func(t placement.ClockWatch, period time.Duration) (int, error) {
			return t.SetTasks(n, func() ([]int, error) { return cgroup.DirThreads(dir) }, period)
		})
	}
	p.e.Clock.Keep(func(k string) bool { return p.workloads[k] != nil })
	for n := range p.clockRetask {
		if p.workloads[n] == nil || !p.e.Clock.Armed(n) {
			delete(p.clockRetask, n) // gone, or armed afresh when packed
		}
	}
	return more
}

// retaskClock has the workloads tasks were attached to get their counters
// again: now for a batch, the rest at the next SyncClock, which the
// decision that follows asks the loop for (Daemon.recompute).
func (p *Placement) retaskClock() {
	for n := range p.takeAttached() {
		if p.clockRetask == nil {
			p.clockRetask = map[string]bool{}
		}
		p.clockRetask[n] = true
	}
	p.SyncClock()
}
