package acpi

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sirupsen/logrus"
	logtest "github.com/sirupsen/logrus/hooks/test"

	"github.com/schedpolicyd/schedpolicyd/internal/testutil"
	"github.com/schedpolicyd/schedpolicyd/sysfs"
)

// fakeUevents is an in-memory ueventSource fed by the test.
type fakeUevents struct {
	ch        chan fakeMsg
	done      chan struct{}
	closeOnce sync.Once
}

type fakeMsg struct {
	b   []byte
	err error
}

func newFakeUevents() *fakeUevents {
	return &fakeUevents{ch: make(chan fakeMsg), done: make(chan struct{})}
}

func (f *fakeUevents) Receive() ([]byte, error) {
	select {
	case m := <-f.ch:
		return m.b, m.err
	case <-f.done:
		return nil, net.ErrClosed
	}
}

func (f *fakeUevents) Close() error {
	f.closeOnce.Do(func() { close(f.done) })
	return nil
}

func (f *fakeUevents) send(t *testing.T, b []byte, err error) {
	t.Helper()
	select {
	case f.ch <- fakeMsg{b, err}:
	case <-time.After(5 * time.Second):
		t.Fatal("monitor does not read uevents")
	}
}

func psUevent(name string) []byte {
	return []byte(fmt.Sprintf("change@/devices/LNXSYSTM:00/power_supply/%[1]s\x00ACTION=change\x00DEVPATH=/devices/LNXSYSTM:00/power_supply/%[1]s\x00SUBSYSTEM=power_supply\x00POWER_SUPPLY_NAME=%[1]s\x00SEQNUM=1\x00", name))
}

