package daemon

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"time"

	"github.com/sirupsen/logrus"
	"golang.org/x/sys/unix"

	"github.com/schedpolicyd/schedpolicyd/policy"
	"github.com/schedpolicyd/schedpolicyd/sysfs"
)

// placement is the cgroupfs placement of workloads: the managed parent
// cgroup, its children (one workload each) and the records of state.json
// that say what the daemon changed in them. It adopts, samples, applies
// plans, restores, creates and reaps. Owned by the event loop: only the
// goroutine running Daemon.Run calls its methods.
//
// The promise it keeps (issue 11): before any write to a cgroup file it
// records the original and the value it writes (Record, persisted through
// save); on exit, and after a crash on the next start, it restores only
// files that still hold a value of its own; a value someone else wrote is
// theirs and is kept; a record stays until what it covers is restored or
// its cgroup is gone, whichever run that takes.
type placement struct {
	cfg   *Config // the daemon's: CgroupRoot, ProcRoot, UtilHalfLife, SampleInterval
	log   logrus.FieldLogger
	stats *counters
	// save persists state.json with the daemon's knob and p.recordList().
	save func() error
	done <-chan struct{}

	cg     *sysfs.Cgroup
	lock   cgroupLock // flock on the managed parent's directory (cglock.go)
	warned bool       // "placement disabled" said once
	// watch hints at changes of the managed parent (nil: none, the loop
	// rescans on its ticker); newWatch makes it (watchCgroupDir, or a
	// test's). pressure wakes the loop when tasks wait for a CPU (a PSI
	// trigger on the managed parent's cpu.pressure on cgroup v2, the
	// machine's /proc/pressure/cpu on v1); nil where the kernel has no PSI.
	// With it, sampling stops while every workload is idle.
	watch    cgroupSource
	newWatch func(parent string) (cgroupSource, error)
	pressure *sysfs.PressureTrigger

	workloads map[string]*workload
	// records holds every record by cgroup path: the current workloads',
	// the managed parent's, and those loaded from state.json that no
	// current workload matched (another root, a run that could not open
	// the parent), which are kept as they are.
	records map[string]*Record
	parent  *Record // the managed parent's record (v1 CPUs)
	// parentFound is the v1 parent's CPUs as this run found them when
	// they were fewer than its recorded original (a CPU went offline while
	// no daemon ran); a workload trimmed to the same set is still ours.
	parentFound sysfs.CPUSet
	rejected    map[string]bool // child names refused, warned about once
	// waiting holds children that could not be adopted yet (their files
	// not there yet, or a transient read error): logged once, retried on
	// the next hint, their directory watched meanwhile.
	waiting map[string]bool
	dirty   bool // records changed since the last save
	saved   bool // the last save succeeded: writes may go ahead

	idleSamples int // consecutive samples with every workload idle
	plan        policy.Plan

	exits       chan exitEvent              // a watched task of a created workload exited (reap.go)
	exitWatches map[string]*sysfs.ExitWatch // one task's per created workload (reap.go)
}

// workload is one direct child of the managed parent cgroup.
type workload struct {
	name string
	rec  *Record      // its record in placement.records
	cpus sysfs.CPUSet // what the file holds, as last read or written
	avg  policy.UtilAverage
	// lastAt is when avg was last updated.
	lastAt   time.Time
	threads  int     // runnable threads at the last sample (nr_running)
	pressure float64 // cpu.pressure some avg10, percent (v2 only)
	// override is the workload's own placement policy ("" = the
	// machine's); only Performance is accepted (SetWorkloadPolicy).
	override policy.Policy
	// cpusFile is its cpuset.cpus held open (real cgroupfs only; nil until
	// the first write, or after an error).
	cpusFile *sysfs.CPUsFile
	// lbChecked: its v1 cpuset.sched_load_balance was looked at.
	lbChecked bool
	// refused is the last refused write ("cpulist error"), so a refusal
	// that repeats on every sample is warned about once.
	refused string
}

func newPlacement(cfg *Config, log logrus.FieldLogger, stats *counters, done <-chan struct{}) *placement {
	return &placement{
		cfg: cfg, log: log, stats: stats, done: done,
		workloads: map[string]*workload{}, records: map[string]*Record{},
		rejected: map[string]bool{}, waiting: map[string]bool{},
		exits: make(chan exitEvent), exitWatches: map[string]*sysfs.ExitWatch{},
		newWatch: watchCgroupDir,
	}
}

// load takes the records state.json holds (before anything is adopted),
// but for those whose cgroup is gone: no directory at the path (cgroups do
// not survive a reboot), or another one (a different inode).
func (p *placement) load(saved []Record) {
	for i := range saved {
		r := saved[i]
		if id := dirInode(r.Path); id == 0 || r.Inode != 0 && id != r.Inode {
			p.log.WithField("path", r.Path).Debug("dropping the record of a cgroup that is gone")
			p.dirty = true
			continue
		}
		p.records[r.Path] = &r
	}
}

// recordList is the records state.json must hold now, sorted by path.
func (p *placement) recordList() []Record {
	keep := make(map[string]*Record, len(p.records))
	for path, r := range p.records {
		if r.needed() || r.Parent {
			keep[path] = r
		}
	}
	return sortedRecords(keep)
}

