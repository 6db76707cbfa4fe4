package units

import (
	"context"
	"errors"
	"path/filepath"
	"time"

	"github.com/godbus/dbus/v5"
	"github.com/sirupsen/logrus"

	"github.com/schedpolicyd/schedpolicyd/daemon/placement"
	"github.com/schedpolicyd/schedpolicyd/daemon/statefile"
	"github.com/schedpolicyd/schedpolicyd/sysfs"
	"github.com/schedpolicyd/schedpolicyd/systemd"
)

// Scan lists the managed slices' units, adopting new ones and forgetting
// those gone; it reports whether the set changed. Used at start, after
// lost signals and on Rebalance. A listing cut short (an error, or
// unitScanTimeout on a busy machine) still takes in the units it read but
// forgets none, and sets rescan: the next sample scans again.
func (u *Placement) Scan() bool {
	if u.mgr == nil {
		return false
	}
	ctx, cancel := context.WithTimeout(context.Background(), unitScanTimeout)
	defer cancel()
	seen := map[string]bool{}
	changed := false
	list, err := u.mgr.Units(ctx, "*.service", "*.scope")
	complete := err == nil
	if err != nil {
		u.log.WithError(err).WithField("read", len(list)).Warn("listing the managed slices' units was cut short: the units read are taken in, none is forgotten, and the next sample lists them again")
	}
	if !complete && len(list) == 0 {
		u.setRescan(true)
		return changed
	}
	if u.users && complete {
		if u.scanUsers(ctx, list) {
			changed = true
		}
	}
	for _, info := range list {
		if !u.managed(-1, info) {
			continue
		}
		seen[workloadKey(-1, info.Name)] = true
		if u.consider(-1, info) {
			changed = true
		}
	}
	for _, p := range u.people {
		if p.mgr == nil {
			continue
		}
		ul, err := p.mgr.Units(ctx, "*.service", "*.scope")
		if err != nil {
			u.log.WithError(err).WithField("uid", p.uid).Warn("listing a user manager's units")
			for k, w := range u.workloads {
				if w.uid == p.uid {
					seen[k] = true // kept until the manager answers again
				}
			}
			continue
		}
		for _, info := range ul {
			if !u.managed(p.uid, info) {
				continue
			}
			seen[workloadKey(p.uid, info.Name)] = true
			if u.consider(p.uid, info) {
				changed = true
			}
		}
	}
	if complete {
		for k := range u.workloads {
			if !seen[k] {
				u.forget(k)
				changed = true
			}
		}
		u.dropGone(ctx)
	}
	u.setRescan(!complete)
	u.Flush()
	return changed
}

// setRescan notes whether the last scan was cut short; the end of a run
// of cut-short scans is logged.
func (u *Placement) setRescan(on bool) {
	if u.rescan && !on {
		u.log.WithField("workloads", len(u.workloads)).Info("the managed slices' units listed in full again")
	}
	u.rescan = on
}

// dropGone drops the records of units systemd no longer knows (a
// transient scope or service that ended): their runtime values went with
// them.
func (u *Placement) dropGone(ctx context.Context) {
	for k, r := range u.records {
		uid := recordUID(r.Manager)
		if u.workloads[workloadKey(uid, r.Unit)] != nil {
			continue
		}
		m := u.mgr
		if uid >= 0 {
			if u.userGone(r) {
				delete(u.records, k)
				u.Dirty = true
				continue
			}
			if p := u.people[uid]; p != nil && p.mgr != nil {
				m = p.mgr
			} else {
				continue // its manager runs but is not reachable now: kept
			}
		}
		if info, err := m.UnitInfo(ctx, r.Unit); err == nil && info.LoadState == "not-found" || isNoSuchUnit(err) {
			if _, _, lingers := lingering(r); lingers && r.Written() {
				continue // the value comes back with a unit of that name
			}
			delete(u.records, k)
			u.Dirty = true
		}
	}
}

// isNoSuchUnit reports whether err is systemd's "no such unit" answer.
func isNoSuchUnit(err error) bool {
	var e dbus.Error
	return errors.As(err, &e) && (e.Name == "org.freedesktop.systemd1.NoSuchUnit" || e.Name == "org.freedesktop.systemd1.LoadFailed")
}

