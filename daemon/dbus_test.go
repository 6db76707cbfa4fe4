package daemon

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/godbus/dbus/v5"

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
