package main

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/godbus/dbus/v5"

	"github.com/schedpolicyd/schedpolicyd/daemon/bus"
	"github.com/schedpolicyd/schedpolicyd/internal/testutil"
)

const (
	ppdName  = "net.hadess.PowerProfiles"
	ppdPath  = dbus.ObjectPath("/net/hadess/PowerProfiles")
	ppdIface = "net.hadess.PowerProfiles"

	cpusetRoot = "/sys/fs/cgroup/cpuset"
	// psCase is the power_supply corpus's case (testdata/power_supply) the
	// mock root starts from: AC online, battery at its stop threshold
	// ("Not charging") → ac.
	psCase = "thinkpad-threshold-not-charging"
)

// env is one bench run's private world: a temporary directory, a private
// bus (with polkitd on it for power-profiles-daemon), a mock sysfs root and
// every process and cgroup started, for cleanup.
type env struct {
	o       options
	tmp     string
	busAddr string
	sysRoot string

	mu      sync.Mutex
	procs   []*exec.Cmd // stopped at cleanup, last first
	cgroups []string    // removed at cleanup, last first
	polkit  bool

	ppdSwitch *switchResult // power-profiles-daemon's switch figures, for the 10-workload rows
}

func (e *env) setup() error {
	var err error
	if e.busAddr, err = e.startBus("bus"); err != nil {
		return err
	}
	if e.o.polkitd != "" {
		if _, err := os.Stat(e.o.polkitd); err == nil {
			if err := e.startPolkit(); err != nil {
				fmt.Fprintf(os.Stderr, "bench: polkitd: %v; power-profiles-daemon's profile switch is skipped\n", err)
			}
		}
	}
	return e.mockSysfs()
}

// startBus runs dbus-daemon with a system-bus-like config on socket tmp/name
// and returns its address. Any uid may connect (polkitd drops to its own
// user) and own any name. Its standard error goes to a log file in tmp.
func (e *env) startBus(name string) (string, error) {
	o := testutil.BusOptions{System: true, AnyUser: true, Dir: e.tmp, Name: name, Binary: e.o.busDaemon}
	if f := e.logFile("dbus-daemon-" + name); f != nil {
		o.Stderr = f
	}
	b, err := testutil.StartBusProcess(o)
	if err != nil {
		return "", err
	}
	e.track(b.Cmd)
	return b.Addr, nil
}

func (e *env) startPolkit() error {
	cmd := exec.Command(e.o.polkitd, "--no-debug")
	cmd.Env = append(os.Environ(), "DBUS_SYSTEM_BUS_ADDRESS="+e.busAddr)
	cmd.Stdout = e.logFile("polkitd")
	cmd.Stderr = cmd.Stdout
	conn, err := dbus.Connect(e.busAddr)
	if err != nil {
		return err
	}
	defer conn.Close()
	owned := watchName(conn, "org.freedesktop.PolicyKit1")
	if err := cmd.Start(); err != nil {
		return err
	}
	e.track(cmd)
	select {
	case <-owned:
		e.polkit = true
		return nil
	case <-time.After(5 * time.Second):
		return errors.New("did not own org.freedesktop.PolicyKit1 within 5s")
	}
}

// mockSysfs builds tmp/sys from the laptop-4c8t topology fixture and the
// power_supply corpus's case psCase, both paths relative to the checkout
// (make bench-daemon runs the bench from there).
func (e *env) mockSysfs() error {
	e.sysRoot = filepath.Join(e.tmp, "sys")
	srcs := []string{
		"sysfs/testdata/topology/laptop-4c8t",
		filepath.Join("testdata", "power_supply", psCase, "sys"),
	}
	for _, s := range srcs {
		if err := testutil.CopyTree(s, e.sysRoot); err != nil {
			return fmt.Errorf("mock sysfs from %s (run from the checkout): %w", s, err)
		}
	}
	return nil
}