// onEvent follows one message of EventsC: a unit signal of a manager, a
// user logging in or out, a manager's connection closing, a focus
// change; it reports whether the workloads changed. After an overflow
// (signals lost) it rescans.
func (u *Placement) onEvent(msg unitMsg) bool {
	if u.mgr == nil {
		return false
	}
	switch {
	case msg.closed && msg.uid < 0:
		u.log.Warn("the connection to the systemd manager closed; units are no longer followed")
		u.Close()
		return false
	case msg.closed:
		return u.userManagerClosed(msg.uid, msg.from)
	case msg.user != nil:
		return u.onUser(*msg.user)
	case msg.focus != "" || msg.focusOverflow:
		return u.onFocus(msg)
	}
	ev := msg.ev
	m := u.managerOf(ev.UID)
	if m == nil {
		return false
	}
	switch {
	case ev.Kind == systemd.ReloadStarted:
		u.reloading[ev.UID] = true
		u.log.WithField("manager", managerName(ev.UID)).Info("the systemd manager is reloading: its units are held (not forgotten, not set) until it is done")
		return false
	case ev.Kind == systemd.ReloadFinished:
		return u.reloaded(ev.UID)
	case u.reloading[ev.UID]:
		// Every unit is dropped and loaded again: the scan at the end
		// says which are there.
		return false
	}
	if m.Overflowed() {
		return u.Scan()
	}
	if systemd.UnitType(ev.Name) != "Service" && systemd.UnitType(ev.Name) != "Scope" {
		return false
	}
	key := workloadKey(ev.UID, ev.Name)
	if ev.Kind == systemd.UnitDropped {
		changed := false
		if _, ok := u.workloads[key]; ok {
			u.forget(key)
			changed = true
		}
		u.dropUnloaded(ev.UID, ev.Name)
		u.Flush()
		return changed
	}
	ctx, cancel := context.WithTimeout(context.Background(), unitOpTimeout)
	defer cancel()
	info, err := m.LoadedUnitInfo(ctx, ev.Name)
	if err != nil {
		if _, ok := u.workloads[key]; ok {
			u.forget(key)
			u.Flush()
			return true
		}
		return false
	}
	changed := false
	if ev.UID < 0 && u.users && isUserManager(ev.Name) {
		changed = u.userUnit(ctx, info)
	}
	if u.consider(ev.UID, info) {
		changed = true
	}
	u.Flush()
	return changed
}

// reloaded ends a manager's reload (ReloadFinished; also one whose start
// was not seen): one scan takes in the units as they are now, without
// the flapping that following each unit's UnitRemoved and UnitNew would
// cause (every unit forgotten, then adopted one by one, each plan over a
// partial set). After `daemon-reexec` it is what re-adopts
// the units at all: systemd 252 sends UnitRemoved for every unit and no
// UnitNew. It reports whether the workloads changed or a write was held.
func (u *Placement) reloaded(uid int) bool {
	was := u.reloading[uid]
	delete(u.reloading, uid)
	if m := u.managerOf(uid); m != nil {
		m.Overflowed() // the scan covers what was dropped
	}
	before := len(u.workloads)
	changed := u.Scan()
	held := u.held && len(u.reloading) == 0
	if held {
		u.held = false
	}
	u.log.WithFields(logrus.Fields{"manager": managerName(uid), "workloads": len(u.workloads), "before": before, "changed": changed, "start_seen": was}).Info("the systemd manager reloaded: units listed again")
	return changed || held
}

// dropUnloaded forgets the record of a unit its manager dropped from
// memory (UnitRemoved) when the daemon's value went with it (a transient
// unit's drop-ins are removed with it); a value that outlives the unit
// (lingering) keeps its record for a unit loaded again under that name,
// and an unknown one keeps it for dropGone and restore to decide.
func (u *Placement) dropUnloaded(uid int, name string) {
	if u.workloads[workloadKey(uid, name)] != nil {
		return
	}
	k := statefile.UnitRecord{Manager: managerName(uid), Unit: name}.Key()
	r := u.records[k]
	if r == nil || !r.Written() || r.Created {
		return
	}
	if _, known, lingers := lingering(r); known && !lingers {
		delete(u.records, k)
		u.Dirty = true
	}
}

// consider adopts info's unit (of manager uid) if it is an active unit of
// a managed slice with a cgroup, and forgets it if it no longer is; it
// reports a change.
func (u *Placement) consider(uid int, info systemd.UnitInfo) bool {
	key := workloadKey(uid, info.Name)
	_, had := u.workloads[key]
	want := u.managed(uid, info) && (uid >= 0 || info.Name != OwnUnit) && info.ControlGroup != "" &&
		(info.ActiveState == "active" || info.ActiveState == "reloading" || info.ActiveState == "activating")
	switch {
	case want && !had:
		u.adopt(uid, info)
		return true
	case !want && had:
		u.forget(key)
		return true
	case want && had:
		_, changed := u.refresh(u.workloads[key], info)
		return changed
	}
	return false
}

