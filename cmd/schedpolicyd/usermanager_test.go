package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/godbus/dbus/v5"

	"github.com/schedpolicyd/schedpolicyd/daemon/bus"
	"github.com/schedpolicyd/schedpolicyd/internal/testutil"
)

// The real daemon against a user's manager as a hostile user runs one
// (testutil.FakeManager on RUNROOT/user/4242/systemd/private, in a
// directory owned by uid 4242 and listened on as that uid), with the
// system manager a fake on a private bus with the system bus's policy
// (user@4242.service with cpuset delegated, its MainPID this process) and
// a mock machine whose cgroup tree is v2.

const userUID = 4242

// userCG is user@4242.service's cgroup.
const userCG = "/user.slice/user-4242.slice/user@4242.service"

// userSetup is one such installation.
type userSetup struct {
	bin, sys, run, state, tree, conf string
	bus                              *testutil.Bus
	root                             *dbus.Conn
	system, user                     *testutil.FakeManager
}

// newUserSetup builds it; the user's manager is served once serveUser is
// called, so that a test can make it misbehave first.
func newUserSetup(t *testing.T) *userSetup {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: serves the user's manager as uid 4242")
	}
	testutil.NeedBusDaemon(t)
	s := &userSetup{bin: buildDaemon(t)}
	s.sys = mockMachine(t, "ac-offline-battery-unknown")
	testutil.Put(t, s.sys+"/devices/system/cpu/kernel_max", "63")
	testutil.Put(t, s.sys+"/fs/cgroup/cgroup.controllers", "cpuset cpu io memory pids")
	testutil.Put(t, s.sys+"/fs/cgroup"+userCG+"/cgroup.controllers", "cpuset cpu memory pids")
	dir := t.TempDir()
	s.run, s.state, s.tree, s.conf = filepath.Join(dir, "run"), filepath.Join(dir, "state"), filepath.Join(dir, "tree"), filepath.Join(dir, "schedpolicyd.conf")
	testutil.WriteFile(t, s.conf, "")
	s.bus = testutil.StartSystemPolicyBus(t, "../../packaging/dbus/org.schedpolicyd.SchedPolicy1.conf")
	s.system = testutil.NewFakeManager(t)
	s.system.Put("user@4242.service", testutil.FakeUnit{Slice: "user-4242.slice", ControlGroup: userCG, MainPID: uint32(os.Getpid()),
		Delegate: true, DelegateControllers: []string{"cpu", "cpuset", "memory", "pids"}})
	s.system.ServeBus(s.bus.Addr)
	s.user = testutil.NewFakeManager(t)
	var err error
	if s.root, err = dbus.Connect(s.bus.Addr); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.root.Close() })
	return s
}

// unit puts an honest unit of the user's in slice, with its cgroup in the
// mock tree (cpuset.cpus there: the manager applies AllowedCPUs=).
func (s *userSetup) unit(t *testing.T, name, slice string, mask []byte) {
	cg := userCG + "/" + slice + "/" + name
	testutil.Put(t, s.sys+"/fs/cgroup"+cg+"/cpu.stat", "usage_usec 0")
	testutil.Put(t, s.sys+"/fs/cgroup"+cg+"/cpuset.cpus", "")
	s.user.Put(name, testutil.FakeUnit{Slice: slice, ControlGroup: cg, Mask: mask})
}

func (s *userSetup) serveUser() { s.user.ServeUser(filepath.Join(s.run, "user", "4242"), userUID) }

// start runs the daemon and waits for READY=1.
func (s *userSetup) start(t *testing.T) *daemonProc {
	t.Helper()
	t.Setenv("DBUS_SYSTEM_BUS_ADDRESS", s.bus.Addr) // the placement's system manager
	return startDaemonProc(t, s.bin, "--sysfs-root", s.sys, "--run-root", s.run, "--placement", "systemd",
		"--manage", "app.slice,background.slice,session.slice", "--bus", s.bus.Addr, "--tree-dir", s.tree, "--tree-backend", "plain",
		"--state-dir", s.state, "--events", "fsnotify", "--upower", "off", "--logind=false", "--task-clock=false",
		"--log-level", "debug", "--config", s.conf)
}

// setPolicy sets the policy as root over the bus and returns how long
// the daemon took to answer; the bound is a hang guard, not a speed
// claim: a daemon whose loop is stuck never answers.
func (s *userSetup) setPolicy(t *testing.T, pol string) time.Duration {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	t0 := time.Now()
	if err := s.root.Object(bus.Name, bus.ObjectPath).CallWithContext(ctx, bus.Interface+".SetPolicy", 0, pol).Err; err != nil {
		t.Fatalf("root's SetPolicy(%s): %v", pol, err)
	}
	return time.Since(t0)
}

// rss is the daemon's resident memory, in bytes (/proc/PID/status VmRSS).
func rss(t *testing.T, p *daemonProc) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb << 10
		}
	}
	t.Fatal("no VmRSS")
	return 0
}

