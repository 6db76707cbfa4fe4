package cgroupfs

import (
	"path/filepath"
	"time"

	"github.com/sirupsen/logrus"
	"golang.org/x/sys/unix"

	"github.com/schedpolicyd/schedpolicyd/cgroup"
	"github.com/schedpolicyd/schedpolicyd/daemon/snapshot"
	"github.com/schedpolicyd/schedpolicyd/daemon/statefile"
	"github.com/schedpolicyd/schedpolicyd/sysfs"
)

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

// Scan adopts new children of the managed parent and forgets vanished
// ones; it reports whether the set changed. A new workload's record is the
// one a crashed or earlier run saved for the same cgroup, if state.json has
// it (reconciled with what the file holds: a value that is not that run's
// was set by someone else and becomes the original), else a new one. If
// the managed parent itself vanished, it is recreated.
func (p *Placement) Scan() bool {
	if p.cg == nil {
		if p.e.Cfg.CgroupRoot == "" || p.Open() != nil {
			return false
		}
	}
	names, err := p.cg.Children()
	if err == nil {
		err = p.lock.stale(p.cg.Path()) // made again or replaced: relock it
	}
	if err != nil {
		if !cgroup.IsGone(err) {
			p.e.Log.WithError(err).Warn("listing workloads")
			return false
		}
		return p.parentVanished()
	}
	seen := make(map[string]bool, len(names))
	changed, created := p.adoptChildren(names, seen)
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
			p.e.Log.WithField("workload", n).Info("workload gone")
		}
	}
	// Saved records of children that are gone: their cgroup is gone.
	for path, r := range p.records {
		if !r.Parent && filepath.Dir(path) == p.cg.Path() && !seen[filepath.Base(path)] {
			delete(p.records, path)
			p.e.Dirty = true
		}
	}
	p.e.Flush()
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

// parentVanished handles scan's managed parent gone: what is ours is put
// back, every workload and record below it forgotten, and the parent made
// again and scanned. It reports whether the workloads changed.
func (p *Placement) parentVanished() bool {
	p.e.Log.WithField("path", p.cg.Path()).Warn("managed parent cgroup vanished; recreating it")
	changed := len(p.workloads) > 0
	// Renamed away, its children live on elsewhere: put back what is
	// ours through the files held open (their paths are gone).
	p.Restore()
	p.forgetAll()
	for path, r := range p.records {
		if r.Parent || filepath.Dir(path) == p.cg.Path() {
			delete(p.records, path) // their cgroups are gone with it
			p.e.Dirty = true
		}
	}
	p.parent = nil
	p.cg = nil
	p.stopWatch()
	if p.Open() == nil {
		p.Scan()
		changed = true
	}
	p.e.Flush()
	return changed
}

// adoptChildren adopts the children named that are not workloads yet (or
// were made again under a workload's name), marking each name in seen. It
// reports whether the workloads changed and which adopted ones an earlier
// run created.
func (p *Placement) adoptChildren(names []string, seen map[string]bool) (changed bool, created []string) {
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
			p.e.Log.WithField("workload", n).Info("workload replaced by a new cgroup of the same name")
			p.forget(n, true)
			changed = true
		} else if p.rejected[n] {
			continue
		}
		w, err := p.adopt(n)
		if err != nil && !p.waiting[n] {
			// Watch the child for what it lacks, then try once more:
			// a file made between the first try and the watch (mkdir,
			// then its files, as a program makes a cgroup by hand)
			// raises no event, and would leave the child waiting for
			// good.
			p.waiting[n] = true
			p.watchDir(filepath.Join(p.cg.Path(), n), true)
			if w, err = p.adopt(n); err != nil {
				p.e.Log.WithError(err).WithField("workload", n).Info("cannot adopt this cgroup yet; retrying on the next change")
			}
		}
		if err != nil {
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
	return changed, created
}

