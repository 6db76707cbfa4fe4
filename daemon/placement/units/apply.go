package units

import (
	"context"
	"errors"
	"path/filepath"
	"sort"
	"strconv"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/schedpolicyd/schedpolicyd/daemon/placement"
	"github.com/schedpolicyd/schedpolicyd/daemon/statefile"
	"github.com/schedpolicyd/schedpolicyd/policy"
	"github.com/schedpolicyd/schedpolicyd/sysfs"
	"github.com/schedpolicyd/schedpolicyd/systemd"
)

// PlanInput gives the engine's plan (Engine.Apply) every online CPU, the
// units' loads (not those with an override of performance, nor exempt
// ones: their originals come back) under the slice rules, and their
// keys; nothing to place without the manager or units.
func (u *Placement) PlanInput(online sysfs.CPUSet) (placement.PlanInput, bool) {
	if u.mgr == nil || len(u.workloads) == 0 {
		return placement.PlanInput{}, false
	}
	in := placement.PlanInput{Allowed: online, Names: u.Names(), Slices: true}
	for _, n := range in.Names {
		w := u.workloads[n]
		if w.override == policy.Performance || w.exempt || u.inertUser(w.uid) {
			continue // no restriction of ours: its original below
		}
		cur := w.cpus
		if cur.IsEmpty() {
			cur = online
		}
		in.Loads = append(in.Loads, policy.Load{Name: n, Util: w.avg.Util, Current: cur.List(), Pressure: w.pressure,
			Class: u.class(w), Slice: w.slice})
	}
	return in, true
}

// Write sets the AllowedCPUs= the plan wants that differ. A unit the
// plan gives every allowed CPU, or none (an override of performance, or
// exempt: SetExempt), gets its original back (unset stays unset: no
// value of ours). An administrator's AllowedCPUs= (the original) bounds
// the choice. Each value is recorded (Pending) and saved before it is
// set: the system manager's units here, each user's in a batch handed to
// its link; a user's manager in a reload gets its values once it is
// over.
func (u *Placement) Write(plan policy.Plan, wants []placement.Want) {
	online := u.e.Allowed
	users := map[int][]userWrite{}
	type set struct {
		w    *unitWorkload
		want sysfs.CPUSet
	}
	var sets []set
	var batch []placement.JournalWrite
	for _, x := range wants {
		w := u.workloads[x.Name]
		if w == nil {
			continue
		}
		if u.reloading[w.uid] {
			u.held[w.uid] = true // set once the reload is over (reloaded)
			continue
		}
		want := x.CPUs
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
		if w.uid >= 0 {
			u.queueUserWrite(w, want, pending, users)
			continue
		}
		batch = append(batch, placement.JournalWrite{Values: &w.rec.Values, Pending: pending, Value: want.String()})
		sets = append(sets, set{w, want})
	}
	ctx, cancel := context.WithTimeout(context.Background(), unitOpTimeout)
	defer cancel()
	u.e.WriteAll(batch, func(i int) placement.WriteOutcome {
		w := sets[i].w
		return u.setOne(ctx, w, sets[i].want, plan.Policies[workloadKey(w.uid, w.name)])
	})
	u.sendUserWrites(users)
}

// queueUserWrite adds the write of want to a user's unit to that user's
// batch (users, by uid), its pending value recorded (saved with the
// system units' batch, or by sendUserWrites); a user whose previous batch
// is still with its link gets none now, and another plan when the link
// answers.
func (u *Placement) queueUserWrite(w *unitWorkload, want sysfs.CPUSet, pending string, users map[int][]userWrite) {
	p := u.people[w.uid]
	if p == nil || p.link == nil || !p.up {
		return
	}
	if p.writing {
		p.again = true
		return
	}
	if !w.rec.Written() && u.userRecords(w.uid) >= maxUserRecords {
		if !p.recordsFull {
			p.recordsFull = true
			u.e.Log.WithFields(logrus.Fields{"uid": w.uid, "unit": w.name, "max": maxUserRecords}).Warn("the daemon holds as many records of a user's units as it keeps; no new AllowedCPUs= is set on that user's units until some are reset")
		}
		return
	}
	if pending != "" {
		u.e.Begin(&w.rec.Values, pending)
	}
	users[w.uid] = append(users[w.uid], userWrite{key: w.rec.Key(), name: w.name, want: want, expect: w.cpus.String(), expectIDs: w.rec.DropIns})
}

