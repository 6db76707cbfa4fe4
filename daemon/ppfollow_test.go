package daemon

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/godbus/dbus/v5"

	"github.com/schedpolicyd/schedpolicyd/daemon/bus"
	"github.com/schedpolicyd/schedpolicyd/internal/testutil"
	"github.com/schedpolicyd/schedpolicyd/policy"
)

const ppdBinary = "/usr/libexec/power-profiles-daemon"

// polkitd is Debian's polkitd, which power-profiles-daemon asks.
const polkitd = testutil.PolkitdBinary

// realPPD runs Debian's power-profiles-daemon on the bus at addr, in a
// mount namespace of its own with a temporary directory bound over
// /var/lib (its state.ini never touches the machine's) and UMOCKDEV_DIR
// pointing at an empty directory (its drivers see no hardware: the
// placeholder driver, nothing written to the real /sys). It returns
// once it owns net.hadess.PowerProfiles (the owner's pid is its own:
// unshare and sh exec it); stop sends SIGTERM and waits.
func realPPD(t *testing.T, addr string, args ...string) (stop func()) {
	t.Helper()
	dir := t.TempDir()
	varlib, mock := filepath.Join(dir, "varlib"), filepath.Join(dir, "umockdev")
	for _, d := range []string{filepath.Join(varlib, "power-profiles-daemon"), mock} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command("unshare", append([]string{"--mount", "--propagation", "private", "sh", "-c",
		`mount --bind "$0" /var/lib && exec "$@"`, varlib, ppdBinary, "-v"}, args...)...)
	cmd.Env = append(os.Environ(), "DBUS_SYSTEM_BUS_ADDRESS="+addr, "UMOCKDEV_DIR="+mock)
	var out testutil.LockedBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		cmd.Process.Signal(syscall.SIGTERM)
		<-exited
	}
	t.Cleanup(func() {
		stop()
		if t.Failed() {
			t.Logf("power-profiles-daemon %v:\n%s", args, out.String())
		}
	})
	testutil.Eventually(t, "power-profiles-daemon owns net.hadess.PowerProfiles", func() (bool, string) {
		select {
		case <-exited:
			t.Fatalf("power-profiles-daemon exited:\n%s", out.String())
		default:
		}
		conn, err := dbus.Connect(addr)
		if err != nil {
			return false, err.Error()
		}
		defer conn.Close()
		var pid uint32
		err = conn.BusObject().Call("org.freedesktop.DBus.GetConnectionUnixProcessID", dbus.FlagNoAutoStart, "net.hadess.PowerProfiles").Store(&pid)
		return err == nil && int(pid) == cmd.Process.Pid, fmt.Sprintf("owner pid %d, err %v", pid, err)
	})
	return stop
}

