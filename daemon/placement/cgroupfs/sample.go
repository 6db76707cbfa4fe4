package cgroupfs

import (
	"time"

	"github.com/schedpolicyd/schedpolicyd/cgroup"
	"github.com/schedpolicyd/schedpolicyd/daemon/placement"
)

// Sample updates each workload's load signals: the decayed utilisation
// from its cgroup CPU-time counter (policy.UtilAverage, a PELT-like
// average: u = Δusage / Δwall in CPUs; negative deltas of the v1
// per-thread accounting count as 0), the instant number of runnable
// threads and, on cgroup v2, cpu.pressure.
func (p *Placement) Sample() (busy bool) {
	if p.cg == nil {
		return false // no parent (yet): nothing to sample, nothing counted
	}
	p.e.Stats.Samples.Add(1)
	now := time.Now()
	for n, w := range p.workloads {
		use, err := p.cg.Usage(n)
		if err != nil {
			continue
		}
		moved := use != w.avg.Usage
		p.e.Clock.Calm(n, max(use-w.avg.Usage, 0), w.lastAt, now, w.cpus.Size())
		if moved || w.avg.Util > placement.IdleUtil {
			busy = true
		}
		w.avg, w.lastAt = w.avg.Update(use, now.Sub(w.lastAt), p.e.Cfg.UtilHalfLife), now
		// A workload whose CPU time did not move ran nothing for a whole
		// period: skip the per-thread scan of /proc.
		w.threads = 0
		if moved {
			if r, err := p.cg.Runnable(n); err == nil {
				w.threads = r
			}
		}
		if p.cg.Version() != cgroup.CgroupV2 {
			continue // cpu.pressure exists on cgroup v2 only
		}
		if pr, err := p.cg.CPUPressure(n); err == nil {
			w.pressure = pr.Avg10
		}
	}
	return busy
}
