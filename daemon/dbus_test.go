package daemon

import (
	"encoding/xml"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/godbus/dbus/v5"
	"github.com/godbus/dbus/v5/introspect"

	"github.com/schedpolicyd/schedpolicyd/daemon/bus"
	"github.com/schedpolicyd/schedpolicyd/internal/testutil"
	"github.com/schedpolicyd/schedpolicyd/policy"
)

// busDaemon runs the daemon in-process on a private bus against the mock
// laptop.
func busDaemon(t *testing.T, ppAPI bool) (*Daemon, mockLaptop, *dbus.Conn, string) {
	t.Helper()
	addr := testutil.StartBus(t, testutil.BusOptions{AnyUser: true}).Addr
	m := newMockLaptop(t)
	d := m.startWith(t, func(c *Config) { c.Bus = addr; c.PowerProfilesAPI = ppMode(ppAPI) })
	conn, err := dbus.Connect(addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	testutil.Eventually(t, "bus name", func() (bool, string) { return testutil.NameOwned(conn, bus.Name) })
	return d, m, conn, addr
}

func prop(t *testing.T, conn *dbus.Conn, name string) any {
	t.Helper()
	v, err := conn.Object(bus.Name, bus.ObjectPath).GetProperty(bus.Interface + "." + name)
	if err != nil {
		t.Fatalf("Get %s: %v", name, err)
	}
	return v.Value()
}

func dbusErrName(err error) string {
	if e, ok := err.(dbus.Error); ok {
		return e.Name
	}
	return fmt.Sprint(err)
}

// TestBusAPI exercises the service with a real client on a private bus.
func TestBusAPI(t *testing.T) {
	d, m, conn, _ := busDaemon(t, false)
	obj := conn.Object(bus.Name, bus.ObjectPath)

	// Introspect serves the committed contract.
	var x string
	if err := obj.Call("org.freedesktop.DBus.Introspectable.Introspect", 0).Store(&x); err != nil {
		t.Fatal(err)
	}
	var node introspect.Node
	if err := xml.Unmarshal([]byte(x), &node); err != nil {
		t.Fatalf("Introspect output does not parse: %v", err)
	}
	var names []string
	for _, i := range node.Interfaces {
		names = append(names, i.Name)
	}
	sort.Strings(names)
	if want := []string{"org.freedesktop.DBus.Introspectable", "org.freedesktop.DBus.Peer", "org.freedesktop.DBus.Properties", bus.Interface}; !reflect.DeepEqual(names, want) {
		t.Errorf("introspected interfaces %v, want %v", names, want)
	}

	// GetAll has every property with its value.
	var all map[string]dbus.Variant
	if err := obj.Call("org.freedesktop.DBus.Properties.GetAll", 0, bus.Interface).Store(&all); err != nil {
		t.Fatal(err)
	}
	if len(all) != 20 || all["ActivePolicy"].Value() != "performance" || all["OnBattery"].Value() != false ||
		all["KnobFrom"].Value() != "default" || all["KnobChosenAt"].Value() != uint64(0) ||
		all["PowerSource"].Value() != "ac" || !strings.Contains(all["Reason"].Value().(string), "power_aware=1") {
		t.Errorf("GetAll = %v", all)
	}
	if ws := all["Workloads"].Value().([][]any); len(ws) != 2 || ws[0][0] != "a" {
		t.Errorf("Workloads = %v", ws)
	}

	// PropertiesChanged and PolicyChanged come with a change.
	conn.AddMatchSignal(dbus.WithMatchObjectPath(bus.ObjectPath))
	sigs := make(chan *dbus.Signal, 50)
	conn.Signal(sigs)

	// Writable property: PowerAware via Properties.Set.
	if err := obj.SetProperty(bus.Interface+".PowerAware", dbus.MakeVariant(uint32(2))); err != nil {
		t.Fatalf("Set PowerAware: %v", err)
	}
	if got := prop(t, conn, "ActivePolicy"); got != "powersaving" {
		t.Errorf("ActivePolicy after PowerAware=2: %v", got)
	}
	// One PropertiesChanged carries every property that changed together,
	// then PolicyChanged follows.
	waitSignal(t, sigs, "org.freedesktop.DBus.Properties.PropertiesChanged", func(s *dbus.Signal) bool {
		ch := s.Body[1].(map[string]dbus.Variant)
		return ch["ActivePolicy"].Value() == "powersaving" && ch["PowerAware"].Value() == uint32(2)
	})
	waitSignal(t, sigs, bus.Interface+".PolicyChanged", func(s *dbus.Signal) bool { return s.Body[0] == "powersaving" })
	for name, v := range map[string]any{"ActivePolicy": "balance", "PowerAware": "2", "Boost": "1"} {
		err := obj.SetProperty(bus.Interface+"."+name, dbus.MakeVariant(v))
		want := map[string]string{"ActivePolicy": errPropReadOnly, "Boost": errPropReadOnly, "PowerAware": errInvalidArgs}[name]
		if dbusErrName(err) != want {
			t.Errorf("Set %s = %v: %v, want %s", name, v, err, want)
		}
	}
	if err := obj.SetProperty(bus.Interface+".PowerAwarePolicy", dbus.MakeVariant("performance")); dbusErrName(err) != errInvalidArgs {
		t.Errorf("Set PowerAwarePolicy performance: %v, want InvalidArgs", err)
	}
	if err := obj.Call(bus.Interface+".SetPowerAware", 0, uint32(3)).Err; dbusErrName(err) != errInvalidArgs {
		t.Errorf("SetPowerAware(3): %v, want InvalidArgs", err)
	}
	if err := obj.Call(bus.Interface+".SetPowerAware", 0, uint32(1)).Err; err != nil {
		t.Fatal(err)
	}

	// Holds: the power-saving one wins; a user's choice cancels holds; a
	// holder leaving the bus releases its holds.
	var c1, c2 uint32
	if err := obj.Call(bus.Interface+".HoldPolicy", 0, "performance", "benchmark").Store(&c1); err != nil {
		t.Fatal(err)
	}
	if got := prop(t, conn, "ActivePolicy"); got != "performance" {
		t.Errorf("with a performance hold: %v", got)
	}
	if err := obj.Call(bus.Interface+".HoldPolicy", 0, "balance", "video").Store(&c2); err != nil {
		t.Fatal(err)
	}
	if got := prop(t, conn, "ActivePolicy"); got != "balance" {
		t.Errorf("performance and balance holds: %v, want balance (the power-saving one wins)", got)
	}
	if r := prop(t, conn, "Reason").(string); !strings.Contains(r, "video") {
		t.Errorf("Reason %q does not name the winning hold", r)
	}
	if err := obj.Call(bus.Interface+".ReleasePolicy", 0, c2).Err; err != nil {
		t.Fatal(err)
	}
	if got := prop(t, conn, "ActivePolicy"); got != "performance" {
		t.Errorf("after releasing balance: %v", got)
	}
	if err := obj.Call(bus.Interface+".ReleasePolicy", 0, uint32(9999)).Err; dbusErrName(err) != errInvalidArgs {
		t.Errorf("ReleasePolicy(unknown): %v", err)
	}
	if err := obj.Call(bus.Interface+".SetPolicy", 0, "powersaving").Err; err != nil {
		t.Fatal(err)
	}
	if hs := prop(t, conn, "Holds").([][]any); len(hs) != 0 {
		t.Errorf("holds after an explicit choice: %v, want none", hs)
	}
	other, err := dbus.Connect(d.cfg.Bus)
	if err != nil {
		t.Fatal(err)
	}
	if err := other.Object(bus.Name, bus.ObjectPath).Call(bus.Interface+".HoldPolicy", 0, "performance", "game").Err; err != nil {
		t.Fatal(err)
	}
	if got := prop(t, conn, "ActivePolicy"); got != "performance" {
		t.Errorf("with another client's performance hold: %v", got)
	}
	other.Close()
	testutil.Eventually(t, "hold released when its owner left", func() (bool, string) {
		got := prop(t, conn, "ActivePolicy")
		return got == "powersaving", fmt.Sprint(got)
	})

	// CreateWorkload: names validated, existing names refused, only the
	// caller's own PID (the successful path runs on a real cgroup in
	// TestBusCreateWorkloadRealCgroup).
	pid := uint32(os.Getpid())
	for _, tc := range []struct {
		name string
		pid  uint32
		want string
	}{
		{"a", pid, errFileExists},
		{"../escape", pid, errInvalidArgs},
		{"a/b", pid, errInvalidArgs},
		{"..", pid, errInvalidArgs},
		{"tab\there", pid, errInvalidArgs},
		{"cgroup.procs", pid, errInvalidArgs},
		{strings.Repeat("x", 65), pid, errInvalidArgs},
		{"notmine", 1, errAccessDenied},
	} {
		err := obj.Call(bus.Interface+".CreateWorkload", 0, tc.name, tc.pid).Err
		if dbusErrName(err) != tc.want {
			t.Errorf("CreateWorkload(%q, %d) = %v, want %s", tc.name, tc.pid, err, tc.want)
		}
	}
	if _, err := os.Stat(filepath.Join(m.managed, "notmine")); !os.IsNotExist(err) {
		t.Errorf("a refused CreateWorkload left a cgroup behind")
	}

	// Per-workload override: b keeps every CPU while the rest is packed.
	if err := obj.Call(bus.Interface+".SetWorkloadPolicy", 0, "b", "performance").Err; err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "override applied", func() (bool, string) {
		b, a := testutil.ReadTrim(t, filepath.Join(m.managed, "b/cpuset.cpus")), testutil.ReadTrim(t, filepath.Join(m.managed, "a/cpuset.cpus"))
		return b == "0-7" && a == "0", b + " / " + a
	})
	if err := obj.Call(bus.Interface+".SetWorkloadPolicy", 0, "b", "balance").Err; dbusErrName(err) != errInvalidArgs {
		t.Errorf("override balance: %v, want InvalidArgs", err)
	}
	if err := obj.Call(bus.Interface+".SetWorkloadPolicy", 0, "nosuch", "performance").Err; dbusErrName(err) != errInvalidArgs {
		t.Errorf("override of an unknown workload: %v", err)
	}
	if err := obj.Call(bus.Interface+".Rebalance", 0).Err; err != nil {
		t.Errorf("Rebalance: %v", err)
	}
	if d.Snapshot().Policy != policy.Powersaving {
		t.Errorf("policy drifted: %v", d.Snapshot().Policy)
	}
}

