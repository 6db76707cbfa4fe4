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
)

// startSystemBus starts a private dbus-daemon configured like a system bus
// that anyone may own names on, and returns its address.
func startSystemBus(t *testing.T) string {
	t.Helper()
	if _, err := exec.LookPath("dbus-daemon"); err != nil {
		t.Skip("needs dbus-daemon (Debian package dbus) for a private bus")
	}
	dir := t.TempDir()
	conf := filepath.Join(dir, "bus.conf")
	sock := filepath.Join(dir, "bus")
	err := os.WriteFile(conf, []byte(`<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>system</type>
  <listen>unix:path=`+sock+`</listen>
  <auth>EXTERNAL</auth>
  <policy context="default">
    <allow send_destination="*" eavesdrop="true"/>
    <allow eavesdrop="true"/>
    <allow own="*"/>
  </policy>
</busconfig>
`), 0o644)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("dbus-daemon", "--nofork", "--print-address=1", "--config-file="+conf)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("dbus-daemon: %v", err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	addr := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(stdout).ReadString('\n')
		addr <- strings.TrimSpace(line)
	}()
	select {
	case a := <-addr:
		if a == "" {
			t.Fatal("dbus-daemon printed no address")
		}
		return a
	case <-time.After(10 * time.Second):
		t.Fatal("dbus-daemon did not start within 10s")
	}
	return ""
}

// waitFor polls cond every 10ms for up to 10s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestMonitorLogindResume runs a tiny fake logind (a bus peer owning
// org.freedesktop.login1) on a private bus: PrepareForSleep(true) changes
// nothing, PrepareForSleep(false) re-reads the power state (trigger
// "resume") and gives a CPUHotplug hint.
func TestMonitorLogindResume(t *testing.T) {
	addr := startSystemBus(t)
	logind, err := dbus.Connect(addr)
	if err != nil {
		t.Fatal(err)
	}
	defer logind.Close()
	if reply, err := logind.RequestName(logindName, dbus.NameFlagDoNotQueue); err != nil || reply != dbus.RequestNameReplyPrimaryOwner {
		t.Fatalf("RequestName(%s) = %v, %v", logindName, reply, err)
	}

	fsys := fixtureRoot(t, "ac-offline-battery-unknown")
	m := NewMonitor(MonitorConfig{FS: fsys, Events: EventsNone, Logind: true, SystemBusAddress: addr,
		Debounce: time.Millisecond, Settle: -1, Interval: -1, Log: testLogger(t)})
	stop := runMonitor(t, m)
	defer stop()
	if st := recvState(t, m); st.Power.Source != Unknown {
		t.Fatalf("initial %+v", st)
	}
	waitFor(t, "the monitor to subscribe on the bus", func() bool { return m.busUp.Load() > 0 })

	// Suspend: the battery was unplugged while asleep, without events.
	if err := logind.Emit(logindPath, prepareForSleep, true); err != nil {
		t.Fatal(err)
	}
	writeFile(t, fsys.Path("class/power_supply/BAT0/status"), "Discharging\n")
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
		SystemBusAddress: "unix:path=" + filepath.Join(t.TempDir(), "nobus"), Debounce: time.Millisecond, Interval: -1, Log: testLogger(t)})
	stop := runMonitor(t, m)
	defer stop()
	recvState(t, m)
	writeFile(t, fsys.Path("class/power_supply/BAT0/status"), "Discharging\n")
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
	cmd.Stderr = tWriter{t}
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
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
	addr := startSystemBus(t)
	tb := startUPowerTestbed(t, addr)
	fsys := mustFS(t, filepath.Join(tb.root, "sys"))
	m := NewMonitor(MonitorConfig{FS: fsys, Events: EventsNone, UPower: UPowerOn, SystemBusAddress: addr,
		Debounce: 10 * time.Millisecond, Settle: -1, Interval: -1, Log: testLogger(t)})
	stop := runMonitor(t, m)
	defer stop()
	if st := recvState(t, m); st.Power.Source != AC {
		t.Fatalf("initial state %+v, want AC (adapter online)", st)
	}
	waitFor(t, "UPower's OnBattery=false", func() bool { ob := m.upower.Load(); return ob != nil && !*ob })

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
