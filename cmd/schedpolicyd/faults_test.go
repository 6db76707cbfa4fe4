package main

// With the real binary: crash safety (kill -9 and reconcile) and
// faults from outside (the FUSE tree unmounted, CPUs going offline, a
// cpuset write the kernel refuses, power supplies and the sysfs root
// vanishing, the bus daemon killed, a corrupt state file). Every test runs
// the binary built from this checkout against a mock sysfs root with this
// machine's CPUs, a real cgroup v1 cpuset parent, a real FUSE mount and a
// private dbus-daemon.

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/godbus/dbus/v5"

	"github.com/schedpolicyd/schedpolicyd/daemon"
	"github.com/schedpolicyd/schedpolicyd/daemon/bus"
	"github.com/schedpolicyd/schedpolicyd/daemon/statefile"
	"github.com/schedpolicyd/schedpolicyd/internal/testutil"
	"github.com/schedpolicyd/schedpolicyd/tree"
)

// daemonProc is one run of the real binary: a testutil.Proc under the
// names this package's tests use.
type daemonProc struct {
	cmd    *exec.Cmd
	log    *testutil.LockedBuffer
	exited chan error // Wait's error, put back by each receiver
	notify *testutil.NotifySocket
	ready  string // the READY=1 notification, with its STATUS
}

func procOf(p *testutil.Proc) *daemonProc {
	return &daemonProc{cmd: p.Cmd, log: p.Log, exited: p.Exited, notify: p.Notify, ready: p.Ready}
}

// startDaemonProc starts bin with args (testutil.StartProc: its output in
// a buffer, NOTIFY_SOCKET pointing at a fresh listener, killed at cleanup
// and its log printed on failure) and waits for READY=1.
func startDaemonProc(t *testing.T, bin string, args ...string) *daemonProc {
	t.Helper()
	t.Cleanup(func() {
		// Registered before the process starts, so it runs after its kill.
		// A daemon killed here (a test that failed before its stop) leaves
		// its tree's FUSE mount dead: detach it, so that a failing test
		// leaves no mount on the machine.
		for i, a := range args {
			if a == "--tree-dir" && i+1 < len(args) {
				if err := tree.ClearStaleMount(args[i+1], nil); err != nil {
					t.Logf("detaching the killed daemon's tree: %v", err)
				}
			}
		}
	})
	p := procOf(testutil.StartProc(t, bin, args...))
	p.ready = p.notify.Expect(t, "READY=1")
	return p
}

// kill9 kills the daemon with SIGKILL and waits for it: a crash.
func (p *daemonProc) kill9(t *testing.T) {
	t.Helper()
	p.cmd.Process.Signal(syscall.SIGKILL)
	err := <-p.exited
	p.exited <- err
}