// runMonitor starts m.Run and returns a stop function that cancels it and
// checks it returned nil and closed C.
func runMonitor(t *testing.T, m *Monitor) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	errc := make(chan error, 1)
	go func() { errc <- m.Run(ctx) }()
	return func() {
		t.Helper()
		cancel()
		select {
		case err := <-errc:
			if err != nil {
				t.Fatalf("Run: %v", err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("Run did not return after cancel")
		}
		if _, ok := <-m.C(); ok {
			t.Fatal("C not closed after Run returned")
		}
	}
}

func recvState(t *testing.T, m *Monitor) State {
	t.Helper()
	return recvStateWithin(t, m, 5*time.Second)
}

// recvStateWithin waits up to d (fake time inside a synctest bubble).
func recvStateWithin(t *testing.T, m *Monitor, d time.Duration) State {
	t.Helper()
	select {
	case st, ok := <-m.C():
		if !ok {
			t.Fatal("C closed")
		}
		return st
	case <-time.After(d):
		t.Fatalf("no state within %v", d)
	}
	return State{}
}

// fixtureRoot copies a case of the power_supply corpus into a temp dir.
func fixtureRoot(t *testing.T, name string) sysfs.FS {
	t.Helper()
	root := t.TempDir()
	testutil.CopyFixture(t, filepath.Join(fixtureDir, name, "sys"), root)
	return mustFS(t, root)
}

const batteryReason = "battery: system battery BAT0 reports status=Discharging and no supply shows external power (rule 3)"

// TestMonitorFsnotify drives a real fsnotify watcher on a copy of a
// fixture: unplugging (AC/online=0, BAT0 Discharging) gives a battery state,
// a boost write gives a new state, and a write to cpu/online a hotplug hint.
func TestMonitorFsnotify(t *testing.T) {
	fsys := fixtureRoot(t, "ac-offline-battery-unknown")
	testutil.WriteFile(t, fsys.Path("devices/system/cpu/cpufreq/boost"), "1\n")
	testutil.WriteFile(t, fsys.Path("devices/system/cpu/online"), "0-1\n")
	m := NewMonitor(MonitorConfig{FS: fsys, Events: EventsAuto, Debounce: 50 * time.Millisecond, Interval: -1, Log: testutil.Logger(t)})
	stop := runMonitor(t, m)
	defer stop()

	st := recvState(t, m)
	if st.Power.Source != Unknown || st.Boost != "1" {
		t.Fatalf("initial state %+v, want unknown with boost 1", st)
	}
	testutil.WriteFile(t, fsys.Path("class/power_supply/AC/online"), "0\n")
	testutil.WriteFile(t, fsys.Path("class/power_supply/BAT0/status"), "Discharging\n")
	st = recvState(t, m)
	if st.Power.Source != Battery || st.Power.Reason != batteryReason || st.Boost != "1" {
		t.Fatalf("after unplug: %+v", st)
	}
	testutil.WriteFile(t, fsys.Path("devices/system/cpu/cpufreq/boost"), "0\n")
	st = recvState(t, m)
	if st.Power.Source != Battery || st.Boost != "0" {
		t.Fatalf("after boost write: %+v", st)
	}
	testutil.WriteFile(t, fsys.Path("class/power_supply/AC/online"), "1\n")
	st = recvState(t, m)
	if want := "AC: Mains supply AC reports online=1 (rule 2)"; st.Power.Source != AC || st.Power.Reason != want {
		t.Fatalf("after replug: %+v, want reason %q", st, want)
	}
	testutil.WriteFile(t, fsys.Path("devices/system/cpu/online"), "0\n")
	select {
	case <-m.CPUHotplug():
	case <-time.After(5 * time.Second):
		t.Fatal("no CPUHotplug hint after writing cpu/online")
	}
}

// TestMonitorFsnotifyNewSupply checks that a supply directory created after
// start is watched too.
func TestMonitorFsnotifyNewSupply(t *testing.T) {
	fsys := fixtureRoot(t, "desktop-no-power-supply")
	m := NewMonitor(MonitorConfig{FS: fsys, Events: EventsFsnotify, Debounce: 50 * time.Millisecond, Interval: -1, Log: testutil.Logger(t)})
	stop := runMonitor(t, m)
	defer stop()
	if st := recvState(t, m); st.Power.Source != Unknown || st.Boost != "unsupported" {
		t.Fatalf("initial state %+v", st)
	}
	dir := fsys.Path("class/power_supply/BAT0")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	testutil.WriteFile(t, filepath.Join(dir, "type"), "Battery\n")
	testutil.WriteFile(t, filepath.Join(dir, "status"), "Full\n")
	// The new supply changes the reason; once that state arrives the new
	// directory is watched (the watch is added before the re-read hint).
	if st := recvState(t, m); st.Power.Source != Unknown || st.Power.Reason != "unknown: no system supply is online and no system battery is charging or discharging (rule 4: without evidence either way the source is unknown, treated as AC)" {
		t.Fatalf("state after new supply %+v", st)
	}
	testutil.WriteFile(t, filepath.Join(dir, "status"), "Discharging\n")
	if st := recvState(t, m); st.Power.Source != Battery || st.Power.Reason != batteryReason {
		t.Fatalf("state %+v", st)
	}
}

// TestMonitorDebounce feeds a burst of 10 power_supply uevents through a
// fake source (fake time) and expects exactly one re-read and delivery,
// after the debounce window. The settle re-read is off here (see
// TestFlappingConnectorOneDecision and TestSettleReRead for it).
func TestMonitorDebounce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fsys := fixtureRoot(t, "ac-offline-battery-unknown")
		src := newFakeUevents()
		m := newMonitor(MonitorConfig{FS: fsys, Events: EventsNetlink, Interval: -1, Settle: -1, Log: testutil.Logger(t)},
			func() (ueventSource, error) { return src, nil })
		stop := runMonitor(t, m)

		if st := recvState(t, m); st.Power.Source != Unknown {
			t.Fatalf("initial state %+v", st)
		}
		testutil.WriteFile(t, fsys.Path("class/power_supply/BAT0/status"), "Discharging\n")
		start := time.Now()
		for range 10 {
			src.send(t, psUevent("BAT0"), nil)
		}
		synctest.Wait()
		if n := m.reads.Load(); n != 1 {
			t.Fatalf("reads during the window = %d, want 1 (the initial one)", n)
		}
		st := recvState(t, m)
		if st.Power.Source != Battery || st.Power.Reason != batteryReason || st.Trigger != TriggerUevent {
			t.Fatalf("state %+v", st)
		}
		if d := time.Since(start); d != DefaultDebounce {
			t.Fatalf("delivered after %v, want %v", d, DefaultDebounce)
		}
		time.Sleep(10 * DefaultDebounce)
		synctest.Wait()
		if n := m.reads.Load(); n != 2 {
			t.Fatalf("reads = %d, want 2", n)
		}
		select {
		case st := <-m.C():
			t.Fatalf("second delivery %+v", st)
		default:
		}

		// A hint that changes nothing re-reads but delivers nothing.
		m.Poke()
		time.Sleep(2 * DefaultDebounce)
		synctest.Wait()
		if n := m.reads.Load(); n != 3 {
			t.Fatalf("reads after Poke = %d, want 3", n)
		}
		select {
		case st := <-m.C():
			t.Fatalf("delivery without change: %+v", st)
		default:
		}

		// Other subsystems and garbage are ignored; cpu gives a hotplug hint.
		src.send(t, []byte("add@/devices/virtual/net/lo\x00SUBSYSTEM=net\x00"), nil)
		src.send(t, []byte("garbage"), nil)
		src.send(t, []byte(cpuOffline), nil)
		src.send(t, []byte(cpuOffline), nil)
		synctest.Wait()
		select {
		case <-m.CPUHotplug():
		default:
			t.Fatal("no CPUHotplug hint for SUBSYSTEM=cpu")
		}
		select {
		case <-m.CPUHotplug():
			t.Fatal("two cpu uevents gave two hints; want one coalesced")
		default:
		}
		time.Sleep(2 * DefaultDebounce)
		synctest.Wait()
		if n := m.reads.Load(); n != 3 {
			t.Fatalf("reads after non-power uevents = %d, want 3", n)
		}

		// An overrun (ENOBUFS) means lost events: re-read and hotplug hint.
		testutil.WriteFile(t, fsys.Path("class/power_supply/AC/online"), "1\n")
		src.send(t, nil, fmt.Errorf("receive uevent: %w", syscall.ENOBUFS))
		synctest.Wait()
		select {
		case <-m.CPUHotplug():
		default:
			t.Fatal("no CPUHotplug hint after ENOBUFS")
		}
		if st := recvState(t, m); st.Power.Source != AC || st.Trigger != TriggerUevent {
			t.Fatalf("after ENOBUFS: %+v", st)
		}
		stop()
	})
}

