package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/godbus/dbus/v5"

	"github.com/schedpolicyd/schedpolicyd/daemon"
)

// TestMain doubles as the light workload: with SCHEDPOLICYD_TEST_SPIN=1 the
// test binary spins 1 ms and sleeps 9 ms forever (about 10 % of one CPU).
func TestMain(m *testing.M) {
	if os.Getenv("SCHEDPOLICYD_TEST_SPIN") == "1" {
		for {
			end := time.Now().Add(time.Millisecond)
			for time.Now().Before(end) {
			}
			time.Sleep(9 * time.Millisecond)
		}
	}
	os.Exit(m.Run())
}

const cpusetRoot = "/sys/fs/cgroup/cpuset"

// requireMachine skips unless this machine can run the end-to-end test,
// saying exactly what is missing.
func requireMachine(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: mounts FUSE and writes cgroup cpusets")
	}
	if _, err := os.Stat(cpusetRoot + "/cpuset.cpus"); err != nil {
		t.Skipf("needs the cgroup v1 cpuset controller at %s: %v", cpusetRoot, err)
	}
	f, err := os.OpenFile("/dev/fuse", os.O_RDWR, 0)
	if err != nil {
		t.Skipf("needs /dev/fuse to mount the tree: %v", err)
	}
	f.Close()
	if _, err := exec.LookPath("dbus-daemon"); err != nil {
		t.Skip("needs dbus-daemon (Debian package dbus) for a private bus")
	}
}

// buildDaemon compiles the real binary once per test.
func buildDaemon(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "schedpolicyd")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// startBus starts a private dbus-daemon in a temporary directory and
// returns its address.
func startBus(t *testing.T) string {
	t.Helper()
	addr, _ := startBusAt(t, t.TempDir())
	return addr
}

