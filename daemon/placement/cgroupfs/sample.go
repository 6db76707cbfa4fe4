package cgroupfs

import (
	"time"

	"github.com/schedpolicyd/schedpolicyd/daemon/placement"
	"github.com/schedpolicyd/schedpolicyd/sysfs"
)

// sample updates each workload's load signals: the decayed utilisation
// from its cgroup CPU-time counter (policy.UtilAverage, a PELT-like
// average: u = Δusage / Δwall in CPUs; negative deltas of the v1
// per-thread accounting count as 0), the instant number of runnable
// threads and, on cgroup v2, cpu.pressure.
func (p *Placement) sample() (busy bool) {
	if p.cg == nil {
		return false // no parent (yet): nothing to sample, nothing counted
	}
	p.stats.Samples.Add(1)
	now := time.Now()
	for n, w := range p.workloads {
		use, err := p.cg.Usage(n)
		if err != nil {
			continue
		}
		moved := use != w.avg.Usage
		p.clock.Calm(n, max(use-w.avg.Usage, 0), w.lastAt, now, w.cpus.Size())
		if moved || w.avg.Util > placement.IdleUtil {
			busy = true
		}
		w.avg, w.lastAt = w.avg.Update(use, now.Sub(w.lastAt), p.cfg.UtilHalfLife), now
		// A workload whose CPU time did not move ran nothing for a whole
		// period: skip the per-thread scan of /proc.
		w.threads = 0
		if moved {
			if r, err := p.cg.Runnable(n); err == nil {
				w.threads = r
			}
		}
		if p.cg.Version() != sysfs.CgroupV2 {
			continue // cpu.pressure exists on cgroup v2 only
		}
		if pr, err := p.cg.CPUPressure(n); err == nil {
			w.pressure = pr.Avg10
		}
	}
	return busy
}

// Sampling reports whether the loop samples periodically now: at most
// once a period, and only while a workload is busy, so that an idle
// machine is not woken. It
// does while any workload is busy, and for IdleSamplesBeforeBackoff samples
// after the last busy one. Then it stops if something will wake it when a
// workload gets busy again — the cgroup watch (a task attached: a write to
// cgroup.procs or tasks) and the CPU pressure trigger (tasks wait for a
// CPU, or at the end of its back-off: placement.PressureGate.Covers) —
// and a created workload's last exit is seen through its exit
// watch (reap.go). Without a pressure trigger it keeps sampling, at the
// backed-off period of SampleEvery. Without a watch on the managed parent
// it samples even with no workloads, to find new ones.
func (p *Placement) Sampling() bool {
	if p.watch == nil {
		return p.cfg.CgroupRoot != "" || len(p.workloads) > 0
	}
	if len(p.workloads) == 0 {
		return false
	}
	return p.backoff.Sampling(p.pressure.Covers())
}

// SampleEvery is the current sampling period: the configured one while any
// workload is busy or sampling can stop (sampling), else doubling while all
// are idle, never beyond maxSamplePeriod (saturating: any configured
// period gives a positive one). A task attached to a workload, CPU
// pressure, a new workload or a policy change brings it back to the
// configured period.
func (p *Placement) SampleEvery() time.Duration {
	return p.backoff.Every(p.cfg.SampleInterval, p.pressure.Covers())
}
