package daemon

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/fsnotify/fsnotify"
	"github.com/sirupsen/logrus"
	"golang.org/x/sys/unix"

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
	cpus     sysfs.CPUSet       // what the file holds, as last read or written
	avg      policy.UtilAverage // decayed utilisation (CPUs) and the last counter
	lastAt   time.Time
	threads  int     // runnable threads at the last sample (nr_running)
	pressure float64 // cpu.pressure some avg10, percent (v2 only)
	// override is the workload's own placement policy ("" = the
	// machine's); only Performance is accepted (SetWorkloadPolicy).
	override policy.Policy
	// created: the daemon made this cgroup (CreateWorkload, i.e.
	// schedpolicyctl run); it is removed once its last task has gone.
	created bool
	// id is the inode number of its directory at adoption: a cgroup
	// removed and made again under the same name is a new workload.
	id uint64
	// cpusFile is its cpuset.cpus held open for writes (real cgroupfs
	// only; nil until the first write, or after an error).
	cpusFile *sysfs.CPUsFile
	// lbChecked: its v1 cpuset.sched_load_balance was looked at;
	// lbCleared: the daemon changed it from 1 to 0 (quietLoadBalance) and
	// sets it back on exit. Recorded in state.json before the write.
	lbChecked, lbCleared bool
	// refused is the last refused write ("cpulist error"), so a refusal
	// that repeats on every sample is warned about once.
	refused string
}

// openCgroup opens (creating if needed) the managed parent and starts
// watching it. On failure placement stays off until the next scan retries.
func (d *Daemon) openCgroup() bool {
	if d.cfg.CgroupRoot == "" {
		return false
	}
	cg, err := sysfs.OpenCgroup(d.cfg.CgroupRoot, sysfs.CgroupOptions{Create: true, ProcRoot: d.cfg.ProcRoot})
	if err != nil {
		if d.cg == nil && !d.cgWarned {
			d.log.WithError(err).Warn("workload placement disabled")
			d.cgWarned = true
		}
		return false
	}
	d.cg, d.cgWarned = cg, false
	d.log.WithFields(logrus.Fields{"path": cg.Path(), "version": cg.Version().String()}).Info("managing workloads")
	d.stopCgroupWatch()
	d.cgWatch = d.watchCgroup()
	return true
}

