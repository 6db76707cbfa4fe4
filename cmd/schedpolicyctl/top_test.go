package main

// schedpolicyctl top against the real daemon on a private bus: in a real
// terminal (a detached 80×24 tmux session, read with capture-pane) and
// with its output on a pipe.

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/godbus/dbus/v5"

	"github.com/schedpolicyd/schedpolicyd/internal/testutil"
)

// tmuxPane is one detached tmux session on a server of the test's own.
type tmuxPane struct {
	tmux, sock string
}

// startTmux runs argv in a new detached width×height session on a tmux
// server whose socket is in the test's temporary directory; the server is
// killed at cleanup.
func startTmux(t *testing.T, width, height int, argv ...string) *tmuxPane {
	t.Helper()
	bin, err := exec.LookPath("tmux")
	if err != nil {
		t.Skip("needs tmux (Debian package tmux; make deps installs it)")
	}
	p := &tmuxPane{tmux: bin, sock: filepath.Join(t.TempDir(), "tmux.sock")}
	// remain-on-exit keeps the pane, with what the program printed last
	// and its exit status, when it ends.
	args := append([]string{"-u", "-S", p.sock, "-f", "/dev/null", "start-server", ";",
		"set-option", "-g", "remain-on-exit", "on", ";",
		"new-session", "-d", "-s", "top", "-x", fmt.Sprint(width), "-y", fmt.Sprint(height), "--"}, argv...)
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), "LC_ALL=C.UTF-8", "TERM=xterm-256color")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("tmux new-session: %v\n%s", err, out)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("last screen:\n%s", p.capture(t))
		}
		exec.Command(bin, "-S", p.sock, "kill-server").Run()
	})
	return p
}

// exited returns the exit status of the pane's program once it has ended.
func (p *tmuxPane) exited(t *testing.T) (int, bool) {
	t.Helper()
	out, err := exec.Command(p.tmux, "-S", p.sock, "display-message", "-p", "-t", "top", "#{pane_dead} #{pane_dead_status}").Output()
	if err != nil {
		t.Fatalf("tmux display-message: %v", err)
	}
	var dead, status int
	fmt.Sscan(string(out), &dead, &status)
	return status, dead == 1
}

// capture returns the pane's text, one string per screen line.
func (p *tmuxPane) capture(t *testing.T) string {
	t.Helper()
	out, err := exec.Command(p.tmux, "-S", p.sock, "capture-pane", "-p", "-t", "top").Output()
	if err != nil {
		return fmt.Sprintf("(capture-pane: %v)", err)
	}
	return string(out)
}

// waitScreen waits until the screen has every line of want (each a whole
// line, trailing blanks ignored) and returns it.
func (p *tmuxPane) waitScreen(t *testing.T, what string, want ...string) string {
	t.Helper()
	var screen string
	testutil.WaitFor(t, what+" on the screen", 15*time.Second, func() (bool, string) {
		screen = p.capture(t)
		lines := map[string]bool{}
		for _, l := range strings.Split(screen, "\n") {
			lines[strings.TrimRight(l, " ")] = true
		}
		for _, w := range want {
			if !lines[w] {
				return false, fmt.Sprintf("no line %q in\n%s", w, screen)
			}
		}
		return true, ""
	})
	return screen
}

// propsCalls watches the bus as a monitor (BecomeMonitor) and counts the
// org.freedesktop.DBus.Properties calls sent to the daemon. sync makes a
// Ping to the daemon and waits until the monitor has seen it, so every
// call the bus routed before it has been counted.
type propsCalls struct {
	mu    sync.Mutex
	calls []string // "Member from sender"
	pings map[string]bool
	conn  *dbus.Conn
	addr  string
}

