package units

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/godbus/dbus/v5"

	"github.com/schedpolicyd/schedpolicyd/systemd"
)

// memManager is the units tests' one fake systemd manager: an in-memory
// manager (unitManager) for tests of Placement's own logic driven on the
// test's goroutine, which fakeSystemd (fakesystemd_test.go) serves as
// the system manager on a private bus for the real D-Bus path. It
// behaves as systemd 252 does for the calls placement makes:
//
//   - A loaded unit has LoadState "loaded", an ActiveState, a Slice, a
//     ControlGroup ("/SLICE/NAME" while active, "" once stopped), its
//     AllowedCPUs= and its DropInPaths. A unit it does not know reads as
//     LoadState "not-found" with nothing else (UnitInfo, DropInPaths);
//     LoadedUnitInfo, SetAllowedCPUs and set answer NoSuchUnit for it.
//   - SetUnitProperties of AllowedCPUs= (set; SetAllowedCPUs is the
//     runtime one) takes effect at once and writes the drop-in
//     50-AllowedCPUs.conf anew (a new inode), below dir: a transient
//     unit's always in run/systemd/transient/NAME.d/ (systemd's
//     unit_drop_in_dir), another's in run/systemd/system.control/NAME.d/
//     (runtime) or etc/systemd/system.control/NAME.d/ (persistent); the
//     file is added to DropInPaths. A user manager's are below
//     run/user/UID/systemd/ and home/UID/.config/systemd/user.control.
//   - A unit loaded (start of a name not loaded, or a reload) has the
//     AllowedCPUs= of its own configuration unless a 50-AllowedCPUs.conf
//     drop-in is there: the persistent one shadows the runtime one, which
//     shadows the transient one (same file name: the first directory of
//     systemd's lookup paths wins), and DropInPaths lists that one.
//   - Removing a unit from memory (remove, stop of a transient unit)
//     removes a transient unit's drop-ins with it; another's stay.
//   - Events, once subscribed, in the order the manager sends them:
//     UnitNew (UnitLoaded) when a unit is loaded, JobRemoved
//     (JobFinished) when its start or stop job ends, UnitRemoved
//     (UnitDropped), and Reloading(true) / Reloading(false) around a
//     reload, between which every unit is dropped and loaded again.
//     systemd also sends PropertiesChanged on a property's change, which
//     placement does not follow; this fake sends nothing for it. A unit
//     event that finds the channel full is dropped and Overflowed says
//     so; ReloadFinished waits for room.
//
// Reading a unit it does not know loads nothing here (systemd loads it
// for a moment and sends UnitNew and UnitRemoved for it, which is why
// placement follows signals with LoadedUnitInfo).
//
// In memory, the test's goroutine calls everything and only Events'
// channel is read by another (Placement.forward); served, the bus's
// method calls come on godbus's goroutines: mu keeps the units, the
// calls and the journal.
type memManager struct {
	t   *testing.T
	mu  sync.Mutex
	uid int
	dir string
	// journal, when not nil, gets "set NAME=CPUS" for each SetAllowedCPUs
	// and "start NAME" for each StartScope, in order; the caller may
	// append to it too (the state file's saves).
	journal *[]string

	units      map[string]*memUnit
	events     chan systemd.UnitEvent
	subscribed bool
	overflow   bool
	closed     bool
	// calls counts the calls made of each method, by name ("Units").
	calls map[string]int
	// unitsRead, when not negative, cuts Units short as a manager too slow
	// for the caller's deadline does: the first unitsRead units (by name)
	// and context.DeadlineExceeded.
	unitsRead int
	// served, when not nil, sends each event as the manager's signal
	// (fakeSystemd) instead of on Events' channel.
	served func(systemd.UnitEvent)
	// refuse, when not nil, picks the SetAllowedCPUs calls the manager
	// refuses (org.freedesktop.DBus.Error.AccessDenied, nothing changed;
	// counted, not journalled).
	refuse func(name string, cpus []int) bool
}

// memUnit is one unit the manager has loaded.
type memUnit struct {
	slice     string
	active    string
	transient bool
	// own is the AllowedCPUs= of the unit's own configuration (its unit
	// file, or a transient unit's properties); allowed is in force now.
	own, allowed []int
	dropins      []string
}

