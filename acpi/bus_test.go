package acpi

import (
	"bufio"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/godbus/dbus/v5"

	"github.com/schedpolicyd/schedpolicyd/internal/testutil"
)

// TestMonitorLogindResume runs a tiny fake logind (a bus peer owning
// org.freedesktop.login1) on a private bus: PrepareForSleep(true) changes
// nothing, PrepareForSleep(false) re-reads the power state (trigger
// "resume") and gives a CPUHotplug hint.
func TestMonitorLogindResume(t *testing.T) {
	addr := testutil.StartBus(t, testutil.BusOptions{System: true}).Addr
	logind, err := dbus.Connect(addr)
	if err != nil {
		t.Fatal(err)
	}
	defer logind.Close()
	if reply, err := logind.RequestName(logindName, dbus.NameFlagDoNotQueue); err != nil || reply != dbus.RequestNameReplyPrimaryOwner {
		t.Fatalf("RequestName(%s) = %v, %v", logindName, reply, err)
	}

	fsys := fixtureRoot(t, "ac-offline-battery-unknown")
	m := NewMonitor(MonitorConfig{FS: fsys, Events: EventsNone, Logind: true, Bus: addr,
		Debounce: time.Millisecond, Settle: -1, Interval: -1, Log: testutil.Logger(t)})
	stop := runMonitor(t, m)
	defer stop()
	if st := recvState(t, m); st.Power.Source != Unknown {
		t.Fatalf("initial %+v", st)
	}
	testutil.Eventually(t, "the monitor to subscribe on the bus", func() (bool, string) { return m.busUp.Load() > 0, "" })

	// Suspend: the battery was unplugged while asleep, without events.
	if err := logind.Emit(logindPath, prepareForSleep, true); err != nil {
		t.Fatal(err)
	}
	testutil.WriteFile(t, fsys.Path("class/power_supply/BAT0/status"), "Discharging\n")
	if err := logind.Emit(logindPath, prepareForSleep, false); err != nil {
		t.Fatal(err)
	}
	st := recvState(t, m)
	if st.Power.Source != Battery || st.Trigger != TriggerResume {
		t.Fatalf("after resume %+v", st)
	}
	if n := m.reads.Load(); n != 2 {
		t.Fatalf("%d reads, want 2: PrepareForSleep(true) must not re-read", n)
	}
	select {
	case <-m.CPUHotplug():
	case <-time.After(5 * time.Second):
		t.Fatal("no CPUHotplug hint after resume")
	}
}

// TestMonitorBusAbsent: with UPower=auto and Logind on but no bus at the
// address, the monitor runs on and delivers states.
func TestMonitorBusAbsent(t *testing.T) {
	fsys := fixtureRoot(t, "ac-offline-battery-unknown")
	m := NewMonitor(MonitorConfig{FS: fsys, Events: EventsNone, UPower: UPowerAuto, Logind: true,
		Bus: "unix:path=" + filepath.Join(t.TempDir(), "nobus"), Debounce: time.Millisecond, Interval: -1, Log: testutil.Logger(t)})
	stop := runMonitor(t, m)
	defer stop()
	recvState(t, m)
	testutil.WriteFile(t, fsys.Path("class/power_supply/BAT0/status"), "Discharging\n")
	m.Poke()
	if st := recvState(t, m); st.Power.Source != Battery || st.Trigger != TriggerPoke || st.UPowerOnBattery != nil {
		t.Fatalf("state %+v", st)
	}
}

// upowerTestbed runs acpi/testdata/upower_testbed.py: the real upowerd
// under umockdev with a fake AC adapter and battery, on the bus at addr.
type upowerTestbed struct {
	in   io.WriteCloser
	out  *bufio.Scanner
	root string
}

func startUPowerTestbed(t *testing.T, addr string) *upowerTestbed {
	t.Helper()
	for _, need := range []struct{ path, pkg string }{
		{"/usr/libexec/upowerd", "upower"},
		{"/usr/bin/umockdev-wrapper", "umockdev"},
		{"/usr/bin/python3", "python3"},
	} {
		if _, err := os.Stat(need.path); err != nil {
			t.Skipf("needs %s (Debian package %s)", need.path, need.pkg)
		}
	}
	if out, err := exec.Command("/usr/bin/python3", "-c", "import gi; gi.require_version('UMockdev', '1.0'); from gi.repository import UMockdev").CombinedOutput(); err != nil {
		t.Skipf("needs the UMockdev GObject introspection for /usr/bin/python3 (Debian packages python3-gi, gir1.2-umockdev-1.0): %v: %s", err, strings.TrimSpace(string(out)))
	}
	script, err := filepath.Abs("testdata/upower_testbed.py")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("umockdev-wrapper", "/usr/bin/python3", script, "--bus", addr)
	cmd.Stderr = testutil.LogWriter(t)
	in, out := testutil.StartPiped(t, cmd)
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		in.Close() // EOF: the helper stops upowerd and exits
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-done
		}
	})
	tb := &upowerTestbed{in: in, out: bufio.NewScanner(out)}
	if line := tb.expect(t, "ROOT "); line != "" {
		tb.root = strings.TrimPrefix(line, "ROOT ")
	}
	tb.expect(t, "READY")
	return tb
}

