package main

// Integration tests: the real schedpolicyd binary on a private dbus-daemon
// with a mock sysfs root (the seed's 4-core/8-thread laptop plus the
// power_supply corpus's Surface Pro on battery), queried and driven by the real
// schedpolicyctl binary. The private bus, the fixture copy and the polling
// are internal/testutil's, shared with cmd/schedpolicyd's tests.

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/godbus/dbus/v5"

	"github.com/schedpolicyd/schedpolicyd/internal/testutil"
)

// binDir holds the binaries built once for the package's tests; it is
// world-readable so a test can run schedpolicyctl as another user.
var (
	buildOnce sync.Once
	binDir    string
	buildErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// binaries builds schedpolicyd and schedpolicyctl once.
func binaries(t *testing.T) (daemonBin, ctlBin string) {
	t.Helper()
	buildOnce.Do(func() {
		binDir, buildErr = os.MkdirTemp("", "schedpolicyctl-test-")
		if buildErr != nil {
			return
		}
		os.Chmod(binDir, 0o755)
		for _, b := range []struct{ out, pkg string }{{"schedpolicyd", "../schedpolicyd"}, {"schedpolicyctl", "."}} {
			out, err := exec.Command("go", "build", "-o", filepath.Join(binDir, b.out), b.pkg).CombinedOutput()
			if err != nil {
				buildErr = fmt.Errorf("go build %s: %v\n%s", b.pkg, err, out)
				return
			}
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return filepath.Join(binDir, "schedpolicyd"), filepath.Join(binDir, "schedpolicyctl")
}

// mockLaptop builds a sysfs root: the 4-core/8-thread laptop topology and
// the Surface Pro running on battery (ADP1 offline, BAT1 Discharging at
// 7.21 W) of the corpus (testdata/power_supply/surface-pro-on-battery).
func mockLaptop(t *testing.T) string {
	t.Helper()
	root := filepath.Join(t.TempDir(), "sys")
	testutil.CopyFixture(t, "../../sysfs/testdata/topology/laptop-4c8t", root)
	testutil.CopyFixture(t, "../../testdata/power_supply/surface-pro-on-battery/sys", root)
	return root
}

// testDaemon is a running schedpolicyd on a private bus.
type testDaemon struct {
	addr  string
	sys   string // mock sysfs root
	tree  string // the knob directory of the served tree
	state string
	ctl   string // schedpolicyctl binary
	log   *testutil.LockedBuffer
}

// startDaemon runs the real daemon with the plain tree backend on a mock
// laptop; cgroupRoot is "none" or a managed parent. It returns once the
// daemon owns its name.
func startDaemon(t *testing.T, cgroupRoot string) *testDaemon {
	t.Helper()
	return startDaemonOn(t, cgroupRoot, testutil.StartBus(t, testutil.BusOptions{AnyUser: true}).Addr)
}

// startDaemonOn is startDaemon on the bus at addr.
func startDaemonOn(t *testing.T, cgroupRoot, addr string) *testDaemon {
	t.Helper()
	return startDaemonAt(t, cgroupRoot, addr, nil)
}

// startDaemonWith is startDaemon with prep adding to the mock sysfs root
// before the daemon starts.
func startDaemonWith(t *testing.T, cgroupRoot string, prep func(sys string)) *testDaemon {
	t.Helper()
	return startDaemonAt(t, cgroupRoot, testutil.StartBus(t, testutil.BusOptions{AnyUser: true}).Addr, prep)
}

func startDaemonAt(t *testing.T, cgroupRoot, addr string, prep func(sys string)) *testDaemon {
	t.Helper()
	daemonBin, ctlBin := binaries(t)
	tmp := t.TempDir()
	d := &testDaemon{addr: addr, sys: mockLaptop(t), state: filepath.Join(tmp, "state"), ctl: ctlBin}
	if prep != nil {
		prep(d.sys)
	}
	treeDir := filepath.Join(tmp, "tree")
	d.tree = filepath.Join(treeDir, "devices/system/cpu/sched_policy")
	p := testutil.StartProc(t, daemonBin, "--sysfs-root", d.sys, "--cgroup-root", cgroupRoot, "--tree-dir", treeDir,
		"--tree-backend", "plain", "--state-dir", d.state, "--bus", addr, "--events", "fsnotify",
		"--debounce", "50ms", "--sample-interval", "200ms", "--log-level", "debug")
	d.log = p.Log
	// A clean stop first, so that the daemon restores what it placed;
	// StartProc's own cleanup, after this one, kills what is left.
	t.Cleanup(func() {
		p.Cmd.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-p.Exited:
			p.Exited <- err
		case <-time.After(10 * time.Second):
		}
	})
	// The daemon owns its name before READY=1 (its first bus connection
	// is made in its start).
	if !p.WaitReady() {
		t.Fatalf("schedpolicyd exited before READY=1: %v\n%s", <-p.Exited, d.log.String())
	}
	conn, err := dbus.Connect(addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if ok, seen := testutil.NameOwned(conn, busName); !ok {
		t.Fatalf("schedpolicyd sent READY=1 without owning its name: %s", seen)
	}
	return d
}

// result is one schedpolicyctl run.
type result struct {
	stdout, stderr string
	code           int
}

func (r result) String() string {
	return fmt.Sprintf("exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
}

// run executes schedpolicyctl --bus ADDR args... as a separate process.
func (d *testDaemon) run(t *testing.T, args ...string) result {
	t.Helper()
	return runCtl(t, exec.Command(d.ctl, append([]string{"--bus", d.addr}, args...)...))
}

func runCtl(t *testing.T, cmd *exec.Cmd) result {
	t.Helper()
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("%v: %v", cmd.Args, err)
	}
	return result{out.String(), errb.String(), code}
}

// inProcess runs the command through run() in this process, so the race
// detector sees the client code.
func (d *testDaemon) inProcess(args ...string) result {
	var out, errb bytes.Buffer
	code := run(append([]string{"--bus", d.addr}, args...), &out, &errb)
	return result{out.String(), errb.String(), code}
}

func (d *testDaemon) statusJSON(t *testing.T) status {
	t.Helper()
	r := d.inProcess("status", "--json")
	if r.code != 0 {
		t.Fatalf("status --json: %v", r)
	}
	var s status
	if err := json.Unmarshal([]byte(r.stdout), &s); err != nil {
		t.Fatalf("status --json output: %v\n%s", err, r.stdout)
	}
	return s
}

func TestCtlStatus(t *testing.T) {
	d := startDaemon(t, "none")
	r := d.inProcess("status")
	if r.code != 0 {
		t.Fatalf("status: %v", r)
	}
	for _, want := range []string{"policy:        powersaving\n", "power source:  battery", "power_aware=1 (automatic) power_aware_policy=powersaving", "boost:         unsupported", "workloads:     none"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("status lacks %q:\n%s", want, r.stdout)
		}
	}
	// --json before or after the command.
	for _, args := range [][]string{{"status", "--json"}, {"--json", "status"}} {
		r := d.inProcess(args...)
		var s status
		if err := json.Unmarshal([]byte(r.stdout), &s); err != nil || r.code != 0 {
			t.Fatalf("%v: %v %v", args, err, r)
		}
		if s.ActivePolicy != "powersaving" || s.PowerSource != "battery" || s.PowerAware != 1 || s.PowerAwarePolicy != "powersaving" {
			t.Errorf("%v: %+v", args, s)
		}
	}
}

// TestCtlStatusContract checks the properties the D-Bus contract adds
// (daemon/bus/org.schedpolicyd.SchedPolicy1.xml) as the client sees them.
func TestCtlStatusContract(t *testing.T) {
	d := startDaemon(t, "none")
	s := d.statusJSON(t)
	if strings.Join(s.AvailablePolicies, " ") != "performance balance powersaving" {
		t.Errorf("available_policies = %v", s.AvailablePolicies)
	}
	if !s.OnBattery || s.Reason == "" || s.LastChangeUsec == 0 {
		t.Errorf("on_battery=%v reason=%q last_change_usec=%d; want true, a reason, a time", s.OnBattery, s.Reason, s.LastChangeUsec)
	}
	if got := d.inProcess("workloads"); got.code != 0 || got.stdout != "no managed workloads\n" {
		t.Errorf("workloads: %v", got)
	}
}

func TestCtlSetAndAuto(t *testing.T) {
	d := startDaemon(t, "none")
	if r := d.inProcess("set", "performance"); r.code != 0 {
		t.Fatalf("set performance: %v", r)
	}
	testutil.WaitFor(t, "performance in the tree", 5*time.Second, func() (bool, string) {
		v := testutil.ReadTrim(t, d.tree+"/current_sched_policy")
		return v == "performance", v
	})
	if s := d.statusJSON(t); s.ActivePolicy != "performance" || s.PowerAware != 0 {
		t.Errorf("after set performance: %+v", s)
	}
	// Bad values: exit 4, nothing changes.
	for _, args := range [][]string{{"set", "bogus"}, {"set", "Performance"}, {"auto", "3"}, {"auto", "--", "-1"}, {"auto", "one"}} {
		r := d.inProcess(args...)
		if r.code != exitInvalid || !strings.Contains(r.stderr, "invalid") {
			t.Errorf("%v: %v, want exit 4", args, r)
		}
	}
	if v := testutil.ReadTrim(t, d.tree+"/power_aware"); v != "0" {
		t.Errorf("power_aware = %s after rejected values, want 0", v)
	}
	// Usage errors: exit 2.
	for _, args := range [][]string{{"set"}, {"set", "balance", "extra"}, {"auto"}, {"status", "extra"}, {"frobnicate"}, {"status", "--nope"}} {
		if r := d.inProcess(args...); r.code != exitUsage {
			t.Errorf("%v: %v, want exit 2", args, r)
		}
	}
	if r := d.inProcess("auto", "1"); r.code != 0 {
		t.Fatalf("auto 1: %v", r)
	}
	testutil.WaitFor(t, "automatic → powersaving on battery", 5*time.Second, func() (bool, string) {
		v := testutil.ReadTrim(t, d.tree+"/current_sched_policy") + " " + testutil.ReadTrim(t, d.tree+"/power_aware")
		return v == "powersaving 1", v
	})
	if r := d.inProcess("set", "balance"); r.code != 0 {
		t.Fatalf("set balance: %v", r)
	}
	if s := d.statusJSON(t); s.ActivePolicy != "balance" || s.PowerAware != 2 || s.PowerAwarePolicy != "balance" {
		t.Errorf("after set balance: %+v", s)
	}
}

func TestCtlNotRunning(t *testing.T) {
	_, ctl := binaries(t)
	addr := testutil.StartBus(t, testutil.BusOptions{AnyUser: true}).Addr
	for _, args := range [][]string{{"status"}, {"set", "balance"}, {"workloads", "--json"}} {
		r := runCtl(t, exec.Command(ctl, append([]string{"--bus", addr}, args...)...))
		if r.code != exitFailure || !strings.Contains(r.stderr, "schedpolicyd is not running") {
			t.Errorf("%v without a daemon: %v", args, r)
		}
	}
	// No bus at all.
	r := runCtl(t, exec.Command(ctl, "--bus", "unix:path="+filepath.Join(t.TempDir(), "none"), "status"))
	if r.code != exitFailure || !strings.Contains(r.stderr, "cannot connect to the bus at unix:path=") {
		t.Errorf("without a bus: %v", r)
	}
}

// TestCtlAccessDenied runs schedpolicyctl as nobody: reading works, setting
// is refused with exit 3 (no polkit on the private bus, so only root may
// set), and nothing changes.
func TestCtlAccessDenied(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to run the client as another user")
	}
	setpriv, err := exec.LookPath("setpriv")
	if err != nil {
		t.Skip("needs setpriv (Debian package util-linux)")
	}
	d := startDaemon(t, "none")
	asNobody := func(args ...string) result {
		cmd := exec.Command(setpriv, append([]string{"--reuid=65534", "--regid=65534", "--clear-groups", d.ctl, "--bus", d.addr}, args...)...)
		return runCtl(t, cmd)
	}
	if r := asNobody("status", "--json"); r.code != 0 {
		t.Fatalf("status as nobody: %v", r)
	}
	for _, args := range [][]string{{"set", "performance"}, {"auto", "0"}} {
		r := asNobody(args...)
		if r.code != exitAccessDenied || !strings.Contains(r.stderr, "access denied") || !strings.Contains(r.stderr, "org.schedpolicyd.set-policy") {
			t.Errorf("%v as nobody: %v, want exit 3 naming the polkit action", args, r)
		}
	}
	if v := testutil.ReadTrim(t, d.tree+"/power_aware"); v != "1" {
		t.Errorf("power_aware = %s after refused calls, want 1", v)
	}
}

// watcher runs `schedpolicyctl watch` and collects its lines.
type watcher struct {
	cmd   *exec.Cmd
	lines chan string
	done  chan error
}

func (d *testDaemon) watch(t *testing.T, args ...string) *watcher {
	t.Helper()
	cmd := exec.Command(d.ctl, append([]string{"--bus", d.addr, "watch"}, args...)...)
	out, _ := cmd.StdoutPipe()
	var errb testutil.LockedBuffer
	cmd.Stderr = &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w := &watcher{cmd: cmd, lines: make(chan string, 100), done: make(chan error, 1)}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			w.lines <- sc.Text()
		}
		close(w.lines)
		w.done <- cmd.Wait()
	}()
	t.Cleanup(func() {
		cmd.Process.Kill()
		if t.Failed() {
			t.Logf("watch stderr: %s", errb.String())
		}
	})
	return w
}