// scanWorkloads adopts new children of the managed parent and forgets
// vanished ones; it reports whether the set changed. A new workload's
// original cpuset is the one saved by a crashed run if state.json has it,
// else what its file holds; originals are persisted before any write. If
// the managed parent itself vanished, it is recreated.
func (d *Daemon) scanWorkloads() bool {
	if d.cg == nil {
		if d.cfg.CgroupRoot == "" || !d.openCgroup() {
			return false
		}
	}
	names, err := d.cg.Children()
	if err != nil {
		if !sysfs.IsGone(err) {
			d.log.WithError(err).Warn("listing workloads")
			return false
		}
		d.log.WithField("path", d.cg.Path()).Warn("managed parent cgroup vanished; recreating it")
		d.cg = nil
		d.stopCgroupWatch()
		changed := len(d.workloads) > 0
		d.forgetAll()
		if d.openCgroup() {
			d.scanWorkloads()
			changed = true
		}
		if changed {
			d.persistOriginals()
		}
		return changed
	}
	changed := false
	seen := map[string]bool{}
	var created []string // adopted, and created by an earlier run
	for _, n := range names {
		seen[n] = true
		if w, ok := d.workloads[n]; ok {
			if id := d.childID(n); id == 0 || id == w.id {
				continue
			}
			// Removed and made again under the same name between two
			// scans (rmdir and mkdir back to back): a new cgroup, with
			// empty cpus and mems on v1. Forget the old one — its
			// original, file and exit watch — and adopt the new one.
			d.log.WithField("workload", n).Info("workload replaced by a new cgroup of the same name")
			d.forget(n)
			changed = true
		} else if d.rejected[n] {
			continue
		}
		if err := d.cg.PrepareChild(n); err != nil {
			if !sysfs.IsGone(err) {
				d.log.WithError(err).WithField("workload", n).Warn("not managing this cgroup")
				d.rejected[n] = true
			}
			continue
		}
		cur, err := d.cg.ReadCPUs(n)
		if err != nil {
			continue
		}
		w := &workload{name: n, original: cur, cpus: cur, id: d.childID(n)}
		path, _ := d.cg.ChildPath(n)
		if id, known := d.savedOrigIDs[path]; known && id != w.id {
			d.log.WithField("workload", n).Info("a saved original names another cgroup that had this path; not used")
		} else if saved, ok := d.savedOriginals[path]; ok {
			// A crashed run packed this workload; its true original is the
			// one saved before that run's first write.
			w.original, _ = sysfs.ParseCPUList(saved)
			d.log.WithFields(logrus.Fields{"workload": n, "original": saved}).Info("original cpuset recovered from saved state")
		}
		if id, ok := d.savedLBCleared[path]; ok && id == w.id {
			// A crashed run cleared its sched_load_balance: still ours to
			// set back (the same cgroup, not one made again).
			w.lbChecked, w.lbCleared = true, true
		}
		if id, ok := d.savedCreated[path]; ok && id == w.id {
			// An earlier run created it: still removed when its last task
			// has gone.
			w.created = true
			created = append(created, n)
		}
		if use, err := d.cg.Usage(n); err == nil {
			w.avg, w.lastAt = w.avg.Update(use, 0, d.cfg.UtilHalfLife), time.Now()
		}
		d.workloads[n] = w
		d.cgWatch.watchChild(path, d.cg.Version())
		changed = true
		d.idleSamples = 0 // a new workload: sample it
		d.log.WithFields(logrus.Fields{"workload": n, "cpus": cur.String()}).Info("adopted workload")
	}
	for n := range d.rejected {
		if !seen[n] {
			delete(d.rejected, n)
		}
	}
	for n := range d.workloads {
		if !seen[n] {
			d.forget(n)
			changed = true
			d.log.WithField("workload", n).Info("workload gone")
		}
	}
	if changed {
		d.persistOriginals()
	}
	for _, n := range created {
		// Its tasks may have gone while no daemon ran: remove it now, or
		// watch for the last one.
		if d.reapCreated(n) {
			changed = true
			continue
		}
		if procs, err := d.cg.Procs(n); err == nil && len(procs) > 0 {
			d.watchExit(n, procs[0])
		}
	}
	return changed
}

// originals returns the originals of the current workloads and the inodes
// of their directories, keyed by cgroup directory, for state.json.
func (d *Daemon) originals() (cpus map[string]string, ids map[string]uint64) {
	if len(d.workloads) == 0 {
		return nil, nil
	}
	cpus = make(map[string]string, len(d.workloads))
	ids = make(map[string]uint64, len(d.workloads))
	for n, w := range d.workloads {
		if p, err := d.cg.ChildPath(n); err == nil {
			cpus[p] = w.original.String()
			if w.id != 0 {
				ids[p] = w.id
			}
		}
	}
	return cpus, ids
}

// persistOriginals saves the current workloads' originals with the knob.
// Until that succeeds applyPlan writes no cpuset, so an original can never
// be lost to a crash.
func (d *Daemon) persistOriginals() {
	if err := SaveState(d.cfg.StateDir, d.stateWith(d.knob)); err != nil {
		d.log.WithError(err).Error("cannot save original cpusets; not placing workloads until it works")
		d.originalsSaved = false
		return
	}
	d.originalsSaved = true
	d.savedOriginals, d.savedOrigIDs, d.savedLBCleared, d.savedCreated = nil, nil, nil, nil // from now on state.json holds our own
}

