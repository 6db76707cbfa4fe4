package cgroupfs

import (
	"errors"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/schedpolicyd/schedpolicyd/cgroup"
	"github.com/schedpolicyd/schedpolicyd/daemon/placement"
	"github.com/schedpolicyd/schedpolicyd/daemon/statefile"
	"github.com/schedpolicyd/schedpolicyd/policy"
	"github.com/schedpolicyd/schedpolicyd/sysfs"
)

// Placement is the cgroupfs placement of workloads: the managed parent
// cgroup, its children (one workload each) and the records of state.json
// that say what the daemon changed in them. It adopts, samples, applies
// plans, restores, creates and reaps. Owned by the event loop: only the
// goroutine running Daemon.Run calls its methods.
//
// The promise it keeps, through placement.Journal: before any write to a cgroup
// file it records the original and the value it writes (statefile.Record,
// persisted through save); on exit, and after a crash on the next start,
// it restores only files that still hold a value of its own; a value someone else wrote is
// theirs and is kept; a record stays until what it covers is restored or
// its cgroup is gone, whichever run that takes.
type Placement struct {
	// e is the engine that holds this driver: the journal (it starts
	// dirty: the first flush saves), the pressure trigger, the task-clock
	// gate, the sampling back-off, the confirmation and the plan.
	e *placement.Engine

	cg   *cgroup.Cgroup
	lock cgroupLock // flock on the managed parent's directory (lock.go)
	// watch hints at changes of the managed parent (nil: none, the loop
	// rescans on its ticker); newWatch makes it (watchCgroupDir, or a
	// test's). The engine's pressure trigger is configured on the managed
	// parent's cpu.pressure on cgroup v2, the machine's /proc/pressure/cpu
	// on v1 (startWatch), never where nothing watches the parent.
	watch    cgroupSource
	newWatch func(parent string) (cgroupSource, error)
	// clockRetask holds the workloads tasks were attached to whose
	// counters are to be set again (SyncClock).
	clockRetask map[string]bool

	workloads map[string]*workload
	// records is the engine's table of cgroup records, by path
	// (placement.KeepRecords): the current workloads', the managed
	// parent's, and those loaded from state.json that no current workload
	// matched (another root, a run that could not open the parent), which
	// are kept as they are.
	records placement.Records[statefile.Record]
	parent  *statefile.Record // the managed parent's record (v1 CPUs)
	// parentFound is the v1 parent's CPUs as this run found them when
	// they were fewer than its recorded original (a CPU went offline while
	// no daemon ran); a workload trimmed to the same set is still ours.
	parentFound sysfs.CPUSet
	rejected    map[string]bool // child names refused, warned about once
	// waiting holds children that could not be adopted yet (their files
	// not there yet, or a transient read error): logged once, retried on
	// the next hint, their directory watched meanwhile.
	waiting map[string]bool

	exits       chan placement.Event        // a watched task of a created workload exited (reap.go)
	exitWatches map[string]*sysfs.ExitWatch // one task's per created workload (reap.go)
}

// The driver and the capabilities it has (backend.go).
var (
	_ placement.Driver      = (*Placement)(nil)
	_ placement.Watcher     = (*Placement)(nil)
	_ placement.EventSource = (*Placement)(nil)
	_ placement.Confirmer   = (*Placement)(nil)
	_ placement.Clocked     = (*Placement)(nil)
	_ placement.Creator     = (*Placement)(nil)
	_ placement.Overrider   = (*Placement)(nil)
	_ placement.Hotplugger  = (*Placement)(nil)
	_ placement.Reporter    = (*Placement)(nil)
	_ placement.Poller      = (*Placement)(nil)
	_ placement.Refresher   = (*Placement)(nil)
	_ placement.Rechecker   = (*Placement)(nil)
	_ placement.Exempter    = (*Placement)(nil)
)

// workload is one direct child of the managed parent cgroup.
type workload struct {
	name string
	rec  *statefile.Record // its record in placement.records
	cpus sysfs.CPUSet      // what the file holds, as last read or written
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
	cpusFile *cgroup.CPUsFile
	// lbChecked: its v1 cpuset.sched_load_balance was looked at.
	lbChecked bool
	// refused is the last refused write ("cpulist error"), so a refusal
	// that repeats on every sample is warned about once.
	refused string
	// exempt: the engine's exempt list names it (SetExempt): not placed,
	// its original given back.
	exempt bool
}

// placed reports whether the plan places w: neither released (someone
// else's value is in it) nor exempt.
func (w *workload) placed() bool { return !w.rec.Released && !w.exempt }