// TestFollowRealPowerProfilesDaemon runs power_profiles_api "auto" beside
// the real power-profiles-daemon and polkitd from Debian on a private
// system bus: we follow its ActiveProfile (set with the real
// powerprofilesctl), an explicit choice wins until the profile changes,
// PPD stopped → we serve both names, PPD back with --replace → it has them
// and we follow it again.
func TestFollowRealPowerProfilesDaemon(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: polkitd switches to its own user; power-profiles-daemon runs in its own mount namespace")
	}
	for _, bin := range []string{ppdBinary, polkitd} {
		if _, err := os.Stat(bin); err != nil {
			t.Skipf("needs %s (Debian packages power-profiles-daemon, polkitd): %v", bin, err)
		}
	}
	for _, tool := range []string{"unshare", "powerprofilesctl"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("needs %s", tool)
		}
	}
	addr := testutil.StartBus(t, testutil.BusOptions{System: true, AnyUser: true}).Addr
	pk := exec.Command(polkitd, "--no-debug")
	pk.Env = append(os.Environ(), "DBUS_SYSTEM_BUS_ADDRESS="+addr)
	if err := pk.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pk.Process.Kill(); pk.Wait() })
	testutil.Eventually(t, "polkitd on the bus", func() (bool, string) {
		return testutil.NameOwnedAt(addr, "org.freedesktop.PolicyKit1")
	})
	stopPPD := realPPD(t, addr)

	m := newMockLaptop(t)
	d := m.startWith(t, func(c *Config) { c.Bus = addr; c.PowerProfilesAPI = bus.PowerProfilesAuto })
	conn, err := dbus.Connect(addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	pctl := func(args ...string) string {
		cmd := exec.Command("powerprofilesctl", args...)
		cmd.Env = append(os.Environ(), "DBUS_SYSTEM_BUS_ADDRESS="+addr)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("powerprofilesctl %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	owner := func(name string) string {
		var o string
		conn.BusObject().Call("org.freedesktop.DBus.GetNameOwner", dbus.FlagNoAutoStart, name).Store(&o)
		return o
	}
	ppdOwner := owner("net.hadess.PowerProfiles")
	following := func(what string, pa policy.PowerAware, eff policy.Policy, reason string) {
		t.Helper()
		testutil.Eventually(t, what, func() (bool, string) {
			s := d.Snapshot()
			return s.Knob.PowerAware == pa && s.Policy == eff && strings.Contains(s.PolicyReason, reason),
				s.PolicyReason
		})
	}

	// PPD starts in balanced: power_aware 1 (on AC: performance).
	following("follows PPD's balanced", policy.PowerAwareAuto, policy.Performance,
		"; power_aware follows net.hadess.PowerProfiles ("+ppdOwner+") ActiveProfile balanced")
	if o := owner("org.freedesktop.UPower.PowerProfiles"); o != "" && o == owner(bus.Name) {
		t.Errorf("we own org.freedesktop.UPower.PowerProfiles while following PPD")
	}
	if p := bus.ProbePowerProfiles(addr, "auto", nil); p.Action != "follow net.hadess.PowerProfiles" || p.Ours {
		t.Errorf("probe while following: %+v", p)
	}
	pctl("set", "power-saver")
	following("power-saver → 2", policy.PowerAwareOn, policy.Powersaving, "ActiveProfile power-saver")
	// Reason, as schedpolicyctl status shows it.
	var reason string
	if err := conn.Object(bus.Name, bus.ObjectPath).StoreProperty(bus.Interface+".Reason", &reason); err != nil ||
		reason != "power_aware=2: always powersaving; power_aware follows net.hadess.PowerProfiles ("+ppdOwner+") ActiveProfile power-saver" {
		t.Errorf("Reason = %q, %v", reason, err)
	}

	// An explicit choice wins until the profile changes.
	if err := conn.Object(bus.Name, bus.ObjectPath).Call(bus.Interface+".SetPowerAware", 0, uint32(0)).Err; err != nil {
		t.Fatal(err)
	}
	following("explicit choice wins", policy.PowerAwareOff, policy.Performance,
		"an explicit choice overrides net.hadess.PowerProfiles ("+ppdOwner+") ActiveProfile power-saver until that profile changes")
	pctl("set", "performance")
	following("performance → 0", policy.PowerAwareOff, policy.Performance, "power_aware follows net.hadess.PowerProfiles ("+ppdOwner+") ActiveProfile performance")
	pctl("set", "power-saver")
	following("power-saver → 2 again", policy.PowerAwareOn, policy.Powersaving, "ActiveProfile power-saver")

	// PPD stopped: we serve both names, and powerprofilesctl talks to us.
	stopPPD()
	me := owner(bus.Name)
	testutil.Eventually(t, "we serve both names", func() (bool, string) {
		a, b := owner("net.hadess.PowerProfiles"), owner("org.freedesktop.UPower.PowerProfiles")
		return a == me && b == me, a + " " + b
	})
	if s := d.Snapshot(); strings.Contains(s.PolicyReason, "follows") || s.Knob.PowerAware != policy.PowerAwareOn {
		t.Errorf("after PPD left: knob %+v, reason %q; want power_aware 2 kept, not following", s.Knob, s.PolicyReason)
	}
	if p := bus.ProbePowerProfiles(addr, "auto", nil); p.Action != "served by schedpolicyd" || !p.Ours || len(p.Owners) != 2 {
		t.Errorf("probe while serving: %+v", p)
	}
	if out := pctl("get"); out != "power-saver\n" {
		t.Errorf("powerprofilesctl get from us = %q, want power-saver", out)
	}
	pctl("set", "balanced")
	following("we serve: balanced → 1", policy.PowerAwareAuto, policy.Performance, "power_aware=1")
	if list := pctl("list"); !strings.Contains(list, "schedpolicyd") {
		t.Errorf("powerprofilesctl list does not show us:\n%s", list)
	}

	// PPD back with --replace: it has the names, we follow it again.
	realPPD(t, addr, "--replace")
	ppdOwner = owner("net.hadess.PowerProfiles")
	if ppdOwner == me {
		t.Fatalf("net.hadess.PowerProfiles still ours")
	}
	testutil.Eventually(t, "we released org.freedesktop.UPower.PowerProfiles", func() (bool, string) {
		o := owner("org.freedesktop.UPower.PowerProfiles")
		return o != me, o
	})
	following("follows the new PPD", policy.PowerAwareAuto, policy.Performance,
		"power_aware follows net.hadess.PowerProfiles ("+ppdOwner+") ActiveProfile")
	pctl("set", "power-saver")
	following("power-saver → 2 with the new PPD", policy.PowerAwareOn, policy.Powersaving, "("+ppdOwner+") ActiveProfile power-saver")
}

// TestPowerProfilesConfigErrors: bad modes and maps are refused by New
// with the offending value named; good ones are normalised.
func TestPowerProfilesConfigErrors(t *testing.T) {
	m := newMockLaptop(t)
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{PowerProfilesAPI: "maybe"}, `power_profiles_api "maybe": want auto, true or false`},
		{Config{ProfileMap: map[string]policy.PowerAware{"turbo": 1}}, `profile map: unknown profile "turbo" (want power-saver, balanced or performance)`},
		{Config{ProfileMap: map[string]policy.PowerAware{"balanced": 3}}, `profile map: balanced → power_aware 3: want 0, 1 or 2`},
		{Config{LowBattery: -1}, `low_battery -1: want a percentage 1 to 100, or 0 for off`},
	} {
		tc.cfg.SysfsRoot = m.sys
		if _, err := New(tc.cfg); err == nil || err.Error() != tc.want {
			t.Errorf("New(%+v) = %v, want %q", tc.cfg, err, tc.want)
		}
	}
	d, err := New(Config{SysfsRoot: m.sys, PowerProfilesAPI: "true", ProfileMap: map[string]policy.PowerAware{"balanced": 2}})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]policy.PowerAware{"power-saver": 2, "balanced": 2, "performance": 0}
	if d.cfg.PowerProfilesAPI != bus.PowerProfilesServe || fmt.Sprint(d.cfg.ProfileMap) != fmt.Sprint(want) {
		t.Errorf("normalised: %q %v, want on %v", d.cfg.PowerProfilesAPI, d.cfg.ProfileMap, want)
	}
}