func watchPropsCalls(t *testing.T, addr string) *propsCalls {
	t.Helper()
	conn := testutil.Connect(t, addr)
	var owner string
	if err := conn.BusObject().Call("org.freedesktop.DBus.GetNameOwner", 0, busName).Store(&owner); err != nil {
		t.Fatal(err)
	}
	// Every message that reaches this connection from now on is ours to
	// read, the reply to BecomeMonitor too: the monitored rules are method
	// calls only, so the one reply or error is that answer.
	ch := make(chan *dbus.Message, 1024)
	conn.Eavesdrop(ch)
	rules := []string{"type='method_call',interface='org.freedesktop.DBus.Properties'", "type='method_call',interface='org.freedesktop.DBus.Peer'"}
	conn.BusObject().Go("org.freedesktop.DBus.Monitoring.BecomeMonitor", 0, nil, rules, uint32(0))
	pc := &propsCalls{pings: map[string]bool{}, conn: conn, addr: addr}
	answer := make(chan *dbus.Message, 1)
	go func() {
		for m := range ch {
			if m.Type == dbus.TypeMethodReply || m.Type == dbus.TypeError {
				answer <- m
				continue
			}
			if m.Type != dbus.TypeMethodCall {
				continue
			}
			dest, _ := m.Headers[dbus.FieldDestination].Value().(string)
			if dest != busName && dest != owner {
				continue
			}
			member, _ := m.Headers[dbus.FieldMember].Value().(string)
			sender, _ := m.Headers[dbus.FieldSender].Value().(string)
			pc.mu.Lock()
			if member == "Ping" {
				pc.pings[sender] = true
			} else {
				pc.calls = append(pc.calls, member+" from "+sender)
			}
			pc.mu.Unlock()
		}
	}()
	testutil.WaitFor(t, "the answer to BecomeMonitor", 10*time.Second, func() (bool, string) {
		select {
		case m := <-answer:
			if m.Type == dbus.TypeError {
				t.Fatalf("BecomeMonitor: %v", m.Body)
			}
			return true, ""
		default:
			return false, ""
		}
	})
	return pc
}