// expect waits for a line containing all of want.
func (w *watcher) expect(t *testing.T, want ...string) string {
	t.Helper()
	timeout := time.After(10 * time.Second)
	var seen []string
	for {
		select {
		case l, ok := <-w.lines:
			if !ok {
				t.Fatalf("watch ended before a line with %q; saw %q", want, seen)
			}
			seen = append(seen, l)
			all := true
			for _, s := range want {
				all = all && strings.Contains(l, s)
			}
			if all {
				return l
			}
		case <-timeout:
			t.Fatalf("no watch line with %q; saw %q", want, seen)
		}
	}
}

func TestCtlWatch(t *testing.T) {
	d := startDaemon(t, "none")
	w := d.watch(t)
	w.expect(t, "state ", "ActivePolicy=powersaving", "PowerSource=battery")
	if r := d.inProcess("set", "performance"); r.code != 0 {
		t.Fatal(r)
	}
	w.expect(t, "changed ", "ActivePolicy=performance")
	// Plug in: a power-source change is one line too.
	os.WriteFile(filepath.Join(d.sys, "class/power_supply/ADP1/online"), []byte("1\n"), 0o644)
	w.expect(t, "changed ", "PowerSource=ac")
	// SIGINT ends it with exit 0.
	w.cmd.Process.Signal(os.Interrupt)
	select {
	case err := <-w.done:
		if err != nil {
			t.Errorf("watch after SIGINT: %v, want exit 0", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("watch did not exit on SIGINT")
	}
}

// TestCtlWatchForgedSignals, on a bus with the system bus's policy and
// the package's: uid 65534 sends the watch client the daemon's
// PropertiesChanged and PolicyChanged and the bus's NameOwnerChanged
// saying the daemon left (unicast); watch prints none of them, and the
// next line is about the daemon's own change to performance that followed
// them.
func TestCtlWatchForgedSignals(t *testing.T) {
	bus := testutil.StartSystemPolicyBus(t, "../../packaging/dbus/org.schedpolicyd.SchedPolicy1.conf")
	d := startDaemonOn(t, "none", bus.Addr)
	w := d.watch(t)
	w.expect(t, "state ", "ActivePolicy=powersaving")
	attacker := testutil.DialAs(t, bus.Addr, 65534)
	var daemon string
	if err := attacker.BusObject().Call("org.freedesktop.DBus.GetNameOwner", 0, busName).Store(&daemon); err != nil {
		t.Fatal(err)
	}
	for _, dest := range testutil.Peers(t, attacker, daemon) {
		testutil.SendSignal(t, attacker, dest, objectPath, "org.freedesktop.DBus.Properties.PropertiesChanged",
			iface, map[string]dbus.Variant{"ActivePolicy": dbus.MakeVariant("forged")}, []string{})
		testutil.SendSignal(t, attacker, dest, objectPath, iface+".PolicyChanged", "forged", "forged")
		testutil.SendSignal(t, attacker, dest, "/org/freedesktop/DBus", "org.freedesktop.DBus.NameOwnerChanged", busName, daemon, "")
	}
	if r := d.inProcess("set", "performance"); r.code != 0 {
		t.Fatal(r)
	}
	select {
	case l := <-w.lines:
		if strings.Contains(l, "forged") || strings.Contains(l, "daemon-stopped") || !strings.Contains(l, "performance") {
			t.Fatalf("watch printed %q after forged signals, want the daemon's change to performance", l)
		}
	case <-time.After(time.Minute):
		t.Fatal("no line after the daemon's change")
	}
}

// TestCtlWatchContract: PolicyChanged and JSON lines (D-Bus contract).
func TestCtlWatchContract(t *testing.T) {
	d := startDaemon(t, "none")
	w := d.watch(t, "--json")
	first := w.expect(t, `"event":"state"`)
	var ev watchEvent
	if err := json.Unmarshal([]byte(first), &ev); err != nil || ev.Changed["ActivePolicy"] != "powersaving" {
		t.Fatalf("first line %q: %v", first, err)
	}
	if r := d.inProcess("set", "performance"); r.code != 0 {
		t.Fatal(r)
	}
	l := w.expect(t, `"event":"policy-changed"`, `"policy":"performance"`)
	if err := json.Unmarshal([]byte(l), &ev); err != nil || ev.Reason == "" {
		t.Errorf("PolicyChanged line %q (%v): want a reason", l, err)
	}
}

// TestCtlLaunch holds powersaving on AC for a command's lifetime: inside,
// the policy is powersaving with one hold; after, the hold is gone and the
// policy is performance again; the command's exit status comes through.
func TestCtlLaunch(t *testing.T) {
	d := startDaemon(t, "none")
	os.WriteFile(filepath.Join(d.sys, "class/power_supply/ADP1/online"), []byte("1\n"), 0o644)
	testutil.WaitFor(t, "performance on AC", 5*time.Second, func() (bool, string) {
		v := testutil.ReadTrim(t, d.tree+"/current_sched_policy")
		return v == "performance", v
	})
	inside := filepath.Join(t.TempDir(), "inside.json")
	text, ppid := inside+".txt", inside+".ppid"
	// $PPID: launch, the holder.
	script := fmt.Sprintf("echo $PPID > %s; %s --bus '%s' status --json > %s; %s --bus '%s' status > %s; exit 7", ppid, d.ctl, d.addr, inside, d.ctl, d.addr, text)
	r := d.run(t, "launch", "--policy", "powersaving", "--reason", "test build", "--", "sh", "-c", script)
	if r.code != 7 {
		t.Fatalf("launch: %v, want the command's exit 7", r)
	}
	var s status
	b, _ := os.ReadFile(inside)
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatalf("status inside launch: %v: %s", err, b)
	}
	if s.ActivePolicy != "powersaving" || len(s.Holds) != 1 || s.Holds[0].Policy != "powersaving" || s.Holds[0].Reason != "test build" {
		t.Fatalf("inside launch: policy %s holds %+v; want powersaving with one hold", s.ActivePolicy, s.Holds)
	}
	// The holder named by its process, as the bus daemon and /proc say.
	holder := strings.TrimSpace(testutil.Read(t, ppid))
	if h := s.Holds[0]; fmt.Sprint(h.PID) != holder || h.Command != "schedpolicyctl" {
		t.Errorf("the hold's holder: PID %d command %q, want launch's PID %s, schedpolicyctl", h.PID, h.Command, holder)
	}
	if want := fmt.Sprintf("  #%d powersaving by PID %s (schedpolicyctl, %s): test build\n", s.Holds[0].Cookie, holder, s.Holds[0].Holder); !strings.Contains(testutil.Read(t, text), want) {
		t.Errorf("status inside launch lacks %q:\n%s", want, testutil.Read(t, text))
	}
	after := d.statusJSON(t)
	if after.ActivePolicy != "performance" || len(after.Holds) != 0 {
		t.Errorf("after launch: policy %s holds %+v", after.ActivePolicy, after.Holds)
	}

	// A signal to schedpolicyctl reaches the command; the hold goes too.
	cmd := exec.Command(d.ctl, "--bus", d.addr, "launch", "--policy", "balance", "--", "sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, "the hold", 5*time.Second, func() (bool, string) {
		s := d.statusJSON(t)
		return len(s.Holds) == 1, fmt.Sprint(s.Holds)
	})
	cmd.Process.Signal(syscall.SIGTERM)
	err := cmd.Wait()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 128+int(syscall.SIGTERM) {
		t.Errorf("launch after SIGTERM: %v, want exit %d (the command killed by SIGTERM)", err, 128+int(syscall.SIGTERM))
	}
	if s := d.statusJSON(t); len(s.Holds) != 0 || s.ActivePolicy != "performance" {
		t.Errorf("after SIGTERM: holds %+v policy %s", s.Holds, s.ActivePolicy)
	}
	// Usage and lookup failures.
	if r := d.run(t, "launch", "--", "true"); r.code != exitUsage {
		t.Errorf("launch without --policy: %v", r)
	}
	if r := d.run(t, "launch", "--policy", "turbo", "--", "true"); r.code != exitInvalid {
		t.Errorf("launch --policy turbo: %v", r)
	}
	if r := d.run(t, "launch", "--policy", "balance", "--", "/nonexistent/cmd"); r.code != exitNotFound {
		t.Errorf("launch of a missing command: %v, want 127", r)
	}
}

