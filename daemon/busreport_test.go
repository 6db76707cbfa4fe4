package daemon

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/godbus/dbus/v5"
	"github.com/sirupsen/logrus"
	logtest "github.com/sirupsen/logrus/hooks/test"

	"github.com/schedpolicyd/schedpolicyd/daemon/bus"
	"github.com/schedpolicyd/schedpolicyd/internal/testutil"
)

// uniqueNames lists the connections on conn's bus (unique names).
func uniqueNames(t *testing.T, conn *dbus.Conn) []string {
	t.Helper()
	var names []string
	if err := conn.BusObject().Call("org.freedesktop.DBus.ListNames", 0).Store(&names); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, n := range names {
		if strings.HasPrefix(n, ":") {
			out = append(out, n)
		}
	}
	return out
}

// TestBusNoneConnectsNowhere: --bus none must not connect to the system
// bus for the UPower and logind hints either. Here the
// "system bus" (DBUS_SYSTEM_BUS_ADDRESS) is a private one. Daemon A runs
// with bus none and UPower auto and logind on; daemon B, started after A
// is ready, with bus system, shows that the address is the one a daemon
// would use: once B owns its name and its hints are connected, the bus
// has exactly the test's and B's two connections, none of A's.
func TestBusNoneConnectsNowhere(t *testing.T) {
	testutil.NeedBusDaemon(t)
	pbus := testutil.StartBus(t, testutil.BusOptions{System: true})
	t.Setenv("DBUS_SYSTEM_BUS_ADDRESS", pbus.Addr)
	conn, err := dbus.Connect(pbus.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()

	logA := testutil.Logger(t)
	hookA := logtest.NewLocal(logA)
	newMockLaptop(t).startWith(t, func(c *Config) { c.Bus, c.UPower, c.Logind, c.Log = "none", "auto", true, logA })
	logB := testutil.Logger(t)
	hookB := logtest.NewLocal(logB)
	newMockLaptop(t).startWith(t, func(c *Config) { c.Bus, c.UPower, c.Logind, c.Log = "system", "auto", true, logB })

	connected := func(h *logtest.Hook) bool {
		for _, e := range h.AllEntries() {
			if e.Data["component"] == "acpi" && e.Message == "system bus connected" {
				return true
			}
		}
		return false
	}
	testutil.Eventually(t, "daemon B on the bus with its hints", func() (bool, string) {
		owned, seen := testutil.NameOwned(conn, bus.Name)
		return owned && connected(hookB), seen
	})
	if names := uniqueNames(t, conn); len(names) != 3 {
		t.Errorf("connections on the bus: %q; want 3 (the test, daemon B's name and its hints), none of the daemon with bus none", names)
	}
	if connected(hookA) {
		t.Error("the daemon with bus none connected its hints to a bus")
	}
	if got := testutil.EntriesAt(hookA, logrus.InfoLevel, "D-Bus disabled", logrus.Fields{"component": "dbus"}); len(got) != 1 {
		t.Errorf("daemon A's log: %s; want one \"D-Bus disabled\"", testutil.DescribeEntries(testutil.EntriesAt(hookA, logrus.InfoLevel, "", logrus.Fields{"component": "dbus"})))
	}
}

// TestNoBusSaidOnce: without a bus the daemon says so once, not in two
// lines, its own connection's warning and the
// power monitor's (UPower and logind use the same bus). Only the first is
// left, at warning level; the monitor's is a debug line. Nothing else
// about the bus is logged above debug level.
func TestNoBusSaidOnce(t *testing.T) {
	m := newMockLaptop(t)
	log := testutil.Logger(t)
	hook := logtest.NewLocal(log)
	addr := "unix:path=" + testutil.EscapeAddressValue(filepath.Join(t.TempDir(), "nobus"))
	m.startWith(t, func(c *Config) { c.Bus, c.UPower, c.Logind, c.Log = addr, "auto", true, log })
	// The monitor's outage line comes after its first connection attempt.
	testutil.Eventually(t, "the monitor's outage at debug level", func() (bool, string) {
		for _, e := range hook.AllEntries() {
			if e.Data["component"] == "acpi" && strings.Contains(e.Message, "unavailable") {
				return true, ""
			}
		}
		return false, ""
	})
	var said []string
	for _, e := range hook.AllEntries() {
		if e.Level <= logrus.InfoLevel && (strings.Contains(e.Message, "bus") || strings.Contains(e.Message, "D-Bus")) {
			said = append(said, fmt.Sprintf("%s %s %q", e.Level, e.Data["component"], e.Message))
		}
	}
	if len(said) != 1 || !strings.Contains(said[0], "warning dbus \"no D-Bus connection") {
		t.Errorf("lines about the missing bus: %q; want the one warning of the bus connection", said)
	}
}

// TestKnobLoggedBeforePolicy: "knob changed" is logged before the
// "policy changed" it causes.
func TestKnobLoggedBeforePolicy(t *testing.T) {
	m := newMockLaptop(t) // on AC: performance
	log := testutil.Logger(t)
	hook := logtest.NewLocal(log)
	d := m.startWith(t, func(c *Config) { c.Log = log })
	if err := d.writeFile(t.Context(), fileCurrent, []byte("powersaving\n"), "test"); err != nil {
		t.Fatal(err)
	}
	var order []string
	for _, e := range hook.AllEntries() {
		if e.Message == "knob changed" || e.Message == "policy changed" {
			order = append(order, e.Message)
		}
	}
	if strings.Join(order, ", ") != "knob changed, policy changed" {
		t.Errorf("logged %q; want the knob change, then the policy change it caused", order)
	}
}
