package placement

import (
	"fmt"
	"io/fs"
	"time"

	"github.com/schedpolicyd/schedpolicyd/internal/names"
	"github.com/schedpolicyd/schedpolicyd/policy"
	"github.com/schedpolicyd/schedpolicyd/sysfs"
)

// LazyInput is the lazy balance a plan starts from (patch 18's history
// and the race-to-idle hold, prev) and whether it plans afresh, ignoring
// them (policy.Input.DisableLazy): only a forced decision whose policy
// (asked before, eff now) or CPUs (before, now) changed does — a knob,
// power-source or hotplug change, which must apply at once. One forced by
// workloads or units coming and going keeps them (a new workload is still
// placed at once), or unit churn would undo every hysteresis: the reason's
// "(race to idle)" toggled 4 times in a second in the VM.
func LazyInput(prev policy.LazyState, asked, eff policy.Policy, before, now sysfs.CPUSet, force bool) (policy.LazyState, bool) {
	if force && (asked != eff || !before.Equal(now)) {
		return policy.LazyState{}, true
	}
	return prev, false
}

// IdleUtil: a workload whose decayed utilisation is below it (in CPUs) and
// whose CPU time did not move counts as idle for the sampling backoff.
const IdleUtil = 0.01

// IdleSamplesBeforeBackoff quiet samples (every workload idle) stop the
// sampling, or start its backoff where it cannot stop. maxIdleShift caps
// the backoff: the period doubles up to 2^maxIdleShift × the sampling
// period (32 s at the default 1 s). maxSamplePeriod caps the backed-off
// period whatever the configured one, so that the shift cannot overflow.
const (
	IdleSamplesBeforeBackoff = 3
	maxIdleShift             = 5
	maxSamplePeriod          = time.Hour
)

// SampleBackoff is a back end's sampling back-off: how many samples in a
// row found every workload idle. Each back end holds one; a busy sample
// or a wake (a task attached, CPU pressure, a new workload, a forced
// decision) starts the count again.
type SampleBackoff struct{ quiet int }

// Sampled counts a periodic sample: busy (or one that changed the
// workloads) starts the count again, else it is one more quiet sample.
func (b *SampleBackoff) Sampled(busy bool) {
	if busy {
		b.quiet = 0
	} else {
		b.quiet++
	}
}

// Reset starts the count again: look at once, then every period.
func (b *SampleBackoff) Reset() { b.quiet = 0 }

// Idle reports whether IdleSamplesBeforeBackoff quiet samples have passed.
func (b SampleBackoff) Idle() bool { return b.quiet >= IdleSamplesBeforeBackoff }

// Sampling reports whether the loop samples: always where nothing wakes
// it when a workload gets busy (canStop false: no pressure trigger), else
// until idle.
func (b SampleBackoff) Sampling(canStop bool) bool { return !canStop || !b.Idle() }

// Every is the sampling period for the configured base: base where
// sampling can stop (canStop), else backedOffPeriod of the quiet samples.
func (b SampleBackoff) Every(base time.Duration, canStop bool) time.Duration {
	if canStop {
		return backedOffPeriod(base, 0)
	}
	return backedOffPeriod(base, b.quiet)
}

// backedOffPeriod is the sampling period after idle consecutive quiet
// samples: base (policy.DefaultSamplePeriod when not positive) until
// IdleSamplesBeforeBackoff, then doubling per sample up to 2^maxIdleShift ×
// base, never beyond maxSamplePeriod (saturating: any base gives a
// positive period).
func backedOffPeriod(base time.Duration, idle int) time.Duration {
	if base <= 0 {
		base = policy.DefaultSamplePeriod
	}
	shift := idle - IdleSamplesBeforeBackoff + 1
	every := base
	for i := 0; i < min(shift, maxIdleShift) && every < maxSamplePeriod; i++ {
		every *= 2
	}
	return max(base, min(every, maxSamplePeriod))
}

// Pressure trigger parameters. The window bounds how soon a packed
// workload that turned busy is noticed, and the kernel signals at most
// once per window. The narrow window's stall, 20 ms (4 %), is reached 20
// ms after two threads start to share one CPU, and the kernel checks every
// window/10 = 50 ms: 20–70 ms to the wake. The 2 s window's is 10 %. What the kernel
// grants (kernel/sched/psi.c psi_trigger_create, kernel/cgroup/cgroup.c):
//   - up to 6.4: windows of 500 ms–10 s, evaluated every window/10 by the
//     psimon RT thread; /proc/pressure/* needs CAP_SYS_RESOURCE to be
//     opened for writing at all, a cgroup v2 cpu.pressure does not;
//   - 6.5 on: any window up to 10 s with CAP_SYS_RESOURCE (RT-polled);
//     without it only multiples of 2 s, evaluated every 2 s by the
//     averaging worker (early 6.5 and 6.6 releases also refused to open
//     a cgroup file for writing without it).
//
// The narrow window is tried first; where it is refused, the 2 s one
// (PressureGate.arm).
const (
	pressureStall        = 20 * time.Millisecond
	pressureWindow       = 500 * time.Millisecond
	PressureStallUnpriv  = 200 * time.Millisecond
	PressureWindowUnpriv = 2 * time.Second
)

// ValidWorkloadName checks a name for CreateWorkload by the rule
// schedpolicyctl applies too (names.Workload): 1–64 bytes of valid UTF-8,
// one path component (no "/", not "." or ".."), no control characters,
// not starting with "." and not looking like a cgroup interface file
// ("cgroup.", "cpuset.", "cpu.", "tasks"). Errors wrap policy.ErrInvalid
// and a *names.Error.
func ValidWorkloadName(name string) error {
	if err := names.Workload(name); err != nil {
		return fmt.Errorf("%w: %w", policy.ErrInvalid, err)
	}
	return nil
}

// DefaultManage is the slices placed by default with placement "systemd":
// the daemon's own (schedpolicyctl run starts transient scopes there), the
// system services, and every logged-in user's apps, background work and
// session (issue 34: a laptop's work is mostly the user's own; each is
// placed by its class, policy.ClassPolicy). The users' slices are placed
// unit by unit where cpuset is delegated to user@UID.service (the
// package's drop-in, at the next login), else each user's manager as a
// whole, never confined (docs/USERS.md). Before issue 34 only the first
// two.
var DefaultManage = []string{"schedpolicyd.slice", "system.slice", "app.slice", "background.slice", "session.slice"}

// WorkloadExistsError is CreateWorkload's FileExists: the workload is
// there already (another run, or made by hand). It reads "workload
// "build" already exists (/sys/fs/cgroup/cpuset/schedpolicyd/build);
// choose another name" (what: the cgroup, or the unit build.scope), not
// mkdir's "file exists", and matches fs.ErrExist.
type WorkloadExistsError struct{ Name, What string }

func (e *WorkloadExistsError) Error() string {
	return fmt.Sprintf("workload %q already exists (%s); choose another name", e.Name, e.What)
}

func (e *WorkloadExistsError) Is(target error) bool { return target == fs.ErrExist }
