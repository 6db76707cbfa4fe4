package daemon

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/godbus/dbus/v5"
	"github.com/sirupsen/logrus"

	"github.com/schedpolicyd/schedpolicyd/policy"
	"github.com/schedpolicyd/schedpolicyd/sysfs"
	"github.com/schedpolicyd/schedpolicyd/systemd"
)

// Placement modes (Config.Placement).
const (
	// PlacementCgroupfs places the direct children of CgroupRoot by writing
	// their cpuset.cpus: machines without systemd, and cgroup v1, where
	// systemd never manages cpusets.
	PlacementCgroupfs = "cgroupfs"
	// PlacementSystemd places the units of the managed slices through
	// systemd's D-Bus API (SetUnitProperties AllowedCPUs=, runtime only):
	// on a systemd machine a cgroup has one writer, systemd
	// (../shared/docs/SYSTEMD.md §1).
	PlacementSystemd = "systemd"
)

// ResolvePlacement turns a placement setting into a mode and says why:
// "auto" is PlacementSystemd where systemd is PID 1 (/run/systemd/system
// exists, sd_booted(3)) and /sys/fs/cgroup is cgroup v2, else
// PlacementCgroupfs; any other value is returned as it is (New validates
// it).
func ResolvePlacement(mode string) (string, string) {
	if mode != "auto" && mode != "" {
		return mode, "configured"
	}
	if _, err := os.Stat("/run/systemd/system"); err != nil {
		return PlacementCgroupfs, "auto: systemd is not PID 1 here"
	}
	if !sysfs.IsUnified("/sys/fs/cgroup") {
		return PlacementCgroupfs, "auto: /sys/fs/cgroup is cgroup v1, where systemd never manages cpusets"
	}
	return PlacementSystemd, "auto: systemd is PID 1 and /sys/fs/cgroup is cgroup v2"
}

// DefaultManage is the slices placed by default with placement "systemd":
// the daemon's own (schedpolicyctl run starts transient scopes there) and
// the system services.
var DefaultManage = []string{"schedpolicyd.slice", "system.slice"}

// OwnUnit is the daemon's own unit; it is never placed.
const OwnUnit = "schedpolicyd.service"

// unitOpTimeout bounds each batch of calls to the manager made from the
// event loop.
const unitOpTimeout = 10 * time.Second

// unitPlacement places systemd units: each service or scope directly in a
// managed slice is a workload, placed with AllowedCPUs= set at runtime
// through the system manager. Owned by the event loop, like placement.
//
// Units are adopted and forgotten from systemd's UnitNew, JobRemoved and
// UnitRemoved signals, never by polling, and never moved between
// cgroups. The promise of the restore issue holds here too: before setting
// AllowedCPUs= the daemon records the unit's original and the value it
// sets (UnitRecord, saved through save); on exit, and after a crash on the
// next start, it resets exactly the values it set, and only where the unit
// still has them.
type unitPlacement struct {
	cfg   *Config
	log   logrus.FieldLogger
	stats *counters
	save  func() error

	mgr    *systemd.Manager // the system manager; nil until open succeeds
	events <-chan systemd.UnitEvent
	slices map[string]bool // managed slices of the system manager
	// users: manage names a user slice (userSlices), so every user's
	// manager, user@UID.service, is placed as a whole.
	users bool
	// cgroupRoot is where units' ControlGroup paths live (/sys/fs/cgroup);
	// unified: it is cgroup v2, where systemd applies AllowedCPUs=.
	cgroupRoot string
	unified    bool
	warned     bool

	workloads map[string]*unitWorkload // by unit name
	records   map[string]*UnitRecord   // by UnitRecord.key()
	dirty     bool

	idleSamples int
	plan        policy.Plan
	online      sysfs.CPUSet // the CPUs of the last plan: what "unset" gives
}

// unitWorkload is one unit placed as a workload.
type unitWorkload struct {
	name   string
	slice  string
	cgroup string // its cgroup directory (cgroupRoot + ControlGroup)
	rec    *UnitRecord
	// cpus is its AllowedCPUs= as last read or set; empty: unset.
	cpus   sysfs.CPUSet
	avg    policy.UtilAverage
	lastAt time.Time
}