// TestDaemonUserManagerStuck: a user's manager that accepts and says
// nothing, one that never answers AddMatch, and one that answers
// nothing once connected (every property read held): the daemon becomes
// ready, root's SetPolicy is answered while the daemon's link waits on
// the user's manager, the manager is dropped and said once, and SIGTERM
// stops the daemon. Before, the daemon made this connection on its loop
// without a deadline: it never became ready, and SetPolicy got no answer.
func TestDaemonUserManagerStuck(t *testing.T) {
	for _, mode := range []string{"silent", "no AddMatch", "held reads"} {
		t.Run(mode, func(t *testing.T) {
			s := newUserSetup(t)
			s.unit(t, "app-editor.scope", "background.slice", nil)
			switch mode {
			case "silent":
				s.user.SetSilent(true)
			case "no AddMatch":
				s.user.Hold("AddMatch", true)
			case "held reads":
				s.user.Hold("GetAll", true)
			}
			s.serveUser()
			p := s.start(t)
			testutil.WaitFor(t, "the daemon to reach the user's manager", time.Minute, func() (bool, string) {
				return s.user.Accepted() > 0, fmt.Sprint(s.user.Accepted())
			})
			if mode != "silent" {
				testutil.WaitFor(t, "the daemon's call held", time.Minute, func() (bool, string) {
					return s.user.Holding() > 0, fmt.Sprint(s.user.Holding())
				})
			}
			// The link waits on the user's manager; the loop answers.
			took := s.setPolicy(t, "powersaving")
			took2 := s.setPolicy(t, "performance")
			t.Logf("%s: root's SetPolicy answered in %v and %v while the user's manager held the daemon's link", mode, took.Round(time.Millisecond), took2.Round(time.Millisecond))
			p.logHas(t, "the manager dropped", "does not answer as systemd does")
			p.stop(t)
			if n := strings.Count(p.log.String(), "does not answer as systemd does: dropped"); n != 1 {
				t.Errorf("said %d times at warning level, want once", n)
			}
		})
	}
}

// TestDaemonUserManagerLies: a user's units that point outside the user's
// cgroup (a ControlGroup that climbs out of the tree to a FIFO and a
// symbolic link to /dev/zero), an AllowedCPUs= of 1 MiB (a message over 4 MiB drops the whole manager: systemd.MaxUserMessage), names that are
// not UTF-8: the daemon opens nothing there (inotify on the targets),
// stays small, places the honest unit, and puts its original back at
// stop. Before, the FIFO hung the loop for good and /dev/zero ran the
// daemon out of memory.
func TestDaemonUserManagerLies(t *testing.T) {
	s := newUserSetup(t)
	evil := filepath.Join(s.run, "user", "4242", "evil")
	for _, d := range []string{evil + "/fifo", evil + "/zero", evil + "/link", evil + "/target"} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := syscall.Mkfifo(evil+"/fifo/cpu.stat", 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/dev/zero", evil+"/zero/cpu.stat"); err != nil {
		t.Fatal(err)
	}
	testutil.WriteFile(t, evil+"/target/cpu.stat", "usage_usec 1\n")
	if err := os.Symlink(evil+"/target/cpu.stat", evil+"/link/cpu.stat"); err != nil {
		t.Fatal(err)
	}
	opened := testutil.WatchOpens(t, evil+"/fifo", evil+"/zero", evil+"/link", evil+"/target")
	up := strings.Repeat("/..", 8)
	s.unit(t, "app-honest.scope", "background.slice", []byte{3})
	s.user.Put("app-fifo.scope", testutil.FakeUnit{Slice: "background.slice", ControlGroup: userCG + up + evil + "/fifo"})
	s.user.Put("app-zero.scope", testutil.FakeUnit{Slice: "background.slice", ControlGroup: userCG + up + evil + "/zero"})
	// Clean paths, but not the user's: refused all the same.
	s.user.Put("app-link.scope", testutil.FakeUnit{Slice: "background.slice", ControlGroup: filepath.Join("/", evil, "link")})
	s.user.Put("app-ssh.scope", testutil.FakeUnit{Slice: "background.slice", ControlGroup: "/system.slice/ssh.service"})
	s.unit(t, "app-mask.scope", "background.slice", make([]byte, 1<<20))
	s.unit(t, "app-caf\x7f.scope", "background.slice", nil)
	s.user.NotUTF8(true)
	s.serveUser()
	p := s.start(t)
	p.logHas(t, "the honest unit adopted", `unit=app-honest.scope`)
	took := s.setPolicy(t, "powersaving")
	testutil.WaitFor(t, "the honest unit placed", time.Minute, func() (bool, string) {
		sets := s.user.Sets()
		return len(sets) > 0 && strings.HasPrefix(sets[len(sets)-1], "app-honest.scope="), strings.Join(sets, " ")
	})
	for _, want := range []string{`app-fifo.scope`, `app-zero.scope`, `app-link.scope`, `app-ssh.scope`, `app-mask.scope`, `app-caf\\xe9.scope`} {
		p.logHas(t, "the refusal of "+want, want)
	}
	for _, l := range strings.Split(p.log.String(), "\n") {
		if strings.Contains(l, `msg="adopted unit"`) && !strings.Contains(l, "unit=app-honest.scope") {
			t.Errorf("adopted: %s", l)
		}
	}
	if m := rss(t, p); m > 128<<20 {
		t.Fatalf("the daemon holds %d MiB after a 1 MiB mask, want under 128 MiB", m>>20)
	}
	p.stop(t)
	if o := opened(); len(o) > 0 {
		t.Fatalf("the daemon opened what a user's unit pointed at: %v", o)
	}
	sets := s.user.Sets()
	if len(sets) == 0 || sets[len(sets)-1] != "app-honest.scope=03" {
		t.Fatalf("sets %v: want the honest unit's original 0-1 back last", sets)
	}
	t.Logf("root's SetPolicy answered in %v; the user's manager saw %s", took.Round(time.Millisecond), strings.Join(sets, " "))
}
