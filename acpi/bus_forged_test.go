package acpi

import (
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/godbus/dbus/v5"
	logtest "github.com/sirupsen/logrus/hooks/test"

	"github.com/schedpolicyd/schedpolicyd/internal/testutil"
)

// fakeUPower answers Properties.Get on UPower's object (OnBattery false)
// and counts the calls.
type fakeUPower struct{ gets atomic.Int64 }

func (f *fakeUPower) Get(iface, prop string) (dbus.Variant, *dbus.Error) {
	f.gets.Add(1)
	return dbus.MakeVariant(false), nil
}

// TestMonitorForgedSignals, on a bus with the system bus's policy: a
// connection of uid 65534 sends the monitor's connection (unicast, and as
// broadcasts) logind's PrepareForSleep(false), UPower's PropertiesChanged
// and the bus's NameOwnerChanged for UPower; none of them is believed (no
// CPU re-read hint, UPower not asked again, nothing logged about UPower
// leaving). The same signals from logind's and UPower's own connections
// do all of that. The forged signals are routed before the genuine
// PrepareForSleep(true) that the test waits for, so they have been handled
// when it is.
func TestMonitorForgedSignals(t *testing.T) {
	conf := filepath.Join(t.TempDir(), "upower.conf")
	testutil.WriteFile(t, conf, `<busconfig><policy user="root"><allow own="org.freedesktop.UPower"/></policy>
<policy context="default"><allow send_destination="org.freedesktop.UPower"/></policy></busconfig>`)
	bus := testutil.StartSystemPolicyBus(t, conf)
	logind, err := dbus.Connect(bus.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer logind.Close()
	if r, err := logind.RequestName(logindName, dbus.NameFlagDoNotQueue); err != nil || r != dbus.RequestNameReplyPrimaryOwner {
		t.Fatalf("RequestName(%s) = %v, %v", logindName, r, err)
	}
	up, err := dbus.Connect(bus.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer up.Close()
	fake := &fakeUPower{}
	if err := up.Export(fake, upowerPath, "org.freedesktop.DBus.Properties"); err != nil {
		t.Fatal(err)
	}
	if r, err := up.RequestName(upowerName, dbus.NameFlagDoNotQueue); err != nil || r != dbus.RequestNameReplyPrimaryOwner {
		t.Fatalf("RequestName(%s) = %v, %v", upowerName, r, err)
	}

	log := testutil.Logger(t)
	hook := logtest.NewLocal(log)
	m := NewMonitor(MonitorConfig{FS: fixtureRoot(t, "ac-offline-battery-unknown"), Events: EventsNone, Logind: true,
		UPower: UPowerOn, Bus: bus.Addr, Debounce: time.Millisecond, Settle: -1, Interval: -1, Log: log})
	stop := runMonitor(t, m)
	defer stop()
	recvState(t, m)
	testutil.Eventually(t, "the monitor to subscribe on the bus", func() (bool, string) { return m.busUp.Load() > 0, "" })
	gets := fake.gets.Load()

	attacker := testutil.DialAs(t, bus.Addr, 65534)
	monitor := testutil.Peers(t, attacker, logind.Names()[0], up.Names()[0])
	if len(monitor) != 1 {
		t.Fatalf("connections on the bus besides the test's: %v, want the monitor's alone", monitor)
	}
	for _, dest := range append(monitor, "") {
		testutil.SendSignal(t, attacker, dest, logindPath, prepareForSleep, false)
		testutil.SendSignal(t, attacker, dest, upowerPath, propsChanged, upowerIface,
			map[string]dbus.Variant{"OnBattery": dbus.MakeVariant(true)}, []string{})
		testutil.SendSignal(t, attacker, dest, "/org/freedesktop/DBus", "org.freedesktop.DBus.NameOwnerChanged",
			upowerName, up.Names()[0], "")
	}
	handled := func(msg string) func() (bool, string) {
		return func() (bool, string) {
			for _, e := range hook.AllEntries() {
				if e.Message == msg {
					return true, ""
				}
			}
			return false, "not logged yet"
		}
	}
	if err := logind.Emit(logindPath, prepareForSleep, true); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "the genuine PrepareForSleep(true)", handled("suspending"))
	select {
	case <-m.CPUHotplug():
		t.Fatal("a forged PrepareForSleep(false) made the monitor re-read the CPUs")
	default:
	}
	if n := fake.gets.Load(); n != gets {
		t.Fatalf("UPower was asked %d more times after forged signals", n-gets)
	}
	for _, e := range hook.AllEntries() {
		if e.Message == "UPower left the system bus" || e.Message == "resumed from suspend; re-reading power state and CPUs" {
			t.Fatalf("a forged signal was believed: %q", e.Message)
		}
	}

	// The same signals from their owners are believed.
	if err := logind.Emit(logindPath, prepareForSleep, false); err != nil {
		t.Fatal(err)
	}
	select {
	case <-m.CPUHotplug():
	case <-time.After(time.Minute):
		t.Fatal("logind's own PrepareForSleep(false) gave no CPU re-read hint")
	}
	if err := up.Emit(upowerPath, propsChanged, upowerIface, map[string]dbus.Variant{"OnBattery": dbus.MakeVariant(true)}, []string{}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "UPower asked again after its own PropertiesChanged", func() (bool, string) {
		return fake.gets.Load() > gets, ""
	})
}