// stop sends SIGTERM and waits for a clean exit.
func (p *daemonProc) stop(t *testing.T) {
	t.Helper()
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-p.exited:
		p.exited <- err
		if err != nil {
			t.Errorf("daemon exit after SIGTERM: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("daemon did not exit after SIGTERM")
	}
}

// alive fails the test if the daemon has exited.
func (p *daemonProc) alive(t *testing.T) {
	t.Helper()
	select {
	case err := <-p.exited:
		p.exited <- err
		t.Fatalf("daemon exited: %v", err)
	default:
	}
}

// logHas waits for s in the daemon's log.
func (p *daemonProc) logHas(t *testing.T, what, s string) {
	t.Helper()
	testutil.WaitFor(t, what, 15*time.Second, func() (bool, string) {
		return strings.Contains(p.log.String(), s), "log lacks " + strconv.Quote(s)
	})
}

// v1Parent is a managed cgroup v1 cpuset parent of our own, with all CPUs
// and mems, removed (children first, their tasks killed) at cleanup.
type v1Parent struct {
	dir, cpus, mems string
	procs           []*exec.Cmd
}

// rootCpusetCPUs is the root cpuset's effective CPUs, a cpulist; it
// skips t unless they are the online CPUs, all of which the tests' plans
// count on.
func rootCpusetCPUs(t *testing.T) string {
	t.Helper()
	online := testutil.ReadTrim(t, "/sys/devices/system/cpu/online")
	all := testutil.ReadTrim(t, testutil.CpusetRoot+"/cpuset.effective_cpus")
	if all != online {
		t.Skipf("the root cpuset (%s) differs from the online CPUs (%s)", all, online)
	}
	return all
}

func newV1Parent(t *testing.T) *v1Parent {
	t.Helper()
	all := rootCpusetCPUs(t)
	if !strings.ContainsAny(all, ",-") {
		t.Skipf("needs at least 2 online CPUs, this machine has %s", all)
	}
	// CpusetV1Parent gives it the root's effective CPUs (all, checked
	// above) and mems, and removes it with its children at cleanup; the
	// tasks are killed first (cleanups run last first).
	c := &v1Parent{dir: testutil.CpusetV1Parent(t, "schedpolicyd-test"), cpus: all, mems: testutil.ReadTrim(t, testutil.CpusetRoot+"/cpuset.mems")}
	t.Cleanup(func() {
		for _, p := range c.procs {
			p.Process.Kill()
			p.Wait()
		}
	})
	return c
}

// child makes a workload (or a nested cgroup, with a path like "w/inner")
// restricted to cpus.
func (c *v1Parent) child(t *testing.T, name, cpus string) string {
	t.Helper()
	p := filepath.Join(c.dir, name)
	if err := os.Mkdir(p, 0o755); err != nil {
		t.Fatal(err)
	}
	testutil.Write(t, p+"/cpuset.cpus", cpus)
	testutil.Write(t, p+"/cpuset.mems", c.mems)
	return p
}

// spin puts a light spinning process (TestMain's) into the cgroup.
func (c *v1Parent) spin(t *testing.T, name string) *exec.Cmd {
	t.Helper()
	exe, _ := os.Executable()
	p := exec.Command(exe, "-test.run=^$")
	p.Env = append(os.Environ(), "SCHEDPOLICYD_TEST_SPIN=1")
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	c.procs = append(c.procs, p)
	testutil.Write(t, filepath.Join(c.dir, name, "cgroup.procs"), strconv.Itoa(p.Process.Pid))
	return p
}

func (c *v1Parent) cpusOf(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(c.dir, name, "cpuset.cpus"))
	if err != nil {
		return "error: " + err.Error()
	}
	return strings.TrimSpace(string(b))
}

// single reports whether a cpulist names exactly one CPU.
func single(cpus string) bool { return cpus != "" && !strings.ContainsAny(cpus, ",-") }

func savedState(t *testing.T, stateDir string) map[string]any {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(stateDir, statefile.StateFile))
	if err != nil {
		t.Fatalf("state.json: %v", err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("state.json %q: %v", b, err)
	}
	return m
}

// originalsOf returns cgroup path → original cpuset.cpus of the workload
// records in state.json (version 2) that hold a value the daemon wrote.
func originalsOf(t *testing.T, stateDir string) map[string]any {
	o := map[string]any{}
	recs, _ := savedState(t, stateDir)["cgroups"].([]any)
	for _, r := range recs {
		m, _ := r.(map[string]any)
		if m["parent"] == true || (m["applied_cpus"] == nil && m["pending_cpus"] == nil) {
			continue
		}
		o[m["path"].(string)] = m["original_cpus"]
	}
	return o
}

func onBattery(t *testing.T, sys string) {
	ps := filepath.Join(sys, "class/power_supply")
	testutil.Write(t, ps+"/AC/online", "0")
	testutil.Write(t, ps+"/BAT0/status", "Discharging")
}

func onAC(t *testing.T, sys string) {
	ps := filepath.Join(sys, "class/power_supply")
	testutil.Write(t, ps+"/AC/online", "1")
	testutil.Write(t, ps+"/BAT0/status", "Charging")
}

