package daemon

import (
	"fmt"
	"sync"
	"testing"

	"github.com/godbus/dbus/v5"
	"github.com/sirupsen/logrus"

	"github.com/schedpolicyd/schedpolicyd/daemon/bus"
	"github.com/schedpolicyd/schedpolicyd/internal/testutil"
)

// fakeUnitFiles answers as much of the system manager as the power-profiles units watch asks:
// Subscribe, and GetUnitFileState from a table (FileNotFound for a unit
// not in it, as systemd answers for a unit without a file).
type fakeUnitFiles struct {
	mu    sync.Mutex
	files map[string]string
}

func (f *fakeUnitFiles) Subscribe() *dbus.Error { return nil }

func (f *fakeUnitFiles) GetUnitFileState(name string) (string, *dbus.Error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if st, ok := f.files[name]; ok {
		return st, nil
	}
	return "", dbus.NewError("org.freedesktop.DBus.Error.FileNotFound", []any{"No such file or directory"})
}

func (f *fakeUnitFiles) set(files map[string]string) {
	f.mu.Lock()
	f.files = files
	f.mu.Unlock()
}

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

// TestPowerProfilesLeftToInstalledDaemon is the laptop issue's first case,
// against a system manager of the test's own on a bus with the system
// bus's policy: with power-profiles-daemon installed (disabled) "auto"
// never takes the power-profiles names, so its start cannot fail on them;
// once its unit file is gone (UnitFilesChanged) they are served; installed
// again (tuned-ppd, a reload) they are released at once; served again and
// power-profiles-daemon's start job queued (JobNew), they are released
// before it asks for them. A forged JobNew from uid 65534 releases
// nothing.
func TestPowerProfilesLeftToInstalledDaemon(t *testing.T) {
	pbus := testutil.StartSystemPolicyBus(t, "../packaging/dbus/org.schedpolicyd.SchedPolicy1.conf")
	systemd, err := dbus.Connect(pbus.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer systemd.Close()
	fake := &fakeUnitFiles{files: map[string]string{"power-profiles-daemon.service": "disabled"}}
	if err := systemd.Export(fake, systemdPath, systemdIface); err != nil {
		t.Fatal(err)
	}
	if r, err := systemd.RequestName(systemdName, dbus.NameFlagDoNotQueue); err != nil || r != dbus.RequestNameReplyPrimaryOwner {
		t.Fatalf("RequestName(%s) = %v, %v", systemdName, r, err)
	}
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
	testutil.Eventually(t, "the names left to the installed daemon", func() (bool, string) {
		return ml.mentions("a power-profiles daemon is installed") != "", ppOwners(root)
	})
	testutil.Eventually(t, "bus name", func() (bool, string) { return testutil.NameOwned(root, bus.Name) })
	var ours string
	if err := root.BusObject().Call("org.freedesktop.DBus.GetNameOwner", 0, bus.Name).Store(&ours); err != nil {
		t.Fatal(err)
	}
	if got, want := ppOwners(root), fmt.Sprintf("%s= %s= ", ppNames[0].name, ppNames[1].name); got != want {
		t.Fatalf("owners %q with power-profiles-daemon installed, want none", got)
	}
	served := fmt.Sprintf("%s=%s %s=%s ", ppNames[0].name, ours, ppNames[1].name, ours)
	none := fmt.Sprintf("%s= %s= ", ppNames[0].name, ppNames[1].name)
	emit := func(member string, body ...any) {
		t.Helper()
		if err := systemd.Emit(systemdPath, systemdIface+"."+member, body...); err != nil {
			t.Fatal(err)
		}
	}

	fake.set(nil) // purged
	emit("UnitFilesChanged")
	testutil.Eventually(t, "served once nothing is installed", func() (bool, string) { return ppOwners(root) == served, ppOwners(root) })

	attacker := testutil.DialAs(t, pbus.Addr, 65534)
	forge(t, attacker, []string{systemd.Names()[0], root.Names()[0]}, systemdPath, systemdIface+".JobNew",
		uint32(66), dbus.ObjectPath("/org/freedesktop/systemd1/job/66"), "power-profiles-daemon.service")
	fake.set(map[string]string{"tuned-ppd.service": "enabled"}) // installed, then a reload
	emit("Reloading", true)
	emit("Reloading", false)
	testutil.Eventually(t, "released once tuned-ppd is installed", func() (bool, string) { return ppOwners(root) == none, ppOwners(root) })
	if n, e := ml.count("released the power-profiles names"), ml.mentions("released the power-profiles names"); n != 1 || e != "released the power-profiles names component=dbus why=a power-profiles daemon is installed now" {
		t.Fatalf("released %d times (first: %q), want once, for the installed daemon (a forged JobNew was believed?)", n, e)
	}

	if p := bus.ProbePowerProfiles(pbus.Addr, bus.PowerProfilesAuto, nil); p.Action != "left to tuned-ppd.service (installed)" || p.Installed != "tuned-ppd.service enabled" {
		t.Fatalf("probe: %+v, want the names left to tuned-ppd.service (installed, enabled)", p)
	}

	fake.set(nil)
	emit("UnitFilesChanged")
	testutil.Eventually(t, "served again", func() (bool, string) { return ppOwners(root) == served, ppOwners(root) })
	emit("JobNew", uint32(67), dbus.ObjectPath("/org/freedesktop/systemd1/job/67"), "power-profiles-daemon.service")
	testutil.Eventually(t, "released at power-profiles-daemon's start", func() (bool, string) { return ppOwners(root) == none, ppOwners(root) })
	if e := ml.mentions("why=power-profiles-daemon.service is starting"); e == "" {
		t.Fatal("the release does not say power-profiles-daemon.service is starting")
	}
}