// maxUserRecords bounds the records of one user's units that hold a
// value of ours (state.json keeps each until it is reset): a unit that
// comes and goes leaves its record until a listing finds it gone.
const maxUserRecords = 2 * maxUserWorkloads

// userRecords is how many records of uid's units hold a value of ours.
func (u *Placement) userRecords(uid int) int {
	n, m := 0, managerName(uid)
	for _, r := range u.records {
		if r.Manager == m && r.Written() {
			n++
		}
	}
	return n
}

// sendUserWrites hands each user's batch to its link, once state.json
// holds their pending values (nothing is sent without: they stay
// recorded in memory, saved with the next save, as WriteAll's). The
// results come back as the link's message (takeUserWritten).
func (u *Placement) sendUserWrites(users map[int][]userWrite) {
	if len(users) == 0 || !u.e.Flush() {
		return
	}
	for uid, ws := range users {
		p := u.people[uid]
		p.writing = true
		u.e.Written += len(ws)
		p.link.ask(func(w *linkWork) { w.writes = append(w.writes, ws...) })
	}
}

// takeUserWritten takes a user's link's results of a batch of writes (see
// writeResult), as WriteAll steps the system units' batch: done, the
// value is applied; refused or not made, the pending value is cleared;
// the unit changed meanwhile, what it holds is taken in (refresh) and it
// is planned again; unknown (the connection failed during the call),
// the pending value stays recorded, as a crash would leave it. It
// reports whether the user's units wait for another plan.
func (u *Placement) takeUserWritten(p *userManager, results []writeResult) bool {
	p.writing = false
	replan := p.again
	p.again = false
	for _, r := range results {
		rec := u.records[r.key]
		if rec == nil {
			continue
		}
		e := &rec.Values
		w := u.workloads[workloadKey(p.uid, r.name)]
		log := u.e.Log.WithFields(logrus.Fields{"unit": r.name, "manager": managerName(p.uid)})
		switch r.outcome {
		case writeDone:
			u.e.Done(e, r.want.String())
			rec.DropIns = r.dropIDs
			u.e.Stats.Writes.Add(1)
			if u.unified && !p.applies && !p.inert && p.check == "" && !r.want.IsEmpty() {
				// Looked at two samples from now (checkApplied): sampling
				// goes on for them even where every workload is idle.
				p.check, p.checkSamples = r.key, 0
				u.e.Backoff.Reset()
			}
			if w != nil {
				log.WithFields(logrus.Fields{"from": w.cpus.String(), "to": r.want.String()}).Debug("AllowedCPUs set")
				w.cpus = r.want
			}
		case writeChanged:
			if w != nil && r.view != nil {
				u.refresh(w, *r.view)
			}
			u.e.Failed(e)
			replan = true
		case writeGone:
			u.e.Failed(e)
		case writeUnknown:
			u.e.Stats.Errors.Add(1)
			log.WithError(r.err).Warn("setting AllowedCPUs through the user's manager failed on the connection; the value is kept recorded as pending")
		case writeWidened:
			u.e.Stats.Errors.Add(1)
			log.WithError(r.err).WithField("allowed_cpus", r.held.String()).Warn("AllowedCPUs refused after the widening step: the unit holds every possible CPU, recorded as the daemon's value")
			u.e.Done(e, r.held.String())
			rec.DropIns = r.dropIDs
			if w != nil {
				w.cpus = r.held
			}
		default:
			u.e.Stats.Errors.Add(1)
			log.WithError(r.err).Warn("AllowedCPUs refused")
			u.e.Failed(e)
		}
	}
	u.e.Dirty = true
	return replan
}