// adopt makes child n a workload. It returns nil, nil for a child refused
// for good (warned about once), and an error for one that cannot be
// adopted yet.
func (p *Placement) adopt(n string) (*workload, error) {
	if err := p.cg.PrepareChild(n); err != nil {
		if cgroup.IsGone(err) {
			return nil, nil
		}
		return nil, err
	}
	cur, err := p.cg.ReadCPUs(n)
	if err != nil {
		// ENOENT of the file while the directory is there: not gone, not
		// there yet (a mock tree fills it after mkdir) — retried.
		if dir, _ := p.cg.ChildPath(n); cgroup.IsGone(err) && dirInode(dir) == 0 {
			return nil, nil
		}
		return nil, err
	}
	path, err := p.cg.ChildPath(n)
	if err != nil {
		p.e.Log.WithError(err).WithField("workload", n).Warn("not managing this cgroup")
		p.rejected[n] = true
		return nil, nil
	}
	id := dirInode(path)
	log := p.e.Log.WithField("workload", n)
	r := p.records[path]
	if r != nil && r.Inode != 0 && id != 0 && r.Inode != id {
		log.Info("a saved record names another cgroup that had this path; not used")
		r = nil
	}
	if r == nil && id != 0 {
		r = p.renamed(path, id)
	}
	if r == nil {
		r = &statefile.Record{Path: path, Inode: id, Values: statefile.Values{Original: cur.String()}}
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
	p.e.Dirty = true
	w := &workload{name: n, rec: r, cpus: cur, lbChecked: r.LoadBalanceCleared}
	if use, err := p.cg.Usage(n); err == nil {
		w.avg, w.lastAt = w.avg.Update(use, 0, p.e.Cfg.UtilHalfLife), time.Now()
	}
	p.workloads[n] = w
	p.e.Pressure.Changed(len(p.workloads)) // the first arms the trigger
	p.watchChild(path)
	p.e.Backoff.Reset() // a new workload: sample it
	fields := logrus.Fields{"cpus": cur.String(), "original": r.Original}
	if pub := snapshot.Escape(n); pub != n {
		// Not UTF-8, a control character or `\x`: D-Bus, the tree and
		// the metrics show it escaped, and SetWorkloadPolicy takes that.
		fields["published_as"] = pub
	}
	log.WithFields(fields).Info("adopted workload")
	return w, nil
}

// renamed finds the record of the cgroup with inode id under another path
// of the managed parent (a workload renamed: mv a b), moves it to path and
// forgets the workload of the old name; nil when there is none.
func (p *Placement) renamed(path string, id uint64) *statefile.Record {
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
		p.e.Log.WithFields(logrus.Fields{"from": old, "to": path}).Info("workload renamed; its record follows it")
		return r
	}
	return nil
}

// reconcile compares a saved record with what the cgroup's cpuset.cpus
// holds now (at adoption): a value of ours keeps the saved original; any
// other value was set by someone else while no daemon ran, and becomes
// the original.
func (p *Placement) reconcile(r *statefile.Record, cur sysfs.CPUSet, log logrus.FieldLogger) {
	switch {
	case r.Released:
		r.Original = cur.String()
	case !r.Written():
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
		p.e.Theirs(&r.Values, cur.String())
		r.Unverified = false
	}
}

// ours reports whether cur, a workload's cpuset.cpus, is a value the
// daemon wrote (the journal's ours): the record's applied or pending
// value, or on cgroup v1 one of them less CPUs the kernel removed on
// hotplug (the managed parent's effective CPUs are what is left online to
// it). A record migrated from a version-1 file (Unverified) takes any
// value for ours. The cgroup's identity needs no check here: a record is
// matched to a cgroup by its inode when it is adopted (load, adopt, and
// scan's check for a cgroup made again under the same name).
func (p *Placement) ours(r *statefile.Record, cur sysfs.CPUSet) bool {
	if r.Unverified {
		return true
	}
	return r.Ours(cur.String(), true, p.same(cur))
}