// copyTree copies regular files (and directories) from src to dst, skipping
// what cannot be read; used for a fixture and for this machine's own CPU
// topology files.
func copyTree(t *testing.T, src, dst string) {
	t.Helper()
	err := filepath.Walk(src, func(p string, info os.FileInfo, err error) error {
		if err != nil {
			return nil
		}
		rel, _ := filepath.Rel(src, p)
		target := filepath.Join(dst, rel)
		if info.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		if !info.Mode().IsRegular() {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return nil
		}
		return os.WriteFile(target, b, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// mockMachine builds a sysfs root: a laptop's power_supply from the shared
// corpus plus a copy of this machine's CPU topology, so cpusets name real
// CPUs.
func mockMachine(t *testing.T, psCase string) string {
	t.Helper()
	root := filepath.Join(t.TempDir(), "sys")
	src := filepath.Join("..", "..", "..", "shared", "testdata", "power_supply", psCase, "sys")
	if _, err := os.Stat(src); err != nil {
		t.Skipf("needs the shared test corpus beside the checkout: %v", err)
	}
	copyTree(t, src, root)
	cpuDir := "/sys/devices/system/cpu"
	for _, f := range []string{"online", "possible", "present", "offline"} {
		b, err := os.ReadFile(filepath.Join(cpuDir, f))
		if err == nil {
			os.MkdirAll(filepath.Join(root, "devices/system/cpu"), 0o755)
			os.WriteFile(filepath.Join(root, "devices/system/cpu", f), b, 0o644)
		}
	}
	entries, _ := filepath.Glob(filepath.Join(cpuDir, "cpu[0-9]*"))
	for _, e := range entries {
		for _, sub := range []string{"topology", "cache"} {
			if _, err := os.Stat(filepath.Join(e, sub)); err == nil {
				copyTree(t, filepath.Join(e, sub), filepath.Join(root, "devices/system/cpu", filepath.Base(e), sub))
			}
		}
	}
	nodes, _ := filepath.Glob("/sys/devices/system/node/node[0-9]*")
	for _, n := range nodes {
		b, err := os.ReadFile(filepath.Join(n, "cpulist"))
		if err == nil {
			os.MkdirAll(filepath.Join(root, "devices/system/node", filepath.Base(n)), 0o755)
			os.WriteFile(filepath.Join(root, "devices/system/node", filepath.Base(n), "cpulist"), b, 0o644)
		}
	}
	return root
}

func readTrim(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatalf("read %s: %v", p, err)
	}
	return strings.TrimSpace(string(b))
}

func write(t *testing.T, p, v string) {
	t.Helper()
	if err := os.WriteFile(p, []byte(v+"\n"), 0o644); err != nil {
		t.Fatalf("write %q to %s: %v", v, p, err)
	}
}

// waitFor polls cond every 50 ms until it holds or the bound passes; the
// bound only keeps a failing test from hanging, it is not a speed claim.
func waitFor(t *testing.T, what string, bound time.Duration, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(bound)
	var last string
	for time.Now().Before(deadline) {
		ok, s := cond()
		if ok {
			return
		}
		last = s
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("timed out waiting for %s; last seen: %s", what, last)
}

// lastCPU is field 39 of /proc/PID/stat: the CPU the task last ran on.
func lastCPU(pid int) (int, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return -1, err
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')') // comm may hold spaces
	f := strings.Fields(s[i+2:])       // f[0] is field 3
	return strconv.Atoi(f[39-3])
}

// lockedBuffer collects a child's output; exec's copying goroutine writes
// while the test reads.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

type notifySocket struct {
	conn *net.UnixConn
	msgs chan string
}

func listenNotify(t *testing.T) (*notifySocket, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "notify.sock")
	c, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	n := &notifySocket{conn: c, msgs: make(chan string, 100)}
	go func() {
		buf := make([]byte, 4096)
		for {
			k, err := c.Read(buf)
			if err != nil {
				close(n.msgs)
				return
			}
			n.msgs <- string(buf[:k])
		}
	}()
	t.Cleanup(func() { c.Close() })
	return n, path
}

func (n *notifySocket) expect(t *testing.T, prefix string) string {
	t.Helper()
	timeout := time.After(20 * time.Second)
	for {
		select {
		case m, ok := <-n.msgs:
			if !ok {
				t.Fatalf("notify socket closed before %q", prefix)
			}
			if strings.Contains(m, prefix) {
				return m
			}
		case <-timeout:
			t.Fatalf("no sd_notify message containing %q", prefix)
		}
	}
}

// TestEndToEnd runs the real binary against a mock laptop with this
// machine's CPUs, a real cgroup v1 cpuset parent, a real FUSE tree and a
// private dbus-daemon (issue 2's acceptance test).
func TestEndToEnd(t *testing.T) {
	requireMachine(t)
	bin := buildDaemon(t)
	addr := startBus(t)
	sys := mockMachine(t, "ac-offline-battery-unknown")
	ps := filepath.Join(sys, "class/power_supply")
	online := readTrim(t, "/sys/devices/system/cpu/online")
	allCPUs := readTrim(t, cpusetRoot+"/cpuset.effective_cpus")
	if allCPUs != online {
		t.Skipf("the root cpuset (%s) differs from the online CPUs (%s)", allCPUs, online)
	}

	tmp := t.TempDir()
	treeDir := filepath.Join(tmp, "tree")
	stateDir := filepath.Join(tmp, "state")
	cg := filepath.Join(cpusetRoot, fmt.Sprintf("schedpolicyd-test-%d", rand.Uint32()))
	var procs []*exec.Cmd
	t.Cleanup(func() {
		for _, p := range procs {
			p.Process.Kill()
			p.Wait()
		}
		children, _ := filepath.Glob(cg + "/w*")
		for _, c := range children {
			syscall.Rmdir(c)
		}
		syscall.Rmdir(cg)
	})

	// w1 exists before the daemon starts, restricted to the last CPU: its
	// original cpuset must come back on SIGTERM.
	lastCPUStr := online[strings.LastIndexAny(online, ",-")+1:]
	if err := os.MkdirAll(cg+"/w1", 0o755); err != nil {
		t.Fatal(err)
	}
	write(t, cg+"/cpuset.cpus", allCPUs)
	write(t, cg+"/cpuset.mems", readTrim(t, cpusetRoot+"/cpuset.mems"))
	write(t, cg+"/w1/cpuset.cpus", lastCPUStr)
	write(t, cg+"/w1/cpuset.mems", readTrim(t, cpusetRoot+"/cpuset.mems"))

	d := startDaemonProc(t, bin, "--sysfs-root", sys, "--cgroup-root", cg, "--tree-dir", treeDir,
		"--tree-backend", "fuse", "--state-dir", stateDir, "--bus", addr, "--events", "fsnotify",
		"--debounce", "100ms", "--sample-interval", "250ms", "--log-level", "debug")
	if !strings.Contains(d.ready, "STATUS=policy performance") {
		t.Errorf("READY message %q lacks the STATUS with the policy", d.ready)
	}

	knobDir := filepath.Join(treeDir, daemon.TreePrefix)
	if got := readTrim(t, knobDir+"/power_source"); got != "unknown" {
		t.Fatalf("power_source = %q, want unknown (AC offline, battery Unknown)", got)
	}

	// D-Bus client on the private bus.
	conn, err := dbus.Connect(addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	obj := conn.Object(daemon.BusName, daemon.ObjectPath)
	getProp := func(name string) string {
		v, err := obj.GetProperty(daemon.Interface + "." + name)
		if err != nil {
			return "error: " + err.Error()
		}
		return fmt.Sprint(v.Value())
	}
	if err := conn.AddMatchSignal(dbus.WithMatchInterface("org.freedesktop.DBus.Properties"), dbus.WithMatchMember("PropertiesChanged")); err != nil {
		t.Fatal(err)
	}
	signals := make(chan *dbus.Signal, 100)
	conn.Signal(signals)

	// Workloads: w2 is created while the daemon runs and must be adopted
	// (v1: cpuset.cpus and cpuset.mems filled so tasks can be attached).
	if err := os.Mkdir(cg+"/w2", 0o755); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "w2 adopted", 5*time.Second, func() (bool, string) {
		c, m := readTrim(t, cg+"/w2/cpuset.cpus"), readTrim(t, cg+"/w2/cpuset.mems")
		return c != "" && m != "", "cpus=" + c + " mems=" + m
	})
	pids := map[string]int{}
	for _, w := range []string{"w1", "w2"} {
		exe, _ := os.Executable()
		p := exec.Command(exe, "-test.run=^$")
		p.Env = append(os.Environ(), "SCHEDPOLICYD_TEST_SPIN=1")
		if err := p.Start(); err != nil {
			t.Fatal(err)
		}
		procs = append(procs, p)
		write(t, cg+"/"+w+"/cgroup.procs", strconv.Itoa(p.Process.Pid))
		pids[w] = p.Process.Pid
	}
	cpus := func() (string, string) {
		return readTrim(t, cg+"/w1/cpuset.cpus"), readTrim(t, cg+"/w2/cpuset.cpus")
	}
	waitFor(t, "performance: every workload on all CPUs", 5*time.Second, func() (bool, string) {
		a, b := cpus()
		return a == allCPUs && b == allCPUs, a + " / " + b
	})

	// (a) Unplug: AC offline, battery discharging → powersaving, packed.
	write(t, ps+"/AC/online", "0")
	write(t, ps+"/BAT0/status", "Discharging")
	waitFor(t, "powersaving everywhere", 10*time.Second, func() (bool, string) {
		a, b := cpus()
		tree := readTrim(t, knobDir+"/current_sched_policy")
		bus := getProp("ActivePolicy")
		src := readTrim(t, knobDir+"/power_source")
		ok := tree == "powersaving" && bus == "powersaving" && src == "battery" && a == b && !strings.ContainsAny(a, ",-") && a != ""
		return ok, fmt.Sprintf("tree=%s bus=%s source=%s w1=%s w2=%s", tree, bus, src, a, b)
	})
	if got := getProp("PowerSource"); got != "battery" {
		t.Errorf("D-Bus PowerSource = %q, want battery", got)
	}
	// The same through a real command-line client.
	if _, err := exec.LookPath("busctl"); err == nil {
		out, err := exec.Command("busctl", "--address="+addr, "get-property", daemon.BusName, string(daemon.ObjectPath),
			daemon.Interface, "ActivePolicy", "PowerAware", "PowerSource").CombinedOutput()
		if want := "s \"powersaving\"\nu 1\ns \"battery\"\n"; err != nil || string(out) != want {
			t.Errorf("busctl get-property: %v\n%q, want %q", err, out, want)
		}
	} else {
		t.Log("busctl not installed (Debian package systemd); checked with the godbus client only")
	}
	packed, _ := cpus()
	packedCPU, _ := strconv.Atoi(packed)
	// The processes really run only there: sample field 39 repeatedly.
	time.Sleep(200 * time.Millisecond)
	for i := 0; i < 40; i++ {
		for w, pid := range pids {
			c, err := lastCPU(pid)
			if err != nil {
				t.Fatalf("%s: %v", w, err)
			}
			if c != packedCPU {
				t.Fatalf("%s (pid %d) ran on CPU %d, want only CPU %d", w, pid, c, packedCPU)
			}
		}
		time.Sleep(25 * time.Millisecond)
	}
	sawSignal := false
	for len(signals) > 0 && !sawSignal {
		s := <-signals
		if len(s.Body) >= 2 {
			if ch, ok := s.Body[1].(map[string]dbus.Variant); ok {
				if v, ok := ch["ActivePolicy"]; ok && v.Value() == "powersaving" {
					sawSignal = true
				}
			}
		}
	}
	if !sawSignal {
		t.Errorf("no PropertiesChanged carrying ActivePolicy=powersaving")
	}

	// Plug back in: AC online → performance, all CPUs again.
	write(t, ps+"/AC/online", "1")
	waitFor(t, "performance again", 10*time.Second, func() (bool, string) {
		a, b := cpus()
		tree := readTrim(t, knobDir+"/current_sched_policy")
		bus := getProp("ActivePolicy")
		return tree == "performance" && bus == "performance" && a == allCPUs && b == allCPUs,
			fmt.Sprintf("tree=%s bus=%s w1=%s w2=%s", tree, bus, a, b)
	})

	// (b) echo bogus through the FUSE file: EINVAL in the shell, no change.
	stateBefore, _ := os.ReadFile(filepath.Join(stateDir, daemon.StateFile))
	out, err := exec.Command("bash", "-c", "echo bogus > "+knobDir+"/current_sched_policy").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "Invalid argument") {
		t.Fatalf("echo bogus: err=%v output=%q, want a failure with \"Invalid argument\"", err, out)
	}
	if got := readTrim(t, knobDir+"/current_sched_policy"); got != "performance" {
		t.Errorf("after bogus write current_sched_policy = %q", got)
	}
	if got := readTrim(t, knobDir+"/power_aware"); got != "1" {
		t.Errorf("after bogus write power_aware = %q, want 1", got)
	}
	if a, b := cpus(); a != allCPUs || b != allCPUs {
		t.Errorf("after bogus write cpusets = %s / %s", a, b)
	}
	stateAfter, _ := os.ReadFile(filepath.Join(stateDir, daemon.StateFile))
	if !bytes.Equal(stateBefore, stateAfter) {
		t.Errorf("state file changed after a rejected write: %q → %q", stateBefore, stateAfter)
	}
	// D-Bus SetPolicy with a bad value: InvalidArgs, no change.
	call := obj.Call(daemon.Interface+".SetPolicy", 0, "bogus")
	if derr, ok := call.Err.(dbus.Error); !ok || derr.Name != "org.freedesktop.DBus.Error.InvalidArgs" {
		t.Errorf("SetPolicy(bogus) err = %v, want InvalidArgs", call.Err)
	}

	// echo powersaving on AC: an explicit choice takes effect (power_aware 2)
	// and persists.
	if out, err := exec.Command("bash", "-c", "echo powersaving > "+knobDir+"/current_sched_policy").CombinedOutput(); err != nil {
		t.Fatalf("echo powersaving: %v %s", err, out)
	}
	waitFor(t, "explicit powersaving", 10*time.Second, func() (bool, string) {
		a, b := cpus()
		tree := readTrim(t, knobDir+"/current_sched_policy")
		return tree == "powersaving" && getProp("PowerAware") == "2" && a == b && !strings.ContainsAny(a, ",-"),
			fmt.Sprintf("tree=%s aware=%s w1=%s w2=%s", tree, getProp("PowerAware"), a, b)
	})
	var saved struct {
		PowerAware       int    `json:"power_aware"`
		PowerAwarePolicy string `json:"power_aware_policy"`
	}
	b, _ := os.ReadFile(filepath.Join(stateDir, daemon.StateFile))
	if err := json.Unmarshal(b, &saved); err != nil || saved.PowerAware != 2 || saved.PowerAwarePolicy != "powersaving" {
		t.Errorf("state.json = %s (%v), want power_aware 2, powersaving", b, err)
	}
	// D-Bus SetPolicy performance behaves like the write.
	if call := obj.Call(daemon.Interface+".SetPolicy", 0, "performance"); call.Err != nil {
		t.Fatalf("SetPolicy(performance): %v", call.Err)
	}
	waitFor(t, "SetPolicy performance", 10*time.Second, func() (bool, string) {
		a, b := cpus()
		return readTrim(t, knobDir+"/current_sched_policy") == "performance" && a == allCPUs && b == allCPUs, a + " / " + b
	})
	if out, err := exec.Command("bash", "-c", "echo powersaving > "+knobDir+"/current_sched_policy").CombinedOutput(); err != nil {
		t.Fatalf("echo powersaving: %v %s", err, out)
	}
	waitFor(t, "packed again before stop", 10*time.Second, func() (bool, string) {
		a, _ := cpus()
		return !strings.ContainsAny(a, ",-"), a
	})

	// (c) SIGTERM restores the original cpusets and unmounts the tree.
	d.stop(t)
	d.notify.expect(t, "STOPPING=1")
	a, b2 := cpus()
	if a != lastCPUStr {
		t.Errorf("w1 cpuset after SIGTERM = %q, want its original %q", a, lastCPUStr)
	}
	if b2 != allCPUs {
		t.Errorf("w2 cpuset after SIGTERM = %q, want %q (as adopted)", b2, allCPUs)
	}
	mi, _ := os.ReadFile("/proc/self/mountinfo")
	if strings.Contains(string(mi), " "+treeDir+" ") {
		t.Errorf("tree still mounted at %s after exit", treeDir)
	}

	// Restart: the explicit choice survived.
	out2, err := exec.Command(bin, "probe", "--sysfs-root", sys, "--state-dir", stateDir, "--json").Output()
	if err != nil {
		t.Fatal(err)
	}
	var pr map[string]any
	json.Unmarshal(out2, &pr)
	if pr["policy"] != "powersaving" || pr["power_aware"] != float64(2) {
		t.Errorf("probe after restart: %s", out2)
	}
}

// startBusAt starts dbus-daemon on a fixed socket path in dir, so a test
// can stop or kill it (through the returned process) and start another at
// the same address. It waits until the socket exists; the test's cleanup
// ends it.
func startBusAt(t *testing.T, dir string) (addr string, bus *exec.Cmd) {
	t.Helper()
	conf := filepath.Join(dir, "bus.conf")
	sock := filepath.Join(dir, "bus")
	os.WriteFile(conf, []byte(`<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>session</type>
  <listen>unix:path=`+sock+`</listen>
  <auth>EXTERNAL</auth>
  <policy context="default">
    <allow send_destination="*" eavesdrop="true"/>
    <allow eavesdrop="true"/>
    <allow own="*"/>
  </policy>
</busconfig>
`), 0o644)
	os.Remove(sock) // a killed bus leaves its socket behind
	bus = exec.Command("dbus-daemon", "--nofork", "--config-file="+conf)
	if err := bus.Start(); err != nil {
		t.Fatalf("dbus-daemon: %v", err)
	}
	t.Cleanup(func() { bus.Process.Kill(); bus.Wait() })
	waitFor(t, "bus socket", 5*time.Second, func() (bool, string) {
		_, err := os.Stat(sock)
		return err == nil, fmt.Sprint(err)
	})
	return "unix:path=" + sock, bus
}

// stopBus ends a bus from startBusAt with SIGTERM, letting it remove its
// socket.
func stopBus(bus *exec.Cmd) {
	bus.Process.Signal(syscall.SIGTERM)
	bus.Wait()
}

// TestDaemonBusRestartAndSignals: the real binary survives SIGHUP, rejects
// SetPolicy arguments of the wrong type with InvalidArgs (checked with
// dbus-send, a real client), and owns its name again after the bus daemon
// restarts.
func TestDaemonBusRestartAndSignals(t *testing.T) {
	if _, err := exec.LookPath("dbus-daemon"); err != nil {
		t.Skip("needs dbus-daemon (Debian package dbus)")
	}
	bin := buildDaemon(t)
	busDir := t.TempDir()
	addr, bus := startBusAt(t, busDir)
	sys := mockMachine(t, "ac-offline-battery-unknown")
	tmp := t.TempDir()
	conf := filepath.Join(tmp, "schedpolicyd.conf")
	os.WriteFile(conf, []byte("# test config\npower_profiles_api = false\n"), 0o644)
	d := startDaemonProc(t, bin, "--config", conf, "--sysfs-root", sys, "--cgroup-root", "none", "--tree-dir", filepath.Join(tmp, "tree"),
		"--tree-backend", "plain", "--state-dir", filepath.Join(tmp, "state"), "--bus", addr, "--log-level", "debug")
	owned := func() (bool, string) {
		conn, err := dbus.Connect(addr)
		if err != nil {
			return false, err.Error()
		}
		defer conn.Close()
		var has bool
		err = conn.BusObject().Call("org.freedesktop.DBus.NameHasOwner", 0, daemon.BusName).Store(&has)
		return err == nil && has, fmt.Sprint(err)
	}
	waitFor(t, "name owned", 10*time.Second, owned)

	// Wrong argument types: InvalidArgs, and nothing changes.
	for _, arg := range []string{"uint32:1", "int32:2", "objpath:/balance", "variant:string:powersaving"} {
		// --bus registers with Hello; --address (alias of --peer) does not.
		out, err := exec.Command("dbus-send", "--bus="+addr, "--print-reply", "--dest="+daemon.BusName,
			string(daemon.ObjectPath), daemon.Interface+".SetPolicy", arg).CombinedOutput()
		if err == nil || !strings.Contains(string(out), "org.freedesktop.DBus.Error.InvalidArgs") {
			t.Errorf("SetPolicy %s: err=%v out=%q, want InvalidArgs", arg, err, out)
		}
	}
	if got := readTrim(t, filepath.Join(tmp, "tree", daemon.TreePrefix, "power_aware")); got != "1" {
		t.Errorf("power_aware = %q after rejected calls, want 1", got)
	}

	// SIGHUP with a broken file keeps the running configuration and says
	// where the file is wrong; with a good one the change applies (here the
	// power-profiles API appears on the bus).
	os.WriteFile(conf, []byte("# test config\npower_profiles_api = false\nbogus_key = 1\n"), 0o644)
	d.cmd.Process.Signal(syscall.SIGHUP)
	waitFor(t, "bad config reported", 10*time.Second, func() (bool, string) {
		l := d.log.String()
		return strings.Contains(l, "keeping the running configuration") && strings.Contains(l, conf+":3"), ""
	})
	d.alive(t)
	os.WriteFile(conf, []byte("power_profiles_api = true\n"), 0o644)
	d.cmd.Process.Signal(syscall.SIGHUP)
	waitFor(t, "power-profiles API after reload", 20*time.Second, func() (bool, string) {
		conn, err := dbus.Connect(addr)
		if err != nil {
			return false, err.Error()
		}
		defer conn.Close()
		var has bool
		err = conn.BusObject().Call("org.freedesktop.DBus.NameHasOwner", 0, "net.hadess.PowerProfiles").Store(&has)
		return err == nil && has, fmt.Sprint(err)
	})
	waitFor(t, "main name owned after the reload reconnect", 20*time.Second, owned)

	// The bus goes away and comes back at the same address.
	stopBus(bus)
	addr2, _ := startBusAt(t, busDir)
	if addr2 != addr {
		t.Fatalf("restarted bus at %s, want %s", addr2, addr)
	}
	waitFor(t, "name owned again after the bus restarted", 40*time.Second, owned)
	if !strings.Contains(d.log.String(), "lost the D-Bus connection") {
		t.Errorf("loss of the bus not logged")
	}
}