// TestCtlRun creates a workload in a real cgroup v1 cpuset parent owned by
// the test and checks the command really runs inside it.
func TestCtlRun(t *testing.T) {
	cg := testutil.CpusetV1Dir(t, "schedpolicyctl-test")
	d := startDaemon(t, cg)
	r := d.run(t, "run", "--name", "build", "--", "cat", "/proc/self/cgroup")
	if r.code != 0 {
		t.Fatalf("run: %v", r)
	}
	want := "cpuset:/" + filepath.Base(cg) + "/build\n"
	if !strings.Contains(r.stdout, want) {
		t.Errorf("the command ran in\n%s\nwant a line ending in %q", r.stdout, want)
	}
	// The command has exited: the daemon made that cgroup, so it removes it.
	testutil.WaitFor(t, "the finished workload removed", 10*time.Second, func() (bool, string) {
		_, err := os.Stat(filepath.Join(cg, "build"))
		r := d.inProcess("workloads", "--json")
		return os.IsNotExist(err) && strings.TrimSpace(r.stdout) == "[]", r.stdout
	})
	// While a run is going on it is listed, and its name is taken: exit 5,
	// the second command does not run.
	long := exec.Command(d.ctl, "--bus", d.addr, "run", "--name", "build", "--", "sleep", "30")
	if err := long.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { long.Process.Kill(); long.Wait() })
	testutil.WaitFor(t, "the running workload listed", 5*time.Second, func() (bool, string) {
		r := d.inProcess("workloads", "--json")
		var ws []workload
		json.Unmarshal([]byte(r.stdout), &ws)
		return len(ws) == 1 && ws[0].Name == "build" && ws[0].Path == filepath.Join(cg, "build"), r.stdout
	})
	marker := filepath.Join(t.TempDir(), "ran")
	// Said in words, not mkdir's raw "file exists".
	wantErr := fmt.Sprintf("schedpolicyctl: run --name build: workload %q already exists (%s); choose another name\n", "build", filepath.Join(cg, "build"))
	if r := d.run(t, "run", "--name", "build", "--", "touch", marker); r.code != exitExists || r.stderr != wantErr {
		t.Errorf("run with an existing name: %v, want exit 5 and %q", r, wantErr)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Error("the command ran although the workload could not be created")
	}
	long.Process.Kill()
	long.Wait()
	// Bad names are refused before the bus.
	for _, n := range []string{"../escape", "a/b", "..", ".", "", "tab\there", strings.Repeat("x", 65)} {
		if r := d.run(t, "run", "--name", n, "--", "true"); r.code != exitInvalid {
			t.Errorf("run --name %q: %v, want exit 4", n, r)
		}
	}
	// The default name is derived from the command and the pid; the exit
	// status is the command's.
	r = d.run(t, "run", "--", "sh", "-c", "cat /proc/self/cgroup; exit 3")
	if r.code != 3 || !regexpMatch(`cpuset:/`+filepath.Base(cg)+`/sh-[0-9]+\n`, r.stdout) {
		t.Errorf("run with the default name: %v", r)
	}
	if r := d.run(t, "run", "--", "/nonexistent/cmd"); r.code != exitNotFound {
		t.Errorf("run of a missing command: %v, want 127", r)
	}
}

