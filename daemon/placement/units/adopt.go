package units

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/godbus/dbus/v5"
	"github.com/sirupsen/logrus"

	"github.com/schedpolicyd/schedpolicyd/cgroup"
	"github.com/schedpolicyd/schedpolicyd/daemon/statefile"
	"github.com/schedpolicyd/schedpolicyd/sysfs"
	"github.com/schedpolicyd/schedpolicyd/systemd"
)

// Scan lists the managed slices' units of the system manager, adopting
// new ones and forgetting those gone, and asks each user's link for a
// listing of its manager (whose units come later, as the link's
// message); it reports whether the set changed. Used at start, after
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
		u.e.Log.WithError(err).WithField("read", len(list)).Warn("listing the managed slices' units was cut short: the units read are taken in, none is forgotten, and the next sample lists them again")
	}
	u.sayRefusedSystem()
	if !complete && len(list) == 0 {
		u.setRescan(true)
		return changed
	}
	if u.users && complete {
		if u.scanUsers(list) {
			changed = true
		}
	}
	for _, info := range list {
		if !u.managed(-1, info) {
			continue
		}
		seen[workloadKey(-1, info.Name)] = true
		if u.consider(-1, u.systemView(info)) {
			changed = true
		}
	}
	for _, p := range u.people {
		if p.link == nil {
			continue
		}
		u.askLingering(p)
		p.link.ask(func(w *linkWork) { w.list = true })
	}
	if complete {
		for k, w := range u.workloads {
			if w.uid < 0 && !seen[k] {
				u.forget(k)
				changed = true
			}
		}
		u.dropGone(ctx)
	}
	u.setRescan(!complete)
	u.e.Flush()
	return changed
}

// systemView is a system manager's unit as viewed on the loop (its
// drop-ins are root's).
func (u *Placement) systemView(info systemd.UnitInfo) unitView { return viewOf(info) }

// sayRefusedSystem warns of the values the system manager sent that
// systemd cannot have (a unit left out), once per unit and property.
func (u *Placement) sayRefusedSystem() {
	errs, more := u.mgr.TakeRefused()
	if len(errs) > 0 || more > 0 {
		if u.systemRefused == nil {
			u.systemRefused = &userManager{uid: -1}
		}
		u.sayRefused(u.systemRefused, errs, more)
	}
}

// setRescan notes whether the last scan was cut short; the end of a run
// of cut-short scans is logged.
func (u *Placement) setRescan(on bool) {
	if u.rescan && !on {
		u.e.Log.WithField("workloads", len(u.workloads)).Info("the managed slices' units listed in full again")
	}
	u.rescan = on
}

// dropGone drops the records of the system manager's units it no longer
// knows (a transient scope or service that ended): their runtime values
// went with them. A user's records are its link's listings' to decide
// (takeUserList).
func (u *Placement) dropGone(ctx context.Context) {
	for k, r := range u.records {
		if recordUID(r.Manager) >= 0 || u.workloads[workloadKey(-1, r.Unit)] != nil {
			continue
		}
		if info, err := u.mgr.UnitInfo(ctx, r.Unit); err == nil && info.LoadState == "not-found" || isNoSuchUnit(err) {
			if _, _, lingers := lingering(r); lingers && r.Written() {
				continue // the value comes back with a unit of that name
			}
			delete(u.records, k)
			u.e.Dirty = true
		}
	}
}

// isNoSuchUnit reports whether err is systemd's "no such unit" answer.
func isNoSuchUnit(err error) bool {
	var e dbus.Error
	return errors.As(err, &e) && (e.Name == "org.freedesktop.systemd1.NoSuchUnit" || e.Name == "org.freedesktop.systemd1.LoadFailed")
}

// isDBusError reports whether err is a D-Bus error answer (the manager
// said no), not a failure of the call itself.
func isDBusError(err error) bool {
	var e dbus.Error
	return errors.As(err, &e)
}