// expect reads the helper's next line (30s at most) and checks its prefix.
func (tb *upowerTestbed) expect(t *testing.T, prefix string) string {
	t.Helper()
	line := make(chan string, 1)
	go func() {
		if tb.out.Scan() {
			line <- tb.out.Text()
		} else {
			line <- ""
		}
	}()
	select {
	case l := <-line:
		if !strings.HasPrefix(l, prefix) {
			t.Fatalf("upower testbed said %q, want %q… (see its log above)", l, prefix)
		}
		return l
	case <-time.After(30 * time.Second):
		t.Fatalf("upower testbed: no %q within 30s", prefix)
	}
	return ""
}

func (tb *upowerTestbed) do(t *testing.T, cmd string) {
	t.Helper()
	if _, err := io.WriteString(tb.in, cmd+"\n"); err != nil {
		t.Fatal(err)
	}
	tb.expect(t, "OK "+cmd)
}

// TestMonitorUPower runs the real upowerd from Debian under umockdev with
// a fake AC adapter (online) and battery (charging) on a private system
// bus. The monitor reads the testbed's sysfs tree with no uevent or
// inotify source and no timers, so the only thing that can make it look
// again is UPower's PropertiesChanged: unplugging the fake adapter must
// flip the power source to battery (trigger "upower"), and plugging it
// back to AC. UPower's OnBattery is recorded but never decides.
func TestMonitorUPower(t *testing.T) {
	addr := testutil.StartBus(t, testutil.BusOptions{System: true}).Addr
	tb := startUPowerTestbed(t, addr)
	fsys := mustFS(t, filepath.Join(tb.root, "sys"))
	m := NewMonitor(MonitorConfig{FS: fsys, Events: EventsNone, UPower: UPowerOn, Bus: addr,
		Debounce: 10 * time.Millisecond, Settle: -1, Interval: -1, Log: testutil.Logger(t)})
	stop := runMonitor(t, m)
	defer stop()
	if st := recvState(t, m); st.Power.Source != AC {
		t.Fatalf("initial state %+v, want AC (adapter online)", st)
	}
	testutil.Eventually(t, "UPower's OnBattery=false", func() (bool, string) { ob := m.upower.Load(); return ob != nil && !*ob, "" })

	tb.do(t, "unplug")
	st := recvStateWithin(t, m, 20*time.Second)
	if st.Power.Source != Battery || st.Trigger != TriggerUPower {
		t.Fatalf("after unplug %+v, want battery by upower", st)
	}
	t.Logf("after unplug: %s by %s: %s (UPower OnBattery=%v)", st.Power.Source, st.Trigger, st.Power.Reason, ptrBool(st.UPowerOnBattery))

	tb.do(t, "plug")
	st = recvStateWithin(t, m, 20*time.Second)
	if st.Power.Source != AC || st.Trigger != TriggerUPower {
		t.Fatalf("after plug %+v, want AC by upower", st)
	}
}

func ptrBool(b *bool) string {
	if b == nil {
		return "unknown"
	}
	if *b {
		return "true"
	}
	return "false"
}

// TestMonitorUPowerNoAutoStart: upower "auto" means UPower when it is on
// the bus, so the monitor must never make the bus start it. The private
// bus has an activation file for org.freedesktop.UPower whose Exec only
// leaves a mark; a call without NO_AUTO_START to another activatable name
// shows the mark really appears when something asks the bus to start a
// service. After the monitor's session is up and has asked UPower once,
// UPower's mark must be absent.
func TestMonitorUPowerNoAutoStart(t *testing.T) {
	testutil.NeedBusDaemon(t)
	dir := t.TempDir()
	services := filepath.Join(dir, "services")
	marks := filepath.Join(dir, "started")
	for name, mark := range map[string]string{upowerName: "upower", "org.schedpolicyd.Test.Activatable": "sanity"} {
		testutil.WriteFile(t, filepath.Join(services, name+".service"),
			"[D-BUS Service]\nName="+name+"\nExec=/bin/sh -c \"echo "+mark+" >> "+marks+"\"\n")
	}
	bus := testutil.StartBus(t, testutil.BusOptions{ServiceDir: services})

	conn, err := dbus.Connect(bus.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	// The service leaves its mark and exits without owning the name; the
	// call's answer is not waited for (the bus may hold it until its
	// activation timeout).
	conn.Object("org.schedpolicyd.Test.Activatable", "/").Go("org.freedesktop.DBus.Peer.Ping", 0, nil)
	testutil.Eventually(t, "the mark of a service started by an auto-starting call (is activation working on this bus?)", func() (bool, string) {
		b, _ := os.ReadFile(marks)
		return string(b) == "sanity\n", string(b)
	})

	root := t.TempDir()
	testutil.Put(t, filepath.Join(root, "class/power_supply/AC/type"), "Mains")
	testutil.Put(t, filepath.Join(root, "class/power_supply/AC/online"), "1")
	m := NewMonitor(MonitorConfig{FS: mustFS(t, root), Events: EventsNone, UPower: UPowerAuto, Bus: bus.Addr,
		Debounce: time.Millisecond, Settle: -1, Interval: -1, Log: testutil.Logger(t)})
	stop := runMonitor(t, m)
	defer stop()
	if st := recvState(t, m); st.Power.Source != AC || st.UPowerOnBattery != nil {
		t.Fatalf("initial state %+v, want AC without UPower", st)
	}
	testutil.Eventually(t, "the monitor to subscribe and ask UPower", func() (bool, string) { return m.busUp.Load() > 0, "" })
	if got := testutil.ReadTrim(t, marks); got != "sanity" {
		t.Errorf("marks after the monitor asked UPower: %q, want only \"sanity\": the monitor had the bus start upowerd", got)
	}
}
