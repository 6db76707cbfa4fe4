package units

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/godbus/dbus/v5"
	"github.com/sirupsen/logrus"

	"github.com/schedpolicyd/schedpolicyd/cgroup"
	"github.com/schedpolicyd/schedpolicyd/daemon/placement"
	"github.com/schedpolicyd/schedpolicyd/daemon/snapshot"
	"github.com/schedpolicyd/schedpolicyd/daemon/statefile"
	"github.com/schedpolicyd/schedpolicyd/policy"
	"github.com/schedpolicyd/schedpolicyd/sysfs"
	"github.com/schedpolicyd/schedpolicyd/systemd"
)

// OwnUnit is the daemon's own unit; it is never placed.
const OwnUnit = "schedpolicyd.service"

// unitOpTimeout bounds each batch of calls to the manager made from the
// event loop.
const unitOpTimeout = 10 * time.Second

// unitScanTimeout bounds a scan: it reads two property sets of every
// loaded service and scope of the system manager and of each followed
// user's manager, which a loaded machine may not answer within
// unitOpTimeout. The scan runs on the event loop, so it stays well inside
// systemd's watchdog (WatchdogSec=30s, pinged every 15 s). A scan cut
// short takes in the units it read, forgets none, and is done again at
// the next sample (Placement.rescan).
const unitScanTimeout = 12 * time.Second

// Placement places systemd units: each service or scope directly in a
// managed slice is a workload, placed with AllowedCPUs= set at runtime
// through the system manager. Owned by the event loop, like placement.
//
// Units are adopted and forgotten from systemd's UnitNew, JobRemoved and
// UnitRemoved signals, never by polling, and never moved between
// cgroups. The promise holds here too, through placement.Journal: before setting
// AllowedCPUs= the daemon records the unit's original and the value it
// sets (statefile.UnitRecord, saved through save); on exit, and after a
// crash on the next start, it resets exactly the values it set, and only
// where the unit still has them.
type Placement struct {
	// e is the engine that holds this driver: the journal, the pressure
	// trigger, the task-clock gate, the sampling back-off, the
	// confirmation and the plan.
	e *placement.Engine

	mgr unitManager // the system manager; nil until open succeeds
	// connect reaches the system manager (uid -1; dialManager, or a fake
	// in tests) at open; dialUser a user's, from the user's link
	// (systemd.ConnectUser, or a test's).
	connect  func(ctx context.Context, uid int) (unitManager, error)
	dialUser func(ctx context.Context, uid int, opts systemd.UserOptions) (unitManager, error)
	// runRoot is where the users' runtime directories are
	// (placement.Config.RunRoot): RUNROOT/user/UID/systemd/private is a
	// user's manager's socket. maxCPUs bounds the CPU masks the managers
	// may send: kernel_max + 1 of the sysfs root.
	runRoot string
	maxCPUs int
	// linkTiming is the users' links' (defaultLinkTiming).
	linkTiming linkTiming
	// systemRefused remembers the system manager's refused values said
	// (sayRefused), as a user's do.
	systemRefused *userManager
	slices        map[string]bool // managed slices of the system manager
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
	msgs  chan placement.Event
	done  chan struct{}
	focus *focusWatch
	// cgroupRoot is where units' ControlGroup paths live (/sys/fs/cgroup);
	// unified: it is cgroup v2, where systemd applies AllowedCPUs=.
	cgroupRoot string
	unified    bool

	workloads map[string]*unitWorkload // by workloadKey
	// records is the engine's table of unit records, by
	// UnitRecord.Key() (placement.KeepRecords).
	records placement.Records[statefile.UnitRecord]
	// reloading holds the managers (by uid, -1 the system's) between
	// their Reloading(true) and Reloading(false): their unit signals are
	// not followed and their units' AllowedCPUs= not set meanwhile; one
	// scan at the end takes in what changed. held: a plan's write was
	// skipped for it (by manager), made when that manager is done.
	reloading map[int]bool
	held      map[int]bool
	// rescan: the last scan was cut short (a listing failed or ran out of
	// time), so units may be missing; the loop samples while it is set,
	// and the next sample scans again.
	rescan bool

	// The engine's pressure trigger is configured on the machine's
	// /proc/pressure/cpu (every managed slice is in it) at open; its
	// task-clock gate is nil on cgroup v1 (systemd applies no
	// AllowedCPUs= there) or with Config.NoTaskClock.
	//
	// procRoot is where a confirmation reads its threads' schedstat.
	// (The CPUs of the last plan, what "unset" gives, are the engine's
	// Allowed.)
	procRoot string
}