// TestCrashKill9Reconcile: the daemon packs two workloads and switches
// boost off on battery, then dies by SIGKILL. While it is dead one workload
// vanishes, a new one appears and the machine goes back to AC. The next
// start puts boost back at once (it no longer manages it on AC), re-plans
// the surviving workload from its saved original, forgets the vanished
// one, adopts the new one; back on battery it manages boost and packs
// again, and a clean stop restores every original and the boost and clears
// state.json.
func TestCrashKill9Reconcile(t *testing.T) {
	requireMachine(t)
	bin := buildDaemon(t)
	addr := testutil.StartBus(t, testutil.BusOptions{}).Addr
	sys := mockMachine(t, "ac-offline-battery-unknown")
	boost := filepath.Join(sys, "devices/system/cpu/cpufreq/boost")
	testutil.Put(t, boost, "1")
	cg := newV1Parent(t)
	last := cg.cpus[strings.LastIndexAny(cg.cpus, ",-")+1:]
	cg.child(t, "w1", last) // original: the last CPU only
	cg.child(t, "w2", cg.cpus)
	cg.spin(t, "w1")
	w2proc := cg.spin(t, "w2")
	tmp := t.TempDir()
	stateDir, treeDir := filepath.Join(tmp, "state"), filepath.Join(tmp, "tree")
	args := []string{"--sysfs-root", sys, "--cgroup-root", cg.dir, "--tree-dir", treeDir, "--tree-backend", "fuse",
		"--state-dir", stateDir, "--bus", addr, "--events", "fsnotify", "--debounce", "50ms", "--sample-interval", "200ms",
		"--recheck-interval", "1s", "--boost-on-battery", "off", "--log-level", "debug", "--config", emptyConf(t)}

	p1 := startDaemonProc(t, bin, args...)
	onBattery(t, sys)
	testutil.WaitFor(t, "packed with boost off", 15*time.Second, func() (bool, string) {
		a, b := cg.cpusOf(t, "w1"), cg.cpusOf(t, "w2")
		bo := testutil.ReadTrim(t, boost)
		return single(a) && single(b) && bo == "0", fmt.Sprintf("w1=%s w2=%s boost=%s", a, b, bo)
	})
	o := originalsOf(t, stateDir)
	if o[cg.dir+"/w1"] != last || o[cg.dir+"/w2"] != cg.cpus {
		t.Fatalf("state.json originals while packed = %v, want w1=%s w2=%s", o, last, cg.cpus)
	}
	if b, _ := savedState(t, stateDir)["boost"].([]any); len(b) != 1 {
		t.Fatalf("state.json boost while off = %v, want the start-up setting", savedState(t, stateDir)["boost"])
	}
	p1.kill9(t)
	// The crash leaves everything as it was: packed, boost off.
	if a := cg.cpusOf(t, "w1"); !single(a) || testutil.ReadTrim(t, boost) != "0" {
		t.Fatalf("after kill -9: w1=%s boost=%s; the test assumes nothing was restored", a, testutil.ReadTrim(t, boost))
	}

	// While it is dead: w2 goes, w3 comes, AC comes back.
	w2proc.Process.Kill()
	w2proc.Wait()
	if err := syscall.Rmdir(cg.dir + "/w2"); err != nil {
		t.Fatal(err)
	}
	cg.child(t, "w3", cg.cpus)
	onAC(t, sys)

	p2 := startDaemonProc(t, bin, args...)
	if got := testutil.ReadTrim(t, boost); got != "1" {
		t.Errorf("boost after the restart on AC = %s, want the saved start-up value 1", got)
	}
	p2.logHas(t, "recovery logged", "original cpuset recovered from saved state")
	// The start after a crash says what it found: values of the last run,
	// and its tree's dead FUSE mount. A first start says neither.
	p2.logHas(t, "the unfinished stop logged", `msg="the last run did not finish its stop: each value it set is checked now, restored where it is still ours, and kept where someone else changed it since" found="2 cgroups, boost"`)
	p2.logHas(t, "the dead mount logged", `msg="an earlier run did not unmount its tree; detached it" dir=`+treeDir+` found=`)
	for _, s := range []string{"did not finish its stop", "did not unmount its tree"} {
		if strings.Contains(p1.log.String(), s) {
			t.Errorf("a first start logged %q", s)
		}
	}
	testutil.WaitFor(t, "re-planned for performance", 10*time.Second, func() (bool, string) {
		a, c := cg.cpusOf(t, "w1"), cg.cpusOf(t, "w3")
		return a == cg.cpus && c == cg.cpus, fmt.Sprintf("w1=%s w3=%s", a, c)
	})
	o = originalsOf(t, stateDir)
	if len(o) != 1 || o[cg.dir+"/w1"] != last {
		t.Errorf("originals after reconcile = %v, want w1=%s (saved before the crash) only: no w2 (gone), no w3 (never written: it is where the plan wants it)", o, last)
	}
	if b := savedState(t, stateDir)["boost"]; b != nil {
		t.Errorf("state.json still holds a boost setting after it was put back: %v", b)
	}

	onBattery(t, sys)
	testutil.WaitFor(t, "packed again with boost off", 15*time.Second, func() (bool, string) {
		a, c := cg.cpusOf(t, "w1"), cg.cpusOf(t, "w3")
		bo := testutil.ReadTrim(t, boost)
		return single(a) && single(c) && bo == "0", fmt.Sprintf("w1=%s w3=%s boost=%s", a, c, bo)
	})
	p2.stop(t)
	if a, c, bo := cg.cpusOf(t, "w1"), cg.cpusOf(t, "w3"), testutil.ReadTrim(t, boost); a != last || c != cg.cpus || bo != "1" {
		t.Errorf("after SIGTERM: w1=%s (want %s) w3=%s (want %s) boost=%s (want 1)", a, last, c, cg.cpus, bo)
	}
	st := savedState(t, stateDir)
	if st["originals"] != nil || st["boost"] != nil || st["cgroups"] != nil {
		t.Errorf("state.json after a clean stop = %v, want only the knob", st)
	}
}