func newUnitPlacement(cfg *Config, log logrus.FieldLogger, stats *counters) *unitPlacement {
	u := &unitPlacement{
		cfg: cfg, log: log.WithField("placement", PlacementSystemd), stats: stats,
		slices:     map[string]bool{},
		cgroupRoot: "/sys/fs/cgroup",
		workloads:  map[string]*unitWorkload{},
		records:    map[string]*UnitRecord{},
	}
	manage := cfg.Manage
	if manage == nil {
		manage = DefaultManage
	}
	for _, s := range manage {
		if userSlices[s] {
			u.users = true
			continue
		}
		u.slices[s] = true
	}
	u.unified = sysfs.IsUnified(u.cgroupRoot)
	return u
}

// load takes the unit records of state.json.
func (u *unitPlacement) load(saved []UnitRecord) {
	for i := range saved {
		r := saved[i]
		u.records[r.key()] = &r
	}
}

// recordList is the unit records state.json must hold now.
func (u *unitPlacement) recordList() []UnitRecord {
	var out []UnitRecord
	for _, r := range u.records {
		if r.written() || r.Created {
			out = append(out, *r)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].key() < out[j].key() })
	return out
}

// flush saves state.json if a record changed; it reports whether
// state.json is up to date (nothing is set before it is).
func (u *unitPlacement) flush() bool {
	if !u.dirty {
		return true
	}
	if u.save == nil {
		return false
	}
	if err := u.save(); err != nil {
		u.log.WithError(err).Warn("cannot save state.json; AllowedCPUs= is not changed until it can be")
		return false
	}
	u.dirty = false
	return true
}

// open connects to the system manager and subscribes to its signals. An
// error is logged once ("placement disabled") and returned; the caller
// keeps running without placement.
func (u *unitPlacement) open() error {
	ctx, cancel := context.WithTimeout(context.Background(), unitOpTimeout)
	defer cancel()
	connect := systemd.ConnectSystem
	if u.cfg.Bus == "none" {
		connect = systemd.ConnectSystemPrivate // no D-Bus means no bus daemon either
	}
	m, err := connect(ctx)
	if err == nil {
		u.events, err = m.Events(ctx)
		if err != nil {
			m.Close()
		}
	}
	if err != nil {
		if !u.warned {
			u.log.WithError(err).Warn("workload placement disabled: cannot reach the systemd manager")
			u.warned = true
		}
		return err
	}
	u.mgr = m
	v, _ := m.Version(ctx)
	slices := make([]string, 0, len(u.slices))
	for s := range u.slices {
		slices = append(slices, s)
	}
	sort.Strings(slices)
	u.log.WithFields(logrus.Fields{"systemd": v, "slices": strings.Join(slices, ","), "cgroup_v2": u.unified}).Info("managing units through systemd")
	if u.users {
		u.log.Info("user slices in manage: each user's manager (user@UID.service) is placed as a whole; its own units cannot be (the cpuset controller is not delegated to user managers)")
	}
	if !u.unified {
		u.log.Warn("cgroup v1: systemd stores AllowedCPUs= but does not apply it; units are placed in name only (use placement \"cgroupfs\" to place cpusets on v1)")
	}
	return nil
}

// close drops the connection.
func (u *unitPlacement) close() {
	if u.mgr != nil {
		u.mgr.Close()
		u.mgr = nil
		u.events = nil
	}
}

// eventsC is the manager's unit signals (nil before open).
func (u *unitPlacement) eventsC() <-chan systemd.UnitEvent { return u.events }

// scan lists the managed slices' units, adopting new ones and forgetting
// those gone; it reports whether the set changed. Used at start, after
// lost signals and on Rebalance.
func (u *unitPlacement) scan() bool {
	if u.mgr == nil {
		return false
	}
	ctx, cancel := context.WithTimeout(context.Background(), unitOpTimeout)
	defer cancel()
	seen := map[string]bool{}
	changed := false
	list, err := u.mgr.Units(ctx, "*.service", "*.scope")
	if err != nil {
		u.log.WithError(err).Warn("listing the managed slices' units")
		return changed
	}
	for _, info := range list {
		if !u.managed(info) {
			continue
		}
		seen[info.Name] = true
		if u.consider(info) {
			changed = true
		}
	}
	for n := range u.workloads {
		if !seen[n] {
			u.forget(n)
			changed = true
		}
	}
	u.dropGone(ctx)
	u.flush()
	return changed
}