func newMemManager(t *testing.T, uid int, dir string, journal *[]string) *memManager {
	return &memManager{t: t, uid: uid, dir: dir, journal: journal, units: map[string]*memUnit{},
		events: make(chan systemd.UnitEvent, 256), calls: map[string]int{}, unitsRead: -1}
}

var _ unitManager = (*memManager)(nil)

func (m *memManager) String() string {
	if m.uid < 0 {
		return "system"
	}
	return "user " + strconv.Itoa(m.uid)
}

// call counts a call and answers dbus.ErrClosed after Close.
func (m *memManager) call(name string) error {
	m.calls[name]++
	if m.closed {
		return fmt.Errorf("%s manager: %s: %w", m, name, dbus.ErrClosed)
	}
	return nil
}

// noSuchUnit is the manager's answer for a unit it does not have, as
// godbus hands it over (a dbus.Error value), wrapped as *systemd.Manager
// wraps it.
func (m *memManager) noSuchUnit(name, why string) error {
	return fmt.Errorf("%s manager: %s: %w", m, name, dbus.Error{Name: "org.freedesktop.systemd1.NoSuchUnit", Body: []any{"Unit " + name + " " + why + "."}})
}

func (m *memManager) Events(ctx context.Context) (<-chan systemd.UnitEvent, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.call("Events"); err != nil {
		return nil, err
	}
	m.subscribed = true
	return m.events, nil
}

func (m *memManager) Overflowed() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	o := m.overflow
	m.overflow = false
	return o
}

func (m *memManager) Units(ctx context.Context, patterns ...string) ([]systemd.UnitInfo, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.call("Units"); err != nil {
		return nil, err
	}
	var out []systemd.UnitInfo
	for _, n := range m.names() {
		for _, p := range patterns {
			if ok, _ := filepath.Match(p, n); ok {
				out = append(out, m.info(n))
				break
			}
		}
	}
	if m.unitsRead >= 0 && len(out) > m.unitsRead {
		return out[:m.unitsRead], fmt.Errorf("%s manager: %s: %w", m, out[m.unitsRead].Name, context.DeadlineExceeded)
	}
	return out, nil
}

func (m *memManager) UnitInfo(ctx context.Context, name string) (systemd.UnitInfo, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.call("UnitInfo"); err != nil {
		return systemd.UnitInfo{}, err
	}
	if systemd.UnitType(name) == "" {
		return systemd.UnitInfo{}, fmt.Errorf("%s manager: %s: not a unit with a cgroup", m, name)
	}
	return m.info(name), nil
}

func (m *memManager) LoadedUnitInfo(ctx context.Context, name string) (systemd.UnitInfo, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.call("LoadedUnitInfo"); err != nil {
		return systemd.UnitInfo{}, err
	}
	if m.units[name] == nil {
		return systemd.UnitInfo{}, m.noSuchUnit(name, "not loaded")
	}
	return m.info(name), nil
}

func (m *memManager) DropInPaths(ctx context.Context, name string) ([]string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.call("DropInPaths"); err != nil {
		return nil, err
	}
	return m.info(name).DropInPaths, nil
}

func (m *memManager) SetAllowedCPUs(ctx context.Context, name string, cpus []int) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.call("SetAllowedCPUs"); err != nil {
		return err
	}
	if m.refuse != nil && m.refuse(name, cpus) {
		return fmt.Errorf("%s manager: set AllowedCPUs=%s on %s: %w", m, systemd.FormatCPUList(cpus), name, dbus.Error{Name: "org.freedesktop.DBus.Error.AccessDenied", Body: []any{"refused by the test"}})
	}
	if err := m.set(name, true, cpus...); err != nil {
		return fmt.Errorf("%s manager: set AllowedCPUs=%s on %s: %w", m, systemd.FormatCPUList(cpus), name, err)
	}
	m.note("set " + name + "=" + systemd.FormatCPUList(cpus))
	return nil
}

func (m *memManager) StartScope(ctx context.Context, name, slice, description string, pids ...uint32) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.call("StartScope"); err != nil {
		return err
	}
	m.note("start " + name)
	if m.units[name] != nil {
		return fmt.Errorf("%s manager: start %s in %s: %w", m, name, slice,
			dbus.Error{Name: "org.freedesktop.systemd1.UnitExists", Body: []any{"Unit " + name + " already exists."}})
	}
	m.startLocked(name, slice, true)
	return nil
}

func (m *memManager) TakeRefused() ([]error, int) { return nil, 0 }

