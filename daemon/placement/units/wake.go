package units

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/schedpolicyd/schedpolicyd/daemon/placement"
	"github.com/schedpolicyd/schedpolicyd/sysfs"
)

// unitStallCandidate: a packed unit whose tasks waited for a CPU this long
// since the last sample (its cgroup's cpu.pressure "some" total) is a
// candidate for a confirmation at a periodic sample; at a pressure wake,
// which says that tasks wait now, any stall at all makes one
// (unitWakeStall: in the VM a wake 12 ms into a burst found the unit's
// stall under 10 ms, and the next sample widened it 0.5 s later). A unit's thread count is not read at each
// sample: a user manager placed whole may hold thousands of threads, and
// its cgroup's own stall costs one read.
const (
	unitStallCandidate = 10 * time.Millisecond
	unitWakeStall      = time.Millisecond
)

// maxConfirm bounds the units one confirmation reads the threads of,
// maxConfirmUser those of users' managers among them (see startConfirm).
const (
	maxConfirm     = 16
	maxConfirmUser = 8
)

// ConfirmC fires when the units' confirmation is due.
func (u *Placement) ConfirmC() <-chan time.Time { return u.confirm.C() }

// runDelay is sysfs.DirRunDelay for the unit of key.
func (u *Placement) runDelay(key string) (run, wait time.Duration, err error) {
	w := u.workloads[key]
	if w == nil {
		return 0, 0, fmt.Errorf("unit %s gone", key)
	}
	return sysfs.DirRunDelay(w.cgroup, u.procRoot)
}

// startConfirm starts a confirmation (signal names what woke the loop)
// over the units with AllowedCPUs= set that stalled for at least minStall
// since the sample before the last, unless one is pending. It returns how
// many units were candidates (before the maxConfirm bounds; 0: none
// stalled).
func (u *Placement) startConfirm(signal string, minStall time.Duration) (stalled int) {
	var cands []string
	for _, n := range u.sortedNames() {
		w := u.workloads[n]
		if k := w.cpus.Size(); k > 0 && w.stalled >= minStall {
			cands = append(cands, n)
		}
	}
	// The most stalled first, at most maxConfirm of them and
	// maxConfirmUser of users' units: each costs a walk of its cgroup's
	// threads on the loop, and a user's cgroups are the user's to fill.
	sort.SliceStable(cands, func(i, j int) bool { return u.workloads[cands[i]].stalled > u.workloads[cands[j]].stalled })
	var names, desc []string
	users := 0
	for _, n := range cands {
		w := u.workloads[n]
		if len(names) == maxConfirm || w.uid >= 0 && users == maxConfirmUser {
			continue
		}
		if w.uid >= 0 {
			users++
		}
		names = append(names, n)
		desc = append(desc, fmt.Sprintf("%s:%s/%d", n, w.stalled.Round(time.Millisecond), w.cpus.Size()))
	}
	sort.Strings(names)
	if u.confirm.Start(signal, names, u.runDelay) {
		u.log.WithFields(logrus.Fields{"signal": signal, "stalled_over_cpus": strings.Join(desc, ",")}).Debug("crowded: confirming")
	}
	return len(cands)
}

// pressureWake samples at once because the CPU pressure trigger fired and
// starts a confirmation for the units with AllowedCPUs= set that stalled
// at all since the last sample (unitWakeStall). With one, the sampling
// looks every period from now (its back-off reset) and so does the
// trigger (placement.PressureGate.Woke); with none — the pressure is
// someone else's, or of units the daemon does not narrow — the sample
// counts as a periodic one (sampling stays stopped while every unit is
// idle) and the trigger backs off. Logged at debug level.
func (u *Placement) pressureWake() {
	busy := u.sample()
	found := u.startConfirm("cpu pressure", unitWakeStall) > 0
	if found {
		u.backoff.Reset() // sample at once, then every period
	} else {
		u.backoff.Sampled(busy)
	}
	mute := u.pressure.Woke(found)
	u.cfg.Log.WithFields(logrus.Fields{"signal": "cpu pressure", "pressure_backoff": mute}).Debug("woken: units sampled")
}

// confirmWake ends the units' pending confirmation as placement.confirmWake
// does: a saturated unit's utilisation is raised to its CPU count. It
// reports whether any was (then the caller plans).
func (u *Placement) confirmWake() bool {
	signal, retried := u.confirm.Signal, u.confirm.Retried
	cpus := func(n string) int {
		if w := u.workloads[n]; w != nil {
			return w.cpus.Size()
		}
		return 0
	}
	cands := slices.Collect(maps.Keys(u.confirm.Cands))
	r := u.confirm.Finish(cpus, u.runDelay)
	placement.LogConfirmed(u.log, signal, r.Saturated, r.Light)
	if len(r.Names) > 0 {
		u.pressure.Reset() // ours is busy: listen to the pressure again
	}
	for _, n := range r.Names {
		w := u.workloads[n]
		w.avg.Util = max(w.avg.Util, float64(w.cpus.Size()))
	}
	u.confirm.Retry(signal, retried, r, u.runDelay)
	u.clock.Settle(cands, r.Names, func(n string) bool { _, again := u.confirm.Cands[n]; return again })
	return len(r.Names) > 0
}

// clockC fires when a unit's counter overflowed.
func (u *Placement) clockC() <-chan struct{} { return u.clock.C() }

// SyncClock gives every unit with AllowedCPUs= narrower than the CPUs of
// the last plan counters on its cgroup and those CPUs, and closes the
// others'. None are left for another call (more is false).
func (u *Placement) SyncClock() (more bool) {
	if u.clock == nil {
		return false
	}
	for _, n := range u.sortedNames() {
		w := u.workloads[n]
		if !placement.Packed(w.cpus, u.online) {
			u.clock.Remove(n)
			continue
		}
		u.clock.SetCgroup(n, w.cgroup, w.cpus)
	}
	u.clock.Keep(func(k string) bool { return u.workloads[k] != nil })
	return false
}

// clockWake is placement.clockWake for units. A unit's runnable threads
// are not counted at the signal (a user manager placed whole may hold
// thousands): a unit is crowded when its cgroup's tasks waited for a CPU
// (cpu.pressure "some" total) at least unitWakeStall since the last
// sample.
func (u *Placement) clockWake() {
	cpus := func(n string) int {
		if w := u.workloads[n]; w != nil {
			return w.cpus.Size()
		}
		return 0
	}
	crowded := func(n string, _ int) bool {
		w := u.workloads[n]
		if w == nil {
			return false
		}
		pr, err := sysfs.DirCPUPressure(w.cgroup)
		return err == nil && pr.Total-w.stallTotal >= unitWakeStall
	}
	if u.clock.ConfirmBursts(u.sortedNames(), cpus, crowded, &u.confirm, u.runDelay, u.stats) {
		u.backoff.Reset()
		u.pressure.Reset()
	}
}