// dropGone drops the records of units systemd no longer knows (a
// transient scope or service that ended): their runtime values went with
// them.
func (u *unitPlacement) dropGone(ctx context.Context) {
	for k, r := range u.records {
		if r.Manager != "system" || u.workloads[r.Unit] != nil {
			continue
		}
		if info, err := u.mgr.UnitInfo(ctx, r.Unit); err == nil && info.LoadState == "not-found" || isNoSuchUnit(err) {
			delete(u.records, k)
			u.dirty = true
		}
	}
}

// isNoSuchUnit reports whether err is systemd's "no such unit" answer.
func isNoSuchUnit(err error) bool {
	var e dbus.Error
	return errors.As(err, &e) && (e.Name == "org.freedesktop.systemd1.NoSuchUnit" || e.Name == "org.freedesktop.systemd1.LoadFailed")
}

// onEvent follows one unit signal; it reports whether the workloads
// changed. After an overflow (signals lost) it rescans.
func (u *unitPlacement) onEvent(ev systemd.UnitEvent) bool {
	if u.mgr == nil {
		return false
	}
	if u.mgr.Overflowed() {
		return u.scan()
	}
	if systemd.UnitType(ev.Name) != "Service" && systemd.UnitType(ev.Name) != "Scope" {
		return false
	}
	if ev.Kind == systemd.UnitDropped {
		if _, ok := u.workloads[ev.Name]; ok {
			u.forget(ev.Name)
			u.flush()
			return true
		}
		return false
	}
	ctx, cancel := context.WithTimeout(context.Background(), unitOpTimeout)
	defer cancel()
	info, err := u.mgr.UnitInfo(ctx, ev.Name)
	if err != nil {
		if _, ok := u.workloads[ev.Name]; ok {
			u.forget(ev.Name)
			u.flush()
			return true
		}
		return false
	}
	changed := u.consider(info)
	u.flush()
	return changed
}

// consider adopts info's unit if it is an active unit of a managed slice
// with a cgroup, and forgets it if it no longer is; it reports a change.
func (u *unitPlacement) consider(info systemd.UnitInfo) bool {
	_, had := u.workloads[info.Name]
	want := u.managed(info) && info.Name != OwnUnit && info.ControlGroup != "" &&
		(info.ActiveState == "active" || info.ActiveState == "reloading" || info.ActiveState == "activating")
	switch {
	case want && !had:
		u.adopt(info)
		return true
	case !want && had:
		u.forget(info.Name)
		return true
	}
	return false
}

// managed reports whether info's unit is in a managed slice, or is a
// user's manager while user slices are managed.
func (u *unitPlacement) managed(info systemd.UnitInfo) bool {
	return u.slices[info.Slice] || u.users && isUserManager(info.Name)
}

// adopt makes info's unit a workload, with the record a crashed or earlier
// run saved for it if state.json has one (reconciled with what the unit's
// AllowedCPUs= is now), else a new one.
func (u *unitPlacement) adopt(info systemd.UnitInfo) {
	cur := sysfs.NewCPUSet(info.AllowedCPUs...)
	key := UnitRecord{Manager: "system", Unit: info.Name}.key()
	log := u.log.WithFields(logrus.Fields{"unit": info.Name, "slice": info.Slice})
	r := u.records[key]
	if r == nil {
		r = &UnitRecord{Manager: "system", Unit: info.Name, Original: cur.String()}
		u.records[key] = r
	} else {
		switch s := cur.String(); {
		case !r.written():
			r.Original = s
		case s == r.Original:
			r.Applied, r.Pending = "", ""
		case s == r.Applied || s == r.Pending:
			log.WithFields(logrus.Fields{"original": r.Original, "cpus": s}).Info("original AllowedCPUs recovered from saved state")
			r.Applied, r.Pending = s, ""
		default:
			log.WithFields(logrus.Fields{"saved_original": r.Original, "applied": r.Applied, "cpus": s}).Warn("AllowedCPUs was changed by someone else while no daemon ran; that value is kept as the original")
			r.Original, r.Applied, r.Pending = s, "", ""
		}
	}
	u.dirty = true
	w := &unitWorkload{name: info.Name, slice: info.Slice, cgroup: filepath.Join(u.cgroupRoot, info.ControlGroup), rec: r, cpus: cur}
	if use, err := sysfs.DirUsage(w.cgroup); err == nil {
		w.avg, w.lastAt = w.avg.Update(use, 0, u.cfg.UtilHalfLife), time.Now()
	}
	u.workloads[info.Name] = w
	u.idleSamples = 0
	log.WithFields(logrus.Fields{"allowed_cpus": cur.String(), "original": r.Original}).Info("adopted unit")
}

