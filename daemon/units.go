package daemon

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/godbus/dbus/v5"
	"github.com/sirupsen/logrus"

	"github.com/schedpolicyd/schedpolicyd/daemon/statefile"
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
	if _, err := os.Stat(sdBootedDir); err != nil {
		return PlacementCgroupfs, "auto: systemd is not PID 1 here"
	}
	if !sysfs.IsUnified(cgroupMount) {
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

// unitScanTimeout bounds a scan: it reads two property sets of every
// loaded service and scope of the system manager and of each followed
// user's manager, which a loaded machine may not answer within
// unitOpTimeout; a scan cut short adopts nothing until the next.
const unitScanTimeout = 60 * time.Second

// unitPlacement places systemd units: each service or scope directly in a
// managed slice is a workload, placed with AllowedCPUs= set at runtime
// through the system manager. Owned by the event loop, like placement.
//
// Units are adopted and forgotten from systemd's UnitNew, JobRemoved and
// UnitRemoved signals, never by polling, and never moved between
// cgroups. The promise holds here too, through journal.go: before setting
// AllowedCPUs= the daemon records the unit's original and the value it
// sets (statefile.UnitRecord, saved through save); on exit, and after a
// crash on the next start, it resets exactly the values it set, and only
// where the unit still has them.
type unitPlacement struct {
	cfg   *Config
	log   logrus.FieldLogger
	stats *counters
	// journal saves state.json with the daemon's knob and u.recordList()
	// (journal.go).
	journal

	mgr unitManager // the system manager; nil until open succeeds
	// connect reaches manager uid (-1 the system's; dialManager, or a
	// fake in tests): the system manager at open, a user's when the
	// daemon follows it or resets a value on it.
	connect func(ctx context.Context, uid int) (unitManager, error)
	// written: the units the last apply set AllowedCPUs= on (the
	// placement log line, placementChanged).
	written int
	slices  map[string]bool // managed slices of the system manager
	// users: manage names a user slice (userSlices); userManaged is
	// which. Each logged-in user is followed (users.go): where cpuset is
	// delegated to user@UID.service, the units of those slices in the
	// user's manager are placed through it; elsewhere the user's manager,
	// user@UID.service, is placed as a whole.
	users       bool
	userManaged map[string]bool
	people      map[int]*userManager // by uid
	logind      *systemd.Logind
	userSource  string // "logind" or "system manager"
	// msgs carries every manager's unit signals, logind's user signals
	// and the focus watch's events to the event loop; done ends the
	// goroutines that feed it.
	msgs  chan event
	done  chan struct{}
	focus *focusWatch
	// cgroupRoot is where units' ControlGroup paths live (/sys/fs/cgroup);
	// unified: it is cgroup v2, where systemd applies AllowedCPUs=.
	cgroupRoot string
	unified    bool
	warned     bool

	workloads map[string]*unitWorkload         // by workloadKey
	records   map[string]*statefile.UnitRecord // by UnitRecord.Key()
	// reloading holds the managers (by uid, -1 the system's) between
	// their Reloading(true) and Reloading(false): their unit signals are
	// not followed and their units' AllowedCPUs= not set meanwhile; one
	// scan at the end takes in what changed. held: a plan's write was
	// skipped for it.
	reloading map[int]bool
	held      bool

	// pressure wakes the loop when tasks wait for a CPU anywhere (the
	// machine's /proc/pressure/cpu: every managed slice is in it); nil
	// where the kernel grants no trigger. With it, sampling stops while
	// every unit is idle, as for cgroupfs workloads.
	pressure *sysfs.PressureTrigger
	// clock wakes the loop when a unit with AllowedCPUs= set turns busy
	// (clockwake.go); nil on cgroup v1 (systemd applies no AllowedCPUs=
	// there) or with Config.NoTaskClock.
	clock *clockGate

	backoff sampleBackoff // the sampling back-off (sampleBackoff)
	// asked is the policy the last plan was asked for (lazyInput).
	asked policy.Policy
	// confirm is the pending confirmation of a crowded unit (wake.go);
	// procRoot is where its threads' schedstat is read.
	confirm  confirmation
	procRoot string
	plan     policy.Plan
	online   sysfs.CPUSet // the CPUs of the last plan: what "unset" gives
}

var _ backend = (*unitPlacement)(nil)

// unitWorkload is one unit placed as a workload.
type unitWorkload struct {
	name  string
	slice string
	// uid is the user whose manager owns the unit, -1 for the system
	// manager.
	uid int
	// focused: an app.slice unit whose cgroup's user.xdg.inactive-since
	// is -1 (the focused app, focus.go).
	focused bool
	cgroup  string // its cgroup directory (cgroupRoot + ControlGroup)
	rec     *statefile.UnitRecord
	// cpus is its AllowedCPUs= as last read or set; empty: unset.
	cpus   sysfs.CPUSet
	avg    policy.UtilAverage
	lastAt time.Time
	// pressure is its cgroup's cpu.pressure some avg10, percent (cgroup
	// v2 only; 0 on v1, which has no PSI per cgroup).
	pressure float64
	// stallTotal is that file's cumulative "some" stall at the last
	// sample (0 before the first); stalled is how much it grew since the
	// one before: time in which a task of the unit waited for a CPU.
	stallTotal, stalled time.Duration
	// override is the unit's own placement policy (SetWorkloadPolicy):
	// "" the daemon's, policy.Performance no restriction of ours.
	override policy.Policy
}

func newUnitPlacement(cfg *Config, log logrus.FieldLogger, stats *counters) *unitPlacement {
	u := &unitPlacement{
		cfg: cfg, log: log.WithField("placement", PlacementSystemd), stats: stats,
		slices:      map[string]bool{},
		userManaged: map[string]bool{},
		people:      map[int]*userManager{},
		cgroupRoot:  "/sys/fs/cgroup",
		workloads:   map[string]*unitWorkload{},
		records:     map[string]*statefile.UnitRecord{},
		reloading:   map[int]bool{},
	}
	manage := cfg.Manage
	if manage == nil {
		manage = DefaultManage
	}
	for _, s := range manage {
		if userSlices[s] {
			u.users = true
			u.userManaged[s] = true
			continue
		}
		u.slices[s] = true
	}
	u.connect = func(ctx context.Context, uid int) (unitManager, error) { return dialManager(ctx, cfg.Bus, uid) }
	u.unified = sysfs.IsUnified(u.cgroupRoot)
	return u
}

// load takes the unit records of state.json.
func (u *unitPlacement) load(saved []statefile.UnitRecord) {
	for i := range saved {
		r := saved[i]
		u.records[r.Key()] = &r
	}
}

// recordList is the unit records state.json must hold now.
func (u *unitPlacement) recordList() []statefile.UnitRecord {
	var out []statefile.UnitRecord
	for _, r := range u.records {
		if r.Written() || r.Created {
			out = append(out, *r)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key() < out[j].Key() })
	return out
}

// open connects to the system manager and subscribes to its signals. An
// error is logged once ("placement disabled") and returned; the caller
// keeps running without placement.
func (u *unitPlacement) open() error {
	ctx, cancel := context.WithTimeout(context.Background(), unitOpTimeout)
	defer cancel()
	m, err := u.connect(ctx, -1)
	var events <-chan systemd.UnitEvent
	if err == nil {
		events, err = m.Events(ctx)
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
	u.msgs, u.done = make(chan event, 256), make(chan struct{})
	u.forward(-1, m, events)
	v, _ := m.Version(ctx)
	slices := make([]string, 0, len(u.slices))
	for s := range u.slices {
		slices = append(slices, s)
	}
	sort.Strings(slices)
	u.log.WithFields(logrus.Fields{"systemd": v, "slices": strings.Join(slices, ","), "cgroup_v2": u.unified, "slice_rules": sliceRulesString(u.cfg.Slices)}).Info("managing units through systemd")
	if u.users {
		u.openUsers(ctx)
	}
	if !u.unified {
		u.log.Warn("cgroup v1: systemd stores AllowedCPUs= but does not apply it; units are placed in name only (use placement \"cgroupfs\" to place cpusets on v1)")
	}
	u.procRoot = u.cfg.ProcRoot
	if u.procRoot == "" {
		u.procRoot = "/proc"
	}
	u.pressure = armPressure(u.log, filepath.Join(u.procRoot, "pressure", "cpu"))
	if u.unified && !u.cfg.NoTaskClock {
		u.clock = newClockGate(u.log, func(key string) (time.Duration, error) {
			w := u.workloads[key]
			if w == nil {
				return 0, fmt.Errorf("unit %s gone", key)
			}
			pr, err := sysfs.DirCPUPressure(w.cgroup)
			return pr.Total, err
		}, func(int) float64 { return wakeMargin })
	}
	return nil
}

// pressureC is the PSI trigger's channel; nil without one.
func (u *unitPlacement) pressureC() <-chan struct{} {
	if u.pressure == nil {
		return nil
	}
	return u.pressure.C()
}

// pressureDone is closed when the kernel drops the trigger; nil without
// one.
func (u *unitPlacement) pressureDone() <-chan struct{} {
	if u.pressure == nil {
		return nil
	}
	return u.pressure.Done()
}

// dropPressure closes the trigger (after pressureDone, or at close).
func (u *unitPlacement) dropPressure() {
	if u.pressure != nil {
		u.pressure.Close()
		u.pressure = nil
	}
}

// close drops the connections: the system manager, logind, every
// user's manager and the focus watch.
func (u *unitPlacement) close() {
	if u.mgr == nil {
		return
	}
	close(u.done)
	u.dropPressure()
	u.clock.close()
	u.clock = nil
	u.confirm.drop()
	u.closeUsers()
	u.mgr.Close()
	u.mgr = nil
	u.msgs = nil
	clear(u.reloading)
}

// scan lists the managed slices' units, adopting new ones and forgetting
// those gone; it reports whether the set changed. Used at start, after
// lost signals and on Rebalance.
func (u *unitPlacement) scan() bool {
	if u.mgr == nil {
		return false
	}
	ctx, cancel := context.WithTimeout(context.Background(), unitScanTimeout)
	defer cancel()
	seen := map[string]bool{}
	changed := false
	list, err := u.mgr.Units(ctx, "*.service", "*.scope")
	if err != nil {
		u.log.WithError(err).Warn("listing the managed slices' units")
		return changed
	}
	if u.users {
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
	for k := range u.workloads {
		if !seen[k] {
			u.forget(k)
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
		uid := recordUID(r.Manager)
		if u.workloads[workloadKey(uid, r.Unit)] != nil {
			continue
		}
		m := u.mgr
		if uid >= 0 {
			if u.userGone(r) {
				delete(u.records, k)
				u.dirty = true
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
			u.dirty = true
		}
	}
}

// isNoSuchUnit reports whether err is systemd's "no such unit" answer.
func isNoSuchUnit(err error) bool {
	var e dbus.Error
	return errors.As(err, &e) && (e.Name == "org.freedesktop.systemd1.NoSuchUnit" || e.Name == "org.freedesktop.systemd1.LoadFailed")
}

// onEvent follows one message of eventsC: a unit signal of a manager, a
// user logging in or out, a manager's connection closing, a focus
// change; it reports whether the workloads changed. After an overflow
// (signals lost) it rescans.
func (u *unitPlacement) onEvent(msg unitMsg) bool {
	if u.mgr == nil {
		return false
	}
	switch {
	case msg.closed && msg.uid < 0:
		u.log.Warn("the connection to the systemd manager closed; units are no longer followed")
		u.close()
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
		return u.scan()
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
		u.flush()
		return changed
	}
	ctx, cancel := context.WithTimeout(context.Background(), unitOpTimeout)
	defer cancel()
	info, err := m.LoadedUnitInfo(ctx, ev.Name)
	if err != nil {
		if _, ok := u.workloads[key]; ok {
			u.forget(key)
			u.flush()
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
	u.flush()
	return changed
}

// reloaded ends a manager's reload (ReloadFinished; also one whose start
// was not seen): one scan takes in the units as they are now, without
// the flapping that following each unit's UnitRemoved and UnitNew would
// cause (every unit forgotten, then adopted one by one, each plan over a
// partial set). After `daemon-reexec` it is what re-adopts
// the units at all: systemd 252 sends UnitRemoved for every unit and no
// UnitNew. It reports whether the workloads changed or a write was held.
func (u *unitPlacement) reloaded(uid int) bool {
	was := u.reloading[uid]
	delete(u.reloading, uid)
	if m := u.managerOf(uid); m != nil {
		m.Overflowed() // the scan covers what was dropped
	}
	before := len(u.workloads)
	changed := u.scan()
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
func (u *unitPlacement) dropUnloaded(uid int, name string) {
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
		u.dirty = true
	}
}

// managerOf is uid's manager: the system manager for -1, else the user's
// if it is followed and reachable; nil otherwise.
func (u *unitPlacement) managerOf(uid int) unitManager {
	if uid < 0 {
		return u.mgr
	}
	if p := u.people[uid]; p != nil {
		return p.mgr
	}
	return nil
}

// workloadKey names a unit workload: the unit's name for the system
// manager's, "user:UID/NAME" for a user manager's (two users may run units
// of the same name).
func workloadKey(uid int, name string) string {
	if uid < 0 {
		return name
	}
	return managerName(uid) + "/" + name
}

// managerName is a statefile.UnitRecord's Manager: "system", or "user:UID".
func managerName(uid int) string {
	if uid < 0 {
		return "system"
	}
	return "user:" + strconv.Itoa(uid)
}

// recordUID is the uid of a statefile.UnitRecord's Manager, -1 for "system"
// (validate accepts nothing else).
func recordUID(manager string) int {
	if s, ok := strings.CutPrefix(manager, "user:"); ok {
		if n, err := strconv.Atoi(s); err == nil && n >= 0 {
			return n
		}
	}
	return -1
}

// consider adopts info's unit (of manager uid) if it is an active unit of
// a managed slice with a cgroup, and forgets it if it no longer is; it
// reports a change.
func (u *unitPlacement) consider(uid int, info systemd.UnitInfo) bool {
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
func (u *unitPlacement) refresh(w *unitWorkload, info systemd.UnitInfo) (theirs, changed bool) {
	cur := sysfs.NewCPUSet(info.AllowedCPUs...)
	again := rewritten(w.rec, info.DropInPaths)
	if cur.Equal(w.cpus) && !again {
		return false, false
	}
	log := u.log.WithFields(logrus.Fields{"unit": w.name, "manager": managerName(w.uid), "allowed_cpus": cur.String(), "was": w.cpus.String()})
	if s := cur.String(); s == w.rec.Original && !again {
		log.Info("AllowedCPUs is back at the unit's original: the value the daemon set is gone")
		u.restored(unitEntry(w.rec))
	} else {
		if again {
			log = log.WithField("dropins", dropIns(info.DropInPaths))
		}
		log.Warn("AllowedCPUs was changed by someone else; that value is kept as the unit's original")
		u.theirs(unitEntry(w.rec), s)
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
func (u *unitPlacement) managed(uid int, info systemd.UnitInfo) bool {
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
func (u *unitPlacement) adopt(uid int, info systemd.UnitInfo) {
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
		case ours(unitEntry(r), s, !rewritten(r, info.DropInPaths), sameValue):
			// A write under way (Pending) made the drop-in anew: its
			// identity now is the daemon's.
			log.WithFields(logrus.Fields{"original": r.Original, "cpus": s}).Info("original AllowedCPUs recovered from saved state")
			r.Applied, r.Pending, r.DropIns = s, "", dropIns(info.DropInPaths)
		default:
			log.WithFields(logrus.Fields{"saved_original": r.Original, "applied": r.Applied, "cpus": s, "dropins": dropIns(info.DropInPaths)}).Warn("AllowedCPUs was changed by someone else while the daemon did not follow the unit; that value is kept as the original")
			u.theirs(unitEntry(r), s)
			r.DropIns = ""
		}
	}
	u.dirty = true
	w := &unitWorkload{name: info.Name, slice: info.Slice, uid: uid, cgroup: filepath.Join(u.cgroupRoot, info.ControlGroup), rec: r, cpus: cur}
	if use, err := sysfs.DirUsage(w.cgroup); err == nil {
		w.avg, w.lastAt = w.avg.Update(use, 0, u.cfg.UtilHalfLife), time.Now()
	}
	u.workloads[workloadKey(uid, info.Name)] = w
	u.watchFocus(w)
	u.backoff.reset()
	log.WithFields(logrus.Fields{"allowed_cpus": cur.String(), "original": r.Original}).Info("adopted unit")
}

// forget drops a workload. Its record stays while it holds a value of
// ours (a stopped service keeps its runtime AllowedCPUs=; it is reset at
// exit) or it is a scope we started.
func (u *unitPlacement) forget(key string) {
	w, ok := u.workloads[key]
	if !ok {
		return
	}
	delete(u.workloads, key)
	u.unwatchFocus(w)
	if !w.rec.Written() && !w.rec.Created {
		delete(u.records, w.rec.Key())
	}
	u.dirty = true
	u.clock.remove(key)
	u.log.WithFields(logrus.Fields{"unit": w.name, "manager": managerName(w.uid)}).Info("unit gone")
}

// sample reads each unit's cumulative CPU time (cpu.stat) and updates its
// decayed utilisation, and on cgroup v2 its cpu.pressure (some avg10: the
// planner's saturation rule, as for the cgroupfs path's workloads; and the
// stall since the last sample, which makes a packed unit a candidate for
// a wake's confirmation; v1 has no pressure per cgroup, so both stay 0
// there); it reports whether any was busy.
func (u *unitPlacement) sample() (busy bool) {
	if len(u.workloads) == 0 {
		return false
	}
	u.stats.samples.Add(1)
	now := time.Now()
	for key, w := range u.workloads {
		use, err := sysfs.DirUsage(w.cgroup)
		if err != nil {
			continue
		}
		if use != w.avg.Usage || w.avg.Util > idleUtil {
			busy = true
		}
		u.clock.calm(key, max(use-w.avg.Usage, 0), w.lastAt, now, w.cpus.Size())
		w.avg, w.lastAt = w.avg.Update(use, now.Sub(w.lastAt), u.cfg.UtilHalfLife), now
		if !u.unified {
			continue
		}
		if pr, err := sysfs.DirCPUPressure(w.cgroup); err == nil {
			w.stalled = 0
			if w.stallTotal > 0 && pr.Total > w.stallTotal {
				w.stalled = pr.Total - w.stallTotal
			}
			w.pressure, w.stallTotal = pr.Avg10, pr.Total
		}
	}
	return busy
}

// sampling reports whether the loop samples periodically: while any unit
// is busy and for idleSamplesBeforeBackoff samples after; then it stops
// where the CPU pressure trigger will wake it when a unit's tasks wait for
// a CPU, and keeps sampling at the backed-off period (sampleEvery) where
// there is no trigger (as placement.sampling).
func (u *unitPlacement) sampling() bool {
	if len(u.workloads) == 0 {
		return false
	}
	return u.backoff.sampling(u.pressure != nil)
}

// sampleEvery is the sampling period: the configured one while a unit is
// busy or sampling can stop (a pressure trigger), else doubling while all
// are idle (as placement.sampleEvery).
func (u *unitPlacement) sampleEvery() time.Duration {
	return u.backoff.every(u.cfg.SampleInterval, u.pressure != nil)
}

// apply plans placement for policy eff over the units and sets the
// AllowedCPUs= that differ. A unit the plan gives every allowed CPU gets
// its original back (unset stays unset: no value of ours). An
// administrator's AllowedCPUs= (the original) bounds the choice. Each
// value is recorded (Pending) and saved before it is set.
func (u *unitPlacement) apply(eff policy.Policy, topo policy.Topology, online sysfs.CPUSet, force bool) {
	u.written = 0
	if u.mgr == nil || len(u.workloads) == 0 {
		u.plan = policy.Plan{Policy: eff}
		return
	}
	if !u.flush() {
		u.plan = policy.Plan{Policy: eff, Lazy: u.plan.Lazy}
		return
	}
	lazy, fresh := lazyInput(u.plan.Lazy, u.asked, eff, u.online, online, force)
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
	var batch []journalWrite
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
		batch = append(batch, journalWrite{e: unitEntry(w.rec), pending: pending, value: want.String()})
		sets = append(sets, set{w, want})
	}
	ctx, cancel := context.WithTimeout(context.Background(), unitOpTimeout)
	defer cancel()
	u.writeAll(batch, func(i int) writeOutcome {
		w, want := sets[i].w, sets[i].want
		// A value someone set since we last looked is theirs: it becomes
		// the unit's original (an administrator's AllowedCPUs= bounds the
		// choice from the next plan on), and is not overwritten now.
		m := u.managerOf(w.uid)
		if m == nil {
			return writeFailed
		}
		if info, err := m.UnitInfo(ctx, w.name); err == nil {
			theirs, changed := u.refresh(w, info)
			if theirs || want.Equal(w.cpus) {
				return writeSkipped
			}
			if changed {
				// Back at its original: the value is recorded anew.
				u.begin(unitEntry(w.rec), u.pendingFor(want))
				if !u.flush() {
					return writeFailed
				}
			}
		}
		if err := u.setAllowed(ctx, m, w.name, want); err != nil {
			u.stats.errors.Add(1)
			u.log.WithError(err).WithFields(logrus.Fields{"unit": w.name, "manager": managerName(w.uid)}).Warn("AllowedCPUs refused")
			return writeFailed
		}
		u.stats.writes.Add(1)
		u.written++
		u.log.WithFields(logrus.Fields{"unit": w.name, "from": w.cpus.String(), "to": want.String(), "policy": plan.Policies[workloadKey(w.uid, w.name)]}).Debug("AllowedCPUs set")
		w.cpus = want
		w.rec.DropIns = ""
		if paths, err := m.DropInPaths(ctx, w.name); err == nil {
			w.rec.DropIns = dropIns(paths)
		}
		return writeDone
	})
}

// restore resets every recorded unit whose AllowedCPUs= still holds a
// value of ours to its original (restoreAll, with unitRestore), workloads
// or not (a stopped service keeps a runtime value), and drops each record
// done; it reports whether everything is back. A value someone else set
// is theirs and stays; a unit systemd no longer knows has nothing left to
// reset.
func (u *unitPlacement) restore() bool {
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
	ok := restoreAll(&u.journal, b, todo)
	u.dropGone(ctx)
	u.dirty = true
	return ok
}

// unitRestore is unitPlacement.restore's side of restoreAll. temp holds
// the user managers it reached for the reset only (closed by restore).
type unitRestore struct {
	u    *unitPlacement
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

func (b *unitRestore) entry(it *unitRestoring) entry { return unitEntry(it.r) }

// current reads the unit's AllowedCPUs= through its manager: the system
// manager, a followed user's, or a user's that runs but is not followed
// now (the user's cpuset is no longer delegated), reached for the reset
// only. errGone: the user or the unit is gone, and the daemon's value
// with it.
func (b *unitRestore) current(it *unitRestoring) (string, error) {
	u, r := b.u, it.r
	uid := recordUID(r.Manager)
	m := u.managerOf(uid)
	if uid >= 0 && m == nil {
		if u.userGone(r) {
			delete(u.records, it.key)
			return "", errGone
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
		u.restored(unitEntry(r)) // gone, and its runtime values with it
		return "", errGone
	}
	if err != nil {
		u.log.WithError(err).WithField("unit", r.Unit).Warn("cannot read AllowedCPUs to restore it; it stays in state.json for the next start")
		return "", err
	}
	it.paths = info.DropInPaths
	return sysfs.NewCPUSet(info.AllowedCPUs...).String(), nil
}

// ours: the unit's identity is its AllowedCPUs= drop-ins as the daemon's
// last write left them (rewritten).
func (b *unitRestore) ours(it *unitRestoring, cur string) bool {
	return ours(unitEntry(it.r), cur, !rewritten(it.r, it.paths), sameValue)
}

// theirs says so unless the unit is back at its original (its runtime
// value dropped, not replaced).
func (b *unitRestore) theirs(it *unitRestoring, cur string) {
	r := it.r
	if again := cur != r.Pending && rewritten(r, it.paths); cur != r.Original || again {
		b.u.log.WithFields(logrus.Fields{"unit": r.Unit, "allowed_cpus": cur, "original": r.Original, "dropins": dropIns(it.paths)}).Warn("AllowedCPUs was changed by someone else; not restored")
	}
	r.DropIns = ""
}

// putBack resets the unit's AllowedCPUs= to its original (setAllowed),
// recording the widening step first.
func (b *unitRestore) putBack(it *unitRestoring, _ string) bool {
	u, r := b.u, it.r
	e := unitEntry(r)
	orig, _ := sysfs.ParseCPUList(r.Original)
	if p := u.pendingFor(orig); p != "" && p != r.Pending {
		// The widening step (setAllowed) is a value of ours too:
		// recorded before it is set.
		u.begin(e, p)
		if !u.flush() {
			return false
		}
	}
	if err := u.setAllowed(b.ctx, it.m, r.Unit, orig); isNoSuchUnit(err) {
		u.restored(e)
		return true
	} else if err != nil {
		u.stats.errors.Add(1)
		u.log.WithError(err).WithField("unit", r.Unit).Warn("cannot restore AllowedCPUs; it stays in state.json for the next start")
		return false
	}
	u.stats.writes.Add(1)
	u.restored(e)
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
func (u *unitPlacement) setAllowed(ctx context.Context, m unitManager, name string, cpus sysfs.CPUSet) error {
	if cpus.IsEmpty() && u.unified {
		if all, err := possibleCPUs(); err == nil && !all.IsEmpty() {
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
		out = append(out, WorkloadStatus{Name: w.name, Path: w.cgroup, CPUs: cpus.String(), Util: w.avg.Util, Override: w.override, Class: w.class()})
	}
	return out
}

// setOverride sets (policy.Performance) or clears ("") the override of
// the unit named name (SetWorkloadPolicy). Errors, wrapping
// policy.ErrInvalid: no managed unit of that name, several (one per
// user's manager), or another policy.
func (u *unitPlacement) setOverride(name string, pol policy.Policy) error {
	if pol != "" && pol != policy.Performance {
		return fmt.Errorf("%w: a workload override can only be performance (or empty to clear)", policy.ErrInvalid)
	}
	var found []*unitWorkload
	for _, k := range u.sortedNames() {
		if w := u.workloads[k]; w.name == name {
			found = append(found, w)
		}
	}
	switch len(found) {
	case 0:
		return fmt.Errorf("%w: no workload %q", policy.ErrInvalid, name)
	case 1:
	default:
		return fmt.Errorf("%w: %d units named %q, one per user's manager: an override needs one", policy.ErrInvalid, len(found), name)
	}
	found[0].override = pol
	u.log.WithFields(logrus.Fields{"workload": name, "override": pol}).Info("workload override set")
	return nil
}

// class is the workload's Class (WorkloadStatus, policy.Load.Class). A
// user manager's units: policy.ClassFocused (an app.slice unit whose
// cgroup's user.xdg.inactive-since is -1), policy.ClassApp (the other
// app.slice units), policy.ClassBackground (background.slice),
// policy.ClassSession (session.slice). The system manager's: unitClass.
func (w *unitWorkload) class() string {
	if w.uid < 0 {
		return unitClass(w.name, w.slice)
	}
	if w.slice == "app.slice" && w.focused {
		return policy.ClassFocused
	}
	return strings.TrimSuffix(w.slice, ".slice")
}

// UnitClass is the class the daemon gives a system unit name of slice
// (WorkloadStatus.Class; `schedpolicyd plan` uses it for its --load
// NAME@SLICE).
func UnitClass(name, slice string) string { return unitClass(name, slice) }

// unitClass is a system unit's Class: by its slice, or policy.ClassUser
// for a user's manager placed as a whole; any other slice its name
// without ".slice".
func unitClass(name, slice string) string {
	switch {
	case isUserManager(name):
		return policy.ClassUser
	case slice == "system.slice":
		return policy.ClassService
	case slice == createSlice:
		return policy.ClassWorkload
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
// logged-in user's (users.go): where the cpuset controller is delegated to
// user@UID.service, that user's units in these slices are placed through
// the user's manager; where it is not (Debian 12's user@.service delegates
// pids memory cpu: AllowedCPUs= on a user manager's units is stored and
// never applied, seen in the systemd test VM), what can be placed is the
// user's manager as a whole, user@UID.service, through the system
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
	key := statefile.UnitRecord{Manager: "system", Unit: unit}.Key()
	if _, ok := u.workloads[workloadKey(-1, unit)]; ok {
		return "", &workloadExistsError{name: name, what: unit}
	}
	u.records[key] = &statefile.UnitRecord{Manager: "system", Unit: unit, Created: true}
	u.dirty = true
	if err := u.flushErr(); err != nil {
		delete(u.records, key)
		return "", fmt.Errorf("cannot save state.json: %w", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), unitOpTimeout)
	defer cancel()
	if err := u.mgr.StartScope(ctx, unit, createSlice, "schedpolicyd workload "+name, uint32(pid)); err != nil {
		delete(u.records, key)
		u.dirty = true
		u.flush()
		var e dbus.Error
		if errors.As(err, &e) && e.Name == "org.freedesktop.systemd1.UnitExists" {
			return "", &workloadExistsError{name: name, what: unit}
		}
		return "", err
	}
	info, err := u.mgr.UnitInfo(ctx, unit)
	if err != nil {
		return "", err
	}
	u.consider(-1, info)
	if w := u.workloads[workloadKey(-1, unit)]; w != nil {
		w.rec.Created = true
	}
	u.flush()
	return filepath.Join(u.cgroupRoot, info.ControlGroup), nil
}