// TestMonitorFallbackInterval: the uevent source cannot be opened; the
// failure is logged once and the safety-net interval still sees changes.
func TestMonitorFallbackInterval(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fsys := fixtureRoot(t, "ac-offline-battery-unknown")
		log, hook := logtest.NewNullLogger()
		m := newMonitor(MonitorConfig{FS: fsys, Events: EventsNetlink, Log: log},
			func() (ueventSource, error) { return nil, errors.New("socket: permission denied") })
		stop := runMonitor(t, m)
		if st := recvState(t, m); st.Power.Source != Unknown {
			t.Fatalf("initial state %+v", st)
		}
		testutil.WriteFile(t, fsys.Path("class/power_supply/BAT0/status"), "Discharging\n")
		start := time.Now()
		st := recvStateWithin(t, m, 2*DefaultInterval)
		if st.Power.Source != Battery || st.Trigger != TriggerSafetyNet {
			t.Fatalf("state %+v", st)
		}
		if d := time.Since(start); d != DefaultInterval {
			t.Fatalf("picked up after %v, want the %v interval", d, DefaultInterval)
		}
		stop()
		warns := 0
		for _, e := range hook.AllEntries() {
			if e.Level == logrus.WarnLevel {
				warns++
			}
		}
		if warns != 1 {
			t.Fatalf("%d warnings, want exactly 1: %v", warns, hook.AllEntries())
		}
	})
}

// TestMonitorUeventsStop: a receive error other than ENOBUFS stops the
// reader; the monitor keeps running on the interval and shuts down cleanly.
func TestMonitorUeventsStop(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fsys := fixtureRoot(t, "ac-offline-battery-unknown")
		src := newFakeUevents()
		m := newMonitor(MonitorConfig{FS: fsys, Events: EventsNetlink, Interval: time.Second, Log: testutil.Logger(t)},
			func() (ueventSource, error) { return src, nil })
		stop := runMonitor(t, m)
		recvState(t, m)
		src.send(t, nil, syscall.EBADF)
		testutil.WriteFile(t, fsys.Path("class/power_supply/BAT0/status"), "Charging\n")
		if st := recvState(t, m); st.Power.Source != AC {
			t.Fatalf("state %+v", st)
		}
		stop()
	})
}