// forget drops a workload. Its record stays while it holds a value of
// ours (a stopped service keeps its runtime AllowedCPUs=; it is reset at
// exit) or it is a scope we started.
func (u *unitPlacement) forget(name string) {
	w, ok := u.workloads[name]
	if !ok {
		return
	}
	delete(u.workloads, name)
	if !w.rec.written() && !w.rec.Created {
		delete(u.records, w.rec.key())
	}
	u.dirty = true
	u.log.WithField("unit", name).Info("unit gone")
}

// sample reads each unit's cumulative CPU time (cpu.stat) and updates its
// decayed utilisation; it reports whether any was busy.
func (u *unitPlacement) sample() (busy bool) {
	if len(u.workloads) == 0 {
		return false
	}
	u.stats.samples.Add(1)
	now := time.Now()
	for _, w := range u.workloads {
		use, err := sysfs.DirUsage(w.cgroup)
		if err != nil {
			continue
		}
		if use != w.avg.Usage || w.avg.Util > idleUtil {
			busy = true
		}
		w.avg, w.lastAt = w.avg.Update(use, now.Sub(w.lastAt), u.cfg.UtilHalfLife), now
	}
	return busy
}

// sampling reports whether the loop samples periodically: while any unit
// is busy and for idleSamplesBeforeBackoff samples after (no pressure
// trigger yet: then at the backed-off period, sampleEvery).
func (u *unitPlacement) sampling() bool { return len(u.workloads) > 0 }

// sampleEvery is the sampling period: the configured one while a unit is
// busy, doubling while all are idle (as placement.sampleEvery without a
// pressure trigger).
func (u *unitPlacement) sampleEvery() time.Duration {
	return backedOffPeriod(u.cfg.SampleInterval, u.idleSamples)
}

// apply plans placement for policy eff over the units and sets the
// AllowedCPUs= that differ. A unit the plan gives every allowed CPU gets
// its original back (unset stays unset: no value of ours). An
// administrator's AllowedCPUs= (the original) bounds the choice. Each
// value is recorded (Pending) and saved before it is set.
func (u *unitPlacement) apply(eff policy.Policy, topo policy.Topology, online sysfs.CPUSet, force bool) {
	if u.mgr == nil || len(u.workloads) == 0 {
		u.plan = policy.Plan{Policy: eff}
		return
	}
	if !u.flush() {
		u.plan = policy.Plan{Policy: eff, Lazy: u.plan.Lazy}
		return
	}
	in := policy.Input{
		Topology: topo, Allowed: online.List(), Policy: eff,
		Lazy: u.plan.Lazy, Now: time.Now(), MaxInterval: u.cfg.SampleInterval,
		DisableLazy: force,
	}
	if force {
		in.Lazy = policy.LazyState{}
	}
	names := u.sortedNames()
	for _, n := range names {
		w := u.workloads[n]
		cur := w.cpus
		if cur.IsEmpty() {
			cur = online
		}
		in.Loads = append(in.Loads, policy.Load{Name: n, Util: w.avg.Util, Current: cur.List()})
	}
	plan := policy.PlanPlacement(in)
	u.plan, u.online = plan, online

	type set struct {
		w    *unitWorkload
		want sysfs.CPUSet
	}
	var sets []set
	for _, n := range names {
		w := u.workloads[n]
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
		if s := u.pendingFor(want); s != w.rec.Original && w.rec.Pending != s {
			w.rec.Pending = s
			u.dirty = true
		}
		sets = append(sets, set{w, want})
	}
	if len(sets) == 0 || !u.flush() {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), unitOpTimeout)
	defer cancel()
	for _, s := range sets {
		w := s.w
		// A value someone set since we last looked is theirs: it becomes
		// the unit's original (an administrator's AllowedCPUs= bounds the
		// choice from the next plan on), and is not overwritten now.
		if info, err := u.mgr.UnitInfo(ctx, w.name); err == nil {
			if cur := sysfs.NewCPUSet(info.AllowedCPUs...); !cur.Equal(w.cpus) {
				u.log.WithFields(logrus.Fields{"unit": w.name, "allowed_cpus": cur.String(), "was": w.cpus.String()}).Warn("AllowedCPUs was changed by someone else; that value is kept as the unit's original")
				w.rec.Original, w.rec.Applied, w.rec.Pending = cur.String(), "", ""
				w.cpus = cur
				u.dirty = true
				continue
			}
		}
		err := u.setAllowed(ctx, w.name, s.want)
		if err != nil {
			w.rec.Pending = ""
			u.stats.errors.Add(1)
			u.log.WithError(err).WithField("unit", w.name).Warn("AllowedCPUs refused")
			continue
		}
		u.stats.writes.Add(1)
		u.log.WithFields(logrus.Fields{"unit": w.name, "from": w.cpus.String(), "to": s.want.String(), "policy": plan.Policy}).Debug("AllowedCPUs set")
		w.cpus = s.want
		w.rec.Applied, w.rec.Pending = s.want.String(), ""
		if w.rec.Applied == w.rec.Original {
			w.rec.Applied = ""
		}
		u.dirty = true
	}
	u.dirty = true
	u.flush()
}