func (m *memManager) Version(ctx context.Context) (string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.call("Version"); err != nil {
		return "", err
	}
	return "252.39-1~deb12u2", nil
}

func (m *memManager) Close() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.calls["Close"]++
	if !m.closed {
		m.closed = true
		close(m.events)
	}
}

// The world's side: what systemd, the administrator and other programs
// do to the manager's units.

// start loads unit name (in slice; transient: made by
// StartTransientUnit, or from a unit file) if it is not loaded, with own
// as the AllowedCPUs= of its own configuration, sending UnitNew; then it
// starts it, sending its start job's JobRemoved.
func (m *memManager) start(name, slice string, transient bool, own ...int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.startLocked(name, slice, transient, own...)
}

func (m *memManager) startLocked(name, slice string, transient bool, own ...int) {
	if m.units[name] == nil {
		u := &memUnit{slice: slice, transient: transient, own: own, active: "inactive"}
		m.units[name] = u
		m.load(name, u)
		m.emit(systemd.UnitEvent{Name: name, Kind: systemd.UnitLoaded})
	}
	m.units[name].active = "active"
	m.emit(systemd.UnitEvent{Name: name, Kind: systemd.JobFinished})
}

// stop stops unit name, sending its stop job's JobRemoved; a transient
// unit is then removed from memory (remove).
func (m *memManager) stop(name string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	u := m.units[name]
	if u == nil {
		m.t.Fatalf("stop %s: not loaded", name)
	}
	u.active = "inactive"
	m.emit(systemd.UnitEvent{Name: name, Kind: systemd.JobFinished})
	if u.transient {
		m.drop(name)
	}
}

// remove drops unit name from memory (garbage collection of a stopped
// unit, or its unit file gone), sending UnitRemoved; a transient unit's
// drop-ins go with it.
func (m *memManager) remove(name string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.drop(name)
}

func (m *memManager) drop(name string) {
	u := m.units[name]
	if u == nil {
		m.t.Fatalf("remove %s: not loaded", name)
	}
	if u.transient {
		for _, p := range u.dropins {
			if filepath.Dir(filepath.Dir(p)) == m.controlDir("transient") {
				os.Remove(p)
				os.Remove(filepath.Dir(p))
			}
		}
	}
	delete(m.units, name)
	m.emit(systemd.UnitEvent{Name: name, Kind: systemd.UnitDropped})
}

// set is SetUnitProperties of AllowedCPUs= (systemctl set-property,
// with --runtime when runtime): the value in force at once, the drop-in
// written anew. Errors: NoSuchUnit for a unit not loaded, or the
// drop-in's write. Called with mu held.
func (m *memManager) set(name string, runtime bool, cpus ...int) error {
	u := m.units[name]
	if u == nil {
		return dbus.Error{Name: "org.freedesktop.systemd1.NoSuchUnit", Body: []any{"Unit " + name + " not found."}}
	}
	kind := "persistent"
	switch {
	case u.transient:
		kind = "transient"
	case runtime:
		kind = "runtime"
	}
	p := m.dropIn(name, kind)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	// A new file each time (a new inode), as systemd's atomic write.
	section := "[" + systemd.UnitType(name) + "]"
	if err := os.WriteFile(p+".tmp", []byte(section+"\nAllowedCPUs="+systemd.FormatCPUList(cpus)+"\n"), 0o644); err != nil {
		return err
	}
	if err := os.Rename(p+".tmp", p); err != nil {
		return err
	}
	if !slices.Contains(u.dropins, p) {
		u.dropins = append(u.dropins, p)
	}
	u.allowed = slices.Clone(cpus)
	return nil
}

// admin is the administrator's `systemctl set-property [--runtime] NAME
// AllowedCPUs=CPUS` (no signal placement follows: systemd sends only
// PropertiesChanged).
func (m *memManager) admin(name string, runtime bool, cpus ...int) {
	m.t.Helper()
	m.mu.Lock()
	err := m.set(name, runtime, cpus...)
	m.mu.Unlock()
	if err != nil {
		m.t.Fatal(err)
	}
}