func (e *env) logFile(name string) *os.File {
	f, err := os.OpenFile(filepath.Join(e.tmp, name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil
	}
	return f
}

func (e *env) track(c *exec.Cmd) {
	e.mu.Lock()
	e.procs = append(e.procs, c)
	e.mu.Unlock()
}

func (e *env) untrack(c *exec.Cmd) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for i, p := range e.procs {
		if p == c {
			e.procs = append(e.procs[:i], e.procs[i+1:]...)
			return
		}
	}
}

func (e *env) cleanup() {
	e.mu.Lock()
	procs := e.procs
	e.procs = nil
	cgs := e.cgroups
	e.cgroups = nil
	e.mu.Unlock()
	for i := len(procs) - 1; i >= 0; i-- {
		stopProc(procs[i])
	}
	for i := len(cgs) - 1; i >= 0; i-- {
		removeCgroup(cgs[i])
	}
	if !e.o.keep {
		os.RemoveAll(e.tmp)
	}
}

// stopProc sends SIGTERM, waits up to 5 s, then SIGKILL.
func stopProc(c *exec.Cmd) {
	if c.Process == nil {
		return
	}
	c.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { c.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		c.Process.Kill()
		<-done
	}
}

// workloads is a managed parent cgroup of our own with n children
// w0000…, the first sleepers of which hold one sleeping process each.
type workloads struct {
	dir      string
	children []string
	sleepers []*exec.Cmd
}

// makeWorkloads creates cpuset/schedpolicyd-bench-<random> with n children
// (cpus and mems filled in so tasks can be attached).
func (e *env) makeWorkloads(n, sleepers int) (*workloads, error) {
	if _, err := os.Stat(filepath.Join(cpusetRoot, "cpuset.cpus")); err != nil {
		return nil, fmt.Errorf("needs a cgroup v1 cpuset hierarchy at %s: %w", cpusetRoot, err)
	}
	cpus, err := os.ReadFile(filepath.Join(cpusetRoot, "cpuset.effective_cpus"))
	if err != nil {
		return nil, err
	}
	mems, err := os.ReadFile(filepath.Join(cpusetRoot, "cpuset.effective_mems"))
	if err != nil {
		return nil, err
	}
	w := &workloads{dir: filepath.Join(cpusetRoot, fmt.Sprintf("schedpolicyd-bench-%d", rand.Uint32()))}
	if err := os.Mkdir(w.dir, 0o755); err != nil {
		return nil, err
	}
	e.mu.Lock()
	e.cgroups = append(e.cgroups, w.dir)
	e.mu.Unlock()
	for _, d := range []string{w.dir} {
		if err := writeFile(filepath.Join(d, "cpuset.cpus"), cpus); err != nil {
			return nil, err
		}
		if err := writeFile(filepath.Join(d, "cpuset.mems"), mems); err != nil {
			return nil, err
		}
	}
	for i := 0; i < n; i++ {
		c := filepath.Join(w.dir, fmt.Sprintf("w%04d", i))
		if err := os.Mkdir(c, 0o755); err != nil {
			return nil, err
		}
		if err := writeFile(filepath.Join(c, "cpuset.cpus"), cpus); err != nil {
			return nil, err
		}
		if err := writeFile(filepath.Join(c, "cpuset.mems"), mems); err != nil {
			return nil, err
		}
		w.children = append(w.children, c)
	}
	for i := 0; i < sleepers && i < n; i++ {
		s := exec.Command("sleep", "infinity")
		if err := s.Start(); err != nil {
			return nil, err
		}
		e.track(s)
		w.sleepers = append(w.sleepers, s)
		if err := writeFile(filepath.Join(w.children[i], "cgroup.procs"), []byte(fmt.Sprint(s.Process.Pid))); err != nil {
			return nil, err
		}
	}
	return w, nil
}

// release kills the sleepers and removes the cgroups (after the daemon
// that managed them has stopped and restored them).
func (e *env) release(w *workloads) {
	for _, s := range w.sleepers {
		s.Process.Kill()
		s.Wait()
		e.untrack(s)
	}
	removeCgroup(w.dir)
	e.mu.Lock()
	for i, d := range e.cgroups {
		if d == w.dir {
			e.cgroups = append(e.cgroups[:i], e.cgroups[i+1:]...)
			break
		}
	}
	e.mu.Unlock()
}

