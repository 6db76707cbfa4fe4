package daemon

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/godbus/dbus/v5"

	"github.com/schedpolicyd/schedpolicyd/daemon/bus"
	"github.com/schedpolicyd/schedpolicyd/internal/testutil"
)

// busDaemon runs the daemon in-process on a private bus against the mock
// laptop.
func busDaemon(t *testing.T, ppAPI bool) (*Daemon, mockLaptop, *dbus.Conn, string) {
	t.Helper()
	addr := testutil.StartBus(t, testutil.BusOptions{AnyUser: true}).Addr
	m := newMockLaptop(t)
	d := m.startWith(t, func(c *Config) { c.Bus = addr; c.PowerProfilesAPI = ppMode(ppAPI) })
	conn := testutil.Connect(t, addr)
	testutil.Eventually(t, "bus name", func() (bool, string) { return testutil.NameOwned(conn, bus.Name) })
	return d, m, conn, addr
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