func regexpMatch(re, s string) bool {
	return regexp.MustCompile(re).MatchString(s)
}

// TestCtlHelpBinary: every command's --help works in the built binary and
// exits 0 without a bus.
func TestCtlHelpBinary(t *testing.T) {
	_, ctl := binaries(t)
	for name := range commands() {
		r := runCtl(t, exec.Command(ctl, name, "--help"))
		if r.code != 0 || !strings.HasPrefix(r.stdout, "Usage: schedpolicyctl "+name) {
			t.Errorf("%s --help: %v", name, r)
		}
	}
	r := runCtl(t, exec.Command(ctl, "--help"))
	if r.code != 0 || !strings.Contains(r.stdout, "Exit status:") {
		t.Errorf("--help: %v", r)
	}
	r = runCtl(t, exec.Command(ctl))
	if r.code != exitUsage {
		t.Errorf("no command: %v", r)
	}
}

// mockCgroupV2 builds a directory tree shaped like a cgroup v2 hierarchy
// (as the daemon's own tests do) whose managed parent holds one workload,
// "build"; it returns the managed parent and build's cpu.stat, whose
// usage_usec the test raises to make the workload look busy.
func mockCgroupV2(t *testing.T) (managed, cpuStat string) {
	t.Helper()
	root := filepath.Join(t.TempDir(), "cgroup")
	managed = filepath.Join(root, "schedpolicyd")
	testutil.Put(t, root+"/cgroup.controllers", "cpuset cpu io memory")
	testutil.Put(t, root+"/cgroup.subtree_control", "cpuset cpu")
	testutil.Put(t, managed+"/cgroup.controllers", "cpuset cpu")
	testutil.Put(t, managed+"/cgroup.subtree_control", "cpuset")
	testutil.Put(t, managed+"/cpuset.cpus.effective", "0-7")
	testutil.Put(t, managed+"/build/cpuset.cpus", "")
	testutil.Put(t, managed+"/build/cpuset.cpus.effective", "0-7")
	cpuStat = managed + "/build/cpu.stat"
	testutil.Put(t, cpuStat, "usage_usec 0\nuser_usec 0\nsystem_usec 0")
	return managed, cpuStat
}

