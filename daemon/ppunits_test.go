package daemon

import (
	"fmt"
	"testing"

	"github.com/godbus/dbus/v5"
	"github.com/sirupsen/logrus"

	"github.com/schedpolicyd/schedpolicyd/daemon/bus"
	"github.com/schedpolicyd/schedpolicyd/internal/testutil"
)

// ppOwners is the owners of the two power-profiles names, as one string.
func ppOwners(conn *dbus.Conn) string {
	var s string
	for _, n := range ppNames {
		var o string
		conn.BusObject().Call("org.freedesktop.DBus.GetNameOwner", 0, n.name).Store(&o)
		s += n.name + "=" + o + " "
	}
	return s
}

// TestDaemonLeavesPowerProfilesToInstalledDaemon is the daemon's side of
// the laptop issue's first case (daemon/bus's
// TestPowerProfilesLeftToInstalledDaemon follows the installed units'
// comings and goings on the service alone): a daemon started with
// power_profiles_api auto and no power_profiles_units hands the service
// the default units and its log, so with power-profiles-daemon installed
// (disabled) on a system manager of the test's own it never takes the
// power-profiles names, and says so as the dbus component.
func TestDaemonLeavesPowerProfilesToInstalledDaemon(t *testing.T) {
	pbus := testutil.StartSystemPolicyBus(t, "../packaging/dbus/org.schedpolicyd.SchedPolicy1.conf")
	fake := testutil.NewFakeManager(t)
	fake.SetUnitFiles(map[string]string{"power-profiles-daemon.service": "disabled"})
	fake.ServeBus(pbus.Addr)
	ml := new(msgLog)
	newMockLaptop(t).startWith(t, func(c *Config) {
		c.Bus, c.PowerProfilesAPI = pbus.Addr, bus.PowerProfilesAuto
		c.Log.(*logrus.Logger).AddHook(ml)
	})
	root, err := dbus.Connect(pbus.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	const leftTo = "a power-profiles daemon is installed; its names are left to it (power_profiles_api = true serves them anyway) component=dbus state=disabled unit=power-profiles-daemon.service"
	testutil.Eventually(t, "the names left to the installed daemon", func() (bool, string) {
		return ml.mentions("a power-profiles daemon is installed") == leftTo, ml.mentions("a power-profiles daemon is installed") + " " + ppOwners(root)
	})
	testutil.Eventually(t, "bus name", func() (bool, string) { return testutil.NameOwned(root, bus.Name) })
	if got, want := ppOwners(root), fmt.Sprintf("%s= %s= ", ppNames[0].name, ppNames[1].name); got != want {
		t.Fatalf("owners %q with power-profiles-daemon installed, want none", got)
	}
}