// onEvent follows one message of EventsC: a signal of the system manager,
// a user logging in or out, the system manager's connection closing, a
// focus change; it reports whether the workloads changed. After an
// overflow (signals lost) it rescans.
func (u *Placement) onEvent(msg unitMsg) bool {
	if u.mgr == nil {
		return false
	}
	switch {
	case msg.closed:
		u.e.Log.Warn("the connection to the systemd manager closed; units are no longer followed")
		u.Close()
		return false
	case msg.user != nil:
		return u.onUser(*msg.user)
	case len(msg.focus) > 0 || msg.focusOverflow:
		return u.onFocus(msg)
	}
	ev := msg.ev
	switch {
	case ev.Kind == systemd.ReloadStarted:
		u.reloading[-1] = true
		u.e.Log.WithField("manager", managerName(-1)).Info("the systemd manager is reloading: its units are held (not forgotten, not set) until it is done")
		return false
	case ev.Kind == systemd.ReloadFinished:
		return u.reloaded(-1)
	case u.reloading[-1]:
		// Every unit is dropped and loaded again: the scan at the end
		// says which are there.
		return false
	}
	if u.mgr.Overflowed() {
		return u.Scan()
	}
	if systemd.UnitType(ev.Name) != "Service" && systemd.UnitType(ev.Name) != "Scope" {
		return false
	}
	key := workloadKey(-1, ev.Name)
	if ev.Kind == systemd.UnitDropped {
		changed := false
		if _, ok := u.workloads[key]; ok {
			u.forget(key)
			changed = true
		}
		u.dropUnloaded(-1, ev.Name)
		u.e.Flush()
		return changed
	}
	ctx, cancel := context.WithTimeout(context.Background(), unitOpTimeout)
	defer cancel()
	info, err := u.mgr.LoadedUnitInfo(ctx, ev.Name)
	if err != nil {
		u.sayRefusedSystem()
		if _, ok := u.workloads[key]; ok {
			u.forget(key)
			u.e.Flush()
			return true
		}
		return false
	}
	changed := false
	if u.users && isUserManager(ev.Name) {
		changed = u.userUnit(info)
	}
	if u.consider(-1, u.systemView(info)) {
		changed = true
	}
	u.e.Flush()
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
	u.mgr.Overflowed() // the scan covers what was dropped
	before := len(u.workloads)
	changed := u.Scan()
	held := u.held[uid]
	delete(u.held, uid)
	u.e.Log.WithFields(logrus.Fields{"manager": managerName(uid), "workloads": len(u.workloads), "before": before, "changed": changed, "start_seen": was}).Info("the systemd manager reloaded: units listed again")
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
		u.e.Dirty = true
	}
}

// consider adopts v's unit (of manager uid) if it is an active unit of
// a managed slice with a cgroup where its manager may have one, and
// forgets it if it no longer is; it reports a change.
func (u *Placement) consider(uid int, v unitView) bool {
	key := workloadKey(uid, v.Name)
	_, had := u.workloads[key]
	want := u.managed(uid, v.UnitInfo) && (uid >= 0 || v.Name != OwnUnit) && v.ControlGroup != "" &&
		(v.ActiveState == "active" || v.ActiveState == "reloading" || v.ActiveState == "activating")
	var dir string
	if want {
		var err error
		if dir, err = u.unitCgroupDir(uid, v); err != nil {
			u.refuseUnit(uid, v.Name, "ControlGroup", err)
			want = false
		}
	}
	if want && !had && uid >= 0 && u.userCount(uid) >= maxUserWorkloads {
		if p := u.people[uid]; p != nil && !p.full {
			p.full = true
			u.e.Log.WithFields(logrus.Fields{"uid": uid, "unit": v.Name, "max": maxUserWorkloads}).Warn("a user's manager has more units in the managed slices than the daemon places; the others are not placed")
		}
		want = false
	}
	switch {
	case want && !had:
		u.adopt(uid, v, dir)
		return true
	case !want && had:
		u.forget(key)
		return true
	case want && had:
		_, changed := u.refresh(u.workloads[key], v)
		return changed
	}
	return false
}

// userCount is how many workloads uid's manager has.
func (u *Placement) userCount(uid int) int {
	n := 0
	for _, w := range u.workloads {
		if w.uid == uid {
			n++
		}
	}
	return n
}

// cgroupDir is where the cgroup of a unit of manager uid is, from its
// ControlGroup property: below the cgroup root, and for a user's unit
// below the cgroup of the user's manager (user@UID.service's, as the
// system manager says), which is all a user's manager can have. Errors
// say why not: the path is not clean and absolute
// (systemd.CheckControlGroup), leaves the cgroup root, or leaves the
// user's manager's cgroup.
func (u *Placement) cgroupDir(uid int, cg string) (string, error) {
	if err := systemd.CheckControlGroup(cg); err != nil || cg == "" || cg == "/" {
		if err == nil {
			err = errors.New("not a unit's cgroup")
		}
		return "", err
	}
	dir := filepath.Join(u.cgroupRoot, cg)
	if !strings.HasPrefix(dir, u.cgroupRoot+"/") {
		return "", fmt.Errorf("%s is not below %s", systemd.Quote(cg), u.cgroupRoot)
	}
	if uid >= 0 {
		p := u.people[uid]
		if p == nil || p.cgroup == "" || !strings.HasPrefix(cg, p.cgroup+"/") {
			own := ""
			if p != nil {
				own = p.cgroup
			}
			return "", fmt.Errorf("%s is not below the cgroup of the user's manager (%s)", systemd.Quote(cg), own)
		}
	}
	return dir, nil
}

// unitCgroupDir is cgroupDir for unit v of manager uid; a user's unit's
// cgroup must moreover be the one its manager gives a unit of that name
// in that slice (USER@UID.SERVICE/SLICE/NAME, as systemd names cgroups:
// the user slices are top-level in a user's manager), so that no two of
// a user's units share one and none names a cgroup below another's.
func (u *Placement) unitCgroupDir(uid int, v unitView) (string, error) {
	dir, err := u.cgroupDir(uid, v.ControlGroup)
	if err != nil || uid < 0 {
		return dir, err
	}
	if want := u.people[uid].cgroup + "/" + v.Slice + "/" + v.Name; v.ControlGroup != want {
		return "", fmt.Errorf("%s is not the cgroup of unit %s in %s (%s)", systemd.Quote(v.ControlGroup), v.Name, v.Slice, systemd.Quote(want))
	}
	return dir, nil
}