// reloadBegin and reloadEnd play `systemctl daemon-reload`:
// Reloading(true) and UnitRemoved for every unit, every unit loaded again
// from its configuration and drop-ins (a runtime value that a persistent
// drop-in of the same name shadows is lost), then UnitNew for each unit
// and Reloading(false).
func (m *memManager) reloadBegin() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.emit(systemd.UnitEvent{Kind: systemd.ReloadStarted})
	for _, n := range m.names() {
		m.emit(systemd.UnitEvent{Name: n, Kind: systemd.UnitDropped})
	}
	for _, n := range m.names() {
		m.load(n, m.units[n])
	}
}

func (m *memManager) reloadEnd() {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, n := range m.names() {
		m.emit(systemd.UnitEvent{Name: n, Kind: systemd.UnitLoaded})
	}
	m.emit(systemd.UnitEvent{Kind: systemd.ReloadFinished})
}

// load reads unit name's AllowedCPUs= from its configuration: the first
// 50-AllowedCPUs.conf of the persistent, runtime and transient
// directories, else its own.
func (m *memManager) load(name string, u *memUnit) {
	u.allowed, u.dropins = slices.Clone(u.own), nil
	for _, kind := range []string{"persistent", "runtime", "transient"} {
		p := m.dropIn(name, kind)
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		u.dropins = []string{p}
		u.allowed = nil
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, "AllowedCPUs="); ok && v != "" {
				for _, r := range strings.Split(v, ",") {
					lo, hi, _ := strings.Cut(r, "-")
					a, _ := strconv.Atoi(lo)
					z := a
					if hi != "" {
						z, _ = strconv.Atoi(hi)
					}
					for c := a; c <= z; c++ {
						u.allowed = append(u.allowed, c)
					}
				}
			}
		}
		return
	}
}

// emit sends ev to the subscriber, if any: served, as the manager's
// signal; else on Events' channel, where a unit event is dropped when
// the channel is full (Overflowed) and ReloadFinished waits for room.
// Called with mu held.
func (m *memManager) emit(ev systemd.UnitEvent) {
	if !m.subscribed || m.closed {
		return
	}
	ev.UID = m.uid
	if m.served != nil {
		m.served(ev)
		return
	}
	if ev.Kind == systemd.ReloadFinished {
		m.events <- ev
		return
	}
	select {
	case m.events <- ev:
	default:
		m.overflow = true
	}
}

// controlDir is the directory of one kind of drop-ins: "persistent",
// "runtime" or "transient".
func (m *memManager) controlDir(kind string) string {
	if m.uid < 0 {
		return map[string]string{
			"persistent": filepath.Join(m.dir, "etc/systemd/system.control"),
			"runtime":    filepath.Join(m.dir, "run/systemd/system.control"),
			"transient":  filepath.Join(m.dir, "run/systemd/transient"),
		}[kind]
	}
	uid := strconv.Itoa(m.uid)
	return map[string]string{
		"persistent": filepath.Join(m.dir, "home", uid, ".config/systemd/user.control"),
		"runtime":    filepath.Join(m.dir, "run/user", uid, "systemd/user.control"),
		"transient":  filepath.Join(m.dir, "run/user", uid, "systemd/transient"),
	}[kind]
}

// dropIn is unit name's AllowedCPUs= drop-in of one kind.
func (m *memManager) dropIn(name, kind string) string {
	return filepath.Join(m.controlDir(kind), name+".d", allowedDropIn)
}

func (m *memManager) info(name string) systemd.UnitInfo {
	u := m.units[name]
	if u == nil {
		return systemd.UnitInfo{Name: name, LoadState: "not-found", ActiveState: "inactive"}
	}
	info := systemd.UnitInfo{Name: name, Slice: u.slice, LoadState: "loaded", ActiveState: u.active,
		AllowedCPUs: slices.Clone(u.allowed), DropInPaths: slices.Clone(u.dropins)}
	if len(info.AllowedCPUs) == 0 {
		info.AllowedCPUs = nil
	}
	if u.active != "inactive" {
		info.ControlGroup = "/" + u.slice + "/" + name
	}
	return info
}

// allowedOf is unit name's AllowedCPUs= as a cpulist, "(not found)" for a
// unit not loaded.
func (m *memManager) allowedOf(name string) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	if u := m.units[name]; u != nil {
		return systemd.FormatCPUList(u.allowed)
	}
	return "(not found)"
}

func (m *memManager) names() []string {
	out := make([]string, 0, len(m.units))
	for n := range m.units {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

func (m *memManager) note(s string) {
	if m.journal != nil {
		*m.journal = append(*m.journal, s)
	}
}