// The driver and the capabilities it has (backend.go).
var (
	_ placement.Driver      = (*Placement)(nil)
	_ placement.EventSource = (*Placement)(nil)
	_ placement.Confirmer   = (*Placement)(nil)
	_ placement.Clocked     = (*Placement)(nil)
	_ placement.Creator     = (*Placement)(nil)
	_ placement.Overrider   = (*Placement)(nil)
	_ placement.Reporter    = (*Placement)(nil)
	_ placement.Poller      = (*Placement)(nil)
	_ placement.Refresher   = (*Placement)(nil)
	_ placement.Exempter    = (*Placement)(nil)
)

// unitWorkload is one unit placed as a workload.
type unitWorkload struct {
	name  string
	slice string
	// uid is the user whose manager owns the unit, -1 for the system
	// manager.
	uid int
	// focused: an app.slice unit whose cgroup's user.xdg.inactive-since
	// is -1 (the focused app, focus.go); marked: that attribute is on its
	// cgroup at all (any value: the desktop says where the focus is).
	focused, marked bool
	cgroup          string // its cgroup directory (cgroupRoot + ControlGroup)
	rec             *statefile.UnitRecord
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
	// exempt: the engine's exempt list names it (SetExempt): its
	// original back, not placed.
	exempt bool
}

// New makes the units placement for e.Cfg as e's driver, logging to
// e.Log (with the field placement=systemd) and counting in e.Stats; it
// reaches no manager until Open.
func New(e *placement.Engine) *Placement {
	cfg := e.Cfg
	u := &Placement{
		e:           e,
		slices:      map[string]bool{},
		userManaged: map[string]bool{},
		people:      map[int]*userManager{},
		cgroupRoot:  filepath.Join(sysfsRoot(cfg), "fs/cgroup"),
		workloads:   map[string]*unitWorkload{},
		records:     placement.KeepRecords[statefile.UnitRecord](e, nil),
		reloading:   map[int]bool{},
		held:        map[int]bool{},
	}
	manage := cfg.Manage
	if manage == nil {
		manage = placement.DefaultManage
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
	u.dialUser = func(ctx context.Context, uid int, opts systemd.UserOptions) (unitManager, error) {
		m, err := systemd.ConnectUser(ctx, uid, opts)
		if err != nil {
			return nil, err // not a nil *systemd.Manager in a non-nil interface
		}
		return m, nil
	}
	u.linkTiming = defaultLinkTiming
	u.runRoot = cfg.RunRoot
	if u.runRoot == "" {
		u.runRoot = "/run"
	}
	u.maxCPUs = kernelMaxCPUs(sysfsRoot(cfg))
	u.unified = cgroupV2(sysfsRoot(cfg), u.cgroupRoot)
	u.attach()
	return u
}

// attach makes u its engine's driver: the engine logs with the field
// placement=systemd, and words its wakes as units' (placement.Traits:
// some lines go to the daemon's logger, Config.Log).
func (u *Placement) attach() {
	e := u.e
	e.Traits.WakeLog = func() logrus.FieldLogger { return e.Cfg.Log }
	e.Traits.WokenMsg, e.Traits.WokenDesc = "woken: units sampled", false
	e.Traits.DroppedMsg = "the CPU pressure trigger of units stopped; while every unit is idle, sampling slows down instead of stopping"
	e.Traits.ConfirmedWhy = "crowded unit confirmed"
	e.Traits.FreshenIdle = true
	e.Log = e.Log.WithField("placement", placement.Systemd)
	e.Drive(u)
}

// kernelMaxCPUs is how many CPU numbers the machine can have:
// devices/system/cpu/kernel_max + 1 below the sysfs root (NR_CPUS); 0
// (systemd.DefaultMaxCPUs) where it cannot be read.
func kernelMaxCPUs(sysfsRoot string) int {
	n, err := sysfs.ReadIntAttr(filepath.Join(sysfsRoot, "devices/system/cpu/kernel_max"))
	if err != nil || n < 0 {
		return 0
	}
	// No more than a cpulist in state.json may name (sysfs.MaxCPUs): a
	// record beyond it would not load.
	return int(min(n+1, sysfs.MaxCPUs))
}

// cgroupV2 reports whether the cgroup hierarchy at cgroupRoot (below
// sysfsRoot) is cgroup v2, where systemd applies AllowedCPUs=: the
// kernel's word (statfs) on the machine itself, and on a mock machine (a
// sysfs root other than /sys, transcribed from a real one) whether its
// fs/cgroup holds cgroup.controllers, as a v2 hierarchy's root does.
func cgroupV2(sysfsRoot, cgroupRoot string) bool {
	if cgroup.IsUnified(cgroupRoot) {
		return true
	}
	if filepath.Clean(sysfsRoot) == sysfs.DefaultRoot {
		return false
	}
	_, err := sysfs.ReadAttr(filepath.Join(cgroupRoot, "cgroup.controllers"))
	return err == nil
}

// Open connects to the system manager and subscribes to its signals. An
// error is logged once ("placement disabled") and returned; the caller
// keeps running without placement.
func (u *Placement) Open() error {
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
		if !u.e.Warned {
			u.e.Log.WithError(err).Warn("workload placement disabled: cannot reach the systemd manager")
			u.e.Warned = true
		}
		return err
	}
	u.mgr = m
	u.msgs, u.done = make(chan placement.Event, 256), make(chan struct{})
	u.forward(events)
	v, _ := m.Version(ctx)
	slices := make([]string, 0, len(u.slices))
	for s := range u.slices {
		slices = append(slices, s)
	}
	sort.Strings(slices)
	u.e.Log.WithFields(logrus.Fields{"systemd": v, "slices": strings.Join(slices, ","), "cgroup_v2": u.unified, "slice_rules": placement.SliceRulesString(u.e.Cfg.Slices)}).Info("managing units through systemd")
	if u.users {
		u.openUsers(ctx)
	}
	if !u.unified {
		u.e.Log.Warn("cgroup v1: systemd stores AllowedCPUs= but does not apply it; units are placed in name only (use placement \"cgroupfs\" to place cpusets on v1)")
	}
	u.procRoot = u.e.Cfg.ProcRoot
	if u.procRoot == "" {
		u.procRoot = "/proc"
	}
	u.e.Pressure.Configure(u.e.Log, filepath.Join(u.procRoot, "pressure", "cpu"), len(u.workloads))
	if u.unified && !u.e.Cfg.NoTaskClock {
		u.e.Clock = placement.NewClockGate(u.e.Log, func(key string) (time.Duration, error) {
			w := u.workloads[key]
			if w == nil {
				return 0, fmt.Errorf("unit %s gone", key)
			}
			pr, err := cgroup.DirCPUPressure(w.cgroup)
			return pr.Total, err
		}, func(int) float64 { return placement.WakeMargin })
	}
	return nil
}