// flush saves state.json if a record changed since the last save; it
// reports whether state.json is up to date. Until it is, no cpuset is
// written.
func (p *placement) flush() bool {
	if !p.dirty && p.saved {
		return true
	}
	if err := p.save(); err != nil {
		if p.saved || p.dirty {
			p.log.WithError(err).Error("cannot save state.json; not placing workloads until it works")
		}
		p.saved = false
		return false
	}
	p.dirty, p.saved = false, true
	return true
}

// dirInode is the inode number of dir, 0 when it cannot be read.
func dirInode(dir string) uint64 {
	var st unix.Stat_t
	if unix.Stat(dir, &st) != nil {
		return 0
	}
	return st.Ino
}

// resolvePath returns path with its symlinks resolved (of its directory
// when path itself does not exist yet), so that records, keyed by path,
// name one cgroup one way however the configuration spells it; path as it
// is when that fails.
func resolvePath(path string) string {
	if r, err := filepath.EvalSymlinks(path); err == nil {
		return r
	}
	if d, err := filepath.EvalSymlinks(filepath.Dir(path)); err == nil {
		return filepath.Join(d, filepath.Base(path))
	}
	return path
}

// open opens (creating if needed) the managed parent, locks it, reconciles
// its record and starts watching it. On failure placement stays off until
// the next scan retries; ErrAlreadyRunning (another daemon manages the
// parent) is returned so that start-up can fail with it.
func (p *placement) open() error {
	if p.cfg.CgroupRoot == "" {
		return errors.New("no managed parent cgroup configured")
	}
	cg, err := sysfs.OpenCgroup(resolvePath(p.cfg.CgroupRoot), sysfs.CgroupOptions{Create: true, ProcRoot: p.cfg.ProcRoot})
	if err == nil {
		err = p.lock.acquire(cg.Path())
	}
	if err != nil {
		if p.cg == nil && !p.warned {
			p.log.WithError(err).Warn("workload placement disabled")
			p.warned = true
		}
		return err
	}
	p.cg, p.warned = cg, false
	p.log.WithFields(logrus.Fields{"path": cg.Path(), "version": cg.Version().String()}).Info("managing workloads")
	p.openParentRecord()
	p.startWatch()
	return nil
}

// openParentRecord, on cgroup v1, finds or makes the managed parent's
// record and gives the parent back CPUs of its recorded original that are
// online again (a run stopped while they were offline left it without).
func (p *placement) openParentRecord() {
	if p.cg.Version() != sysfs.CgroupV1 {
		return // v2's cpuset.cpus survives hotplug: never written
	}
	path, id := p.cg.Path(), dirInode(p.cg.Path())
	r := p.records[path]
	if r != nil && r.Inode != 0 && id != 0 && r.Inode != id {
		p.log.WithField("path", path).Info("a saved record names another cgroup that had the managed parent's path; dropped")
		r = nil
	}
	if r == nil {
		r = &Record{Path: path, Inode: id, Parent: true}
		if cur, err := p.cg.OwnCPUs(); err == nil {
			r.Original = cur.String()
		}
		p.records[path] = r
		p.dirty = true
	}
	r.Parent, r.Inode = true, id
	p.parent = r
	if orig, err := sysfs.ParseCPUList(r.Original); err == nil {
		if cur, err := p.cg.OwnCPUs(); err == nil && !cur.Equal(orig) && cur.IsSubsetOf(orig) {
			p.parentFound = cur // trimmed by hotplug while no daemon ran
		}
	}
	p.fitParent(sysfs.CPUSet{})
}

// fitParent, on cgroup v1, sets the managed parent's cpuset.cpus to its
// recorded original ∩ what its own parent has (the kernel's top cpuset
// follows the online CPUs), so CPUs that came back online are usable
// again. added are CPUs that came online while the daemon runs: they join
// the original, since v1 took them from it when they went offline (a
// parent adopted while they were offline could not show them). A parent
// whose CPUs are not a subset of that set was changed by someone else and
// is left alone.
func (p *placement) fitParent(added sysfs.CPUSet) {
	if p.cg == nil || p.cg.Version() != sysfs.CgroupV1 || p.parent == nil {
		return
	}
	upper, err := p.cg.UpperCPUs()
	if err != nil {
		return
	}
	orig, _ := sysfs.ParseCPUList(p.parent.Original)
	if grown := orig.Union(added.Intersect(upper)); !grown.Equal(orig) {
		orig = grown
		p.parent.Original = orig.String()
		p.dirty = true
	}
	want := orig.Intersect(upper)
	cur, err := p.cg.OwnCPUs()
	if err != nil || want.IsEmpty() || cur.Equal(want) || !cur.Intersect(want).Equal(cur) {
		return
	}
	if err := p.cg.SetOwnCPUs(want); err != nil {
		p.log.WithError(err).Warn("cannot give the managed parent its CPUs back")
		return
	}
	p.log.WithFields(logrus.Fields{"from": cur.String(), "to": want.String()}).Info("managed parent given its CPUs back")
}