// TestFaultsRealBinary drives one running daemon through faults from
// outside, in order, and checks after each that it still serves and that
// no cpuset it wrote is wrong.
func TestFaultsRealBinary(t *testing.T) {
	requireMachine(t)
	if _, err := exec.LookPath("umount"); err != nil {
		t.Skip("needs umount (Debian package mount)")
	}
	bin := buildDaemon(t)
	busDir := t.TempDir()
	pbus := testutil.StartBus(t, testutil.BusOptions{Dir: busDir})
	addr := pbus.Addr
	sys := mockMachine(t, "ac-offline-battery-unknown")
	cg := newV1Parent(t)
	cg.child(t, "w1", cg.cpus)
	cg.child(t, "w2", cg.cpus)
	cg.spin(t, "w1")
	tmp := t.TempDir()
	stateDir, treeDir := filepath.Join(tmp, "state"), filepath.Join(tmp, "tree")
	knob := filepath.Join(treeDir, daemon.TreePrefix)
	p := startDaemonProc(t, bin, "--sysfs-root", sys, "--cgroup-root", cg.dir, "--tree-dir", treeDir, "--tree-backend", "fuse",
		"--state-dir", stateDir, "--bus", addr, "--events", "fsnotify", "--debounce", "50ms", "--sample-interval", "200ms",
		"--recheck-interval", "1s", "--log-level", "debug", "--config", emptyConf(t))
	testutil.WaitFor(t, "name owned", 10*time.Second, func() (bool, string) { return testutil.NameOwnedAt(addr, bus.Name) })

	t.Run("tree unmounted from outside", func(t *testing.T) {
		if out, err := exec.Command("umount", "-l", treeDir).CombinedOutput(); err != nil {
			t.Fatalf("umount -l: %v %s", err, out)
		}
		p.logHas(t, "remount logged", "the tree was unmounted from outside; mounted it again")
		testutil.WaitFor(t, "tree served again", 10*time.Second, func() (bool, string) {
			fstype := topMountAt(t, treeDir)
			b, rerr := os.ReadFile(knob + "/power_aware")
			return fstype == "fuse.schedpolicyd" && rerr == nil && string(b) == "1\n",
				fmt.Sprintf("fstype=%q read=%q %v", fstype, b, rerr)
		})
		// The remounted tree still refuses bad values like the first.
		out, err := exec.Command("bash", "-c", "echo bogus > "+knob+"/power_aware").CombinedOutput()
		if err == nil || !strings.Contains(string(out), "Invalid argument") {
			t.Errorf("echo bogus after the remount: %v %q, want Invalid argument", err, out)
		}
		p.alive(t)
	})

	t.Run("cpu offline in the mock online list", func(t *testing.T) {
		onlineF := filepath.Join(sys, "devices/system/cpu/online")
		last := cg.cpus[strings.LastIndexAny(cg.cpus, ",-")+1:]
		rest := testutil.ReadTrim(t, onlineF)
		n, _ := strconv.Atoi(last)
		rest = fmt.Sprintf("0-%d", n-1)
		if n == 1 {
			rest = "0"
		}
		cpuDir := filepath.Join(sys, "devices/system/cpu/cpu"+last)
		hidden := filepath.Join(t.TempDir(), "cpu")
		if err := os.Rename(cpuDir, hidden); err != nil {
			t.Fatal(err)
		}
		testutil.Write(t, onlineF, rest)
		testutil.WaitFor(t, "CPU "+last+" dropped from every cpuset", 10*time.Second, func() (bool, string) {
			a, b := cg.cpusOf(t, "w1"), cg.cpusOf(t, "w2")
			return a == rest && b == rest, a + " / " + b
		})
		onBattery(t, sys)
		testutil.WaitFor(t, "packed without the offline CPU", 10*time.Second, func() (bool, string) {
			a, b := cg.cpusOf(t, "w1"), cg.cpusOf(t, "w2")
			return single(a) && single(b) && a != last && b != last, a + " / " + b
		})
		onAC(t, sys)
		os.Rename(hidden, cpuDir)
		testutil.Write(t, onlineF, cg.cpus)
		testutil.WaitFor(t, "CPU "+last+" back", 10*time.Second, func() (bool, string) {
			a, b := cg.cpusOf(t, "w1"), cg.cpusOf(t, "w2")
			return a == cg.cpus && b == cg.cpus, a + " / " + b
		})
	})

	t.Run("cpuset write refused (EBUSY: a nested child holds every CPU)", func(t *testing.T) {
		cg.child(t, "w2/inner", cg.cpus)
		onBattery(t, sys)
		p.logHas(t, "refusal logged", "device or resource busy")
		testutil.WaitFor(t, "w1 packed all the same", 10*time.Second, func() (bool, string) {
			a := cg.cpusOf(t, "w1")
			return single(a), a
		})
		if b := cg.cpusOf(t, "w2"); b != cg.cpus {
			t.Errorf("w2 = %s after the refused write, want it untouched (%s)", b, cg.cpus)
		}
		time.Sleep(time.Second) // several samples: the refusal must not be warned about on each
		if n := strings.Count(p.log.String(), `level=warning msg="cpuset write refused"`); n != 1 {
			t.Errorf("refusal warned %d times, want once", n)
		}
		onAC(t, sys)
		testutil.WaitFor(t, "spread again", 10*time.Second, func() (bool, string) {
			a := cg.cpusOf(t, "w1")
			return a == cg.cpus, a
		})
		syscall.Rmdir(cg.dir + "/w2/inner")
		p.alive(t)
	})

	t.Run("power supply and sysfs root vanish", func(t *testing.T) {
		onBattery(t, sys)
		testutil.WaitFor(t, "battery", 10*time.Second, func() (bool, string) {
			s := testutil.ReadTrim(t, knob+"/power_source")
			return s == "battery", s
		})
		bat := filepath.Join(sys, "class/power_supply/BAT0")
		hidden := filepath.Join(t.TempDir(), "BAT0")
		if err := os.Rename(bat, hidden); err != nil {
			t.Fatal(err)
		}
		testutil.WaitFor(t, "no battery: not battery any more", 10*time.Second, func() (bool, string) {
			s := testutil.ReadTrim(t, knob+"/power_source")
			return s != "battery", s
		})
		os.Rename(hidden, bat)
		testutil.WaitFor(t, "battery back", 10*time.Second, func() (bool, string) {
			s := testutil.ReadTrim(t, knob+"/power_source")
			return s == "battery", s
		})
		away := sys + ".away"
		if err := os.Rename(sys, away); err != nil {
			t.Fatal(err)
		}
		testutil.WaitFor(t, "sysfs root gone: unknown, treated like AC", 10*time.Second, func() (bool, string) {
			s, pol := testutil.ReadTrim(t, knob+"/power_source"), testutil.ReadTrim(t, knob+"/current_sched_policy")
			return s == "unknown" && pol == "performance", s + " " + pol
		})
		if err := os.Rename(away, sys); err != nil {
			t.Fatal(err)
		}
		testutil.WaitFor(t, "sysfs root back (found by the periodic re-check)", 10*time.Second, func() (bool, string) {
			s := testutil.ReadTrim(t, knob+"/power_source")
			return s == "battery", s
		})
		onAC(t, sys)
		p.alive(t)
	})

	t.Run("dbus-daemon killed and restarted", func(t *testing.T) {
		pbus.Kill()
		p.logHas(t, "loss logged", "lost the D-Bus connection")
		addr2 := testutil.StartBus(t, testutil.BusOptions{Dir: busDir}).Addr
		if addr2 != addr {
			t.Fatalf("restarted bus at %s, want %s", addr2, addr)
		}
		testutil.WaitFor(t, "name owned again", 40*time.Second, func() (bool, string) { return testutil.NameOwnedAt(addr, bus.Name) })
		conn, err := dbus.Connect(addr)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		v, err := conn.Object(bus.Name, bus.ObjectPath).GetProperty(bus.Interface + ".PowerAware")
		if err != nil || v.Value() != uint32(1) {
			t.Errorf("PowerAware after the reconnect = %v, %v", v, err)
		}
	})

	p.stop(t)
	if a, b := cg.cpusOf(t, "w1"), cg.cpusOf(t, "w2"); a != cg.cpus || b != cg.cpus {
		t.Errorf("after SIGTERM w1=%s w2=%s, want the originals %s", a, b, cg.cpus)
	}
	if fstype := topMountAt(t, treeDir); fstype != "" {
		t.Errorf("tree still mounted (%s) after exit", fstype)
	}
}