// refuseUnit warns, once per unit and property, that a unit of manager
// uid is not placed because of what its manager said of it.
func (u *Placement) refuseUnit(uid int, unit, field string, err error) {
	p := u.people[uid]
	if uid < 0 {
		if u.systemRefused == nil {
			u.systemRefused = &userManager{uid: -1}
		}
		p = u.systemRefused
	}
	if p == nil {
		return
	}
	u.sayRefused(p, []error{&systemd.InvalidError{Manager: managerName(uid), Unit: unit, Field: field, Why: err.Error()}}, 0)
}

// refresh takes in what the manager says of a workload's AllowedCPUs=
// now (v) where it is not what the daemon last set or saw (w.cpus), or
// was set again since (rewritten: also to the very same value). A value
// back at the unit's original means the daemon's value is gone (a
// daemon-reload drops a runtime value that a drop-in of the same name in
// /etc/systemd/system.control shadows); any other is someone else's,
// which becomes the unit's original and bounds the choice from the next
// plan on. It reports whether the original changed (theirs) and whether
// anything did.
func (u *Placement) refresh(w *unitWorkload, v unitView) (theirs, changed bool) {
	cur := sysfs.NewCPUSet(v.AllowedCPUs...)
	again := rewritten(w.rec, v.dropIDs)
	if cur.Equal(w.cpus) && !again {
		return false, false
	}
	log := u.e.Log.WithFields(logrus.Fields{"unit": w.name, "manager": managerName(w.uid), "allowed_cpus": cur.String(), "was": w.cpus.String()})
	if s := cur.String(); s == w.rec.Original && !again {
		log.Info("AllowedCPUs is back at the unit's original: the value the daemon set is gone")
		u.e.Restored(&w.rec.Values)
	} else {
		if again {
			log = log.WithField("dropins", v.dropIDs)
		}
		log.Warn("AllowedCPUs was changed by someone else; that value is kept as the unit's original")
		u.e.Theirs(&w.rec.Values, s)
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
// whose link is up.
func (u *Placement) managed(uid int, info systemd.UnitInfo) bool {
	if uid >= 0 {
		p := u.people[uid]
		return p != nil && p.link != nil && p.up && u.userManaged[info.Slice]
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

// adopt makes v's unit (its cgroup at dir, cgroupDir) a workload, with
// the record a crashed or earlier run saved for it if state.json has one
// (reconciled with what the unit's AllowedCPUs= is now), else a new one.
func (u *Placement) adopt(uid int, v unitView, dir string) {
	cur := sysfs.NewCPUSet(v.AllowedCPUs...)
	key := statefile.UnitRecord{Manager: managerName(uid), Unit: v.Name}.Key()
	log := u.e.Log.WithFields(logrus.Fields{"unit": v.Name, "slice": v.Slice, "manager": managerName(uid)})
	r := u.records[key]
	if r == nil {
		r = &statefile.UnitRecord{Manager: managerName(uid), Unit: v.Name, Values: statefile.Values{Original: cur.String()}}
		u.records[key] = r
	} else {
		switch s := cur.String(); {
		case !r.Written():
			r.Original, r.DropIns = s, ""
		case s == r.Original:
			r.Applied, r.Pending, r.DropIns = "", "", ""
		case r.Ours(s, !rewritten(r, v.dropIDs), nil):
			// A write under way (Pending) made the drop-in anew: its
			// identity now is the daemon's.
			log.WithFields(logrus.Fields{"original": r.Original, "cpus": s}).Info("original AllowedCPUs recovered from saved state")
			r.Applied, r.Pending, r.DropIns = s, "", v.dropIDs
		default:
			log.WithFields(logrus.Fields{"saved_original": r.Original, "applied": r.Applied, "cpus": s, "dropins": v.dropIDs}).Warn("AllowedCPUs was changed by someone else while the daemon did not follow the unit; that value is kept as the original")
			u.e.Theirs(&r.Values, s)
			r.DropIns = ""
		}
	}
	u.e.Dirty = true
	w := &unitWorkload{name: v.Name, slice: v.Slice, uid: uid, cgroup: dir, rec: r, cpus: cur}
	if use, err := cgroup.DirUsage(w.cgroup); err == nil {
		w.avg, w.lastAt = w.avg.Update(use, 0, u.e.Cfg.UtilHalfLife), time.Now()
	}
	u.workloads[workloadKey(uid, v.Name)] = w
	u.e.Pressure.Changed(len(u.workloads)) // the first arms the trigger
	u.watchFocus(w)
	u.e.Backoff.Reset()
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
	u.e.Pressure.Changed(len(u.workloads)) // the last closes the trigger
	u.unwatchFocus(w)
	if !w.rec.Written() && !w.rec.Created {
		delete(u.records, w.rec.Key())
	}
	u.e.Dirty = true
	u.e.Clock.Remove(key)
	u.e.Log.WithFields(logrus.Fields{"unit": w.name, "manager": managerName(w.uid)}).Info("unit gone")
}