func removeCgroup(dir string) {
	for i := 0; i < 50; i++ {
		// A child whose last task is still exiting refuses for a moment.
		children, _ := filepath.Glob(filepath.Join(dir, "*"))
		for _, c := range children {
			if fi, err := os.Stat(c); err == nil && fi.IsDir() {
				syscall.Rmdir(c)
			}
		}
		if err := syscall.Rmdir(dir); err == nil || errors.Is(err, syscall.ENOENT) {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	fmt.Fprintf(os.Stderr, "bench: could not remove %s\n", dir)
}

func writeFile(p string, b []byte) error {
	f, err := os.OpenFile(p, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("write %q to %s: %w", strings.TrimSpace(string(b)), p, err)
	}
	return nil
}

// daemonProc is one running daemon under measurement.
type daemonProc struct {
	name    string
	cmd     *exec.Cmd
	pid     int
	treeDir string
	wl      *workloads
	// Start-up, from just before fork/exec: bus name owned (as seen by a
	// client), READY=1 received (ours only).
	nameOwned, ready time.Duration
	started, readyAt time.Time
	exited           chan struct{}
}

// ourOpts are the schedpolicyd runs' differences.
type ourOpts struct {
	workloads, sleepers int
	noCgroup            bool
	extra               []string
	bus                 string // bus address; "" = the main private bus
	bin                 string // the binary; "" = -bin
}

// startOurs runs bin/schedpolicyd on the private bus with a fresh tree,
// state directory and (unless noCgroup) a cgroup parent with the workloads,
// and waits for READY=1.
func (e *env) startOurs(tag string, oo ourOpts) (*daemonProc, error) {
	dir, err := os.MkdirTemp(e.tmp, "ours-"+tag+"-")
	if err != nil {
		return nil, err
	}
	p := &daemonProc{name: "schedpolicyd", treeDir: filepath.Join(dir, "tree")}
	busAddr := oo.bus
	if busAddr == "" {
		busAddr = e.busAddr
	}
	cg := "none"
	if !oo.noCgroup {
		if p.wl, err = e.makeWorkloads(oo.workloads, oo.sleepers); err != nil {
			return nil, err
		}
		cg = p.wl.dir
	}
	// An empty configuration file: only the flags below apply, whatever
	// /etc/schedpolicyd holds on this machine.
	if err := os.WriteFile(filepath.Join(dir, "none.conf"), nil, 0o644); err != nil {
		return nil, err
	}
	notifyPath := filepath.Join(dir, "notify")
	nl, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: notifyPath, Net: "unixgram"})
	if err != nil {
		return nil, err
	}
	defer nl.Close()
	args := []string{"--config", filepath.Join(dir, "none.conf"),
		"--sysfs-root", e.sysRoot, "--cgroup-root", cg, "--tree-dir", p.treeDir, "--tree-backend", "fuse",
		"--state-dir", filepath.Join(dir, "state"), "--bus", busAddr, "--events", "fsnotify",
		// The default "auto" would follow the power-profiles-daemon under
		// comparison, or take its names so that it exits on start: the
		// two run independently here, as before (extra may override).
		"--power-profiles-api=false"}
	args = append(args, oo.extra...)
	bin := oo.bin
	if bin == "" {
		bin = e.o.bin
	}
	p.cmd = exec.Command(bin, args...)
	p.cmd.Env = append(os.Environ(), "NOTIFY_SOCKET="+notifyPath)
	p.cmd.Stdout = e.logFile(filepath.Base(dir))
	p.cmd.Stderr = p.cmd.Stdout
	readyc := make(chan time.Time, 1)
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := nl.Read(buf)
			if err != nil {
				return
			}
			if strings.Contains("\n"+string(buf[:n])+"\n", "\nREADY=1\n") {
				readyc <- time.Now()
				return
			}
		}
	}()
	if err := e.startWatched(p, busAddr, bus.Name); err != nil {
		return nil, err
	}
	select {
	case t := <-readyc:
		p.readyAt, p.ready = t, t.Sub(p.started)
	case <-p.exited:
		return nil, fmt.Errorf("schedpolicyd exited before READY=1; see %s.log", dir)
	case <-time.After(30 * time.Second):
		return nil, fmt.Errorf("schedpolicyd: no READY=1 within 30s; see %s.log", dir)
	}
	return p, nil
}

