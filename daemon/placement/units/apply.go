package units

import (
	"context"
	"errors"
	"path/filepath"
	"sort"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/schedpolicyd/schedpolicyd/daemon/placement"
	"github.com/schedpolicyd/schedpolicyd/daemon/statefile"
	"github.com/schedpolicyd/schedpolicyd/policy"
	"github.com/schedpolicyd/schedpolicyd/sysfs"
)

// Apply plans placement for policy eff over the units and sets the
// AllowedCPUs= that differ. A unit the plan gives every allowed CPU gets
// its original back (unset stays unset: no value of ours). An
// administrator's AllowedCPUs= (the original) bounds the choice. Each
// value is recorded (Pending) and saved before it is set.
func (u *Placement) Apply(eff policy.Policy, topo policy.Topology, online sysfs.CPUSet, force bool) {
	u.written = 0
	if u.mgr == nil || len(u.workloads) == 0 {
		u.plan = policy.Plan{Policy: eff}
		return
	}
	if !u.Flush() {
		u.plan = policy.Plan{Policy: eff, Lazy: u.plan.Lazy}
		return
	}
	lazy, fresh := placement.LazyInput(u.plan.Lazy, u.asked, eff, u.online, online, force)
	u.asked = eff
	in := policy.Input{
		Topology: topo, Allowed: online.List(), Policy: eff,
		Lazy: lazy, Now: time.Now(), MaxInterval: u.cfg.SampleInterval,
		DisableLazy: fresh, Slices: u.cfg.Slices,
	}
	names := u.sortedNames()
	for _, n := range names {
		w := u.workloads[n]
		if w.override == policy.Performance {
			continue // no restriction of ours: its original below
		}
		cur := w.cpus
		if cur.IsEmpty() {
			cur = online
		}
		in.Loads = append(in.Loads, policy.Load{Name: n, Util: w.avg.Util, Current: cur.List(), Pressure: w.pressure,
			Class: w.class(), Slice: w.slice})
	}
	plan := policy.PlanPlacement(in)
	u.plan, u.online = plan, online

	type set struct {
		w    *unitWorkload
		want sysfs.CPUSet
	}
	var sets []set
	var batch []placement.JournalWrite
	for _, n := range names {
		w := u.workloads[n]
		if u.reloading[w.uid] {
			u.held = true // set once the reload is over (reloaded)
			continue
		}
		want := sysfs.NewCPUSet(plan.CPUs[n]...)
		orig, _ := sysfs.ParseCPUList(w.rec.Original)
		if !orig.IsEmpty() {
			if b := want.Intersect(orig); !b.IsEmpty() {
				want = b
			} else {
				want = orig
			}
		}
		if want.IsEmpty() || want.Equal(online) && orig.IsEmpty() || want.Equal(orig) {
			want = orig // no restriction of ours: the original back
		}
		if want.Equal(w.cpus) {
			continue
		}
		// The original needs no pending value: a crash finds the unit at
		// its original, or at its last value of ours, both known.
		pending := u.pendingFor(want)
		if pending == w.rec.Original {
			pending = ""
		}
		batch = append(batch, placement.JournalWrite{Entry: placement.UnitEntry(w.rec), Pending: pending, Value: want.String()})
		sets = append(sets, set{w, want})
	}
	ctx, cancel := context.WithTimeout(context.Background(), unitOpTimeout)
	defer cancel()
	u.WriteAll(batch, func(i int) placement.WriteOutcome {
		w := sets[i].w
		return u.setOne(ctx, w, sets[i].want, plan.Policies[workloadKey(w.uid, w.name)])
	})
}