func TestMonitorLifecycle(t *testing.T) {
	fsys := mustFS(t, t.TempDir())
	t.Run("cancelled before Run", func(t *testing.T) {
		m := NewMonitor(MonitorConfig{FS: fsys, Events: EventsFsnotify})
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		if err := m.Run(ctx); err != nil {
			t.Fatalf("Run: %v", err)
		}
		if _, ok := <-m.C(); ok {
			t.Fatal("C not closed")
		}
		if err := m.Run(ctx); err == nil {
			t.Fatal("second Run succeeded")
		}
	})
	t.Run("unknown event source", func(t *testing.T) {
		m := NewMonitor(MonitorConfig{FS: fsys, Events: "dbus"})
		if err := m.Run(t.Context()); err == nil {
			t.Fatal("Run accepted Events=dbus")
		}
		if _, ok := <-m.C(); ok {
			t.Fatal("C not closed")
		}
	})
	t.Run("unknown upower setting", func(t *testing.T) {
		m := NewMonitor(MonitorConfig{FS: fsys, Events: EventsNone, UPower: "yes"})
		if err := m.Run(t.Context()); err == nil {
			t.Fatal("Run accepted UPower=yes")
		}
	})
	t.Run("no root", func(t *testing.T) {
		m := NewMonitor(MonitorConfig{})
		if err := m.Run(t.Context()); err == nil {
			t.Fatal("Run accepted a zero FS")
		}
	})
	t.Run("start and stop", func(t *testing.T) {
		m := NewMonitor(MonitorConfig{FS: fsys})
		stop := runMonitor(t, m)
		if st := recvState(t, m); st.Power.Source != Unknown || st.Boost != "unsupported" || st.Trigger != TriggerStart {
			t.Fatalf("state %+v", st)
		}
		m.Poke()
		m.Poke() // never blocks
		stop()
	})
	t.Run("no event source", func(t *testing.T) {
		m := NewMonitor(MonitorConfig{FS: fsys, Events: EventsNone, Debounce: time.Millisecond})
		stop := runMonitor(t, m)
		recvState(t, m)
		stop()
	})
}

// TestMonitorSafetyNetWarns: with uevents working, a change that no event
// announced is found by the safety-net tick (driven in fake time), is
// delivered with trigger "safety-net" and logged at warning level.
func TestMonitorSafetyNetWarns(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fsys := fixtureRoot(t, "ac-offline-battery-unknown")
		log, hook := logtest.NewNullLogger()
		src := newFakeUevents()
		m := newMonitor(MonitorConfig{FS: fsys, Events: EventsNetlink, Log: log},
			func() (ueventSource, error) { return src, nil })
		stop := runMonitor(t, m)
		recvState(t, m)
		testutil.WriteFile(t, fsys.Path("class/power_supply/BAT0/status"), "Discharging\n") // no uevent
		start := time.Now()
		st := recvStateWithin(t, m, 2*DefaultInterval)
		if st.Power.Source != Battery || st.Trigger != TriggerSafetyNet || time.Since(start) != DefaultInterval {
			t.Fatalf("state %+v after %v", st, time.Since(start))
		}
		stop()
		found := false
		for _, e := range hook.AllEntries() {
			if e.Level == logrus.WarnLevel && e.Message == "power state change found only by the periodic re-check; the firmware sent no event" {
				found = true
			}
		}
		if !found {
			t.Fatalf("no safety-net warning in %v", hook.AllEntries())
		}
	})
}

// TestMonitorFsnotifyPolicyBoost: on a tree with only per-policy boost
// files (amd-pstate), a write to one of them is seen through fsnotify.
func TestMonitorFsnotifyPolicyBoost(t *testing.T) {
	fsys := fixtureRoot(t, "desktop-no-power-supply")
	testutil.WriteFile(t, fsys.Path("devices/system/cpu/cpufreq/policy0/boost"), "1\n")
	testutil.WriteFile(t, fsys.Path("devices/system/cpu/cpufreq/policy1/boost"), "0\n")
	m := NewMonitor(MonitorConfig{FS: fsys, Events: EventsFsnotify, Debounce: 10 * time.Millisecond, Interval: -1, Log: testutil.Logger(t)})
	stop := runMonitor(t, m)
	defer stop()
	if st := recvState(t, m); st.Boost != "1" {
		t.Fatalf("initial %+v, want boost 1 (mixed counts as on)", st)
	}
	// One write(2) of the same length, as sysfs changes a value: a
	// truncate first would raise an event of its own, and a loaded machine
	// may read the empty file between the two (a parse error, "unsupported").
	testutil.WriteOnce(t, fsys.Path("devices/system/cpu/cpufreq/policy0/boost"), "0")
	if st := recvState(t, m); st.Boost != "0" || st.Trigger != TriggerFsnotify {
		t.Fatalf("after write %+v, want boost 0 by fsnotify", st)
	}
}