// New makes the cgroupfs placement of e.Cfg.CgroupRoot's children as e's
// driver, logging to e.Log and counting in e.Stats; e.Done closes when
// the daemon's loop ends (the reapers' goroutines stop then). It touches
// no cgroup until Open.
func New(e *placement.Engine) *Placement {
	p := &Placement{
		e:         e,
		workloads: map[string]*workload{},
		rejected:  map[string]bool{}, waiting: map[string]bool{},
		exits: make(chan placement.Event), exitWatches: map[string]*sysfs.ExitWatch{},
		newWatch: watchCgroupDir,
	}
	p.records = placement.KeepRecords(e, p.usable)
	e.Traits.RaceToIdleLog = true
	e.Dirty = true
	e.Drive(p)
	return p
}

// usable reports whether a record state.json holds is taken (before
// anything is adopted): not when its cgroup is gone — no directory at
// the path (cgroups do not survive a reboot), or another one (a
// different inode). A record without an inode (a version-1 file's, or
// one edited by hand) cannot be shown to name the cgroup now at its
// path, which may be anyone's: it is dropped with a warning, and that
// cgroup is adopted as it is found, never removed, restored or written
// back on the record's word.
func (p *Placement) usable(r *statefile.Record) bool {
	id := dirInode(r.Path)
	switch {
	case id == 0 || r.Inode != 0 && id != r.Inode:
		p.e.Log.WithField("path", r.Path).Debug("dropping the record of a cgroup that is gone")
		return false
	case r.Inode == 0:
		p.e.Log.WithFields(logrus.Fields{"path": r.Path, "created": r.Created, "original": r.Original}).
			Warn("a saved record has no inode, so it cannot be shown to be this cgroup's; not used (the cgroup is left as it is)")
		return false
	}
	return true
}

// Open opens (creating if needed) the managed parent, locks it, reconciles
// its record and starts watching it. On failure placement stays off until
// the next scan retries; ErrAlreadyRunning (another daemon manages the
// parent) is returned so that start-up can fail with it.
func (p *Placement) Open() error {
	if p.e.Cfg.CgroupRoot == "" {
		return errors.New("no managed parent cgroup configured")
	}
	cg, err := cgroup.OpenCgroup(resolvePath(p.e.Cfg.CgroupRoot), cgroup.CgroupOptions{Create: true, ProcRoot: p.e.Cfg.ProcRoot})
	if err == nil {
		err = p.lock.acquire(cg.Path())
	}
	if err != nil {
		if p.cg == nil && !p.e.Warned {
			p.e.Log.WithError(err).Warn("workload placement disabled")
			p.e.Warned = true
		}
		return err
	}
	p.cg, p.e.Warned = cg, false
	p.e.Log.WithFields(logrus.Fields{"path": cg.Path(), "version": cg.Version().String()}).Info("managing workloads")
	p.openParentRecord()
	p.startWatch()
	return nil
}

// openParentRecord, on cgroup v1, finds or makes the managed parent's
// record and gives the parent back CPUs of its recorded original that are
// online again (a run stopped while they were offline left it without).
func (p *Placement) openParentRecord() {
	if p.cg.Version() != cgroup.CgroupV1 {
		return // v2's cpuset.cpus survives hotplug: never written
	}
	path, id := p.cg.Path(), dirInode(p.cg.Path())
	r := p.records[path]
	if r != nil && r.Inode != 0 && id != 0 && r.Inode != id {
		p.e.Log.WithField("path", path).Info("a saved record names another cgroup that had the managed parent's path; dropped")
		r = nil
	}
	if r == nil {
		r = &statefile.Record{Path: path, Inode: id, Parent: true}
		if cur, err := p.cg.OwnCPUs(); err == nil {
			r.Original = cur.String()
		}
		p.records[path] = r
		p.e.Dirty = true
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
func (p *Placement) fitParent(added sysfs.CPUSet) {
	if p.cg == nil || p.cg.Version() != cgroup.CgroupV1 || p.parent == nil {
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
		p.e.Dirty = true
	}
	want := orig.Intersect(upper)
	cur, err := p.cg.OwnCPUs()
	if err != nil || want.IsEmpty() || cur.Equal(want) || !cur.Intersect(want).Equal(cur) {
		return
	}
	if err := p.cg.SetOwnCPUs(want); err != nil {
		p.e.Log.WithError(err).Warn("cannot give the managed parent its CPUs back")
		return
	}
	p.e.Log.WithFields(logrus.Fields{"from": cur.String(), "to": want.String()}).Info("managed parent given its CPUs back")
}

// Close stops the watches and closes held files and the parent's lock.
func (p *Placement) Close() {
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
