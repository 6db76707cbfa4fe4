package units

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"
	"sync"
	"testing"

	"github.com/godbus/dbus/v5"

	"github.com/schedpolicyd/schedpolicyd/internal/testutil"
	"github.com/schedpolicyd/schedpolicyd/systemd"
)

// memManager is testutil.FakeManager, the tests' one fake systemd
// manager (its units, drop-ins and signals as systemd 252 has them: see
// fakeunits.go there), called in memory as a unitManager, for tests of
// Placement's own logic driven on the test's goroutine; fakeSystemd
// (fakesystemd_test.go) serves the same fake on a private bus for the real
// D-Bus path. The test plays the world's side through the FakeManager's
// own methods (Start, Stop, Drop, Admin, ReloadBegin, ReloadEnd).
//
// What it adds is what *systemd.Manager does on the daemon's side of the
// bus: the manager's signals as systemd.UnitEvents on Events' channel
// once subscribed (a unit event that finds the channel full is dropped
// and Overflowed says so; ReloadFinished waits for room), systemd.UnitInfo
// from a unit's properties, its errors wrapped as the Manager wraps them,
// calls counted by the unitManager method's name, and a scan cut short
// (unitsRead).
//
// The test's goroutine calls everything and only Events' channel is read
// by another (Placement.forward); mu keeps the calls and the journal.
type memManager struct {
	*testutil.FakeManager
	t   *testing.T
	mu  sync.Mutex
	uid int
	// journal, when not nil, gets "set NAME=CPUS" for each SetAllowedCPUs
	// and "start NAME" for each StartScope, in order; the caller may
	// append to it too (the state file's saves).
	journal *[]string

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
}

// newMemManager makes the manager of uid (-1: the system's), its drop-ins
// below dir.
func newMemManager(t *testing.T, uid int, dir string, journal *[]string) *memManager {
	m := &memManager{FakeManager: testutil.NewFakeManager(t), t: t, uid: uid, journal: journal,
		events: make(chan systemd.UnitEvent, 256), calls: map[string]int{}, unitsRead: -1}
	m.FakeManager.Version = "252.39-1~deb12u2"
	m.DropInsBelow(dir, uid)
	m.OnSignal(m.signal)
	return m
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
	m.mu.Lock()
	defer m.mu.Unlock()
	m.calls[name]++
	if m.closed {
		return fmt.Errorf("%s manager: %s: %w", m, name, dbus.ErrClosed)
	}
	return nil
}

func (m *memManager) Events(ctx context.Context) (<-chan systemd.UnitEvent, error) {
	if err := m.call("Events"); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
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
	if err := m.call("Units"); err != nil {
		return nil, err
	}
	var out []systemd.UnitInfo
	for _, n := range m.UnitNames() {
		for _, p := range patterns {
			if ok, _ := filepath.Match(p, n); ok {
				out = append(out, m.info(n))
				break
			}
		}
	}
	m.mu.Lock()
	read := m.unitsRead
	m.mu.Unlock()
	if read >= 0 && len(out) > read {
		return out[:read], fmt.Errorf("%s manager: %s: %w", m, out[read].Name, context.DeadlineExceeded)
	}
	return out, nil
}

func (m *memManager) UnitInfo(ctx context.Context, name string) (systemd.UnitInfo, error) {
	if err := m.call("UnitInfo"); err != nil {
		return systemd.UnitInfo{}, err
	}
	if systemd.UnitType(name) == "" {
		return systemd.UnitInfo{}, fmt.Errorf("%s manager: %s: not a unit with a cgroup", m, name)
	}
	return m.info(name), nil
}

func (m *memManager) LoadedUnitInfo(ctx context.Context, name string) (systemd.UnitInfo, error) {
	if err := m.call("LoadedUnitInfo"); err != nil {
		return systemd.UnitInfo{}, err
	}
	if _, ok := m.Unit(name); !ok {
		return systemd.UnitInfo{}, fmt.Errorf("%s manager: %s: %w", m, name, *testutil.NoSuchUnit(name))
	}
	return m.info(name), nil
}

func (m *memManager) DropInPaths(ctx context.Context, name string) ([]string, error) {
	if err := m.call("DropInPaths"); err != nil {
		return nil, err
	}
	return m.info(name).DropInPaths, nil
}

func (m *memManager) SetAllowedCPUs(ctx context.Context, name string, cpus []int) error {
	if err := m.call("SetAllowedCPUs"); err != nil {
		return err
	}
	if err := m.Set(name, true, systemd.EncodeCPUMask(cpus)); err != nil {
		return fmt.Errorf("%s manager: set AllowedCPUs=%s on %s: %w", m, systemd.FormatCPUList(cpus), name, *err)
	}
	m.note("set " + name + "=" + systemd.FormatCPUList(cpus))
	return nil
}

func (m *memManager) StartScope(ctx context.Context, name, slice, description string, pids ...uint32) error {
	if err := m.call("StartScope"); err != nil {
		return err
	}
	m.note("start " + name)
	if _, ok := m.Unit(name); ok {
		return fmt.Errorf("%s manager: start %s in %s: %w", m, name, slice,
			dbus.Error{Name: "org.freedesktop.systemd1.UnitExists", Body: []any{"Unit " + name + " already exists."}})
	}
	m.Start(name, slice, true)
	return nil
}

func (m *memManager) TakeRefused() ([]error, int) { return nil, 0 }

func (m *memManager) Version(ctx context.Context) (string, error) {
	if err := m.call("Version"); err != nil {
		return "", err
	}
	return m.FakeManager.Version, nil
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

// signal is the fake's signal as *systemd.Manager hands it on: on Events'
// channel once subscribed, a unit event dropped when the channel is full
// (Overflowed), ReloadFinished waiting for room.
func (m *memManager) signal(s testutil.FakeSignal) {
	ev := systemd.UnitEvent{UID: m.uid, Name: s.Unit}
	switch s.Member {
	case "UnitNew":
		ev.Kind = systemd.UnitLoaded
	case "UnitRemoved":
		ev.Kind = systemd.UnitDropped
	case "JobRemoved":
		ev.Kind = systemd.JobFinished
	case "Reloading":
		ev.Kind = systemd.ReloadFinished
		if s.Reloading {
			ev.Kind = systemd.ReloadStarted
		}
	default:
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.subscribed || m.closed {
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

// info is unit name as systemd.Manager reads it: LoadState "not-found"
// and nothing else for a unit not loaded.
func (m *memManager) info(name string) systemd.UnitInfo {
	u, ok := m.Unit(name)
	if !ok {
		return systemd.UnitInfo{Name: name, LoadState: "not-found", ActiveState: "inactive"}
	}
	active := u.ActiveState
	if active == "" {
		active = "active"
	}
	cpus, err := systemd.DecodeCPUMask(u.Mask, 0)
	if err != nil {
		m.t.Errorf("unit %s: AllowedCPUs=%x: %v", name, u.Mask, err)
	}
	info := systemd.UnitInfo{Name: name, Slice: u.Slice, LoadState: "loaded", ActiveState: active,
		ControlGroup: u.ControlGroup, AllowedCPUs: cpus, DropInPaths: u.DropIns}
	if len(info.AllowedCPUs) == 0 {
		info.AllowedCPUs = nil
	}
	return info
}

func (m *memManager) note(s string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.journal != nil {
		*m.journal = append(*m.journal, s)
	}
}
