package daemon

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/godbus/dbus/v5"
	"github.com/sirupsen/logrus"

	"github.com/schedpolicyd/schedpolicyd/daemon/bus"
	"github.com/schedpolicyd/schedpolicyd/daemon/statefile"
	"github.com/schedpolicyd/schedpolicyd/internal/testutil"
	"github.com/schedpolicyd/schedpolicyd/sysfs"
)

// prefValues is policy0's and policy1's EPP and the platform profile of
// the mock machine at sys.
func prefValues(t *testing.T, sys string) string {
	t.Helper()
	var out []string
	for _, f := range []string{
		"devices/system/cpu/cpufreq/policy0/energy_performance_preference",
		"devices/system/cpu/cpufreq/policy1/energy_performance_preference",
		"firmware/acpi/platform_profile",
	} {
		out = append(out, testutil.ReadTrim(t, filepath.Join(sys, f)))
	}
	return strings.Join(out, " ")
}

// prefsSystemManager starts a bus with the system bus's policy and a
// system manager of the test's own on it that answers GetUnitFileState
// from fake (nothing installed at first); systemd is its connection, for
// its signals. Both end with the test.
func prefsSystemManager(t *testing.T) (pbus *testutil.Bus, systemd *dbus.Conn, fake *testutil.FakeManager) {
	t.Helper()
	pbus = testutil.StartSystemPolicyBus(t, "../packaging/dbus/org.schedpolicyd.SchedPolicy1.conf")
	fake = testutil.NewFakeManager(t)
	fake.SetUnitFiles(map[string]string{})
	return pbus, fake.ServeBus(pbus.Addr), fake
}