// scan adopts new children of the managed parent and forgets vanished
// ones; it reports whether the set changed. A new workload's record is the
// one a crashed or earlier run saved for the same cgroup, if state.json has
// it (reconciled with what the file holds: a value that is not that run's
// was set by someone else and becomes the original), else a new one. If
// the managed parent itself vanished, it is recreated.
func (p *placement) scan() bool {
	if p.cg == nil {
		if p.cfg.CgroupRoot == "" || p.open() != nil {
			return false
		}
	}
	names, err := p.cg.Children()
	if err == nil {
		err = p.lock.stale(p.cg.Path()) // made again or replaced: relock it
	}
	if err != nil {
		if !sysfs.IsGone(err) {
			p.log.WithError(err).Warn("listing workloads")
			return false
		}
		p.log.WithField("path", p.cg.Path()).Warn("managed parent cgroup vanished; recreating it")
		changed := len(p.workloads) > 0
		// Renamed away, its children live on elsewhere: put back what is
		// ours through the files held open (their paths are gone).
		p.restore()
		p.forgetAll()
		for path, r := range p.records {
			if r.Parent || filepath.Dir(path) == p.cg.Path() {
				delete(p.records, path) // their cgroups are gone with it
				p.dirty = true
			}
		}
		p.parent = nil
		p.cg = nil
		p.stopWatch()
		if p.open() == nil {
			p.scan()
			changed = true
		}
		p.flush()
		return changed
	}
	changed := false
	seen := make(map[string]bool, len(names))
	var created []string // adopted, and created by an earlier run
	for _, n := range names {
		seen[n] = true
		if w, ok := p.workloads[n]; ok {
			if id := p.childID(n); id == 0 || id == w.rec.Inode || w.rec.Inode == 0 {
				continue
			}
			// Removed and made again under the same name between two
			// scans (rmdir and mkdir back to back): a new cgroup, with
			// empty cpus and mems on v1. Forget the old one — its record,
			// file and exit watch — and adopt the new one.
			p.log.WithField("workload", n).Info("workload replaced by a new cgroup of the same name")
			p.forget(n, true)
			changed = true
		} else if p.rejected[n] {
			continue
		}
		w, err := p.adopt(n)
		if err != nil {
			if !p.waiting[n] {
				p.log.WithError(err).WithField("workload", n).Info("cannot adopt this cgroup yet; retrying on the next change")
				p.waiting[n] = true
				p.watchDir(filepath.Join(p.cg.Path(), n), true)
			}
			continue
		}
		if w == nil {
			continue
		}
		if p.waiting[n] {
			delete(p.waiting, n)
			p.watchDir(filepath.Join(p.cg.Path(), n), false)
		}
		if w.rec.Created {
			created = append(created, n)
		}
		changed = true
	}
	for n := range p.rejected {
		if !seen[n] {
			delete(p.rejected, n)
		}
	}
	for n := range p.waiting {
		if !seen[n] {
			delete(p.waiting, n)
		}
	}
	for n := range p.workloads {
		if !seen[n] {
			p.forget(n, true)
			changed = true
			p.log.WithField("workload", n).Info("workload gone")
		}
	}
	// Saved records of children that are gone: their cgroup is gone.
	for path, r := range p.records {
		if !r.Parent && filepath.Dir(path) == p.cg.Path() && !seen[filepath.Base(path)] {
			delete(p.records, path)
			p.dirty = true
		}
	}
	p.flush()
	for _, n := range created {
		// Its tasks may have gone while no daemon ran: remove it now, or
		// watch for the last one.
		if p.reapCreated(n) {
			changed = true
			continue
		}
		if procs, err := p.cg.Procs(n); err == nil && len(procs) > 0 {
			p.watchExit(n, procs[0])
		}
	}
	return changed
}

// adopt makes child n a workload. It returns nil, nil for a child refused
// for good (warned about once), and an error for one that cannot be
// adopted yet.
func (p *placement) adopt(n string) (*workload, error) {
	if err := p.cg.PrepareChild(n); err != nil {
		if sysfs.IsGone(err) {
			return nil, nil
		}
		return nil, err
	}
	cur, err := p.cg.ReadCPUs(n)
	if err != nil {
		// ENOENT of the file while the directory is there: not gone, not
		// there yet (a mock tree fills it after mkdir) — retried.
		if dir, _ := p.cg.ChildPath(n); sysfs.IsGone(err) && dirInode(dir) == 0 {
			return nil, nil
		}
		return nil, err
	}
	path, err := p.cg.ChildPath(n)
	if err != nil {
		p.log.WithError(err).WithField("workload", n).Warn("not managing this cgroup")
		p.rejected[n] = true
		return nil, nil
	}
	id := dirInode(path)
	log := p.log.WithField("workload", n)
	r := p.records[path]
	if r != nil && r.Inode != 0 && id != 0 && r.Inode != id {
		log.Info("a saved record names another cgroup that had this path; not used")
		r = nil
	}
	if r == nil && id != 0 {
		r = p.renamed(path, id)
	}
	if r == nil {
		r = &Record{Path: path, Inode: id, Original: cur.String()}
		p.records[path] = r
	} else {
		r.Inode = id
		p.reconcile(r, cur, log)
		if r.LoadBalanceCleared {
			if on, err := p.cg.SchedLoadBalance(n); err == nil && on {
				// Set back by someone since: nothing of ours left there.
				r.LoadBalanceCleared = false
			}
		}
	}
	p.dirty = true
	w := &workload{name: n, rec: r, cpus: cur, lbChecked: r.LoadBalanceCleared}
	if use, err := p.cg.Usage(n); err == nil {
		w.avg, w.lastAt = w.avg.Update(use, 0, p.cfg.UtilHalfLife), time.Now()
	}
	p.workloads[n] = w
	p.watchChild(path)
	p.idleSamples = 0 // a new workload: sample it
	log.WithFields(logrus.Fields{"cpus": cur.String(), "original": r.Original}).Info("adopted workload")
	return w, nil
}