// TestCtlWatchPrintsVisibleChanges: watch must not print the same line
// again and again while only the workloads' utilisation changes, which
// its line does not show. Here a workload's CPU time grows while the
// policy is performance (its CPUs stay 0-7): the daemon announces the
// Workloads property again and again (counted on the bus), and watch must
// print no line that repeats the one before it, up to the next change one
// can see (a policy switch).
func TestCtlWatchPrintsVisibleChanges(t *testing.T) {
	managed, cpuStat := mockCgroupV2(t)
	d := startDaemon(t, managed)
	if r := d.inProcess("set", "performance"); r.code != 0 {
		t.Fatal(r)
	}
	mon, err := dbus.Connect(d.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer mon.Close()
	if err := mon.AddMatchSignal(dbus.WithMatchObjectPath(objectPath), dbus.WithMatchMember("PropertiesChanged")); err != nil {
		t.Fatal(err)
	}
	sigs := make(chan *dbus.Signal, 256)
	mon.Signal(sigs)
	w := d.watch(t)
	w.expect(t, "state ", "ActivePolicy=performance")

	// Busy: a growing usage_usec, so the decayed utilisation changes at
	// every sample; the CPUs do not (performance: every CPU).
	usage := 0
	utilOnly, last := 0, ""
	testutil.Eventually(t, "five announcements of the workloads where only the utilisation changed", func() (bool, string) {
		usage += 50000
		os.WriteFile(cpuStat, []byte(fmt.Sprintf("usage_usec %d\nuser_usec %d\nsystem_usec 0\n", usage, usage)), 0o644)
		for {
			select {
			case s := <-sigs:
				if len(s.Body) < 2 {
					continue
				}
				changed, _ := s.Body[1].(map[string]dbus.Variant)
				v, ok := changed["Workloads"]
				if !ok {
					continue
				}
				if shown := formatValue("Workloads", v); shown == last {
					utilOnly++
				} else {
					last = shown
				}
				continue
			default:
			}
			break
		}
		return utilOnly >= 5, fmt.Sprintf("%d so far, workloads %s", utilOnly, last)
	})

	if r := d.inProcess("set", "powersaving"); r.code != 0 {
		t.Fatal(r)
	}
	var lines []string
	for done := false; !done; {
		select {
		case l, ok := <-w.lines:
			if !ok {
				t.Fatalf("watch ended; saw %q", lines)
			}
			done = strings.Contains(l, "ActivePolicy=powersaving")
			lines = append(lines, l)
		case <-time.After(20 * time.Second):
			t.Fatalf("no line with ActivePolicy=powersaving; saw %q", lines)
		}
	}
	prev := ""
	for _, l := range lines {
		_, text, _ := strings.Cut(l, " ") // after the time stamp
		if text == prev {
			t.Errorf("watch printed %q twice in a row; all lines:\n%s", text, strings.Join(lines, "\n"))
		}
		prev = text
	}
	t.Logf("%d announcements with only the utilisation changed; watch printed:\n%s", utilOnly, strings.Join(lines, "\n"))
}

// TestCtlNonUTF8WorkloadName: one workload whose cgroup's name is not
// UTF-8 ("caf\xe9", Latin-1; an administrator's mkdir is enough) once
// made the daemon's GetAll fail, so status and workloads failed for
// everyone (issue 32, item 5). The daemon publishes it escaped, `caf\xe9`
// (seven ASCII characters), with its directory escaped the same way, and
// both commands show it, in words and in JSON. In a mock cgroup v2 tree,
// and in a real cgroup v1 cpuset of the test's own where the machine has
// one.
func TestCtlNonUTF8WorkloadName(t *testing.T) {
	const name, published = "caf\xe9", `caf\xe9`
	for _, where := range []string{"mock-v2", "real-v1"} {
		t.Run(where, func(t *testing.T) {
			var managed string
			if where == "mock-v2" {
				managed, _ = mockCgroupV2(t)
				testutil.Put(t, filepath.Join(managed, name, "cpuset.cpus"), "")
				testutil.Put(t, filepath.Join(managed, name, "cpuset.cpus.effective"), "0-7")
				testutil.Put(t, filepath.Join(managed, name, "cpu.stat"), "usage_usec 0\nuser_usec 0\nsystem_usec 0")
			} else {
				managed = testutil.CpusetV1Parent(t, "schedpolicyctl-test")
				if err := os.Mkdir(filepath.Join(managed, name), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			d := startDaemon(t, managed)
			testutil.WaitFor(t, published+" listed by workloads --json", 10*time.Second, func() (bool, string) {
				r := d.inProcess("workloads", "--json")
				var ws []workload
				if r.code != 0 || json.Unmarshal([]byte(r.stdout), &ws) != nil {
					return false, r.String()
				}
				for _, w := range ws {
					if w.Name == published && w.Path == filepath.Join(managed, published) {
						return true, ""
					}
				}
				return false, r.stdout
			})
			// The real binary, as a user runs it.
			for _, args := range [][]string{{"status"}, {"workloads"}} {
				r := d.run(t, args...)
				if r.code != 0 || !strings.Contains(r.stdout, published+" ") || !utf8.ValidString(r.stdout) {
					t.Errorf("%v: %v, want %s listed", args, r, published)
				}
			}
			if s := d.statusJSON(t); len(s.Workloads) == 0 || s.Reason == "" {
				t.Errorf("status --json: %+v", s)
			}
		})
	}
}

// TestCtlReset: a set is an explicit choice that status names, with the
// time it took effect; reset forgets it and the knob the daemon started
// with (the configuration's or the built-in one) is back.
func TestCtlReset(t *testing.T) {
	d := startDaemon(t, "none")
	start := d.statusJSON(t)
	if start.KnobFrom != "config" && start.KnobFrom != "default" {
		t.Fatalf("at start: knob from %q", start.KnobFrom)
	}
	before := time.Now()
	if r := d.run(t, "set", "powersaving"); r.code != exitOK {
		t.Fatalf("set: %v", r)
	}
	s := d.statusJSON(t)
	at := time.UnixMicro(int64(s.KnobChosenAtUsec))
	if s.KnobFrom != "choice" || s.PowerAware != 2 || at.Before(before.Truncate(time.Microsecond)) || at.After(time.Now()) {
		t.Errorf("after set: knob %d from %q chosen at %v (set at %v)", s.PowerAware, s.KnobFrom, at, before)
	}
	r := d.run(t, "status")
	if want := "  from:        an explicit choice, in force since " + at.Local().Format("2006-01-02 15:04:05"); r.code != exitOK || !strings.Contains(r.stdout, want) || !strings.Contains(r.stdout, "until 'schedpolicyctl reset'") {
		t.Errorf("status after set lacks %q:\n%s", want, r.stdout)
	}
	if r := d.run(t, "reset"); r.code != exitOK {
		t.Fatalf("reset: %v", r)
	}
	s = d.statusJSON(t)
	if s.KnobFrom != start.KnobFrom || s.PowerAware != start.PowerAware || s.PowerAwarePolicy != start.PowerAwarePolicy || s.KnobChosenAtUsec != 0 {
		t.Errorf("after reset: %+v, want the knob of the start %+v", s, start)
	}
	if r := d.run(t, "reset", "now"); r.code != exitUsage {
		t.Errorf("reset now: %v, want a usage error", r)
	}
}