// setOne sets want as w's AllowedCPUs= for WriteAll (pol is the policy
// that placed it, for the log), unless someone set a value since it was
// last seen (theirs: skipped) or the unit holds want already. A refusal is
// counted and warned about; the unit's drop-ins are recorded after a set.
func (u *Placement) setOne(ctx context.Context, w *unitWorkload, want sysfs.CPUSet, pol policy.Policy) placement.WriteOutcome {
	// A value someone set since we last looked is theirs: it becomes
	// the unit's original (an administrator's AllowedCPUs= bounds the
	// choice from the next plan on), and is not overwritten now.
	m := u.managerOf(w.uid)
	if m == nil {
		return placement.WriteFailed
	}
	if info, err := m.UnitInfo(ctx, w.name); err == nil {
		theirs, changed := u.refresh(w, info)
		if theirs || want.Equal(w.cpus) {
			return placement.WriteSkipped
		}
		if changed {
			// Back at its original: the value is recorded anew.
			u.Begin(placement.UnitEntry(w.rec), u.pendingFor(want))
			if !u.Flush() {
				return placement.WriteFailed
			}
		}
	}
	if err := u.setAllowed(ctx, m, w.name, want); err != nil {
		u.stats.Errors.Add(1)
		u.log.WithError(err).WithFields(logrus.Fields{"unit": w.name, "manager": managerName(w.uid)}).Warn("AllowedCPUs refused")
		return placement.WriteFailed
	}
	u.stats.Writes.Add(1)
	u.written++
	u.log.WithFields(logrus.Fields{"unit": w.name, "from": w.cpus.String(), "to": want.String(), "policy": pol}).Debug("AllowedCPUs set")
	w.cpus = want
	w.rec.DropIns = ""
	if paths, err := m.DropInPaths(ctx, w.name); err == nil {
		w.rec.DropIns = dropIns(paths)
	}
	return placement.WriteDone
}