// TestCorruptStateFile: a state.json that is garbage, of another version,
// or holds invalid values is ignored with a warning naming it; the daemon
// starts from the defaults, and the next save replaces the file.
func TestCorruptStateFile(t *testing.T) {
	bin := buildDaemon(t)
	sys := mockMachine(t, "ac-offline-battery-unknown")
	for name, content := range map[string]string{
		"binary garbage":  "\x00\xff\xfe{{{\n",
		"truncated json":  `{"version": 1, "power_aware": 2`,
		"other version":   `{"version": 99, "power_aware": 2, "power_aware_policy": "balance"}`,
		"invalid knob":    `{"version": 1, "power_aware": 7, "power_aware_policy": "turbo"}`,
		"relative cgroup": `{"version": 1, "power_aware": 1, "power_aware_policy": "powersaving", "originals": {"../../etc": "0"}}`,
		"boost escape":    `{"version": 1, "power_aware": 1, "power_aware_policy": "powersaving", "boost": [{"file": "../../../etc/passwd", "value": "1"}]}`,
	} {
		t.Run(name, func(t *testing.T) {
			tmp := t.TempDir()
			stateDir := filepath.Join(tmp, "state")
			os.MkdirAll(stateDir, 0o755)
			os.WriteFile(filepath.Join(stateDir, statefile.StateFile), []byte(content), 0o644)
			p := startDaemonProc(t, bin, "--sysfs-root", sys, "--cgroup-root", "none", "--tree-dir", filepath.Join(tmp, "tree"),
				"--tree-backend", "plain", "--state-dir", stateDir, "--bus", "none", "--events", "fsnotify",
				"--config", emptyConf(t))
			p.logHas(t, "warning", "ignoring saved state, using defaults")
			if !strings.Contains(p.log.String(), filepath.Join(stateDir, statefile.StateFile)) {
				t.Errorf("the warning does not name the file")
			}
			knob := filepath.Join(tmp, "tree", daemon.TreePrefix)
			if got := testutil.ReadTrim(t, knob+"/power_aware"); got != "1" {
				t.Errorf("power_aware = %s, want the default 1", got)
			}
			testutil.Write(t, knob+"/power_aware", "2")
			testutil.WaitFor(t, "choice saved over the corrupt file", 10*time.Second, func() (bool, string) {
				b, _ := os.ReadFile(filepath.Join(stateDir, statefile.StateFile))
				var m map[string]any
				err := json.Unmarshal(b, &m)
				return err == nil && m["power_aware"] == float64(2), string(b)
			})
			p.stop(t)
		})
	}
}

