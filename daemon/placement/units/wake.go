package units

import (
	"fmt"
	"sort"
	"time"

	"github.com/schedpolicyd/schedpolicyd/cgroup"
	"github.com/schedpolicyd/schedpolicyd/daemon/placement"
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
// maxConfirmUser those of users' managers among them (see Crowded).
const (
	maxConfirm     = 16
	maxConfirmUser = 8
)

// RunDelay is cgroup.DirRunDelay for the unit of key.
func (u *Placement) RunDelay(key string) (run, wait time.Duration, err error) {
	w := u.workloads[key]
	if w == nil {
		return 0, 0, fmt.Errorf("unit %s gone", key)
	}
	return cgroup.DirRunDelay(w.cgroup, u.procRoot)
}

// Crowded returns the units with AllowedCPUs= set that stalled for at
// least unitStallCandidate since the sample before the last (atWake: at
// all, unitWakeStall), as candidates of a confirmation in name order, and
// each as NAME:STALL/CPUS for the log. The most stalled come first, at
// most maxConfirm of them and maxConfirmUser of users' units: each costs
// a walk of its cgroup's threads on the loop, and a user's cgroups are
// the user's to fill.
func (u *Placement) Crowded(atWake bool) placement.Crowding {
	minStall := unitStallCandidate
	if atWake {
		minStall = unitWakeStall
	}
	var cands []string
	for _, n := range u.Names() {
		w := u.workloads[n]
		if k := w.cpus.Size(); k > 0 && w.stalled >= minStall {
			cands = append(cands, n)
		}
	}
	sort.SliceStable(cands, func(i, j int) bool { return u.workloads[cands[i]].stalled > u.workloads[cands[j]].stalled })
	c := placement.Crowding{Field: "stalled_over_cpus"}
	users := 0
	for _, n := range cands {
		w := u.workloads[n]
		if len(c.Names) == maxConfirm || w.uid >= 0 && users == maxConfirmUser {
			continue
		}
		if w.uid >= 0 {
			users++
		}
		c.Names = append(c.Names, n)
		c.Desc = append(c.Desc, fmt.Sprintf("%s:%s/%d", n, w.stalled.Round(time.Millisecond), w.cpus.Size()))
	}
	sort.Strings(c.Names)
	return c
}

// CPUs is the unit of key's CPU count (its AllowedCPUs=; 0 unset or
// gone).
func (u *Placement) CPUs(key string) int {
	if w := u.workloads[key]; w != nil {
		return w.cpus.Size()
	}
	return 0
}

// Saturated raises each confirmed unit's utilisation to its CPU count.
func (u *Placement) Saturated(names []string) {
	for _, n := range names {
		w := u.workloads[n]
		w.avg.Util = max(w.avg.Util, float64(w.cpus.Size()))
	}
}

// SyncClock gives every unit with AllowedCPUs= narrower than the CPUs of
// the last plan counters on its cgroup and those CPUs, and closes the
// others'. None are left for another call (more is false).
func (u *Placement) SyncClock() (more bool) {
	if u.e.Clock == nil {
		return false
	}
	for _, n := range u.Names() {
		w := u.workloads[n]
		if !placement.Packed(w.cpus, u.e.Allowed) {
			u.e.Clock.Remove(n)
			continue
		}
		u.e.Clock.SetCgroup(n, w.cgroup, w.cpus)
	}
	u.e.Clock.Keep(func(k string) bool { return u.workloads[k] != nil })
	return false
}

// ClockCrowded: a unit's runnable threads are not counted at a signal of
// its counters (a user manager placed whole may hold thousands): a unit
// is crowded when its cgroup's tasks waited for a CPU (cpu.pressure
// "some" total) at least unitWakeStall since the last sample.
func (u *Placement) ClockCrowded(key string, _ int) bool {
	w := u.workloads[key]
	if w == nil {
		return false
	}
	pr, err := cgroup.DirCPUPressure(w.cgroup)
	return err == nil && pr.Total-w.stallTotal >= unitWakeStall
}