// restore resets every recorded unit whose AllowedCPUs= still holds a
// value of ours to its original, workloads or not (a stopped service
// keeps a runtime value), and drops each record done; it reports whether
// everything is back. A value someone else set is theirs and stays; a
// unit systemd no longer knows has nothing left to reset.
func (u *unitPlacement) restore() bool {
	if u.mgr == nil {
		return len(u.recordList()) == 0
	}
	ctx, cancel := context.WithTimeout(context.Background(), unitOpTimeout)
	defer cancel()
	ok := true
	keys := make([]string, 0, len(u.records))
	for k := range u.records {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		r := u.records[k]
		if r.Manager != "system" || !r.written() {
			continue
		}
		info, err := u.mgr.UnitInfo(ctx, r.Unit)
		if err == nil && info.LoadState == "not-found" || isNoSuchUnit(err) {
			r.Applied, r.Pending = "", "" // gone, and its runtime values with it
			continue
		}
		if err != nil {
			u.log.WithError(err).WithField("unit", r.Unit).Warn("cannot read AllowedCPUs to restore it; it stays in state.json for the next start")
			ok = false
			continue
		}
		cur := sysfs.NewCPUSet(info.AllowedCPUs...).String()
		if cur != r.Applied && cur != r.Pending {
			if cur != r.Original {
				u.log.WithFields(logrus.Fields{"unit": r.Unit, "allowed_cpus": cur, "original": r.Original}).Warn("AllowedCPUs was changed by someone else; not restored")
			}
			r.Applied, r.Pending = "", ""
			continue
		}
		orig, _ := sysfs.ParseCPUList(r.Original)
		if p := u.pendingFor(orig); p != "" && p != r.Pending {
			// The widening step (setAllowed) is a value of ours too:
			// recorded before it is set.
			r.Pending = p
			u.dirty = true
			if !u.flush() {
				ok = false
				continue
			}
		}
		if err := u.setAllowed(ctx, r.Unit, orig); isNoSuchUnit(err) {
			r.Applied, r.Pending = "", ""
			continue
		} else if err != nil {
			u.stats.errors.Add(1)
			u.log.WithError(err).WithField("unit", r.Unit).Warn("cannot restore AllowedCPUs; it stays in state.json for the next start")
			ok = false
			continue
		}
		u.stats.writes.Add(1)
		r.Applied, r.Pending = "", ""
		if w := u.workloads[r.Unit]; w != nil {
			w.cpus = orig
		}
	}
	u.dropGone(ctx)
	u.dirty = true
	return ok
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
func (u *unitPlacement) setAllowed(ctx context.Context, name string, cpus sysfs.CPUSet) error {
	if cpus.IsEmpty() && u.unified {
		if all, err := possibleCPUs(); err == nil && !all.IsEmpty() {
			if err := u.mgr.SetAllowedCPUs(ctx, name, all.List()); err != nil {
				return err
			}
		}
	}
	return u.mgr.SetAllowedCPUs(ctx, name, cpus.List())
}

// pendingFor is what a record's Pending must say before cpus is set:
// cpus itself, or for the empty set on cgroup v2 the every-possible-CPU
// value setAllowed passes through (so that a crash between its two steps
// leaves a value the next start knows as ours).
func (u *unitPlacement) pendingFor(cpus sysfs.CPUSet) string {
	if cpus.IsEmpty() && u.unified {
		if all, err := possibleCPUs(); err == nil {
			return all.String()
		}
	}
	return cpus.String()
}

// possibleCPUs reads /sys/devices/system/cpu/possible.
func possibleCPUs() (sysfs.CPUSet, error) {
	s, err := sysfs.ReadAttr("/sys/devices/system/cpu/possible")
	if err != nil {
		return sysfs.CPUSet{}, err
	}
	return sysfs.ParseCPUList(s)
}

func (u *unitPlacement) sortedNames() []string {
	names := make([]string, 0, len(u.workloads))
	for n := range u.workloads {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// status lists the units as workloads: the unit name, its cgroup
// directory, the CPUs its AllowedCPUs= gives it (every CPU of the last
// plan when unset) and utilisation.
func (u *unitPlacement) status() []WorkloadStatus {
	var out []WorkloadStatus
	for _, n := range u.sortedNames() {
		w := u.workloads[n]
		cpus := w.cpus
		if cpus.IsEmpty() {
			cpus = u.online
		}
		out = append(out, WorkloadStatus{Name: n, Path: w.cgroup, CPUs: cpus.String(), Util: w.avg.Util, Class: unitClass(n, w.slice)})
	}
	return out
}

// unitClass is a unit's Class (WorkloadStatus): by its slice, or "user"
// for a user's manager placed as a whole.
func unitClass(name, slice string) string {
	switch {
	case isUserManager(name):
		return "user"
	case slice == "system.slice":
		return "service"
	case slice == createSlice:
		return "workload"
	}
	return strings.TrimSuffix(slice, ".slice")
}

// isUserManager reports whether name is a user's manager,
// user@UID.service (a system unit in user-UID.slice).
func isUserManager(name string) bool {
	uid, ok := strings.CutPrefix(name, "user@")
	uid, ok2 := strings.CutSuffix(uid, ".service")
	if !ok || !ok2 || uid == "" {
		return false
	}
	for _, c := range uid {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// userSlices are the slices of a user's manager (systemd
// docs/DESKTOP_ENVIRONMENTS.md). Listed in manage, they mean every
// logged-in user's: since Debian 12's user@.service does not delegate the
// cpuset controller, AllowedCPUs= on units of a user manager is stored and
// never applied (seen in the systemd test VM), so what can be placed is
// each user's manager as a whole, user@UID.service, through the system
// manager: all of that user's apps, background work and session together.
var userSlices = map[string]bool{"app.slice": true, "background.slice": true, "session.slice": true}

// createSlice is where CreateWorkload starts its transient scopes.
const createSlice = "schedpolicyd.slice"

// create starts transient scope NAME.scope in schedpolicyd.slice with pid
// (CreateWorkload, schedpolicyctl run), recorded as created before it is
// started; systemd removes it when its last process exits. Errors: a bad
// name, placement disabled, schedpolicyd.slice not managed, the scope
// exists (fs.ErrExist), or systemd refused.
func (u *unitPlacement) create(name string, pid int) (string, error) {
	if err := ValidWorkloadName(name); err != nil {
		return "", err
	}
	if u.mgr == nil {
		return "", errors.New("workload placement is disabled (systemd manager unreachable)")
	}
	if !u.slices[createSlice] {
		return "", fmt.Errorf("%s is not in manage: created workloads would not be placed", createSlice)
	}
	unit := name + ".scope"
	key := UnitRecord{Manager: "system", Unit: unit}.key()
	if _, ok := u.workloads[unit]; ok {
		return "", fmt.Errorf("workload %s: %w", unit, fs.ErrExist)
	}
	u.records[key] = &UnitRecord{Manager: "system", Unit: unit, Created: true}
	u.dirty = true
	if !u.flush() {
		delete(u.records, key)
		return "", errors.New("cannot save state.json")
	}
	ctx, cancel := context.WithTimeout(context.Background(), unitOpTimeout)
	defer cancel()
	if err := u.mgr.StartScope(ctx, unit, createSlice, "schedpolicyd workload "+name, uint32(pid)); err != nil {
		delete(u.records, key)
		u.dirty = true
		u.flush()
		var e dbus.Error
		if errors.As(err, &e) && e.Name == "org.freedesktop.systemd1.UnitExists" {
			return "", fmt.Errorf("workload %s: %w", unit, fs.ErrExist)
		}
		return "", err
	}
	info, err := u.mgr.UnitInfo(ctx, unit)
	if err != nil {
		return "", err
	}
	u.consider(info)
	if w := u.workloads[unit]; w != nil {
		w.rec.Created = true
	}
	u.flush()
	return filepath.Join(u.cgroupRoot, info.ControlGroup), nil
}