// emptyConf is an empty configuration file, so a test does not depend on
// what /etc/schedpolicyd holds on this machine.
func emptyConf(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "empty.conf")
	if err := os.WriteFile(p, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestLogPipeClosedAtStop is the laptop issue's second case: the daemon's
// output goes into a pipe whose reader ends first (`schedpolicyd | tee
// log`, then Ctrl-C, which ends tee too). Its stop writes log lines into
// the closed pipe, which must fail without ending it: it exits 0, every
// workload has its original back, state.json keeps nothing to restore,
// and the FUSE tree is unmounted. Before, SIGPIPE killed it in the middle
// of the restore (exit 141).
func TestLogPipeClosedAtStop(t *testing.T) {
	requireMachine(t)
	bin := buildDaemon(t)
	sys := mockMachine(t, "ac-offline-battery-unknown")
	cg := newV1Parent(t)
	cg.child(t, "w1", cg.cpus)
	cg.spin(t, "w1")
	tmp := t.TempDir()
	stateDir, treeDir := filepath.Join(tmp, "state"), filepath.Join(tmp, "tree")
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "--sysfs-root", sys, "--cgroup-root", cg.dir, "--tree-dir", treeDir, "--tree-backend", "fuse",
		"--state-dir", stateDir, "--bus", "none", "--events", "fsnotify", "--debounce", "50ms",
		"--log-level", "debug", "--config", emptyConf(t))
	cmd.Stdout, cmd.Stderr = w, w
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-exited
		syscall.Unmount(treeDir, syscall.MNT_DETACH)
	})
	log := &testutil.LockedBuffer{}
	readDone := make(chan struct{})
	go func() {
		defer close(readDone)
		buf := make([]byte, 4096)
		for {
			n, err := r.Read(buf)
			log.Write(buf[:n])
			if err != nil || strings.Contains(log.String(), `msg=ready`) && strings.Contains(log.String(), `msg="cpuset written"`) {
				return
			}
		}
	}()
	onBattery(t, sys)
	testutil.WaitFor(t, "w1 packed", 15*time.Second, func() (bool, string) {
		a := cg.cpusOf(t, "w1")
		return single(a), "w1=" + a
	})
	<-readDone
	r.Close() // the reader is gone: every later line goes into a closed pipe
	cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-exited:
		exited <- err
		if err != nil {
			t.Fatalf("the daemon's exit after SIGTERM with its log pipe closed: %v, want status 0\n%s", err, log.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the daemon did not exit after SIGTERM")
	}
	if a := cg.cpusOf(t, "w1"); a != cg.cpus {
		t.Errorf("w1 = %s after the stop, want its original %s", a, cg.cpus)
	}
	if st := savedState(t, stateDir); st["cgroups"] != nil {
		t.Errorf("state.json after the stop holds %v, want nothing to restore", st["cgroups"])
	}
	if mi, _ := os.ReadFile("/proc/self/mountinfo"); strings.Contains(string(mi), " "+treeDir+" ") {
		t.Errorf("%s is still mounted after the stop", treeDir)
	}
}