// renamed finds the record of the cgroup with inode id under another path
// of the managed parent (a workload renamed: mv a b), moves it to path and
// forgets the workload of the old name; nil when there is none.
func (p *placement) renamed(path string, id uint64) *Record {
	for old, r := range p.records {
		if r.Inode != id || old == path || r.Parent || filepath.Dir(old) != filepath.Dir(path) || dirInode(old) == id {
			continue
		}
		if w := p.workloads[filepath.Base(old)]; w != nil && w.rec == r {
			p.forget(w.name, false)
		}
		delete(p.records, old)
		r.Path = path
		p.records[path] = r
		p.log.WithFields(logrus.Fields{"from": old, "to": path}).Info("workload renamed; its record follows it")
		return r
	}
	return nil
}

// reconcile compares a saved record with what the cgroup's cpuset.cpus
// holds now (at adoption): a value of ours keeps the saved original; any
// other value was set by someone else while no daemon ran, and becomes
// the original.
func (p *placement) reconcile(r *Record, cur sysfs.CPUSet, log logrus.FieldLogger) {
	switch {
	case r.Released:
		r.Original = cur.String()
	case !r.written():
		r.Original = cur.String()
	case cur.String() == r.Original:
		r.Applied, r.Pending, r.Unverified = "", "", false
	case p.ours(r, cur):
		// What the file holds is ours: it is the applied value now (a
		// pending one that was written before the crash, or one the kernel
		// trimmed), so that the next plan's pending value cannot push it
		// out of the record.
		log.WithFields(logrus.Fields{"original": r.Original, "cpus": cur.String()}).Info("original cpuset recovered from saved state")
		if !r.Unverified {
			r.Applied, r.Pending = cur.String(), ""
		}
	default:
		log.WithFields(logrus.Fields{"saved_original": r.Original, "applied": r.Applied, "cpus": cur.String()}).Warn("cpuset.cpus was changed by someone else while no daemon ran; that value is kept as the original")
		r.Original, r.Applied, r.Pending, r.Unverified = cur.String(), "", "", false
	}
}

// ours reports whether cur, a workload's cpuset.cpus, is a value the
// daemon wrote: the record's applied or pending value, or on cgroup v1
// one of them less CPUs the kernel removed on hotplug (the managed
// parent's effective CPUs are what is left online to it).
func (p *placement) ours(r *Record, cur sysfs.CPUSet) bool {
	if r.Unverified {
		return true
	}
	var online sysfs.CPUSet
	haveOnline := false
	for _, v := range []string{r.Applied, r.Pending} {
		if v == "" {
			continue
		}
		set, err := sysfs.ParseCPUList(v)
		if err != nil {
			continue
		}
		if set.Equal(cur) {
			return true
		}
		if p.cg == nil || p.cg.Version() != sysfs.CgroupV1 {
			continue
		}
		if !haveOnline {
			online, _ = p.cg.Allowed()
			haveOnline = true
		}
		if set.Intersect(online).Equal(cur) {
			return true
		}
		// A CPU that went offline while no daemon ran and is back now:
		// the kernel trimmed against the parent's CPUs as this run found
		// them, before it gave the parent its CPUs back (fitParent).
		if !p.parentFound.IsEmpty() && set.Intersect(p.parentFound).Equal(cur) {
			return true
		}
	}
	return false
}

// readCPUs reads workload w's cpuset.cpus, through its held-open file
// when it has one.
func (p *placement) readCPUs(w *workload) (sysfs.CPUSet, error) {
	if w.cpusFile != nil {
		if cur, err := w.cpusFile.Read(); err == nil {
			return cur, nil
		}
	}
	return p.cg.ReadCPUs(w.name)
}

// check re-reads workload w's cpuset.cpus and reports whether it still
// holds what the daemon last saw there. A value the daemon did not write
// means someone else took the workload: it is released (not placed, never
// restored) and said in the log. Hotplug's trimming on v1 is not a change
// of hand: w.cpus then follows the file.
func (p *placement) check(w *workload) bool {
	cur, err := p.readCPUs(w)
	if err != nil || cur.Equal(w.cpus) {
		return true
	}
	if w.rec.Released {
		w.cpus = cur
		w.rec.Original = cur.String()
		return false
	}
	if p.cg.Version() == sysfs.CgroupV1 {
		if online, err := p.cg.Allowed(); err == nil && w.cpus.Intersect(online).Equal(cur) {
			if !cur.IsEmpty() && w.rec.Applied != cur.String() {
				// The kernel trimmed the file (a CPU went offline). If
				// the value was not ours, the original stays the
				// untrimmed one; either way the trimmed value counts as
				// ours, so that restore writes the original back (in full
				// once the CPUs are online) — also after the CPU came
				// back, when the applied value less the offline CPUs no
				// longer matches it (found by the fault model).
				w.rec.Applied = cur.String()
				p.dirty = true
			}
			w.cpus = cur
			return true
		}
	}
	p.log.WithFields(logrus.Fields{"workload": w.name, "expected": w.cpus.String(), "cpus": cur.String()}).
		Warn("cpuset.cpus was changed by someone else; the workload is released: its value is kept, not placed and not restored (SetWorkloadPolicy with \"\" takes it back)")
	w.rec.Released = true
	w.rec.Original, w.rec.Applied, w.rec.Pending, w.rec.Unverified = cur.String(), "", "", false
	w.cpus = cur
	p.dirty = true
	return false
}