// setOne sets want as w's AllowedCPUs= for WriteAll (pol is the policy
// that placed it, for the log), unless someone set a value since it was
// last seen (theirs: skipped) or the unit holds want already. A refusal is
// counted and warned about; the unit's drop-ins are recorded after a set.
func (u *Placement) setOne(ctx context.Context, w *unitWorkload, want sysfs.CPUSet, pol policy.Policy) placement.WriteOutcome {
	// A value someone set since we last looked is theirs: it becomes
	// the unit's original (an administrator's AllowedCPUs= bounds the
	// choice from the next plan on), and is not overwritten now.
	m := u.mgr
	if info, err := m.UnitInfo(ctx, w.name); err == nil {
		theirs, changed := u.refresh(w, u.systemView(info))
		if theirs || want.Equal(w.cpus) {
			return placement.WriteSkipped
		}
		if changed {
			// Back at its original: the value is recorded anew.
			u.e.Begin(&w.rec.Values, u.pendingFor(want))
			if !u.e.Flush() {
				return placement.WriteFailed
			}
		}
	}
	if err := u.setAllowed(ctx, m, w.name, want); err != nil {
		u.e.Stats.Errors.Add(1)
		var we *widenedError
		if errors.As(err, &we) {
			u.e.Log.WithError(err).WithFields(logrus.Fields{"unit": w.name, "manager": managerName(w.uid), "allowed_cpus": we.held.String()}).Warn("AllowedCPUs refused after the widening step: the unit holds every possible CPU, recorded as the daemon's value")
			w.cpus = we.held
			w.rec.DropIns = ""
			if paths, err := m.DropInPaths(ctx, w.name); err == nil {
				w.rec.DropIns = dropIns(paths)
			}
			return placement.WriteHeldPending
		}
		u.e.Log.WithError(err).WithFields(logrus.Fields{"unit": w.name, "manager": managerName(w.uid)}).Warn("AllowedCPUs refused")
		return placement.WriteFailed
	}
	u.e.Stats.Writes.Add(1)
	u.e.Written++
	u.e.Log.WithFields(logrus.Fields{"unit": w.name, "from": w.cpus.String(), "to": want.String(), "policy": pol}).Debug("AllowedCPUs set")
	w.cpus = want
	w.rec.DropIns = ""
	if paths, err := m.DropInPaths(ctx, w.name); err == nil {
		w.rec.DropIns = dropIns(paths)
	}
	return placement.WriteDone
}