// refresh takes in what the manager says of a workload's AllowedCPUs=
// now (info) where it is not what the daemon last set or saw (w.cpus), or
// was set again since (rewritten: also to the very same value). A value
// back at the unit's original means the daemon's value is gone (a
// daemon-reload drops a runtime value that a drop-in of the same name in
// /etc/systemd/system.control shadows); any other is someone else's,
// which becomes the unit's original and bounds the choice from the next
// plan on. It reports whether the original changed (theirs) and whether
// anything did.
func (u *Placement) refresh(w *unitWorkload, info systemd.UnitInfo) (theirs, changed bool) {
	cur := sysfs.NewCPUSet(info.AllowedCPUs...)
	again := rewritten(w.rec, info.DropInPaths)
	if cur.Equal(w.cpus) && !again {
		return false, false
	}
	log := u.log.WithFields(logrus.Fields{"unit": w.name, "manager": managerName(w.uid), "allowed_cpus": cur.String(), "was": w.cpus.String()})
	if s := cur.String(); s == w.rec.Original && !again {
		log.Info("AllowedCPUs is back at the unit's original: the value the daemon set is gone")
		u.Restored(placement.UnitEntry(w.rec))
	} else {
		if again {
			log = log.WithField("dropins", dropIns(info.DropInPaths))
		}
		log.Warn("AllowedCPUs was changed by someone else; that value is kept as the unit's original")
		u.Theirs(placement.UnitEntry(w.rec), s)
		theirs = true
	}
	w.rec.DropIns = ""
	w.cpus = cur
	return theirs, true
}

// managed reports whether info's unit (of manager uid) is a workload: a
// unit of a managed slice of the system manager; a user's manager,
// user@UID.service, while user slices are managed and cpuset is not
// delegated to it; or a unit of a managed user slice in a user's manager
// that can place it.
func (u *Placement) managed(uid int, info systemd.UnitInfo) bool {
	if uid >= 0 {
		p := u.people[uid]
		return p != nil && p.mgr != nil && u.userManaged[info.Slice]
	}
	if u.slices[info.Slice] {
		return true
	}
	if !u.users || !isUserManager(info.Name) {
		return false
	}
	p := u.people[userManagerUID(info.Name)]
	return p == nil || !p.delegated
}

// adopt makes info's unit a workload, with the record a crashed or earlier
// run saved for it if state.json has one (reconciled with what the unit's
// AllowedCPUs= is now), else a new one.
func (u *Placement) adopt(uid int, info systemd.UnitInfo) {
	cur := sysfs.NewCPUSet(info.AllowedCPUs...)
	key := statefile.UnitRecord{Manager: managerName(uid), Unit: info.Name}.Key()
	log := u.log.WithFields(logrus.Fields{"unit": info.Name, "slice": info.Slice, "manager": managerName(uid)})
	r := u.records[key]
	if r == nil {
		r = &statefile.UnitRecord{Manager: managerName(uid), Unit: info.Name, Original: cur.String()}
		u.records[key] = r
	} else {
		switch s := cur.String(); {
		case !r.Written():
			r.Original, r.DropIns = s, ""
		case s == r.Original:
			r.Applied, r.Pending, r.DropIns = "", "", ""
		case placement.Ours(placement.UnitEntry(r), s, !rewritten(r, info.DropInPaths), placement.SameValue):
			// A write under way (Pending) made the drop-in anew: its
			// identity now is the daemon's.
			log.WithFields(logrus.Fields{"original": r.Original, "cpus": s}).Info("original AllowedCPUs recovered from saved state")
			r.Applied, r.Pending, r.DropIns = s, "", dropIns(info.DropInPaths)
		default:
			log.WithFields(logrus.Fields{"saved_original": r.Original, "applied": r.Applied, "cpus": s, "dropins": dropIns(info.DropInPaths)}).Warn("AllowedCPUs was changed by someone else while the daemon did not follow the unit; that value is kept as the original")
			u.Theirs(placement.UnitEntry(r), s)
			r.DropIns = ""
		}
	}
	u.Dirty = true
	w := &unitWorkload{name: info.Name, slice: info.Slice, uid: uid, cgroup: filepath.Join(u.cgroupRoot, info.ControlGroup), rec: r, cpus: cur}
	if use, err := sysfs.DirUsage(w.cgroup); err == nil {
		w.avg, w.lastAt = w.avg.Update(use, 0, u.cfg.UtilHalfLife), time.Now()
	}
	u.workloads[workloadKey(uid, info.Name)] = w
	u.watchFocus(w)
	u.backoff.Reset()
	log.WithFields(logrus.Fields{"allowed_cpus": cur.String(), "original": r.Original}).Info("adopted unit")
}

// forget drops a workload. Its record stays while it holds a value of
// ours (a stopped service keeps its runtime AllowedCPUs=; it is reset at
// exit) or it is a scope we started.
func (u *Placement) forget(key string) {
	w, ok := u.workloads[key]
	if !ok {
		return
	}
	delete(u.workloads, key)
	u.unwatchFocus(w)
	if !w.rec.Written() && !w.rec.Created {
		delete(u.records, w.rec.Key())
	}
	u.Dirty = true
	u.clock.Remove(key)
	u.log.WithFields(logrus.Fields{"unit": w.name, "manager": managerName(w.uid)}).Info("unit gone")
}