func waitSignal(t *testing.T, ch chan *dbus.Signal, name string, match func(*dbus.Signal) bool) {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case s := <-ch:
			if s.Name == name && match(s) {
				return
			}
		case <-timeout:
			t.Fatalf("no %s signal matching", name)
		}
	}
}

// TestPowerProfilesAPI checks the compatibility API with godbus, and with the
// real powerprofilesctl when it is installed.
func TestPowerProfilesAPI(t *testing.T) {
	d, _, conn, addr := busDaemon(t, true)
	for _, n := range ppNames {
		o := conn.Object(n.name, n.path)
		v, err := o.GetProperty(n.name + ".ActiveProfile")
		if err != nil || v.Value() != "balanced" {
			t.Fatalf("%s ActiveProfile = %v, %v; want balanced (power_aware 1)", n.name, v, err)
		}
	}
	legacy := conn.Object("net.hadess.PowerProfiles", "/net/hadess/PowerProfiles")
	if err := legacy.SetProperty("net.hadess.PowerProfiles.ActiveProfile", dbus.MakeVariant("power-saver")); err != nil {
		t.Fatal(err)
	}
	if s := d.Snapshot(); s.Knob.PowerAware != 2 || s.Policy != policy.Powersaving {
		t.Errorf("power-saver → %+v, want power_aware 2, powersaving", s.Knob)
	}
	if err := legacy.SetProperty("net.hadess.PowerProfiles.ActiveProfile", dbus.MakeVariant("turbo")); dbusErrName(err) != "org.freedesktop.DBus.Error.Failed" {
		t.Errorf("unknown profile: %v", err)
	}
	var cookie uint32
	if err := legacy.Call("net.hadess.PowerProfiles.HoldProfile", 0, "performance", "build", "org.example.Test").Store(&cookie); err != nil {
		t.Fatal(err)
	}
	if s := d.Snapshot(); s.Policy != policy.Performance {
		t.Errorf("performance hold: %v", s.Policy)
	}
	if err := legacy.Call("net.hadess.PowerProfiles.ReleaseProfile", 0, cookie).Err; err != nil {
		t.Fatal(err)
	}

	ctl, err := exec.LookPath("powerprofilesctl")
	if err != nil {
		t.Log("powerprofilesctl not installed (Debian package power-profiles-daemon); checked with godbus only")
		return
	}
	env := append(os.Environ(), "DBUS_SYSTEM_BUS_ADDRESS="+addr)
	pctl := func(args ...string) string {
		cmd := exec.Command(ctl, args...)
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("powerprofilesctl %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	if out := pctl("set", "balanced"); out != "" {
		t.Errorf("set balanced printed %q", out)
	}
	if out := pctl("get"); out != "balanced\n" {
		t.Errorf("get = %q, want balanced", out)
	}
	list := pctl("list")
	for _, want := range []string{"* balanced:", "  performance:", "  power-saver:", "schedpolicyd"} {
		if !strings.Contains(list, want) {
			t.Errorf("list lacks %q:\n%s", want, list)
		}
	}
	pctl("set", "power-saver")
	if s := d.Snapshot(); s.Knob.PowerAware != 2 {
		t.Errorf("powerprofilesctl set power-saver → power_aware %d, want 2", s.Knob.PowerAware)
	}
	if out := pctl("get"); out != "power-saver\n" {
		t.Errorf("get = %q, want power-saver", out)
	}
}

// TestBusCreateWorkloadRealCgroup: CreateWorkload on the real cgroup v1
// cpuset hierarchy. The caller is busctl, exec'd by a shell that passes its
// own PID ($$), so the bus credentials match; the daemon creates the
// cgroup, fills in cpus and mems, moves the process and adopts it.
func TestBusCreateWorkloadRealCgroup(t *testing.T) {
	if _, err := exec.LookPath("busctl"); err != nil {
		t.Skip("needs busctl (Debian package systemd)")
	}
	addr := testutil.StartBus(t, testutil.BusOptions{AnyUser: true}).Addr
	d, parent := realV1Daemon(t, func(c *Config) { c.Bus = addr })
	conn, err := dbus.Connect(addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	testutil.Eventually(t, "bus name", func() (bool, string) { return testutil.NameOwned(conn, bus.Name) })
	out, err := exec.Command("sh", "-c", `exec busctl --address="$0" call `+bus.Name+` `+string(bus.ObjectPath)+` `+bus.Interface+` CreateWorkload su job $$`, addr).CombinedOutput()
	if err != nil {
		t.Fatalf("CreateWorkload through busctl: %v %s", err, out)
	}
	if want := fmt.Sprintf("s %q\n", filepath.Join(parent, "job")); string(out) != want {
		t.Errorf("reply %q, want %q", out, want)
	}
	// The reply means the PID was attached, which cgroup v1 refuses
	// (ENOSPC) unless the new cpuset has CPUs and memory nodes; the
	// workload may already be gone again, since busctl has exited.
	// busctl has exited, so the workload is empty: the daemon created it,
	// so it removes it, and the name can be used again.
	testutil.Eventually(t, "finished workload removed", func() (bool, string) {
		_, err := os.Stat(filepath.Join(parent, "job"))
		return os.IsNotExist(err) && len(d.Snapshot().Workloads) == 0, fmt.Sprint(err, d.Snapshot().Workloads)
	})
	if out, err := exec.Command("sh", "-c", `exec busctl --address="$0" call `+bus.Name+` `+string(bus.ObjectPath)+` `+bus.Interface+` CreateWorkload su job $$`, addr).CombinedOutput(); err != nil {
		t.Fatalf("CreateWorkload of a reused name: %v %s", err, out)
	}
	// A cgroup the daemon did not create is never removed by it.
	if err := os.Mkdir(filepath.Join(parent, "mine"), 0o755); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "mine adopted", func() (bool, string) {
		for _, w := range d.Snapshot().Workloads {
			if w.Name == "mine" {
				return true, ""
			}
		}
		return false, fmt.Sprint(d.Snapshot().Workloads)
	})
	time.Sleep(300 * time.Millisecond) // several sample periods
	if _, err := os.Stat(filepath.Join(parent, "mine")); err != nil {
		t.Errorf("the daemon removed a cgroup it did not create: %v", err)
	}
}

// ppMode is Config.PowerProfilesAPI for the old boolean: serve or off.
func ppMode(serve bool) string {
	if serve {
		return bus.PowerProfilesServe
	}
	return bus.PowerProfilesOff
}