// TestDaemonEnergyPrefsFollowPolicy: on the mock laptop with the Zen 3's
// amd-pstate-epp policies (bug 215800) and a ThinkPad's platform profile,
// against a system manager of the test's own on a bus with the system
// bus's policy: with no knob daemon installed, unplugging (powersaving,
// the default knob) writes power and low-power, each recorded in
// state.json first; plugging in puts the values found back (performance).
// Once TLP is installed (a reload asks again) the daemon steps aside:
// what it wrote goes back and nothing more is written, and the log names
// the owner. The stop leaves the values found.
func TestDaemonEnergyPrefsFollowPolicy(t *testing.T) {
	pbus, _, fake := prefsSystemManager(t)
	m := newMockLaptop(t)
	testutil.CopyFixture(t, "../sysfs/testdata/energypref/amd-zen3-pstate-epp", m.sys)
	testutil.CopyFixture(t, "../sysfs/testdata/energypref/thinkpad-dytc", m.sys)
	ml := new(msgLog)
	var cfg Config
	d, cancel, done := m.startCfg(t, func(c *Config) {
		c.Bus, c.PowerProfilesAPI = pbus.Addr, bus.PowerProfilesOff
		c.Log.(*logrus.Logger).AddHook(ml)
		cfg = *c
	})
	values := func(want string) {
		t.Helper()
		testutil.WaitFor(t, "energy preferences "+want, 10*time.Second, func() (bool, string) {
			got := prefValues(t, m.sys)
			return got == want, got
		})
	}
	values("performance performance balanced") // on AC: nothing written
	m.plug(t, false)
	values("power power low-power")
	// Saved as pending before the writes, as applied after them.
	testutil.WaitFor(t, "state.json's records applied", 10*time.Second, func() (bool, string) {
		st, err := statefile.LoadState(m.state)
		ok := err == nil && len(st.Prefs) == 3 && st.Prefs[0].Original == "performance" && st.Prefs[0].Applied == "power" &&
			st.Prefs[2].Original == "balanced" && st.Prefs[2].Applied == "low-power"
		return ok, fmt.Sprintf("%+v, %v", st.Prefs, err)
	})
	m.plug(t, true)
	values("performance performance balanced")
	m.plug(t, false)
	values("power power low-power")

	fake.SetUnitFiles(map[string]string{"tlp.service": "enabled"})
	if err := d.Reload(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	values("performance performance balanced")
	testutil.WaitFor(t, "the owner logged", 10*time.Second, func() (bool, string) {
		return ml.has("another owner manages this knob; not writing it knob=energy_performance_preference owner=tlp.service (installed, enabled;"), ""
	})
	// TLP writes its own value now; the daemon, set aside, leaves it.
	testutil.Put(t, filepath.Join(m.sys, "devices/system/cpu/cpufreq/policy0/energy_performance_preference"), "balance_power")
	m.plug(t, true)
	m.plug(t, false)
	cancel()
	<-done
	if got := prefValues(t, m.sys); got != "balance_power performance balanced" {
		t.Errorf("after the stop: %s", got)
	}
	if st, _ := statefile.LoadState(m.state); len(st.Prefs) != 0 {
		t.Errorf("records after the stop: %+v", st.Prefs)
	}
}

// TestDaemonEnergyPrefsOwnerInstalledLive: the knobs' owners are
// followed while the daemon runs, with no reload of its own. On the same
// mock laptop and fake system manager as above, unplugged (power,
// low-power written): TLP installed, then the manager's daemon-reload as
// a package installation runs it (Reloading true, false) — the daemon
// steps aside and gives the values found back; TLP purged
// (UnitFilesChanged) — the policy's values are written again.
func TestDaemonEnergyPrefsOwnerInstalledLive(t *testing.T) {
	pbus, systemd, fake := prefsSystemManager(t)
	emit := func(member string, body ...any) {
		t.Helper()
		if err := systemd.Emit(testutil.SystemdPath, testutil.SystemdManager+"."+member, body...); err != nil {
			t.Fatal(err)
		}
	}
	m := newMockLaptop(t)
	testutil.CopyFixture(t, "../sysfs/testdata/energypref/amd-zen3-pstate-epp", m.sys)
	testutil.CopyFixture(t, "../sysfs/testdata/energypref/thinkpad-dytc", m.sys)
	ml := new(msgLog)
	_, cancel, done := m.startCfg(t, func(c *Config) {
		c.Bus, c.PowerProfilesAPI = pbus.Addr, bus.PowerProfilesOff
		c.Log.(*logrus.Logger).AddHook(ml)
	})
	values := func(want string) {
		t.Helper()
		testutil.WaitFor(t, "energy preferences "+want, 10*time.Second, func() (bool, string) {
			got := prefValues(t, m.sys)
			return got == want, got
		})
	}
	m.plug(t, false)
	values("power power low-power")

	fake.SetUnitFiles(map[string]string{"tlp.service": "enabled"})
	emit("Reloading", true)
	emit("Reloading", false)
	values("performance performance balanced")
	testutil.WaitFor(t, "the owner logged", 10*time.Second, func() (bool, string) {
		return ml.has("another owner manages this knob; not writing it knob=energy_performance_preference owner=tlp.service (installed, enabled;"), ""
	})

	fake.SetUnitFiles(nil)
	emit("UnitFilesChanged")
	values("power power low-power")
	cancel()
	<-done
	if got := prefValues(t, m.sys); got != "performance performance balanced" {
		t.Errorf("after the stop: %s", got)
	}
}

// has reports whether an entry starts with prefix.
func (l *msgLog) has(prefix string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, e := range l.entries {
		if strings.HasPrefix(e, prefix) {
			return true
		}
	}
	return false
}

// TestPrefAside: who owns each knob, in PrefAside's order.
func TestPrefAside(t *testing.T) {
	m := newMockLaptop(t)
	fs, err := sysfs.NewFS(m.sys)
	if err != nil {
		t.Fatal(err)
	}
	none := bus.InstalledUnits{Systemd: true, States: map[string]string{}}
	tlp := bus.InstalledUnits{Systemd: true, States: map[string]string{"tlp.service": "enabled", "intel_lpmd.service": "disabled"}}
	lpmd := bus.InstalledUnits{Systemd: true, States: map[string]string{"intel_lpmd.service": "disabled"}}
	for _, c := range []struct {
		kind, mode, pp string
		units          bus.InstalledUnits
		unknown, want  string
	}{
		{"epp", "auto", "", none, "", ""},
		{"epp", "off", "", tlp, "", `off (epp = "off")`},
		{"epp", "auto", "", bus.InstalledUnits{}, "", ""},
		{"epp", "auto", "", none, "bus none: systemd is PID 1", "unknown: bus none: systemd is PID 1"},
		{"epp", "auto", "net.hadess.PowerProfiles (:1.7)", none, "", "the power-profiles daemon net.hadess.PowerProfiles (:1.7), which this daemon follows"},
		{"epp", "auto", "", tlp, "", "tlp.service (installed, enabled; the installed-unit rule of power_profiles_units)"},
		{"epp", "auto", "", lpmd, "", "intel_lpmd.service (installed, disabled; the installed-unit rule of power_profiles_units)"},
		{"platform_profile", "auto", "", lpmd, "", ""},
		{"platform_profile", "auto", "", tlp, "", "tlp.service (installed, enabled; the installed-unit rule of power_profiles_units)"},
	} {
		if got := PrefAside(fs, c.kind, PrefMode(c.mode), c.pp, c.units, c.unknown); got != c.want {
			t.Errorf("PrefAside(%s, %s, %q, %v, %q) = %q, want %q", c.kind, c.mode, c.pp, c.units, c.unknown, got, c.want)
		}
	}
	testutil.Put(t, filepath.Join(m.sys, amdPstateDynamicEPP), "1")
	if got, want := PrefAside(fs, "epp", PrefAuto, "", none, ""), "the kernel's amd_pstate dynamic EPP (devices/system/cpu/amd_pstate/dynamic_epp = 1)"; got != want {
		t.Errorf("with dynamic EPP: %q", got)
	}
	if got := PrefAside(fs, "platform_profile", PrefAuto, "", none, ""); got != "" {
		t.Errorf("platform profile with dynamic EPP: %q", got)
	}
}
