package daemon

import (
	"math"
	"sort"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/sirupsen/logrus"

	"github.com/schedpolicyd/schedpolicyd/policy"
	"github.com/schedpolicyd/schedpolicyd/sysfs"
)

// workload is one direct child of the managed parent cgroup. Loop-owned.
type workload struct {
	name string
	// original is cpuset.cpus as found at adoption (after a v1 child's
	// empty set was filled in so tasks can be attached); written back on
	// exit.
	original sysfs.CPUSet
	cpus     sysfs.CPUSet // what the file holds, as last read or written
	util     float64      // decayed utilisation, CPUs
	lastUse  time.Duration
	lastAt   time.Time
	sampled  bool
}

// shrinkAfter is how many consecutive periodic samples must propose a
// smaller active set before the daemon packs tighter (first-version
// hysteresis; the patch set's lazy balance is a later issue).
const shrinkAfter = 3

// scanWorkloads adopts new children of the managed parent and forgets
// vanished ones. It reports whether the set changed.
func (d *Daemon) scanWorkloads() bool {
	if d.cg == nil {
		return false
	}
	names, err := d.cg.Children()
	if err != nil {
		d.log.WithError(err).Warn("listing workloads")
		return false
	}
	changed := false
	seen := map[string]bool{}
	for _, n := range names {
		seen[n] = true
		if _, ok := d.workloads[n]; ok {
			continue
		}
		if err := d.cg.PrepareChild(n); err != nil {
			if !sysfs.IsGone(err) {
				d.log.WithError(err).WithField("workload", n).Warn("cannot prepare workload cpuset")
			}
			continue
		}
		cur, err := d.cg.ReadCPUs(n)
		if err != nil {
			continue
		}
		w := &workload{name: n, original: cur, cpus: cur}
		if use, err := d.cg.Usage(n); err == nil {
			w.lastUse, w.lastAt, w.sampled = use, time.Now(), true
		}
		d.workloads[n] = w
		changed = true
		d.log.WithFields(logrus.Fields{"workload": n, "cpus": cur.String()}).Info("adopted workload")
	}
	for n := range d.workloads {
		if !seen[n] {
			delete(d.workloads, n)
			changed = true
			d.log.WithField("workload", n).Info("workload gone")
		}
	}
	return changed
}

// sampleWorkloads updates each workload's decayed utilisation from its
// cgroup CPU-time counter: u = Δusage / Δwall (CPUs), then
// avg ← avg·y + u·(1−y) with y = 0.5^(Δwall / half-life), a PELT-like
// exponential average (platform.md §3.2). Negative deltas (v1 per-thread
// accounting when threads exit) count as zero.
func (d *Daemon) sampleWorkloads() {
	now := time.Now()
	for n, w := range d.workloads {
		use, err := d.cg.Usage(n)
		if err != nil {
			continue
		}
		if w.sampled {
			dt := now.Sub(w.lastAt)
			if dt > 0 {
				u := math.Max(float64(use-w.lastUse)/float64(dt), 0)
				y := math.Pow(0.5, float64(dt)/float64(d.cfg.UtilHalfLife))
				w.util = w.util*y + u*(1-y)
			}
		}
		w.lastUse, w.lastAt, w.sampled = use, now, true
	}
}

// applyPlan plans placement and writes the cpusets that differ from what
// the files hold. Only changed cpusets are written.
func (d *Daemon) applyPlan(force bool) {
	if d.cg == nil || len(d.workloads) == 0 {
		d.plan = policy.Plan{Policy: d.effective}
		return
	}
	allowed := d.allowed
	if a, err := d.cg.Allowed(); err == nil && !a.IsEmpty() {
		allowed = allowed.Intersect(a)
	}
	in := policy.Input{Topology: d.topo, Allowed: allowed.List(), Policy: d.effective}
	for _, n := range d.sortedNames() {
		w := d.workloads[n]
		in.Loads = append(in.Loads, policy.Load{Name: n, Util: w.util, Current: w.cpus.List()})
	}
	plan := policy.PlanPlacement(in)
	if !force && len(plan.Active) < len(d.plan.Active) {
		d.shrinks++
		if d.shrinks < shrinkAfter {
			return
		}
	}
	d.shrinks = 0
	if plan.Policy != d.plan.Policy && plan.Policy != d.effective {
		d.log.WithFields(logrus.Fields{"policy": d.effective, "placement": plan.Policy}).Info("load exceeds the packing threshold: placing for performance (race to idle)")
	}
	d.plan = plan
	for _, n := range d.sortedNames() {
		w := d.workloads[n]
		want := sysfs.NewCPUSet(plan.CPUs[n]...)
		if want.IsEmpty() || want.Equal(w.cpus) {
			continue
		}
		if err := d.cg.WriteCPUs(n, want); err != nil {
			if sysfs.IsGone(err) {
				delete(d.workloads, n)
				continue
			}
			d.log.WithError(err).WithField("workload", n).Warn("cpuset write refused")
			continue
		}
		d.log.WithFields(logrus.Fields{"workload": n, "from": w.cpus.String(), "to": want.String(), "policy": plan.Policy}).Debug("cpuset written")
		w.cpus = want
	}
}

// restoreWorkloads writes every workload's original cpuset.cpus back.
func (d *Daemon) restoreWorkloads() {
	for _, n := range d.sortedNames() {
		w := d.workloads[n]
		// An empty original is v2's "inherit from the parent"; it is
		// restored too (v1 children never have one: PrepareChild fills it).
		if w.original.Equal(w.cpus) {
			continue
		}
		if err := d.cg.WriteCPUs(n, w.original); err != nil && !sysfs.IsGone(err) {
			d.log.WithError(err).WithField("workload", n).Warn("cannot restore original cpuset")
			continue
		}
		w.cpus = w.original
	}
}

func (d *Daemon) sortedNames() []string {
	names := make([]string, 0, len(d.workloads))
	for n := range d.workloads {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

func (d *Daemon) workloadStatus() []WorkloadStatus {
	var out []WorkloadStatus
	for _, n := range d.sortedNames() {
		w := d.workloads[n]
		p, _ := d.cg.ChildPath(n)
		out = append(out, WorkloadStatus{Name: n, Path: p, CPUs: w.cpus.String(), Util: w.util})
	}
	return out
}

// watchCgroup watches the managed parent for children created or removed
// while the daemon runs (mkdir/rmdir raise inotify events on cgroupfs).
// It returns a nil channel when watching is impossible; the loop then
// rescans on its sampling ticker instead.
func (d *Daemon) watchCgroup() (<-chan struct{}, func()) {
	if d.cg == nil {
		return nil, func() {}
	}
	w, err := fsnotify.NewWatcher()
	if err == nil {
		err = w.Add(d.cg.Path())
	}
	if err != nil {
		d.log.WithError(err).Warn("cannot watch the workload parent; rescanning every sample interval")
		if w != nil {
			w.Close()
		}
		return nil, func() {}
	}
	out := make(chan struct{}, 1)
	stop := make(chan struct{})
	go func() {
		defer close(out)
		for {
			select {
			case ev, ok := <-w.Events:
				if !ok {
					return
				}
				if ev.Op&(fsnotify.Create|fsnotify.Remove) == 0 {
					continue
				}
				select {
				case out <- struct{}{}:
				default:
				}
			case _, ok := <-w.Errors:
				if !ok {
					return
				}
			case <-stop:
				return
			}
		}
	}()
	return out, func() { close(stop); w.Close() }
}