// Close drops the connections: the system manager, logind, every
// user's manager and the focus watch.
func (u *Placement) Close() {
	if u.mgr == nil {
		return
	}
	close(u.done)
	u.e.StopWakes()
	u.closeUsers()
	u.mgr.Close()
	u.mgr = nil
	u.msgs = nil
	clear(u.reloading)
	clear(u.held)
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

// Sample reads each unit's cumulative CPU time (cpu.stat) and updates its
// decayed utilisation, and on cgroup v2 its cpu.pressure (some avg10: the
// planner's saturation rule, as for the cgroupfs path's workloads; and the
// stall since the last sample, which makes a packed unit a candidate for
// a wake's confirmation; v1 has no pressure per cgroup, so both stay 0
// there); it reports whether any was busy.
func (u *Placement) Sample() (busy bool) {
	if len(u.workloads) == 0 {
		return false
	}
	u.e.Stats.Samples.Add(1)
	now := time.Now()
	for key, w := range u.workloads {
		use, err := cgroup.DirUsage(w.cgroup)
		if err != nil {
			continue
		}
		if use != w.avg.Usage || w.avg.Util > placement.IdleUtil {
			busy = true
		}
		u.e.Clock.Calm(key, max(use-w.avg.Usage, 0), w.lastAt, now, w.cpus.Size())
		w.avg, w.lastAt = w.avg.Update(use, now.Sub(w.lastAt), u.e.Cfg.UtilHalfLife), now
		if !u.unified {
			continue
		}
		if pr, err := cgroup.DirCPUPressure(w.cgroup); err == nil {
			w.stalled = 0
			if w.stallTotal > 0 && pr.Total > w.stallTotal {
				w.stalled = pr.Total - w.stallTotal
			}
			w.pressure, w.stallTotal = pr.Avg10, pr.Total
		}
	}
	return busy
}

// Polls: the last scan was cut short, so units may be missing; the loop
// samples, and the next sample scans again (Refresh).
func (u *Placement) Polls() bool { return u.rescan && u.mgr != nil }

// Names are the workloads' keys in order.
func (u *Placement) Names() []string { return slices.Sorted(maps.Keys(u.workloads)) }

// Status lists the units as workloads: the unit name, its cgroup
// directory, the CPUs its AllowedCPUs= gives it (every CPU of the last
// plan when unset) and utilisation.
func (u *Placement) Status() []snapshot.WorkloadStatus {
	var out []snapshot.WorkloadStatus
	for _, n := range u.Names() {
		w := u.workloads[n]
		cpus := w.cpus
		if cpus.IsEmpty() {
			cpus = u.e.Allowed
		}
		ws := snapshot.WorkloadStatus{Name: w.name, Path: w.cgroup, CPUs: cpus.String(), Util: w.avg.Util, Override: w.override, Class: u.class(w), Manager: managerName(w.uid)}
		switch {
		case w.exempt:
			ws.Override = placement.ExemptOverride
		case w.override == "":
			ws.Policy = u.e.Plan.Policies[n]
			// Confined: a value of ours narrower than its original
			// (unset: every CPU of the last plan).
			may, _ := sysfs.ParseCPUList(w.rec.Original)
			if may.IsEmpty() {
				may = u.e.Allowed
			}
			// A user's manager that does not apply it confines nothing.
			ws.Confined = w.rec.Applied != "" && !w.cpus.IsEmpty() && w.cpus.Size() < may.Size() && !u.inertUser(w.uid)
		}
		out = append(out, ws)
	}
	return out
}

// SetOverride sets (policy.Performance) or clears ("") the override of
// the unit named name (SetWorkloadPolicy). Errors, wrapping
// policy.ErrInvalid: no managed unit of that name, several (one per
// user's manager), or another policy.
func (u *Placement) SetOverride(name string, pol policy.Policy) error {
	if pol != "" && pol != policy.Performance {
		return fmt.Errorf("%w: a workload override can only be performance (or empty to clear)", policy.ErrInvalid)
	}
	var found []*unitWorkload
	for _, k := range u.Names() {
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
	u.e.Log.WithFields(logrus.Fields{"workload": name, "override": pol}).Info("workload override set")
	return nil
}

// createSlice is where CreateWorkload starts its transient scopes.
const createSlice = "schedpolicyd.slice"

// Create starts transient scope NAME.scope in schedpolicyd.slice with pid
// (CreateWorkload, schedpolicyctl run), recorded as created before it is
// started; systemd removes it when its last process exits. Errors: a bad
// name, placement disabled, schedpolicyd.slice not managed, the scope
// exists (fs.ErrExist), or systemd refused.
func (u *Placement) Create(name string, pid int) (string, error) {
	if err := placement.ValidWorkloadName(name); err != nil {
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
		return "", &placement.WorkloadExistsError{Name: name, What: unit}
	}
	u.records[key] = &statefile.UnitRecord{Manager: "system", Unit: unit, Created: true}
	u.e.Dirty = true
	if err := u.e.FlushErr(); err != nil {
		delete(u.records, key)
		return "", fmt.Errorf("cannot save state.json: %w", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), unitOpTimeout)
	defer cancel()
	if err := u.mgr.StartScope(ctx, unit, createSlice, "schedpolicyd workload "+name, uint32(pid)); err != nil {
		delete(u.records, key)
		u.e.Dirty = true
		u.e.Flush()
		var e dbus.Error
		if errors.As(err, &e) && e.Name == "org.freedesktop.systemd1.UnitExists" {
			return "", &placement.WorkloadExistsError{Name: name, What: unit}
		}
		return "", err
	}
	info, err := u.mgr.UnitInfo(ctx, unit)
	if err != nil {
		return "", err
	}
	u.consider(-1, u.systemView(info))
	if w := u.workloads[workloadKey(-1, unit)]; w != nil {
		w.rec.Created = true
	}
	u.e.Flush()
	return filepath.Join(u.cgroupRoot, info.ControlGroup), nil
}

// sysfsRoot is cfg's sysfs root, sysfs.DefaultRoot when unset.
func sysfsRoot(cfg *placement.Config) string {
	if cfg.SysfsRoot == "" {
		return sysfs.DefaultRoot
	}
	return cfg.SysfsRoot
}