// startPPD runs power-profiles-daemon on the private bus and waits until it
// owns its name (it sends no sd_notify READY=1: its unit is Type=dbus).
//
// With withState it runs in a mount namespace of its own where a directory
// of tmp (on the same file system as ours' state directory) is bound over
// /var/lib, so it saves state.ini as it does on a real machine (our daemon
// saves state.json on every switch too) without touching the machine's
// /var/lib. Start-up is measured without it (unshare and mount would be
// counted).
func (e *env) startPPD() (*daemonProc, error) { return e.startPPDState(false) }

func (e *env) startPPDState(withState bool) (*daemonProc, error) {
	return e.startPPDOn(e.busAddr, withState)
}

// startPPDOn starts power-profiles-daemon on the bus at addr.
func (e *env) startPPDOn(addr string, withState bool) (*daemonProc, error) {
	p := &daemonProc{name: "power-profiles-daemon"}
	p.cmd = exec.Command(e.o.ppd)
	if withState {
		varlib := filepath.Join(e.tmp, "ppd-varlib")
		if err := os.MkdirAll(filepath.Join(varlib, "power-profiles-daemon"), 0o755); err != nil {
			return nil, err
		}
		p.cmd = exec.Command("unshare", "--mount", "--propagation", "private", "sh", "-c",
			`mount --bind "$0" /var/lib && exec "$1"`, varlib, e.o.ppd)
	}
	p.cmd.Env = append(os.Environ(), "DBUS_SYSTEM_BUS_ADDRESS="+addr)
	p.cmd.Stdout = e.logFile("ppd")
	p.cmd.Stderr = p.cmd.Stdout
	if err := e.startWatched(p, addr, ppdName); err != nil {
		return nil, err
	}
	p.readyAt = time.Now()
	return p, nil
}

// startWatched starts p.cmd and records when the bus name is owned.
func (e *env) startWatched(p *daemonProc, bus, name string) error {
	conn, err := dbus.Connect(bus)
	if err != nil {
		return err
	}
	defer conn.Close()
	owned := watchName(conn, name)
	t0 := time.Now()
	p.started = t0
	if err := p.cmd.Start(); err != nil {
		return err
	}
	e.track(p.cmd)
	p.pid = p.cmd.Process.Pid
	p.exited = make(chan struct{})
	go func() { p.cmd.Wait(); close(p.exited) }()
	select {
	case t := <-owned:
		p.nameOwned = t.Sub(t0)
	case <-p.exited:
		return fmt.Errorf("%s exited before owning %s", p.name, name)
	case <-time.After(30 * time.Second):
		return fmt.Errorf("%s did not own %s within 30s", p.name, name)
	}
	return nil
}

// stop terminates the daemon (ours restores every cpuset on SIGTERM) and
// removes its workloads.
func (e *env) stop(p *daemonProc) {
	if p == nil {
		return
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(10 * time.Second):
		p.cmd.Process.Kill()
		<-p.exited
	}
	e.untrack(p.cmd)
	if p.wl != nil {
		e.release(p.wl)
	}
}

// watchName returns a channel that receives the time a client sees name
// get an owner (NameOwnerChanged with a new owner).
func watchName(conn *dbus.Conn, name string) <-chan time.Time {
	out := make(chan time.Time, 1)
	sigs := make(chan *dbus.Signal, 16)
	conn.Signal(sigs)
	conn.AddMatchSignal(dbus.WithMatchInterface("org.freedesktop.DBus"), dbus.WithMatchMember("NameOwnerChanged"), dbus.WithMatchArg(0, name))
	go func() {
		for s := range sigs {
			if s.Name == "org.freedesktop.DBus.NameOwnerChanged" && len(s.Body) == 3 && s.Body[0] == name && s.Body[2] != "" {
				out <- time.Now()
				return
			}
		}
	}()
	return out
}