// Restore resets every recorded unit whose AllowedCPUs= still holds a
// value of ours to its original (RestoreAll, with unitRestore), workloads
// or not (a stopped service keeps a runtime value), and drops each record
// done; it reports whether everything is back. A value someone else set
// is theirs and stays; a unit systemd no longer knows has nothing left to
// reset.
func (u *Placement) Restore() bool {
	if u.mgr == nil {
		return len(u.recordList()) == 0
	}
	ctx, cancel := context.WithTimeout(context.Background(), unitOpTimeout)
	defer cancel()
	b := &unitRestore{u: u, ctx: ctx}
	defer func() {
		for _, m := range b.temp {
			m.Close()
		}
	}()
	keys := make([]string, 0, len(u.records))
	for k := range u.records {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var todo []*unitRestoring
	for _, k := range keys {
		if r := u.records[k]; r.Written() {
			todo = append(todo, &unitRestoring{key: k, r: r})
		}
	}
	ok := placement.RestoreAll(&u.Journal, b, todo)
	u.dropGone(ctx)
	u.Dirty = true
	return ok
}

// unitRestore is Placement.restore's side of RestoreAll. temp holds
// the user managers it reached for the reset only (closed by restore).
type unitRestore struct {
	u    *Placement
	ctx  context.Context
	temp []unitManager
}

// unitRestoring is one unit record being restored: its key in records,
// and what current found: the unit's manager and its drop-ins.
type unitRestoring struct {
	key   string
	r     *statefile.UnitRecord
	m     unitManager
	paths []string
}

// errLingers: the unit is gone, but the daemon's value outlives it in its
// runtime drop-in (lingering).
var errLingers = errors.New("the unit's runtime drop-in outlives it")

func (b *unitRestore) Entry(it *unitRestoring) placement.Entry { return placement.UnitEntry(it.r) }

// Current reads the unit's AllowedCPUs= through its manager: the system
// manager, a followed user's, or a user's that runs but is not followed
// now (the user's cpuset is no longer delegated), reached for the reset
// only. ErrGone: the user or the unit is gone, and the daemon's value
// with it.
func (b *unitRestore) Current(it *unitRestoring) (string, error) {
	u, r := b.u, it.r
	uid := recordUID(r.Manager)
	m := u.managerOf(uid)
	if uid >= 0 && m == nil {
		if u.userGone(r) {
			delete(u.records, it.key)
			return "", placement.ErrGone
		}
		var err error
		if m, err = u.connect(b.ctx, uid); err != nil {
			u.log.WithError(err).WithFields(logrus.Fields{"unit": r.Unit, "manager": r.Manager}).Warn("cannot reach the user's manager to restore AllowedCPUs; it stays in state.json for the next start")
			return "", err
		}
		b.temp = append(b.temp, m)
	}
	it.m = m
	info, err := m.UnitInfo(b.ctx, r.Unit)
	if err == nil && info.LoadState == "not-found" || isNoSuchUnit(err) {
		if path, _, lingers := lingering(r); lingers {
			u.log.WithFields(logrus.Fields{"unit": r.Unit, "manager": r.Manager, "dropin": path, "allowed_cpus": r.Applied + r.Pending}).Warn("the unit is gone but the AllowedCPUs= the daemon set stays in its runtime drop-in, which a unit loaded again under that name starts with, and systemd cannot change it while the unit is not found; it stays in state.json, and the daemon resets it once the unit is back (a reboot removes it)")
			return "", errLingers
		}
		u.Restored(placement.UnitEntry(r)) // gone, and its runtime values with it
		return "", placement.ErrGone
	}
	if err != nil {
		u.log.WithError(err).WithField("unit", r.Unit).Warn("cannot read AllowedCPUs to restore it; it stays in state.json for the next start")
		return "", err
	}
	it.paths = info.DropInPaths
	return sysfs.NewCPUSet(info.AllowedCPUs...).String(), nil
}

// Ours: the unit's identity is its AllowedCPUs= drop-ins as the daemon's
// last write left them (rewritten).
func (b *unitRestore) Ours(it *unitRestoring, cur string) bool {
	return placement.Ours(placement.UnitEntry(it.r), cur, !rewritten(it.r, it.paths), placement.SameValue)
}

// Theirs says so unless the unit is back at its original (its runtime
// value dropped, not replaced).
func (b *unitRestore) Theirs(it *unitRestoring, cur string) {
	r := it.r
	if again := cur != r.Pending && rewritten(r, it.paths); cur != r.Original || again {
		b.u.log.WithFields(logrus.Fields{"unit": r.Unit, "allowed_cpus": cur, "original": r.Original, "dropins": dropIns(it.paths)}).Warn("AllowedCPUs was changed by someone else; not restored")
	}
	r.DropIns = ""
}

// PutBack resets the unit's AllowedCPUs= to its original (setAllowed),
// recording the widening step first.
func (b *unitRestore) PutBack(it *unitRestoring, _ string) bool {
	u, r := b.u, it.r
	e := placement.UnitEntry(r)
	orig, _ := sysfs.ParseCPUList(r.Original)
	if p := u.pendingFor(orig); p != "" && p != r.Pending {
		// The widening step (setAllowed) is a value of ours too:
		// recorded before it is set.
		u.Begin(e, p)
		if !u.Flush() {
			return false
		}
	}
	if err := u.setAllowed(b.ctx, it.m, r.Unit, orig); isNoSuchUnit(err) {
		u.Restored(e)
		return true
	} else if err != nil {
		u.stats.Errors.Add(1)
		u.log.WithError(err).WithField("unit", r.Unit).Warn("cannot restore AllowedCPUs; it stays in state.json for the next start")
		return false
	}
	u.stats.Writes.Add(1)
	u.Restored(e)
	r.DropIns = ""
	if w := u.workloads[workloadKey(recordUID(r.Manager), r.Unit)]; w != nil {
		w.cpus = orig
	}
	return true
}

// setAllowed sets unit name's AllowedCPUs= to cpus. An empty set (unset,
// the unit's original) is reached through every possible CPU first: when
// systemd resets AllowedCPUs= it writes "" to the unit's cpuset.cpus,
// which Linux 6.1 refuses on a populated cgroup (ENOSPC, on v2 as on v1),
// and systemd keeps the old value — the tasks would stay on the CPUs of
// the last placement (seen in the VM of packaging/systemd-test). Every
// possible CPU is accepted and gives the tasks the parent's CPUs, the
// same as unset; then the property is reset, so that systemd reports what
// the unit had.
func (u *Placement) setAllowed(ctx context.Context, m unitManager, name string, cpus sysfs.CPUSet) error {
	if cpus.IsEmpty() && u.unified {
		if all, err := possibleCPUs(sysfsRoot(u.cfg)); err == nil && !all.IsEmpty() {
			if err := m.SetAllowedCPUs(ctx, name, all.List()); err != nil {
				return err
			}
		}
	}
	return m.SetAllowedCPUs(ctx, name, cpus.List())
}

// pendingFor is what a record's Pending must say before cpus is set:
// cpus itself, or for the empty set on cgroup v2 the every-possible-CPU
// value setAllowed passes through (so that a crash between its two steps
// leaves a value the next start knows as ours).
func (u *Placement) pendingFor(cpus sysfs.CPUSet) string {
	if cpus.IsEmpty() && u.unified {
		if all, err := possibleCPUs(sysfsRoot(u.cfg)); err == nil {
			return all.String()
		}
	}
	return cpus.String()
}

// possibleCPUs reads <root>/devices/system/cpu/possible.
func possibleCPUs(root string) (sysfs.CPUSet, error) {
	s, err := sysfs.ReadAttr(filepath.Join(root, "devices/system/cpu/possible"))
	if err != nil {
		return sysfs.CPUSet{}, err
	}
	return sysfs.ParseCPUList(s)
}
