package policy

import (
	"math"
	"time"
)

// Utilisation averaging, PELT-like (v3.8's kernel/sched/fair.c,
// docs/SOURCES.md §4).
//
// The kernel's PELT decays 1024 µs periods with y^32 = 1/2 (half-life
// ≈ 32 ms) and needs ~345 ms to converge. User space cannot read cgroup
// counters every millisecond for every workload, a cpuset rewrite migrates
// tasks, and a resident daemon must not wake often (at most once a second,
// and only while a workload is busy), so the daemon samples every
// DefaultSamplePeriod (1 s) and decays with DefaultHalfLife (2 s): two
// samples per half-life keep one sample's weight at 29 %, and a step change
// is 94 % reflected after 8 s — far slower than PELT on purpose, because
// bursts are handled by the instant signals (Load.Threads, the patch's
// nr_running, and Load.Pressure), as the cover letter does ("runnable avg
// in power friendly scheduling and ... instant load ... for low latency"),
// and a confined workload that saturates its cpuset grows at once whatever
// its average says.
const (
	DefaultSamplePeriod = 1000 * time.Millisecond
	DefaultHalfLife     = 2000 * time.Millisecond
)

// UtilAverage is one workload's decayed utilisation, a value: Update
// returns the next state.
type UtilAverage struct {
	Util  float64       // decayed utilisation, CPUs
	Usage time.Duration // cumulative CPU time at the last sample
	Valid bool          // a first sample was taken
}

// Update folds in a sample of the cumulative CPU time usage (cgroup v2
// cpu.stat usage_usec, v1 cpuacct.usage) taken wall after the previous one:
// u = Δusage / wall (CPUs), Util ← Util·d + u·(1−d), d = 0.5^(wall /
// halfLife). A negative Δusage (counter reset) counts as 0; wall ≤ 0 only
// records the counter. halfLife ≤ 0 means DefaultHalfLife.
func (a UtilAverage) Update(usage, wall, halfLife time.Duration) UtilAverage {
	if halfLife <= 0 {
		halfLife = DefaultHalfLife
	}
	if a.Valid && wall > 0 {
		u := math.Max(float64(usage-a.Usage)/float64(wall), 0)
		d := math.Pow(0.5, float64(wall)/float64(halfLife))
		a.Util = a.Util*d + u*(1-d)
	}
	a.Usage, a.Valid = usage, true
	return a
}