// sampleWorkloads updates each workload's load signals: the decayed
// utilisation from its cgroup CPU-time counter (policy.UtilAverage, a
// PELT-like average: u = Δusage / Δwall in CPUs; negative deltas of the v1
// per-thread accounting count as 0), the instant number of runnable
// threads and, on cgroup v2, cpu.pressure.
func (d *Daemon) sampleWorkloads() (busy bool) {
	d.stats.samples.Add(1)
	now := time.Now()
	for n, w := range d.workloads {
		use, err := d.cg.Usage(n)
		if err != nil {
			continue
		}
		moved := use != w.avg.Usage
		if moved || w.avg.Util > idleUtil {
			busy = true
		}
		w.avg, w.lastAt = w.avg.Update(use, now.Sub(w.lastAt), d.cfg.UtilHalfLife), now
		// A workload whose CPU time did not move ran nothing for a whole
		// period: skip the per-thread scan of /proc.
		w.threads = 0
		if moved {
			if r, err := d.cg.Runnable(n); err == nil {
				w.threads = r
			}
		}
		if d.cg.Version() != sysfs.CgroupV2 {
			continue // cpu.pressure exists on cgroup v2 only
		}
		if s, err := d.cg.CPUPressure(n); err == nil {
			if p, err := policy.ParseCPUPressure(s); err == nil {
				w.pressure = p
			}
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
// period (32 s at the default 1 s).
const (
	idleSamplesBeforeBackoff = 3
	maxIdleShift             = 5
)

// sampling reports whether the loop samples periodically now (issue 7:
// sample at most once a period, and only while a workload is busy). It
// does while any workload is busy, and for idleSamplesBeforeBackoff samples
// after the last busy one. Then it stops if something will wake it when a
// workload gets busy again — the cgroup watch (a task attached: a write to
// cgroup.procs or tasks) and the CPU pressure trigger (tasks wait for a
// CPU) — and a created workload's last exit is seen through its exit
// watch (reap.go). Without a pressure trigger it keeps sampling, at the
// backed-off period of sampleEvery. Without a watch on the managed parent
// it samples even with no workloads, to find new ones.
func (d *Daemon) sampling() bool {
	if d.cgWatch == nil {
		return d.cfg.CgroupRoot != "" || len(d.workloads) > 0
	}
	if len(d.workloads) == 0 {
		return false
	}
	return d.cgWatch.pressure == nil || d.idleSamples < idleSamplesBeforeBackoff
}

// sampleEvery is the current sampling period: the configured one while any
// workload is busy or sampling can stop (sampling), else doubling while all
// are idle. A task attached to a workload, CPU pressure, a new workload or
// a policy change brings it back to the configured period.
func (d *Daemon) sampleEvery() time.Duration {
	shift := d.idleSamples - idleSamplesBeforeBackoff + 1
	if shift <= 0 || d.cgWatch != nil && d.cgWatch.pressure != nil {
		return d.cfg.SampleInterval
	}
	return d.cfg.SampleInterval << min(shift, maxIdleShift)
}

// applyPlan plans placement and writes the cpusets that differ from what
// the files hold. Only changed cpusets are written.
func (d *Daemon) applyPlan(force bool) {
	if d.cg == nil || len(d.workloads) == 0 {
		d.plan = policy.Plan{Policy: d.effective}
		return
	}
	if !d.originalsSaved {
		d.persistOriginals()
		if !d.originalsSaved {
			// Placement waits until state.json can be written; no plan
			// stands (so no "placing for performance" reason either).
			d.plan = policy.Plan{Policy: d.effective, Lazy: d.plan.Lazy}
			return
		}
	}
	d.quietLoadBalance()
	allowed := d.allowed
	if a, err := d.cg.Allowed(); err == nil && !a.IsEmpty() {
		allowed = allowed.Intersect(a)
	}
	in := policy.Input{
		Topology: d.topo, Allowed: allowed.List(), Policy: d.effective,
		Lazy: d.plan.Lazy, Now: time.Now(), MaxInterval: d.cfg.SampleInterval,
		// A policy, workload or CPU change re-plans at once; only the
		// periodic samples are subject to patch 18's lazy balance.
		DisableLazy: force,
	}
	if force {
		in.Lazy = policy.LazyState{}
	}
	for _, n := range d.sortedNames() {
		w := d.workloads[n]
		if w.override == policy.Performance {
			continue // placed on every allowed CPU below
		}
		in.Loads = append(in.Loads, policy.Load{Name: n, Util: w.avg.Util, Current: w.cpus.List(), Threads: w.threads, Pressure: w.pressure})
	}
	plan := policy.PlanPlacement(in)
	if plan.CPUs == nil {
		plan.CPUs = map[string][]int{}
	}
	for n, w := range d.workloads {
		if w.override == policy.Performance {
			plan.CPUs[n] = allowed.List()
		}
	}
	if plan.Policy != d.plan.Policy && plan.Policy != d.effective {
		d.log.WithFields(logrus.Fields{"policy": d.effective, "placement": plan.Policy}).Info("load exceeds the packing threshold: placing for performance (race to idle)")
	}
	d.plan = plan
	gone := false
	for _, n := range d.sortedNames() {
		w := d.workloads[n]
		want := sysfs.NewCPUSet(plan.CPUs[n]...)
		if want.IsEmpty() || want.Equal(w.cpus) {
			continue
		}
		if err := d.writeCPUs(w, want); err != nil {
			if sysfs.IsGone(err) {
				// Removed after the last scan: forget it, and its
				// original with it (below).
				d.forget(n)
				d.log.WithField("workload", n).Info("workload gone")
				gone = true
				continue
			}
			d.stats.errors.Add(1)
			// The same refusal repeats on every sample: warn once per
			// (workload, cpuset, error), then only at debug level.
			lvl := logrus.WarnLevel
			if key := want.String() + " " + err.Error(); key == w.refused {
				lvl = logrus.DebugLevel
			} else {
				w.refused = key
			}
			d.log.WithError(err).WithField("workload", n).Log(lvl, "cpuset write refused")
			continue
		}
		d.stats.writes.Add(1)
		w.refused = ""
		d.log.WithFields(logrus.Fields{"workload": n, "from": w.cpus.String(), "to": want.String(), "policy": plan.Policy}).Debug("cpuset written")
		w.cpus = want
	}
	if gone {
		d.persistOriginals()
	}
}

// onHotplug handles CPUs going online or offline: the topology is re-read,
// the cpusets re-read (cgroup v1 silently drops an offlined CPU from every
// cpuset, for good) and the plan recomputed, so no cpuset we write names an
// offline CPU and CPUs that come back are handed out again.
func (d *Daemon) onHotplug() {
	before := d.allowed
	d.readTopology()
	if d.allowed.Equal(before) {
		return
	}
	d.log.WithFields(logrus.Fields{"from": before.String(), "to": d.allowed.String()}).Info("online CPUs changed")
	if d.cg != nil {
		if err := d.cg.RestoreParentCPUs(d.allowed); err != nil {
			d.log.WithError(err).Warn("cannot give the managed parent its CPUs back")
		}
		for n, w := range d.workloads {
			if cur, err := d.cg.ReadCPUs(n); err == nil {
				w.cpus = cur
			}
		}
	}
	d.recompute("cpu hotplug", true)
}

// restoreWorkloads writes every workload's original cpuset.cpus back; it
// reports whether all of them are back (vanished workloads count as done).
// CPUs that are offline now are left out (a cpuset naming an offline CPU is
// refused on v1); an original with no online CPU left gets every online CPU.
func (d *Daemon) restoreWorkloads() bool {
	ok := true
	for _, n := range d.sortedNames() {
		w := d.workloads[n]
		orig := w.original
		if !orig.IsEmpty() && !d.allowed.IsEmpty() {
			if orig = orig.Intersect(d.allowed); orig.IsEmpty() {
				orig = d.allowed
			}
		}
		// An empty original is v2's "inherit from the parent"; it is
		// restored too (v1 children never have one: PrepareChild fills it).
		if orig.Equal(w.cpus) {
			continue
		}
		if err := d.writeCPUs(w, orig); err != nil {
			if sysfs.IsGone(err) {
				continue
			}
			d.stats.errors.Add(1)
			d.log.WithError(err).WithField("workload", n).Warn("cannot restore original cpuset; it stays in state.json for the next start")
			ok = false
			continue
		}
		d.stats.writes.Add(1)
		w.cpus = orig
	}
	// The flags last: with them set, every cpuset write above would have
	// rebuilt the sched domains.
	for _, n := range d.sortedNames() {
		w := d.workloads[n]
		if !w.lbCleared {
			continue
		}
		if err := d.cg.SetSchedLoadBalance(n, true); err != nil && !sysfs.IsGone(err) {
			d.stats.errors.Add(1)
			d.log.WithError(err).WithField("workload", n).Warn("cannot set cpuset.sched_load_balance back to 1; it stays in state.json for the next start")
			ok = false
			continue
		}
		w.lbCleared = false
	}
	return ok
}

// childID is the inode number of workload name's directory, 0 when it
// cannot be read (vanished: the next listing forgets it).
func (d *Daemon) childID(name string) uint64 {
	p, err := d.cg.ChildPath(name)
	if err != nil {
		return 0
	}
	var st unix.Stat_t
	if unix.Stat(p, &st) != nil {
		return 0
	}
	return st.Ino
}

// writeCPUs writes workload w's cpuset.cpus, through its held-open file on
// the kernel's cgroupfs (sysfs.Cgroup.OpenCPUs: no path lookup and open per
// write), else with one open/write/close. After an error the file is
// closed, and the next write opens it again.
func (d *Daemon) writeCPUs(w *workload, cpus sysfs.CPUSet) error {
	if w.cpusFile == nil {
		f, err := d.cg.OpenCPUs(w.name)
		if err != nil {
			return d.cg.WriteCPUs(w.name, cpus)
		}
		w.cpusFile = f
	}
	err := w.cpusFile.Write(cpus)
	if err != nil {
		w.cpusFile.Close()
		w.cpusFile = nil
	}
	return err
}

// forget drops workload name: its entry, open file and exit watch.
func (d *Daemon) forget(name string) {
	if w, ok := d.workloads[name]; ok {
		w.cpusFile.Close()
		delete(d.workloads, name)
	}
	d.stopExitWatch(name)
}

// forgetAll forgets every workload.
func (d *Daemon) forgetAll() {
	for n := range d.workloads {
		d.forget(n)
	}
	for n := range d.exitWatches {
		d.stopExitWatch(n)
	}
}

// quietLoadBalance clears cgroup v1 cpuset.sched_load_balance (1 → 0) on
// workloads, when the managed parent has it set. There the children's flag
// does not shape sched domains — the kernel makes one domain of each
// topmost load-balanced cpuset and skips its descendants — but with it set
// every cpuset.cpus write rebuilds the machine's sched domains
// (sysfs.Cgroup.SchedLoadBalance): on this 2-CPU VM 1,000 writes took
// ~69 ms with the flag set and ~29 ms without. A workload whose flag is
// already 0 is left alone, and nothing is changed under a parent without
// the flag (children's flags matter there). What was cleared is saved in
// state.json before the write and set back on exit (restoreWorkloads), or
// by the next start after a crash.
func (d *Daemon) quietLoadBalance() {
	if d.cg.Version() != sysfs.CgroupV1 {
		return
	}
	var todo []*workload // on every plan: no sorting, order does not matter
	for _, w := range d.workloads {
		if !w.lbChecked {
			todo = append(todo, w)
		}
	}
	if len(todo) == 0 {
		return
	}
	if on, err := d.cg.SchedLoadBalance(""); err != nil || !on {
		for _, w := range todo {
			w.lbChecked = true
		}
		return
	}
	var toClear []*workload
	for _, w := range todo {
		w.lbChecked = true
		if on, err := d.cg.SchedLoadBalance(w.name); err == nil && on {
			w.lbCleared = true
			toClear = append(toClear, w)
		}
	}
	if len(toClear) == 0 {
		return
	}
	d.persistOriginals()
	if !d.originalsSaved {
		for _, w := range toClear {
			w.lbChecked, w.lbCleared = false, false
		}
		return
	}
	for _, w := range toClear {
		if err := d.cg.SetSchedLoadBalance(w.name, false); err != nil {
			// Still marked cleared: setting 1 back on exit is harmless.
			d.log.WithError(err).WithField("workload", w.name).Debug("cannot clear cpuset.sched_load_balance")
		}
	}
}

// markedWorkloads returns, for state.json, the workloads whose
// sched_load_balance the daemon cleared and those it created, as cgroup
// directory → inode number (nil maps when there are none).
func (d *Daemon) markedWorkloads() (lbCleared, created map[string]uint64) {
	add := func(m *map[string]uint64, p string, id uint64) {
		if *m == nil {
			*m = map[string]uint64{}
		}
		(*m)[p] = id
	}
	for n, w := range d.workloads {
		p, err := d.cg.ChildPath(n)
		if err != nil {
			continue
		}
		if w.lbCleared {
			add(&lbCleared, p, w.id)
		}
		if w.created {
			add(&created, p, w.id)
		}
	}
	return lbCleared, created
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
		out = append(out, WorkloadStatus{Name: n, Path: p, CPUs: w.cpus.String(), Util: w.avg.Util, Override: w.override})
	}
	return out
}

// cgroupWatch delivers coalesced hints about the managed parent: events
// when children are created or removed (mkdir/rmdir raise inotify events on
// cgroupfs), and activity when a task is attached to a workload (a write to
// its cgroup.procs or tasks file, which raises IN_MODIFY), so an idle
// daemon that slowed its sampling looks again at once.
type cgroupWatch struct {
	events   chan struct{}
	activity chan struct{}
	w        *fsnotify.Watcher
	stop     func()
	// pressure wakes the loop when tasks wait for a CPU (a PSI trigger on
	// the managed parent's cpu.pressure on cgroup v2, the machine's
	// /proc/pressure/cpu on v1); nil where the kernel has no PSI. With it,
	// sampling stops while every workload is idle (see sampleC).
	pressure *sysfs.PressureTrigger
}

// Pressure trigger parameters: 10 % of a 2 s window spent with a task
// waiting for a CPU. The window is a multiple of 2 s because the unit does
// not grant CAP_SYS_RESOURCE (Documentation/accounting/psi.rst); the kernel
// signals at most once per window.
const (
	pressureStall  = 200 * time.Millisecond
	pressureWindow = 2 * time.Second
)

// pressureC is the PSI trigger's channel, or nil without one.
func (d *Daemon) pressureC() <-chan struct{} {
	if d.cgWatch == nil || d.cgWatch.pressure == nil {
		return nil
	}
	return d.cgWatch.pressure.C()
}

// pressureDone is closed when the kernel drops the PSI trigger (the
// managed v2 parent was removed), or nil without one.
func (d *Daemon) pressureDone() <-chan struct{} {
	if d.cgWatch == nil || d.cgWatch.pressure == nil {
		return nil
	}
	return d.cgWatch.pressure.Done()
}

// openPressure arms the PSI trigger for the managed parent; nil (logged)
// where PSI is unavailable: idle sampling then backs off instead of
// stopping.
func (d *Daemon) openPressure() *sysfs.PressureTrigger {
	path := filepath.Join(d.cfg.ProcRoot, "pressure", "cpu")
	if d.cg.Version() == sysfs.CgroupV2 {
		path = filepath.Join(d.cg.Path(), "cpu.pressure")
	}
	t, err := sysfs.OpenPressureTrigger(path, pressureStall, pressureWindow)
	if err != nil {
		lvl := logrus.WarnLevel
		if errors.Is(err, sysfs.ErrNoPSI) {
			lvl = logrus.InfoLevel
		}
		d.log.WithError(err).Log(lvl, "no CPU pressure trigger; while every workload is idle, sampling slows down instead of stopping")
		return nil
	}
	d.log.WithField("file", path).Debug("CPU pressure trigger armed")
	return t
}

// watchChild also watches a workload's task files for task attachment
// (v1 cgroup.procs and tasks, v2 cgroup.procs and cgroup.threads). The
// files, not the directory: a directory watch would also report every
// cpuset.cpus write the daemon itself makes (1,000 events per policy
// switch with 1,000 workloads). Failure (e.g. the inotify watch limit)
// only costs the early wake-up.
func (c *cgroupWatch) watchChild(dir string, v sysfs.CgroupVersion) {
	if c == nil {
		return
	}
	threads := "tasks"
	if v == sysfs.CgroupV2 {
		threads = "cgroup.threads"
	}
	for _, f := range []string{"cgroup.procs", threads} {
		c.w.Add(filepath.Join(dir, f))
	}
}

// activityC is the activity channel, or nil without a watch.
func (d *Daemon) activityC() <-chan struct{} {
	if d.cgWatch == nil {
		return nil
	}
	return d.cgWatch.activity
}

// cgEvents is the current watch's channel, or nil (never ready) without a
// watch.
func (d *Daemon) cgEvents() <-chan struct{} {
	if d.cgWatch == nil {
		return nil
	}
	return d.cgWatch.events
}

func (d *Daemon) stopCgroupWatch() {
	if d.cgWatch != nil {
		d.cgWatch.stop()
		d.cgWatch = nil
	}
}

// watchCgroup watches the managed parent. It returns nil when watching is
// impossible; the loop then rescans on its sampling ticker instead.
func (d *Daemon) watchCgroup() *cgroupWatch {
	w, err := fsnotify.NewWatcher()
	if err == nil {
		err = w.Add(d.cg.Path())
	}
	if err != nil {
		d.log.WithError(err).Warn("cannot watch the workload parent; rescanning every sample interval")
		if w != nil {
			w.Close()
		}
		return nil
	}
	out := make(chan struct{}, 1)
	act := make(chan struct{}, 1)
	stop := make(chan struct{})
	done := make(chan struct{})
	parent := d.cg.Path()
	poke := func(c chan struct{}) {
		select {
		case c <- struct{}{}:
		default:
		}
	}
	go func() {
		defer close(done)
		for {
			select {
			case ev, ok := <-w.Events:
				if !ok {
					return
				}
				switch {
				case filepath.Dir(ev.Name) == parent || ev.Name == parent:
					// Remove of the watched directory itself also arrives here.
					if ev.Op&(fsnotify.Create|fsnotify.Remove) != 0 {
						poke(out)
					}
				case ev.Op&fsnotify.Write != 0:
					if b := filepath.Base(ev.Name); b == "cgroup.procs" || b == "tasks" || b == "cgroup.threads" {
						poke(act)
					}
				}
			case _, ok := <-w.Errors:
				if !ok {
					return
				}
				// The queue overflowed (events lost): rescan.
				poke(out)
			case <-stop:
				return
			}
		}
	}()
	cw := &cgroupWatch{events: out, activity: act, w: w, pressure: d.openPressure()}
	cw.stop = func() {
		close(stop)
		w.Close()
		<-done
		if cw.pressure != nil {
			cw.pressure.Close()
		}
	}
	return cw
}

// MaxWorkloadName is the longest workload name CreateWorkload accepts, in
// bytes.
const MaxWorkloadName = 64

// ValidWorkloadName checks a name for CreateWorkload: 1–64 bytes, one path
// component (no "/", not "." or ".."), no control characters, and not
// starting with "." or looking like a cgroup interface file ("cgroup.",
// "cpuset.", "cpu.", "tasks"). Errors wrap policy.ErrInvalid.
func ValidWorkloadName(name string) error {
	bad := func(why string) error { return fmt.Errorf("%w: workload name %q %s", policy.ErrInvalid, name, why) }
	switch {
	case name == "":
		return bad("is empty")
	case len(name) > MaxWorkloadName:
		return bad(fmt.Sprintf("is longer than %d bytes", MaxWorkloadName))
	case name == "." || name == "..":
		return bad("is not a name")
	case strings.HasPrefix(name, "."):
		return bad("starts with a dot")
	case name == "tasks" || name == "notify_on_release" || name == "release_agent":
		return bad("is a cgroup interface file")
	}
	for _, prefix := range []string{"cgroup.", "cpuset.", "cpu.", "cpuacct.", "memory.", "io.", "pids."} {
		if strings.HasPrefix(name, prefix) {
			return bad("looks like a cgroup interface file")
		}
	}
	for _, r := range name {
		if r == '/' {
			return bad("contains /")
		}
		if r < 0x20 || r == 0x7f || r == utf8.RuneError {
			return bad("contains a control character or invalid UTF-8")
		}
	}
	return nil
}

// createWorkload makes a new workload and moves pid into it (CreateWorkload).
// The original cpuset is recorded before pid arrives; if attaching fails the
// new cgroup is removed again.
func (d *Daemon) createWorkload(name string, pid int) (string, error) {
	if err := ValidWorkloadName(name); err != nil {
		return "", err
	}
	if d.cg == nil {
		return "", errors.New("workload placement is disabled (no managed parent cgroup)")
	}
	err := d.cg.CreateChild(name)
	if errors.Is(err, fs.ErrExist) && d.reapCreated(name) {
		err = d.cg.CreateChild(name) // a finished run's leftover was in the way
	}
	if err != nil {
		return "", err
	}
	path, _ := d.cg.ChildPath(name)
	d.scanWorkloads()
	if err := d.cg.Attach(name, pid); err != nil {
		os.Remove(path)
		d.scanWorkloads()
		return "", fmt.Errorf("move PID %d into %s: %w", pid, path, err)
	}
	if w := d.workloads[name]; w != nil {
		w.created = true
		d.watchExit(name, pid)
	}
	d.log.WithFields(logrus.Fields{"workload": name, "pid": pid}).Info("workload created")
	d.recompute("workload created", true)
	return path, nil
}

// setWorkloadOverride sets or clears a workload's placement override.
func (d *Daemon) setWorkloadOverride(name string, p policy.Policy) error {
	w, ok := d.workloads[name]
	if !ok {
		return fmt.Errorf("%w: no workload %q", policy.ErrInvalid, name)
	}
	if p != "" && p != policy.Performance {
		return fmt.Errorf("%w: a workload override can only be performance (or empty to clear)", policy.ErrInvalid)
	}
	w.override = p
	d.log.WithFields(logrus.Fields{"workload": name, "override": p}).Info("workload override set")
	d.recompute("workload override", true)
	return nil
}

// reapCreated removes workload name if the daemon created it and no task
// is left in it (the command started by schedpolicyctl run has exited); it
// reports whether the cgroup is gone.
func (d *Daemon) reapCreated(name string) bool {
	w, ok := d.workloads[name]
	if !ok || !w.created || d.cg == nil {
		return false
	}
	if procs, err := d.cg.Procs(name); err != nil || len(procs) > 0 {
		return false
	}
	w.cpusFile.Close() // reopened at the next write if the removal fails
	w.cpusFile = nil
	if err := d.cg.RemoveChild(name); err != nil {
		d.log.WithError(err).WithField("workload", name).Debug("cannot remove a finished workload yet")
		return false
	}
	d.forget(name)
	d.log.WithField("workload", name).Info("workload finished; its cgroup is removed")
	d.persistOriginals()
	return true
}

// reapFinished removes every daemon-created workload whose tasks are all
// gone; it reports whether any was removed.
func (d *Daemon) reapFinished() bool {
	removed := false
	for _, n := range d.sortedNames() {
		if d.workloads[n].created && d.reapCreated(n) {
			removed = true
		}
	}
	return removed
}
