package bus

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/godbus/dbus/v5"

	"github.com/schedpolicyd/schedpolicyd/internal/testutil"
)

// countPrefix is the number of lines that start with prefix, and the
// first of them ("" if none does).
func countPrefix(lines []string, prefix string) (int, string) {
	n, first := 0, ""
	for _, l := range lines {
		if strings.HasPrefix(l, prefix) {
			if n == 0 {
				first = l
			}
			n++
		}
	}
	return n, first
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
	pbus := testutil.StartSystemPolicyBus(t, "../../packaging/dbus/org.schedpolicyd.SchedPolicy1.conf")
	fake := testutil.NewFakeManager(t)
	fake.SetUnitFiles(map[string]string{"power-profiles-daemon.service": "disabled"})
	systemd := fake.ServeBus(pbus.Addr)
	st := startService(t, pbus.Addr, Config{PowerProfilesAPI: PowerProfilesAuto, PowerProfilesUnits: slices.Clone(DefaultPowerProfilesUnits)})
	root := st.client
	// owners is the owners of ppNames' two names, as one string.
	owners := func() string { return fmt.Sprintf("%q", ppOwners(t, root)) }
	const leftTo = "a power-profiles daemon is installed; its names are left to it (power_profiles_api = true serves them anyway) state=disabled unit=power-profiles-daemon.service"
	testutil.Eventually(t, "the names left to the installed daemon", func() (bool, string) {
		return slices.Contains(logLines(st.log), leftTo), owners()
	})
	var ours string
	if err := root.BusObject().Call("org.freedesktop.DBus.GetNameOwner", 0, Name).Store(&ours); err != nil {
		t.Fatal(err)
	}
	served, none := fmt.Sprintf("%q", []string{ours, ours}), fmt.Sprintf("%q", []string{"", ""})
	if got := owners(); got != none {
		t.Fatalf("owners %q with power-profiles-daemon installed, want none", got)
	}
	emit := func(member string, body ...any) {
		t.Helper()
		if err := systemd.Emit(systemdPath, systemdIface+"."+member, body...); err != nil {
			t.Fatal(err)
		}
	}

	fake.SetUnitFiles(nil) // purged
	emit("UnitFilesChanged")
	testutil.Eventually(t, "served once nothing is installed", func() (bool, string) { return owners() == served, owners() })

	attacker := testutil.DialAs(t, pbus.Addr, 65534)
	forge(t, attacker, []string{systemd.Names()[0], root.Names()[0]}, systemdPath, systemdIface+".JobNew",
		uint32(66), dbus.ObjectPath("/org/freedesktop/systemd1/job/66"), "power-profiles-daemon.service")
	fake.SetUnitFiles(map[string]string{"tuned-ppd.service": "enabled"}) // installed, then a reload
	emit("Reloading", true)
	emit("Reloading", false)
	testutil.Eventually(t, "released once tuned-ppd is installed", func() (bool, string) { return owners() == none, owners() })
	if n, e := countPrefix(logLines(st.log), "released the power-profiles names"); n != 1 || e != "released the power-profiles names why=a power-profiles daemon is installed now" {
		t.Fatalf("released %d times (first: %q), want once, for the installed daemon (a forged JobNew was believed?)", n, e)
	}

	if p := ProbePowerProfiles(pbus.Addr, PowerProfilesAuto, nil); p.Action != "left to tuned-ppd.service (installed)" || p.Installed != "tuned-ppd.service enabled" {
		t.Fatalf("probe: %+v, want the names left to tuned-ppd.service (installed, enabled)", p)
	}

	fake.SetUnitFiles(nil)
	emit("UnitFilesChanged")
	testutil.Eventually(t, "served again", func() (bool, string) { return owners() == served, owners() })
	emit("JobNew", uint32(67), dbus.ObjectPath("/org/freedesktop/systemd1/job/67"), "power-profiles-daemon.service")
	testutil.Eventually(t, "released at power-profiles-daemon's start", func() (bool, string) { return owners() == none, owners() })
	const starting = "released the power-profiles names why=power-profiles-daemon.service is starting"
	if n, e := countPrefix(logLines(st.log), "released the power-profiles names"); n != 2 || !slices.Contains(logLines(st.log), starting) {
		t.Fatalf("released %d times (first: %q), want twice, the second %q", n, e, starting)
	}
}
