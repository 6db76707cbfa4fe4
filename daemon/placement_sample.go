package daemon

import (
	"time"

	"github.com/schedpolicyd/schedpolicyd/sysfs"
)

// sample updates each workload's load signals: the decayed utilisation
// from its cgroup CPU-time counter (policy.UtilAverage, a PELT-like
// average: u = Δusage / Δwall in CPUs; negative deltas of the v1
// per-thread accounting count as 0), the instant number of runnable
// threads and, on cgroup v2, cpu.pressure.
func (p *placement) sample() (busy bool) {
	if p.cg == nil {
		return false // no parent (yet): nothing to sample, nothing counted
	}
	p.stats.samples.Add(1)
	now := time.Now()
	for n, w := range p.workloads {
		use, err := p.cg.Usage(n)
		if err != nil {
			continue
		}
		moved := use != w.avg.Usage
		p.clock.calm(n, max(use-w.avg.Usage, 0), w.lastAt, now, w.cpus.Size())
		if moved || w.avg.Util > idleUtil {
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

// idleUtil: a workload whose decayed utilisation is below it (in CPUs) and
// whose CPU time did not move counts as idle for the sampling backoff.
const idleUtil = 0.01

// idleSamplesBeforeBackoff quiet samples (every workload idle) stop the
// sampling, or start its backoff where it cannot stop. maxIdleShift caps
// the backoff: the period doubles up to 2^maxIdleShift × the sampling
// period (32 s at the default 1 s). maxSamplePeriod caps the backed-off
// period whatever the configured one, so that the shift cannot overflow.
const (
	idleSamplesBeforeBackoff = 3
	maxIdleShift             = 5
	maxSamplePeriod          = time.Hour
)

// sampling reports whether the loop samples periodically now: at most
// once a period, and only while a workload is busy, so that an idle
// machine is not woken. It
// does while any workload is busy, and for idleSamplesBeforeBackoff samples
// after the last busy one. Then it stops if something will wake it when a
// workload gets busy again — the cgroup watch (a task attached: a write to
// cgroup.procs or tasks) and the CPU pressure trigger (tasks wait for a
// CPU) — and a created workload's last exit is seen through its exit
// watch (reap.go). Without a pressure trigger it keeps sampling, at the
// backed-off period of sampleEvery. Without a watch on the managed parent
// it samples even with no workloads, to find new ones.
func (p *placement) sampling() bool {
	if p.watch == nil {
		return p.cfg.CgroupRoot != "" || len(p.workloads) > 0
	}
	if len(p.workloads) == 0 {
		return false
	}
	return p.backoff.sampling(p.pressure != nil)
}

// sampleEvery is the current sampling period: the configured one while any
// workload is busy or sampling can stop (sampling), else doubling while all
// are idle, never beyond maxSamplePeriod (saturating: any configured
// period gives a positive one). A task attached to a workload, CPU
// pressure, a new workload or a policy change brings it back to the
// configured period.
func (p *placement) sampleEvery() time.Duration {
	return p.backoff.every(p.cfg.SampleInterval, p.pressure != nil)
}

// sampleBackoff is a back end's sampling back-off: how many samples in a
// row found every workload idle. Each back end holds one; a busy sample
// or a wake (a task attached, CPU pressure, a new workload, a forced
// decision) starts the count again.
type sampleBackoff struct{ quiet int }

// sampled counts a periodic sample: busy (or one that changed the
// workloads) starts the count again, else it is one more quiet sample.
func (b *sampleBackoff) sampled(busy bool) {
	if busy {
		b.quiet = 0
	} else {
		b.quiet++
	}
}

// reset starts the count again: look at once, then every period.
func (b *sampleBackoff) reset() { b.quiet = 0 }

// idle reports whether idleSamplesBeforeBackoff quiet samples have passed.
func (b sampleBackoff) idle() bool { return b.quiet >= idleSamplesBeforeBackoff }

// sampling reports whether the loop samples: always where nothing wakes
// it when a workload gets busy (canStop false: no pressure trigger), else
// until idle.
func (b sampleBackoff) sampling(canStop bool) bool { return !canStop || !b.idle() }

// every is the sampling period for the configured base: base where
// sampling can stop (canStop), else backedOffPeriod of the quiet samples.
func (b sampleBackoff) every(base time.Duration, canStop bool) time.Duration {
	if canStop {
		return backedOffPeriod(base, 0)
	}
	return backedOffPeriod(base, b.quiet)
}

// backedOffPeriod is the sampling period after idle consecutive quiet
// samples: base (DefaultSampleInterval when not positive) until
// idleSamplesBeforeBackoff, then doubling per sample up to 2^maxIdleShift ×
// base, never beyond maxSamplePeriod (saturating: any base gives a
// positive period).
func backedOffPeriod(base time.Duration, idle int) time.Duration {
	if base <= 0 {
		base = DefaultSampleInterval
	}
	shift := idle - idleSamplesBeforeBackoff + 1
	every := base
	for i := 0; i < min(shift, maxIdleShift) && every < maxSamplePeriod; i++ {
		every *= 2
	}
	return max(base, min(every, maxSamplePeriod))
}