// same is the comparison ours makes of a recorded value with cur, what a
// workload's cpuset.cpus holds (placement.Held.Same): equal, or on cgroup
// v1 equal once the CPUs the kernel removed on hotplug are taken away.
func (p *Placement) same(cur sysfs.CPUSet) func(v, _ string) bool {
	var online sysfs.CPUSet
	haveOnline := false
	return func(v, _ string) bool {
		set, err := sysfs.ParseCPUList(v)
		if err != nil {
			return false
		}
		if set.Equal(cur) {
			return true
		}
		if p.cg == nil || p.cg.Version() != cgroup.CgroupV1 {
			return false
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
		return !p.parentFound.IsEmpty() && set.Intersect(p.parentFound).Equal(cur)
	}
}

// readCPUs reads workload w's cpuset.cpus, through its held-open file
// when it has one.
func (p *Placement) readCPUs(w *workload) (sysfs.CPUSet, error) {
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
func (p *Placement) check(w *workload) bool {
	cur, err := p.readCPUs(w)
	if err != nil || cur.Equal(w.cpus) {
		return true
	}
	if w.rec.Released || w.exempt && !w.rec.Written() {
		// Released, or exempt with nothing of ours in it: whatever it
		// holds is someone else's, and its original once it is placed
		// again.
		w.cpus = cur
		w.rec.Original = cur.String()
		p.e.Dirty = true
		return false
	}
	if p.cg.Version() == cgroup.CgroupV1 {
		if online, err := p.cg.Allowed(); err == nil && w.cpus.Intersect(online).Equal(cur) {
			if !cur.IsEmpty() && w.rec.Applied != cur.String() {
				// The kernel trimmed the file (a CPU went offline). If
				// the value was not ours, the original stays the
				// untrimmed one; either way the trimmed value counts as
				// ours, so that restore writes the original back (in full
				// once the CPUs are online) — also after the CPU came
				// back, when the applied value less the offline CPUs no
				// longer matches it.
				w.rec.Applied = cur.String()
				p.e.Dirty = true
			}
			w.cpus = cur
			return true
		}
	}
	p.e.Log.WithFields(logrus.Fields{"workload": w.name, "expected": w.cpus.String(), "cpus": cur.String()}).
		Warn("cpuset.cpus was changed by someone else; the workload is released: its value is kept, not placed and not restored (`schedpolicyctl workload-policy NAME none`, D-Bus SetWorkloadPolicy with \"\", takes it back)")
	w.rec.Released = true
	p.e.Theirs(&w.rec.Values, cur.String())
	w.rec.Unverified = false
	w.cpus = cur
	return false
}

// checkAll re-reads every workload's cpuset.cpus (check), for the names
// the watch saw written, or all when names is nil; it reports whether any
// was released or changed.
func (p *Placement) checkAll(names map[string]bool) bool {
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
		p.e.Flush()
	}
	return changed
}

// childID is the inode number of workload name's directory, 0 when it
// cannot be read (vanished: the next listing forgets it).
func (p *Placement) childID(name string) uint64 {
	path, err := p.cg.ChildPath(name)
	if err != nil {
		return 0
	}
	return dirInode(path)
}

// forget drops workload name: its entry, open file and exit watch, and its
// record when gone (its cgroup is gone, or replaced by a new one).
func (p *Placement) forget(name string, gone bool) {
	if w, ok := p.workloads[name]; ok {
		w.cpusFile.Close()
		p.unwatchChild(w.rec.Path)
		delete(p.workloads, name)
		p.e.Pressure.Changed(len(p.workloads)) // the last closes the trigger
		if gone && p.records[w.rec.Path] == w.rec {
			delete(p.records, w.rec.Path)
			p.e.Dirty = true
		}
	}
	p.stopExitWatch(name)
}

// forgetAll forgets every workload (their cgroups are gone).
func (p *Placement) forgetAll() {
	for n := range p.workloads {
		p.forget(n, true)
	}
	for n := range p.exitWatches {
		p.stopExitWatch(n)
	}
}
