package cgroupfs

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/schedpolicyd/schedpolicyd/daemon/placement"
	"github.com/schedpolicyd/schedpolicyd/sysfs"
)

// ConfirmC fires when the cgroupfs placement's confirmation is due.
func (p *Placement) ConfirmC() <-chan time.Time { return p.confirm.C() }

// crowded returns the placed workloads with more runnable threads at the
// last sample than CPUs, in name order, and each as NAME:THREADS/CPUS.
func (p *Placement) crowded() (names, desc []string) {
	for _, n := range p.sortedNames() {
		w := p.workloads[n]
		if k := w.cpus.Size(); k > 0 && w.threads > k && !w.rec.Released {
			names = append(names, n)
			desc = append(desc, fmt.Sprintf("%s:%d/%d", n, w.threads, k))
		}
	}
	return names, desc
}

// startConfirm starts a confirmation (signal names what woke the loop)
// over the crowded workloads of the last sample, unless one is pending. It
// returns them as NAME:THREADS/CPUS.
func (p *Placement) startConfirm(signal string) (crowded []string) {
	names, desc := p.crowded()
	if p.confirm.Start(signal, names, p.cg.RunDelay) {
		p.log.WithFields(logrus.Fields{"signal": signal, "runnable_over_cpus": strings.Join(desc, ",")}).Debug("crowded: confirming")
	}
	return desc
}

// pressureWake samples at once because the CPU pressure trigger fired and
// starts a confirmation for the crowded workloads. With one crowded, the
// sampling looks every period from now (its back-off reset) and so does
// the trigger (placement.PressureGate.Woke); with none — the pressure is
// someone else's — the sample counts as a periodic one (sampling stays
// stopped while every workload is idle) and the trigger backs off. Which
// signal woke the loop, the crowded workloads and the back-off are logged
// at debug level.
func (p *Placement) pressureWake() {
	busy := p.sample()
	crowded := p.startConfirm("cpu pressure")
	found := len(crowded) > 0
	if found {
		p.backoff.Reset() // look at once, then every period
	} else {
		p.backoff.Sampled(busy)
	}
	mute := p.pressure.Woke(found)
	p.log.WithFields(logrus.Fields{"signal": "cpu pressure", "runnable_over_cpus": strings.Join(crowded, ","), "pressure_backoff": mute}).Debug("woken")
}

// confirmWake ends the pending confirmation: each candidate still placed
// whose threads were runnable on average for more than its CPU count plus
// WakeMargin gets its utilisation raised to its CPU count, and the
// borderline ones get one more confirmation at once. It reports whether
// any was raised (then the caller plans).
func (p *Placement) confirmWake() bool {
	signal, retried := p.confirm.Signal, p.confirm.Retried
	cpus := func(n string) int {
		if w := p.workloads[n]; w != nil && !w.rec.Released {
			return w.cpus.Size()
		}
		return 0
	}
	cands := slices.Collect(maps.Keys(p.confirm.Cands))
	r := p.confirm.Finish(cpus, p.cg.RunDelay)
	placement.LogConfirmed(p.log, signal, r.Saturated, r.Light)
	if len(r.Names) > 0 {
		p.pressure.Reset() // ours is busy: listen to the pressure again
	}
	for _, n := range r.Names {
		w := p.workloads[n]
		w.avg.Util = max(w.avg.Util, float64(w.cpus.Size()))
		// More threads runnable than CPUs, as the confirmation measured:
		// the decision that follows must see them, not the last sample's
		// count (one busy thread, say, to which a second was added since;
		// with a count of 1 the plan keeps it on its one CPU until the
		// next sample).
		w.threads = max(w.threads, w.cpus.Size()+1)
	}
	p.confirm.Retry(signal, retried, r, p.cg.RunDelay)
	// Confirmed either way: their counters would signal every period while
	// they stay busy (placement.ClockGate); a retry keeps its candidates'.
	p.clock.Settle(cands, r.Names, func(n string) bool { _, again := p.confirm.Cands[n]; return again })
	return len(r.Names) > 0
}

// clockC fires when a cgroupfs workload's counter overflowed.
func (p *Placement) clockC() <-chan struct{} { return p.clock.C() }

// SyncClock gives packed, placed workloads counters (at most
// ClockSyncBatch of those without) and closes those of the others. The
// task-counted (cgroup v1) workloads in p.clockRetask get theirs again:
// tasks were attached to them. On cgroup v2 a workload's counters follow
// its cpuset. It reports whether workloads are left to arm (the caller
// asks for another call).
func (p *Placement) SyncClock() (more bool) {
	if p.clock == nil || p.cg == nil {
		return false
	}
	allowed, opened := p.allowed, 0
	for _, n := range p.sortedNames() {
		w := p.workloads[n]
		if w.rec.Released || !placement.Packed(w.cpus, allowed) {
			p.clock.Remove(n)
			continue
		}
		dir, err := p.cg.ChildPath(n)
		if err != nil {
			continue
		}
		if opened >= placement.ClockSyncBatch && !p.clock.Armed(n) {
			more = true
			continue
		}
		if p.cg.Version() == sysfs.CgroupV2 {
			if !p.clock.Armed(n) {
				opened++
			}
			p.clock.SetCgroup(n, dir, w.cpus)
			continue
		}
		if p.clockRetask[n] {
			if opened >= placement.ClockSyncBatch {
				more = true
				continue
			}
			delete(p.clockRetask, n)
			p.clock.Stale(n) // new tasks: list them, or try again
		} else if p.clock.Armed(n) || p.clock.Refused[n] == "tasks" {
			continue
		}
		opened++
		// The tasks are listed at each (re)open, until a listing names no
		// new one: threads created since the last were counted through
		// inheritance only.
		p.clock.Set(n, "tasks", func(t placement.ClockWatch, period time.Duration) (int, error) {
			return t.SetTasks(n, func() ([]int, error) { return sysfs.DirThreads(dir) }, period)
		})
	}
	p.clock.Keep(func(k string) bool { return p.workloads[k] != nil })
	for n := range p.clockRetask {
		if p.workloads[n] == nil || !p.clock.Armed(n) {
			delete(p.clockRetask, n) // gone, or armed afresh when packed
		}
	}
	return more
}

// clockWake handles the counters' signal: a confirmation (wake.go) starts
// over the packed workloads that signalled a burst (ClockGate.bursts),
// unless one is pending; the signal is logged at debug level as "task
// clock".
func (p *Placement) clockWake() {
	cpus := func(n string) int {
		if w := p.workloads[n]; w != nil && !w.rec.Released {
			return w.cpus.Size()
		}
		return 0
	}
	crowded := func(n string, k int) bool {
		r, err := p.cg.Runnable(n)
		return err == nil && r > k
	}
	if p.clock.ConfirmBursts(p.sortedNames(), cpus, crowded, &p.confirm, p.cg.RunDelay, p.stats) {
		p.backoff.Reset() // busy: sample every period from now
		p.pressure.Reset()
	}
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