// checkAll re-reads every workload's cpuset.cpus (check), for the names
// the watch saw written, or all when names is nil; it reports whether any
// was released or changed.
func (p *placement) checkAll(names map[string]bool) bool {
	changed := false
	for n, w := range p.workloads {
		if names != nil && !names[n] {
			continue
		}
		before := w.cpus
		if !p.check(w) || !before.Equal(w.cpus) {
			changed = true
		}
	}
	if changed {
		p.flush()
	}
	return changed
}

// sample updates each workload's load signals: the decayed utilisation
// from its cgroup CPU-time counter (policy.UtilAverage, a PELT-like
// average: u = Δusage / Δwall in CPUs; negative deltas of the v1
// per-thread accounting count as 0), the instant number of runnable
// threads and, on cgroup v2, cpu.pressure.
func (p *placement) sample() (busy bool) {
	p.stats.samples.Add(1)
	now := time.Now()
	for n, w := range p.workloads {
		use, err := p.cg.Usage(n)
		if err != nil {
			continue
		}
		moved := use != w.avg.Usage
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
		if s, err := p.cg.CPUPressure(n); err == nil {
			if pr, err := policy.ParseCPUPressure(s); err == nil {
				w.pressure = pr
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
// period (32 s at the default 1 s). maxSamplePeriod caps the backed-off
// period whatever the configured one (no overflow, issue 11 case 6).
const (
	idleSamplesBeforeBackoff = 3
	maxIdleShift             = 5
	maxSamplePeriod          = time.Hour
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
func (p *placement) sampling() bool {
	if p.watch == nil {
		return p.cfg.CgroupRoot != "" || len(p.workloads) > 0
	}
	if len(p.workloads) == 0 {
		return false
	}
	return p.pressure == nil || p.idleSamples < idleSamplesBeforeBackoff
}

// sampleEvery is the current sampling period: the configured one while any
// workload is busy or sampling can stop (sampling), else doubling while all
// are idle, never beyond maxSamplePeriod (saturating: any configured
// period gives a positive one). A task attached to a workload, CPU
// pressure, a new workload or a policy change brings it back to the
// configured period.
func (p *placement) sampleEvery() time.Duration {
	if p.pressure != nil {
		return backedOffPeriod(p.cfg.SampleInterval, 0)
	}
	return backedOffPeriod(p.cfg.SampleInterval, p.idleSamples)
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

// apply plans placement for policy eff on topo within the online CPUs and
// writes the cpusets that differ from what the files hold. Before writing
// it records each value it will write (Record.Pending) and saves
// state.json; without a successful save nothing is written. force applies
// a shrinking plan at once (see policy.Input.DisableLazy).
func (p *placement) apply(eff policy.Policy, topo policy.Topology, online sysfs.CPUSet, force bool) {
	if p.cg == nil || len(p.workloads) == 0 {
		p.plan = policy.Plan{Policy: eff}
		return
	}
	if !p.flush() {
		// Placement waits until state.json can be written; no plan stands
		// (so no "placing for performance" reason either).
		p.plan = policy.Plan{Policy: eff, Lazy: p.plan.Lazy}
		return
	}
	p.quietLoadBalance()
	allowed := online
	if a, err := p.cg.Allowed(); err == nil && !a.IsEmpty() {
		allowed = allowed.Intersect(a)
	}
	in := policy.Input{
		Topology: topo, Allowed: allowed.List(), Policy: eff,
		Lazy: p.plan.Lazy, Now: time.Now(), MaxInterval: p.cfg.SampleInterval,
		// A policy, workload or CPU change re-plans at once; only the
		// periodic samples are subject to patch 18's lazy balance.
		DisableLazy: force,
	}
	if force {
		in.Lazy = policy.LazyState{}
	}
	names := p.sortedNames()
	for _, n := range names {
		w := p.workloads[n]
		if w.override == policy.Performance || w.rec.Released {
			continue // every allowed CPU below, or not placed at all
		}
		in.Loads = append(in.Loads, policy.Load{Name: n, Util: w.avg.Util, Current: w.cpus.List(), Threads: w.threads, Pressure: w.pressure})
	}
	plan := policy.PlanPlacement(in)
	if plan.CPUs == nil {
		plan.CPUs = map[string][]int{}
	}
	for n, w := range p.workloads {
		if w.override == policy.Performance && !w.rec.Released {
			plan.CPUs[n] = allowed.List()
		}
	}
	if plan.Policy != p.plan.Policy && plan.Policy != eff {
		p.log.WithFields(logrus.Fields{"policy": eff, "placement": plan.Policy}).Info("load exceeds the packing threshold: placing for performance (race to idle)")
	}
	p.plan = plan

	type write struct {
		w    *workload
		want sysfs.CPUSet
	}
	var writes []write
	for _, n := range names {
		w := p.workloads[n]
		want := sysfs.NewCPUSet(plan.CPUs[n]...)
		if w.rec.Released || want.IsEmpty() || want.Equal(w.cpus) {
			continue
		}
		if s := want.String(); w.rec.Pending != s {
			// Original is kept as it is even when nothing of ours is
			// there yet: w.cpus may be it less CPUs the kernel took
			// away on hotplug (check).
			w.rec.Pending = s
			p.dirty = true
		}
		writes = append(writes, write{w, want})
	}
	if len(writes) == 0 || !p.flush() {
		return
	}
	for _, wr := range writes {
		w, want := wr.w, wr.want
		// A value someone else wrote since we last looked is theirs.
		if !p.check(w) {
			w.rec.Pending = ""
			continue
		}
		if want.Equal(w.cpus) {
			continue
		}
		err := p.writeCPUs(w, want)
		if err == nil {
			p.stats.writes.Add(1)
			w.refused = ""
			p.log.WithFields(logrus.Fields{"workload": w.name, "from": w.cpus.String(), "to": want.String(), "policy": plan.Policy}).Debug("cpuset written")
			w.cpus = want
			w.rec.Applied, w.rec.Pending = want.String(), ""
			if w.rec.Applied == w.rec.Original {
				w.rec.Applied = "" // back to its original: nothing of ours there
			}
			continue
		}
		w.rec.Pending = ""
		if sysfs.IsGone(err) {
			// Removed after the last scan: forget it and its record.
			p.forget(w.name, true)
			p.log.WithField("workload", w.name).Info("workload gone")
			continue
		}
		p.stats.errors.Add(1)
		// The same refusal repeats on every sample: warn once per
		// (workload, cpuset, error), then only at debug level.
		lvl := logrus.WarnLevel
		if key := want.String() + " " + err.Error(); key == w.refused {
			lvl = logrus.DebugLevel
		} else {
			w.refused = key
		}
		p.log.WithError(err).WithField("workload", w.name).Log(lvl, "cpuset write refused")
	}
	// What was written (Applied) or not (Pending cleared), and records
	// of vanished workloads, are saved too: a record left claiming an
	// earlier value as ours would take a user's later write of that value,
	// made while no daemon runs, for ours.
	p.dirty = true
	p.flush()
}

// hotplug follows a change of the online CPUs (before → after): on cgroup
// v1 the managed parent gets back the CPUs that came online (fitParent),
// and every workload's cpuset is re-read (v1 silently drops an offlined CPU
// from every cpuset, for good). The caller re-plans.
func (p *placement) hotplug(before, after sysfs.CPUSet) {
	if p.cg == nil {
		return
	}
	p.fitParent(after.Difference(before))
	for _, w := range p.workloads {
		p.check(w)
	}
	p.flush()
}

// restore writes back every workload's original cpuset.cpus where the
// file still holds a value of ours, and sets back the sched_load_balance
// flags it cleared; it drops each record whose contents are restored and
// reports whether everything is back. On cgroup v1 CPUs not online now
// cannot be written: such an original is restored in part (its online
// CPUs, or every CPU the parent has when none is) and stays recorded, to
// be restored in full by a later run. Vanished workloads count as done.
func (p *placement) restore() bool {
	if p.cg == nil {
		return true
	}
	ok := true
	var allowed sysfs.CPUSet
	if p.cg.Version() == sysfs.CgroupV1 {
		allowed, _ = p.cg.Allowed()
	}
	for _, n := range p.sortedNames() {
		w := p.workloads[n]
		r := w.rec
		if !r.written() || r.Released {
			continue
		}
		cur, err := p.readCPUs(w)
		if err != nil {
			if !sysfs.IsGone(err) {
				ok = false
			}
			continue
		}
		if !p.ours(r, cur) {
			p.log.WithFields(logrus.Fields{"workload": n, "cpus": cur.String(), "original": r.Original}).Warn("cpuset.cpus was changed by someone else; not restored")
			r.Original, r.Applied, r.Pending, r.Unverified = cur.String(), "", "", false
			w.cpus = cur
			continue
		}
		orig, _ := sysfs.ParseCPUList(r.Original)
		target := orig
		if p.cg.Version() == sysfs.CgroupV1 && !orig.IsEmpty() && !allowed.IsEmpty() && !orig.Intersect(allowed).Equal(orig) {
			if target = orig.Intersect(allowed); target.IsEmpty() {
				target = allowed
			}
		}
		if !target.Equal(cur) {
			err := p.writeCPUs(w, target)
			inherit := false
			if err != nil && target.IsEmpty() && p.cg.Version() == sysfs.CgroupV2 && errors.Is(err, unix.ENOSPC) {
				// v2's "inherit", which the kernel will not give a
				// cgroup with tasks: every CPU, intersected with the
				// parent's, is the same (sysfs.Cgroup.WriteAllCPUs).
				if err = p.cg.WriteAllCPUs(n); err == nil {
					inherit = true
				}
			}
			if err != nil {
				if sysfs.IsGone(err) {
					continue
				}
				p.stats.errors.Add(1)
				p.log.WithError(err).WithField("workload", n).Warn("cannot restore original cpuset; it stays in state.json for the next start")
				ok = false
				continue
			}
			p.stats.writes.Add(1)
			w.cpus = target
			if inherit {
				if now, err := p.readCPUs(w); err == nil {
					w.cpus = now
				}
				p.log.WithFields(logrus.Fields{"workload": n, "cpus": w.cpus.String()}).Info("original cpuset is empty (inherit the parent's), which the kernel refuses to a cgroup with tasks: restored as every CPU, the same effective CPUs")
			}
		}
		r.Pending, r.Unverified = "", false
		if target.Equal(orig) {
			r.Applied = ""
		} else {
			r.Applied = target.String()
			p.log.WithFields(logrus.Fields{"workload": n, "original": r.Original, "written": target.String()}).Warn("original cpuset names CPUs that are offline now: restored in part; it stays in state.json and is restored in full once they are back")
			ok = false
		}
	}
	// The flags last: with them set, every cpuset write above would have
	// rebuilt the sched domains.
	for _, n := range p.sortedNames() {
		r := p.workloads[n].rec
		if !r.LoadBalanceCleared {
			continue
		}
		if on, err := p.cg.SchedLoadBalance(n); err == nil && !on {
			if err := p.cg.SetSchedLoadBalance(n, true); err != nil && !sysfs.IsGone(err) {
				p.stats.errors.Add(1)
				p.log.WithError(err).WithField("workload", n).Warn("cannot set cpuset.sched_load_balance back to 1; it stays in state.json for the next start")
				ok = false
				continue
			}
		}
		r.LoadBalanceCleared = false
	}
	// The managed parent: its record is done once it holds its original.
	if p.parent != nil {
		if cur, err := p.cg.OwnCPUs(); err == nil && cur.String() == p.parent.Original {
			p.parent.Parent = false // not needed any more: dropped at the save
		} else if err == nil {
			ok = false // CPUs offline now: given back by a later run
		}
	}
	p.dirty = true
	return ok
}

// close stops the watches and closes held files and the parent's lock.
func (p *placement) close() {
	for n := range p.exitWatches {
		p.stopExitWatch(n)
	}
	for _, w := range p.workloads {
		w.cpusFile.Close()
		w.cpusFile = nil
	}
	p.stopWatch()
	p.lock.release()
}

// childID is the inode number of workload name's directory, 0 when it
// cannot be read (vanished: the next listing forgets it).
func (p *placement) childID(name string) uint64 {
	path, err := p.cg.ChildPath(name)
	if err != nil {
		return 0
	}
	return dirInode(path)
}

// writeCPUs writes workload w's cpuset.cpus, through its held-open file
// on the kernel's cgroupfs (sysfs.Cgroup.OpenCPUs: no path lookup and open
// per write), else with one open/write/close. After an error the file is
// closed, and the next write opens it again.
func (p *placement) writeCPUs(w *workload, cpus sysfs.CPUSet) error {
	if w.cpusFile == nil {
		f, err := p.cg.OpenCPUs(w.name)
		if err != nil {
			return p.cg.WriteCPUs(w.name, cpus)
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

// forget drops workload name: its entry, open file and exit watch, and its
// record when gone (its cgroup is gone, or replaced by a new one).
func (p *placement) forget(name string, gone bool) {
	if w, ok := p.workloads[name]; ok {
		w.cpusFile.Close()
		p.unwatchChild(w.rec.Path)
		delete(p.workloads, name)
		if gone && p.records[w.rec.Path] == w.rec {
			delete(p.records, w.rec.Path)
			p.dirty = true
		}
	}
	p.stopExitWatch(name)
}

// forgetAll forgets every workload (their cgroups are gone).
func (p *placement) forgetAll() {
	for n := range p.workloads {
		p.forget(n, true)
	}
	for n := range p.exitWatches {
		p.stopExitWatch(n)
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
// the flag (children's flags matter there). What is cleared is recorded
// (Record.LoadBalanceCleared) and saved before the write, and set back on
// exit (restore), or by the next start after a crash.
func (p *placement) quietLoadBalance() {
	if p.cg.Version() != sysfs.CgroupV1 {
		return
	}
	var todo []*workload // on every plan: no sorting, order does not matter
	for _, w := range p.workloads {
		if !w.lbChecked {
			todo = append(todo, w)
		}
	}
	if len(todo) == 0 {
		return
	}
	if on, err := p.cg.SchedLoadBalance(""); err != nil || !on {
		for _, w := range todo {
			w.lbChecked = true
		}
		return
	}
	var toClear []*workload
	for _, w := range todo {
		w.lbChecked = true
		if on, err := p.cg.SchedLoadBalance(w.name); err == nil && on {
			w.rec.LoadBalanceCleared = true
			p.dirty = true
			toClear = append(toClear, w)
		}
	}
	if len(toClear) == 0 {
		return
	}
	if !p.flush() {
		for _, w := range toClear {
			w.lbChecked, w.rec.LoadBalanceCleared = false, false
		}
		return
	}
	for _, w := range toClear {
		if err := p.cg.SetSchedLoadBalance(w.name, false); err != nil {
			// Still recorded: setting 1 back on exit is harmless.
			p.log.WithError(err).WithField("workload", w.name).Debug("cannot clear cpuset.sched_load_balance")
		}
	}
}

func (p *placement) sortedNames() []string {
	names := make([]string, 0, len(p.workloads))
	for n := range p.workloads {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// releasedOverride is what the Workloads property and schedpolicyctl show
// as the override of a released workload (Record.Released).
const releasedOverride = "user"

func (p *placement) status() []WorkloadStatus {
	var out []WorkloadStatus
	for _, n := range p.sortedNames() {
		w := p.workloads[n]
		o := w.override
		if w.rec.Released {
			o = releasedOverride
		}
		out = append(out, WorkloadStatus{Name: n, Path: w.rec.Path, CPUs: w.cpus.String(), Util: w.avg.Util, Override: o, Class: "workload"})
	}
	return out
}

// create makes a new workload and moves pid into it (CreateWorkload). Its
// record says the daemon created it, saved before pid arrives; if
// attaching fails the new cgroup is removed again.
func (p *placement) create(name string, pid int) (string, error) {
	if err := ValidWorkloadName(name); err != nil {
		return "", err
	}
	if p.cg == nil {
		return "", errors.New("workload placement is disabled (no managed parent cgroup)")
	}
	err := p.cg.CreateChild(name)
	if errors.Is(err, fs.ErrExist) && p.reapCreated(name) {
		err = p.cg.CreateChild(name) // a finished run's leftover was in the way
	}
	if err != nil {
		return "", err
	}
	path, _ := p.cg.ChildPath(name)
	p.scan()
	w := p.workloads[name]
	if w != nil {
		w.rec.Created = true
		p.dirty = true
		p.flush()
	}
	if err := p.cg.Attach(name, pid); err != nil {
		os.Remove(path)
		p.scan()
		return "", fmt.Errorf("move PID %d into %s: %w", pid, path, err)
	}
	if w != nil {
		p.watchExit(name, pid)
	}
	p.log.WithFields(logrus.Fields{"workload": name, "pid": pid}).Info("workload created")
	return path, nil
}

// setOverride sets or clears a workload's placement override. Either
// takes back a released workload: its current cpuset becomes its original.
func (p *placement) setOverride(name string, pol policy.Policy) error {
	w, ok := p.workloads[name]
	if !ok {
		return fmt.Errorf("%w: no workload %q", policy.ErrInvalid, name)
	}
	if pol != "" && pol != policy.Performance {
		return fmt.Errorf("%w: a workload override can only be performance (or empty to clear)", policy.ErrInvalid)
	}
	if w.rec.Released {
		p.check(w)
		w.rec.Released, w.rec.Original = false, w.cpus.String()
		p.dirty = true
		p.log.WithField("workload", name).Info("released workload taken back")
	}
	w.override = pol
	p.log.WithFields(logrus.Fields{"workload": name, "override": pol}).Info("workload override set")
	return nil
}

// reapCreated removes workload name if the daemon created it and no task
// is left in it (the command started by schedpolicyctl run has exited); it
// reports whether the cgroup is gone.
func (p *placement) reapCreated(name string) bool {
	w, ok := p.workloads[name]
	if !ok || !w.rec.Created || p.cg == nil {
		return false
	}
	if procs, err := p.cg.Procs(name); err != nil || len(procs) > 0 {
		return false
	}
	w.cpusFile.Close() // reopened at the next write if the removal fails
	w.cpusFile = nil
	if err := p.cg.RemoveChild(name); err != nil {
		p.log.WithError(err).WithField("workload", name).Debug("cannot remove a finished workload yet")
		return false
	}
	p.forget(name, true)
	p.log.WithField("workload", name).Info("workload finished; its cgroup is removed")
	p.flush()
	return true
}

// reapFinished removes every daemon-created workload whose tasks are all
// gone; it reports whether any was removed.
func (p *placement) reapFinished() bool {
	removed := false
	for _, n := range p.sortedNames() {
		if w := p.workloads[n]; w != nil && w.rec.Created && p.reapCreated(n) {
			removed = true
		}
	}
	return removed
}

// createWorkload makes workload name with pid in it and re-plans
// (CreateWorkload; placement.create has the errors).
func (d *Daemon) createWorkload(name string, pid int) (string, error) {
	create := d.pl.create
	if d.units != nil {
		create = d.units.create // a transient scope in schedpolicyd.slice
	}
	path, err := create(name, pid)
	if err == nil {
		d.recompute("workload created", true)
	}
	return path, err
}

// setWorkloadOverride sets or clears a workload's override and re-plans
// (SetWorkloadPolicy; placement.setOverride has the errors).
func (d *Daemon) setWorkloadOverride(name string, pol policy.Policy) error {
	if err := d.pl.setOverride(name, pol); err != nil {
		return err
	}
	d.recompute("workload override", true)
	return nil
}