// sync pings the daemon from a new connection and waits for the monitor
// to see that ping, then returns the Properties calls counted.
func (pc *propsCalls) sync(t *testing.T) []string {
	t.Helper()
	c, err := dbus.Connect(pc.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Object(busName, objectPath).Call("org.freedesktop.DBus.Peer.Ping", 0).Err; err != nil {
		t.Fatal(err)
	}
	me := c.Names()[0]
	var calls []string
	testutil.WaitFor(t, "the monitor to see the ping", 10*time.Second, func() (bool, string) {
		pc.mu.Lock()
		defer pc.mu.Unlock()
		calls = append([]string(nil), pc.calls...)
		return pc.pings[me], ""
	})
	return calls
}

// TestCtlTopTmux runs `schedpolicyctl top` in a detached 80×24 tmux
// session against the real daemon on the mock laptop on battery, with a
// real cgroup v1 cpuset parent: the policy and why are on screen; a policy
// switch and a new workload show up, the workload with the CPUs the
// daemon wrote; a switch back packs it and the screen follows. Every
// change reached the screen without a read: the only Properties call the
// daemon saw is top's GetAll at start (a top that polled would have had to
// read before showing each change).
func TestCtlTopTmux(t *testing.T) {
	if _, err := exec.LookPath("tmux"); err != nil {
		t.Skip("needs tmux (Debian package tmux; make deps installs it)")
	}
	cg := testutil.CpusetV1Parent(t, "schedpolicyctl-top")
	d := startDaemon(t, cg)
	calls := watchPropsCalls(t, d.addr)
	pane := startTmux(t, 80, 24, d.ctl, "--bus", d.addr, "top")

	screen := pane.waitScreen(t, "the policy on battery",
		"schedpolicyd top  policy: powersaving  power: battery  boost: unsupported",
		"why: power_aware=1 (automatic) and the machine runs on battery: battery:",
		"power_aware=1 (automatic)  power_aware_policy=powersaving  holds: none",
		"watts: – (nothing measured yet for powersaving on battery)",
		"package 0  cpus 0-7  (one LLC)",
		" core 0 cpu0 [..........]   0% -  cpu4 [..........]   0% -",
		"workloads: none")
	// It fits: the header is on the first line, the footer on the 24th.
	lines := strings.Split(strings.TrimSuffix(screen, "\n"), "\n")
	if len(lines) != 24 || !strings.HasPrefix(lines[0], "schedpolicyd top") || !strings.HasPrefix(lines[23], "q quit  ↑↓ scroll  ") {
		t.Errorf("the screen is not 24 lines from header to footer:\n%s", screen)
	}

	if r := d.inProcess("set", "performance"); r.code != 0 {
		t.Fatalf("set performance: %v", r)
	}
	pane.waitScreen(t, "the switch to performance",
		"schedpolicyd top  policy: performance  power: battery  boost: unsupported",
		"why: power_aware=0: always performance",
		"power_aware=0 (always performance)  power_aware_policy=powersaving  holds: none")

	// A new workload: a child of the managed parent, adopted by the daemon,
	// which fills in its cpuset.
	build := filepath.Join(cg, "build")
	if err := os.Mkdir(build, 0o755); err != nil {
		t.Fatal(err)
	}
	row := func() string {
		var cpus string
		testutil.WaitFor(t, "the daemon to fill in build's cpuset", 10*time.Second, func() (bool, string) {
			cpus = testutil.ReadTrim(t, filepath.Join(build, "cpuset.cpus"))
			return cpus != "", ""
		})
		return fmt.Sprintf(" a build     %-12s  0.00  -", cpus)
	}
	allCPUs := testutil.ReadTrim(t, filepath.Join(cg, "cpuset.cpus"))
	testutil.WaitFor(t, "build on every CPU of the parent", 10*time.Second, func() (bool, string) {
		got := testutil.ReadTrim(t, filepath.Join(build, "cpuset.cpus"))
		return got == allCPUs, got
	})
	pane.waitScreen(t, "the new workload", "workloads: 1", "   NAME      CPUS          UTIL  POLICY", row(),
		" core 0 cpu0 [..........]   0% a  cpu4 [..........]   0% -")

	// Back to automatic: powersaving on battery packs the idle workload
	// onto one CPU.
	if r := d.inProcess("auto", "1"); r.code != 0 {
		t.Fatalf("auto 1: %v", r)
	}
	testutil.WaitFor(t, "build packed", 10*time.Second, func() (bool, string) {
		got := testutil.ReadTrim(t, filepath.Join(build, "cpuset.cpus"))
		return got != allCPUs && got != "", got
	})
	pane.waitScreen(t, "the switch back with the workload packed",
		"schedpolicyd top  policy: powersaving  power: battery  boost: unsupported", row())

	got := calls.sync(t)
	if len(got) != 1 || !strings.HasPrefix(got[0], "GetAll from ") {
		t.Errorf("Properties calls to the daemon: %q; want only top's GetAll at start", got)
	}

	// Still running (nothing made it quit), and q quits it with status 0.
	if status, dead := pane.exited(t); dead {
		t.Fatalf("top exited with status %d before q", status)
	}
	exec.Command(pane.tmux, "-S", pane.sock, "send-keys", "-t", "top", "q").Run()
	testutil.WaitFor(t, "top to quit on q", 10*time.Second, func() (bool, string) {
		status, dead := pane.exited(t)
		if dead && status != 0 {
			t.Errorf("top exited with status %d on q", status)
		}
		return dead, "still running"
	})
}

// TestCtlTopPlain: with its output on a pipe top prints one snapshot, the
// whole reason and every line of the machine, and exits 0; without a
// daemon it fails like status.
func TestCtlTopPlain(t *testing.T) {
	d := startDaemon(t, "none")
	r := d.run(t, "top")
	want := strings.Join([]string{
		"schedpolicyd top  policy: powersaving  power: battery  boost: unsupported",
		"why: power_aware=1 (automatic) and the machine runs on battery: battery:",
		"     system battery BAT1 reports status=Discharging and no supply shows external",
		"     power (rule 3)",
		"power_aware=1 (automatic)  power_aware_policy=powersaving  holds: none",
		"watts: – (nothing measured yet for powersaving on battery)",
		"",
		"package 0  cpus 0-7  (one LLC)",
		" core 0 cpu0 [..........]   0% -  cpu4 [..........]   0% -",
		" core 1 cpu1 [..........]   0% -  cpu5 [..........]   0% -",
		" core 2 cpu2 [..........]   0% -  cpu6 [..........]   0% -",
		" core 3 cpu3 [..........]   0% -  cpu7 [..........]   0% -",
		"",
		"workloads: none",
		"",
		"cpu% = workloads' use spread over their CPUs",
		"",
	}, "\n")
	if r.code != 0 || r.stdout != want || r.stderr != "" {
		t.Errorf("top on a pipe: %v\nwant stdout:\n%s", r, want)
	}

	_, ctl := binaries(t)
	addr := testutil.StartBus(t, testutil.BusOptions{}).Addr
	r = runCtl(t, exec.Command(ctl, "--bus", addr, "top"))
	if r.code != exitFailure || !strings.Contains(r.stderr, "schedpolicyd is not running") {
		t.Errorf("top without a daemon: %v", r)
	}
	if r := d.inProcess("top", "extra"); r.code != exitUsage {
		t.Errorf("top extra: %v, want exit 2", r)
	}
}