// TestMonitorSafetyNetAutomatic: with the default (automatic) Interval the
// safety net runs only while the event sources do not cover the machine
// (no periodic timer on an idle daemon that does not need one).
// Each case runs for ten safety-net periods of fake time and counts the
// re-reads after the first.
func TestMonitorSafetyNetAutomatic(t *testing.T) {
	for _, tc := range []struct {
		name    string
		fixture string
		events  EventSource
		open    func() (ueventSource, error)
		want    int64 // re-reads after the start read
	}{
		// Mains and USB supplies announce every change: no timer.
		{"uevents, no supplies", "desktop-no-power-supply", EventsNetlink, nil, 0},
		{"uevents, mains only", "desktop-mains-offline-no-battery", EventsNetlink, nil, 0},
		// A peripheral's battery is set aside by rule 1: no timer.
		{"uevents, peripheral battery only", "desktop-hidpp-mouse-keyboard", EventsNetlink, nil, 0},
		// A system battery with uevents only (no UPower): the timer runs.
		{"uevents, laptop without UPower", "thinkpad-dual-battery-on-battery", EventsNetlink, nil, 10},
		// No event source at all: the timer runs.
		{"uevents unavailable", "desktop-no-power-supply", EventsNetlink,
			func() (ueventSource, error) { return nil, errors.New("socket: permission denied") }, 10},
		{"no event source", "desktop-no-power-supply", EventsNone, nil, 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				fsys := fixtureRoot(t, tc.fixture)
				open := tc.open
				if open == nil {
					src := newFakeUevents()
					open = func() (ueventSource, error) { return src, nil }
				}
				m := newMonitor(MonitorConfig{FS: fsys, Events: tc.events, Settle: -1, Log: testutil.Logger(t)}, open)
				stop := runMonitor(t, m)
				recvState(t, m)
				time.Sleep(10*DefaultInterval + time.Second)
				synctest.Wait()
				if got := m.reads.Load() - 1; got != tc.want {
					t.Errorf("%d safety-net re-reads in %v, want %d", got, 10*DefaultInterval, tc.want)
				}
				stop()
			})
		})
	}
}

// TestNeedSafetyNet checks the rule itself, including the cases the fake-time
// test above cannot run (fsnotify's reader blocks in a real read, which
// synctest cannot advance past).
func TestNeedSafetyNet(t *testing.T) {
	yes := true
	for _, tc := range []struct {
		name     string
		interval time.Duration
		mode     EventSource
		sources  int32
		st       State
		want     bool
	}{
		{"explicit on", time.Minute, EventsNetlink, 1, State{}, true},
		{"explicit off", -1, EventsNone, 0, State{systemBattery: true}, false},
		{"no source", 0, EventsNetlink, 0, State{}, true},
		{"uevents, no battery", 0, EventsNetlink, 1, State{}, false},
		{"uevents, battery", 0, EventsNetlink, 1, State{systemBattery: true}, true},
		{"uevents, battery, UPower followed", 0, EventsNetlink, 2, State{systemBattery: true, UPowerOnBattery: &yes}, false},
		// Every change in a mock tree is a write fsnotify reports.
		{"fsnotify, battery", 0, EventsFsnotify, 1, State{systemBattery: true}, false},
	} {
		m := NewMonitor(MonitorConfig{FS: mustFS(t, t.TempDir()), Interval: tc.interval})
		m.mode = tc.mode
		m.events.Store(tc.sources)
		if got := m.needSafetyNet(tc.st); got != tc.want {
			t.Errorf("%s: needSafetyNet = %v, want %v", tc.name, got, tc.want)
		}
	}
}