// Restore resets every recorded unit whose AllowedCPUs= still holds a
// value of ours to its original, workloads or not (a stopped service
// keeps a runtime value), and drops each record done; it reports whether
// everything is back. A value someone else set is theirs and stays; a
// unit systemd no longer knows has nothing left to reset. The system
// manager's units are reset here (Journal.RestoreAll, with unitRestore); a
// user's through its link (restoreUsers), within linkRestoreTimeout.
func (u *Placement) Restore() bool {
	if u.mgr == nil {
		return len(u.records.List()) == 0
	}
	ctx, cancel := context.WithTimeout(context.Background(), unitOpTimeout)
	defer cancel()
	keys := make([]string, 0, len(u.records))
	for k := range u.records {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	sys := &unitRestore{u: u, ctx: ctx}
	var vs []*statefile.Values
	users := map[int][]*statefile.UnitRecord{}
	for _, k := range keys {
		r := u.records[k]
		if !r.Written() {
			continue
		}
		if uid := recordUID(r.Manager); uid >= 0 {
			users[uid] = append(users[uid], r)
			continue
		}
		sys.recs = append(sys.recs, r)
		vs = append(vs, &r.Values)
	}
	sys.ids = make([]string, len(sys.recs))
	ok := u.restoreUsers(ctx, users)
	if !u.e.RestoreAll(vs, sys) {
		ok = false
	}
	u.dropGone(ctx)
	u.e.Dirty = true
	return ok
}

// userRestore is one user's part of restoreUsers: the link asked, the
// request, the records (by key) and each one's restore as the journal
// began it (placement.Journal.BeginRestore: its widening step, and its
// Pending before it); temp: the link was made for the reset.
type userRestore struct {
	uid   int
	link  *userLink
	temp  bool
	req   *linkRestore
	recs  map[string]*statefile.UnitRecord
	steps map[string]placement.Restoring
	reply []restoreResult
}

// restoreUsers resets the users' written records (by uid) through their
// links — a followed user's, or one made for the reset alone while
// user@UID.service runs (its records are forgotten when it does not:
// the user's manager took its runtime values with it) — and waits for
// them all within linkRestoreTimeout. Each widening step (setAllowed)
// is recorded before the links are asked (Journal.BeginRestore: a link
// reads and writes in one go, off the loop), and each result stepped by
// the journal (takeRestored). It reports whether all is back.
func (u *Placement) restoreUsers(ctx context.Context, users map[int][]*statefile.UnitRecord) bool {
	ok := true
	var all []*userRestore
	uids := make([]int, 0, len(users))
	for uid := range users {
		uids = append(uids, uid)
	}
	sort.Ints(uids)
	for _, uid := range uids {
		link, temp := u.linkFor(ctx, uid)
		if link == nil {
			continue
		}
		a := &userRestore{uid: uid, link: link, temp: temp, req: &linkRestore{reply: make(chan []restoreResult, 1)}, recs: map[string]*statefile.UnitRecord{}, steps: map[string]placement.Restoring{}}
		for _, r := range users[uid] {
			// The link decides on a copy as it is before the widening
			// step (setAllowed, to an unset original on cgroup v2),
			// which the journal records before the link is asked, not
			// over a pending value: such a unit is reset without it,
			// which systemd may refuse (its record then waits for the
			// next start).
			a.req.recs = append(a.req.recs, *r)
			a.recs[r.Key()] = r
			widen := ""
			if orig, _ := sysfs.ParseCPUList(r.Original); orig.IsEmpty() {
				widen = u.pendingFor(orig)
			}
			step := u.e.BeginRestore(&r.Values, widen)
			a.steps[r.Key()] = step
			if step.Widened {
				a.req.widen = append(a.req.widen, r.Key())
			}
		}
		all = append(all, a)
	}
	if len(all) == 0 {
		return ok
	}
	if !u.e.Flush() {
		for _, a := range all {
			for _, step := range a.steps {
				u.e.TakeRestore(step, placement.RestoreNotMade, "")
			}
			if a.temp {
				a.link.close()
			}
		}
		return false
	}
	for _, a := range all {
		req := a.req
		a.link.ask(func(w *linkWork) { w.restore = req })
	}
	deadline := time.NewTimer(u.linkTiming.restore)
	defer deadline.Stop()
	for _, a := range all {
		select {
		case a.reply = <-a.req.reply:
		case <-deadline.C:
			u.e.Log.WithField("uid", a.uid).Warn("the user's manager did not answer the reset in time; its units' AllowedCPUs= stay in state.json for the next start")
			ok = false
		}
		if a.temp {
			a.link.close()
		}
		done := map[string]bool{}
		for _, res := range a.reply {
			if r := a.recs[res.key]; r != nil && !done[res.key] {
				done[res.key] = true
				if !u.takeRestored(a.uid, r, a.steps[res.key], res) {
					ok = false
				}
			}
		}
		if len(done) < len(a.recs) {
			ok = false
		}
	}
	return ok
}

// linkFor is the link to reset uid's units through: the followed
// user's, or (temp) one made for the reset when user@UID.service runs.
// When it does not, the user's manager is gone with its runtime values:
// the user's records are forgotten and there is no link. nil too when
// the system manager cannot say (the records stay).
func (u *Placement) linkFor(ctx context.Context, uid int) (link *userLink, temp bool) {
	if p := u.people[uid]; p != nil && p.link != nil {
		return p.link, false
	}
	info, err := u.mgr.UnitInfo(ctx, "user@"+strconv.Itoa(uid)+".service")
	if err != nil && !isNoSuchUnit(err) {
		u.e.Log.WithError(err).WithField("uid", uid).Warn("cannot ask the system manager about the user's manager; its units' AllowedCPUs= stay in state.json for the next start")
		return nil, false
	}
	if err != nil || info.LoadState == "not-found" || info.MainPID == 0 || (info.ActiveState != "active" && info.ActiveState != "reloading") {
		u.forgetUserRecords(uid, "the user's manager is gone (logged out): nothing left to reset; record forgotten")
		return nil, false
	}
	return u.newLink(uid, systemd.UserOptions{Socket: u.userSocket(uid), PeerPID: info.MainPID, MaxCPUs: u.maxCPUs, MaxUnits: maxUserWorkloads * 4}), true
}

// takeRestored takes one result of a user's reset for record r, whose
// restore the journal began as step: it logs what the driver says of it
// (the record as it was before the widening step), lets the journal step
// the record (Journal.TakeRestore, as RestoreAll steps the system
// manager's records) and does the driver's part; it reports whether the
// record is done with.
func (u *Placement) takeRestored(uid int, r *statefile.UnitRecord, step placement.Restoring, res restoreResult) bool {
	log := u.e.Log.WithFields(logrus.Fields{"unit": r.Unit, "manager": r.Manager})
	switch res.outcome {
	case restoreDone, restoreGone:
	case restoreTheirs:
		if again := res.cur != step.Was() && rewritten(r, res.dropIDs); res.cur != r.Original || again {
			log.WithFields(logrus.Fields{"allowed_cpus": res.cur, "original": r.Original, "dropins": res.dropIDs}).Warn("AllowedCPUs was changed by someone else; not restored")
		}
	case restoreLingers:
		log.WithFields(logrus.Fields{"dropin": res.path, "allowed_cpus": r.Applied + step.Was()}).Warn("the unit is gone but the AllowedCPUs= the daemon set stays in its runtime drop-in, which a unit loaded again under that name starts with, and systemd cannot change it while the unit is not found; it stays in state.json, and the daemon resets it once the unit is back (a reboot removes it)")
	case restoreUnknown:
		u.e.Stats.Errors.Add(1)
		log.WithError(res.err).Warn("cannot restore AllowedCPUs (the user's manager failed during the reset); it stays in state.json for the next start")
	case restoreWidened:
		u.e.Stats.Errors.Add(1)
		log.WithError(res.err).Warn("cannot restore AllowedCPUs: the user's manager refused it after the widening step; the unit holds every possible CPU, recorded as the daemon's (pending) value, and is reset at the next restore")
	default:
		if res.err != nil {
			u.e.Stats.Errors.Add(1)
		}
		log.WithError(res.err).Warn("cannot restore AllowedCPUs; it stays in state.json for the next start")
	}
	u.e.TakeRestore(step, res.outcome.result(), res.cur)
	switch res.outcome {
	case restoreDone:
		u.e.Stats.Writes.Add(1)
		r.DropIns = ""
		if w := u.workloads[workloadKey(uid, r.Unit)]; w != nil {
			w.cpus, _ = sysfs.ParseCPUList(r.Original)
		}
		return true
	case restoreGone:
		delete(u.records, r.Key())
		return true
	case restoreTheirs:
		r.DropIns = ""
		return true
	}
	return false
}

// unitRestore is Placement.Restore's side of Journal.RestoreAll, for the
// system manager's records recs; ids holds each unit's drop-ins as
// ReadValue found them.
type unitRestore struct {
	u    *Placement
	ctx  context.Context
	recs []*statefile.UnitRecord
	ids  []string
}

// errLingers: the unit is gone, but the daemon's value outlives it in its
// runtime drop-in (lingering).
var errLingers = errors.New("the unit's runtime drop-in outlives it")

// ReadValue reads the unit's AllowedCPUs= through the system manager.
// ErrGoneWithIt: the unit is gone, and the daemon's value with it. The
// unit's identity is its AllowedCPUs= drop-ins as the daemon's last
// write left them (rewritten: Kept); the way back to an unset original
// passes through every possible CPU on cgroup v2 (pendingFor: Widen).
func (b *unitRestore) ReadValue(i int) (placement.Held, error) {
	u, r := b.u, b.recs[i]
	info, err := u.mgr.UnitInfo(b.ctx, r.Unit)
	if err == nil && info.LoadState == "not-found" || isNoSuchUnit(err) {
		if path, _, lingers := lingering(r); lingers {
			u.e.Log.WithFields(logrus.Fields{"unit": r.Unit, "manager": r.Manager, "dropin": path, "allowed_cpus": r.Applied + r.Pending}).Warn("the unit is gone but the AllowedCPUs= the daemon set stays in its runtime drop-in, which a unit loaded again under that name starts with, and systemd cannot change it while the unit is not found; it stays in state.json, and the daemon resets it once the unit is back (a reboot removes it)")
			return placement.Held{}, errLingers
		}
		return placement.Held{}, placement.ErrGoneWithIt // gone, and its runtime values with it
	}
	if err != nil {
		u.e.Log.WithError(err).WithField("unit", r.Unit).Warn("cannot read AllowedCPUs to restore it; it stays in state.json for the next start")
		return placement.Held{}, err
	}
	b.ids[i] = dropIns(info.DropInPaths)
	orig, _ := sysfs.ParseCPUList(r.Original)
	return placement.Held{Value: sysfs.NewCPUSet(info.AllowedCPUs...).String(), Kept: !rewritten(r, b.ids[i]), Widen: u.pendingFor(orig)}, nil
}

// Theirs says so unless the unit is back at its original (its runtime
// value dropped, not replaced).
func (b *unitRestore) Theirs(i int, h placement.Held) {
	r, ids, cur := b.recs[i], b.ids[i], h.Value
	if again := cur != r.Pending && rewritten(r, ids); cur != r.Original || again {
		b.u.e.Log.WithFields(logrus.Fields{"unit": r.Unit, "allowed_cpus": cur, "original": r.Original, "dropins": ids}).Warn("AllowedCPUs was changed by someone else; not restored")
	}
	r.DropIns = ""
}

// WriteBack resets the unit's AllowedCPUs= to its original (setAllowed,
// the widening step recorded by the journal first). A unit systemd no
// longer knows is back too: its runtime value went with it.
func (b *unitRestore) WriteBack(i int, origList string, _ placement.Held) (string, bool, error) {
	u, r := b.u, b.recs[i]
	orig, _ := sysfs.ParseCPUList(origList)
	if err := u.setAllowed(b.ctx, u.mgr, r.Unit, orig); isNoSuchUnit(err) {
		return origList, true, nil
	} else if err != nil {
		u.e.Stats.Errors.Add(1)
		u.e.Log.WithError(err).WithField("unit", r.Unit).Warn("cannot restore AllowedCPUs; it stays in state.json for the next start")
		return "", false, err
	}
	u.e.Stats.Writes.Add(1)
	r.DropIns = ""
	if w := u.workloads[workloadKey(recordUID(r.Manager), r.Unit)]; w != nil {
		w.cpus = orig
	}
	return origList, true, nil
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
//
// An error after the widening step was made is a *widenedError: the unit
// may hold every possible CPU, the value its record's Pending says.
func (u *Placement) setAllowed(ctx context.Context, m unitManager, name string, cpus sysfs.CPUSet) error {
	var possible sysfs.CPUSet
	if cpus.IsEmpty() && u.unified {
		possible, _ = possibleCPUs(sysfsRoot(u.e.Cfg))
	}
	widened, err := setAllowedVia(ctx, m, name, cpus, possible)
	if err != nil && widened {
		return &widenedError{held: possible, err: err}
	}
	return err
}

// setAllowedVia sets cpus as unit name's AllowedCPUs= through m, the one
// place the widening step is written (setAllowed, and a user's link's
// writeOne and restoreOne): an empty cpus with possible given (cgroup
// v2's every possible CPU) is reached through possible first. widened:
// that step was taken, so an error is the value's own refusal after it
// (the unit holds possible); else the error is the first write's.
func setAllowedVia(ctx context.Context, m unitManager, name string, cpus, possible sysfs.CPUSet) (widened bool, err error) {
	if cpus.IsEmpty() && !possible.IsEmpty() {
		if err := m.SetAllowedCPUs(ctx, name, possible.List()); err != nil {
			return false, err
		}
		widened = true
	}
	return widened, m.SetAllowedCPUs(ctx, name, cpus.List())
}

// widenedError is a reset to an unset AllowedCPUs= that failed after its
// widening step (setAllowed, userLink.writeOne and restoreOne): the unit
// holds held, every possible CPU, unless the failed call took effect
// after all. Recorded as the daemon's value (the record's Pending says
// it is ours): the next look finds either that value, ours, or the
// original, and never takes the widening value for someone else's.
type widenedError struct {
	held sysfs.CPUSet
	err  error
}

func (e *widenedError) Error() string {
	return "after the widening step to every possible CPU (" + e.held.String() + "): " + e.err.Error()
}

func (e *widenedError) Unwrap() error { return e.err }

// pendingFor is what a record's Pending must say before cpus is set:
// cpus itself, or for the empty set on cgroup v2 the every-possible-CPU
// value setAllowed passes through (so that a crash between its two steps
// leaves a value the next start knows as ours).
func (u *Placement) pendingFor(cpus sysfs.CPUSet) string {
	if cpus.IsEmpty() && u.unified {
		if all, err := possibleCPUs(sysfsRoot(u.e.Cfg)); err == nil {
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
