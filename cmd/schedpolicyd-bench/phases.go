package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/godbus/dbus/v5"
	"golang.org/x/sys/unix"

	"github.com/schedpolicyd/schedpolicyd/daemon"
	"github.com/schedpolicyd/schedpolicyd/daemon/bus"
)

// Workload shapes of the idle phase: 100 workloads, the first 10 with one
// sleeping process each, the other 90 empty.
const (
	idleWorkloads = 100
	idleSleepers  = 10
)

func (e *env) benchStart(r *report) error {
	var ownOurs, readyOurs, ownPPD stats
	for i := 0; i < e.o.starts; i++ {
		p, err := e.startOurs("start", ourOpts{})
		if err != nil {
			return err
		}
		ownOurs = append(ownOurs, ms(p.nameOwned))
		readyOurs = append(readyOurs, ms(p.ready))
		e.stop(p)
		q, err := e.startPPD()
		if err != nil {
			return err
		}
		ownPPD = append(ownPPD, ms(q.nameOwned))
		e.stop(q)
	}
	r.add(row{group: "start-up", metric: "exec → bus name owned", unit: "ms", ours: ownOurs, ppd: ownPPD})
	r.add(row{group: "start-up", metric: "exec → READY=1 (sd_notify)", unit: "ms", ours: readyOurs,
		note: "power-profiles-daemon sends no READY=1 (its unit is Type=dbus): bus name owned is its readiness"})
	return nil
}

func (e *env) benchGet(r *report) error {
	ours, err := e.startOurs("get", ourOpts{})
	if err != nil {
		return err
	}
	defer e.stop(ours)
	ppd, err := e.startPPD()
	if err != nil {
		return err
	}
	defer e.stop(ppd)
	conn, err := dbus.Connect(e.busAddr)
	if err != nil {
		return err
	}
	defer conn.Close()
	stopPerf := e.perfRecord("get", ours)
	type target struct {
		p           *daemonProc
		obj         dbus.BusObject
		iface, prop string
	}
	targets := []target{
		{ours, conn.Object(bus.Name, bus.ObjectPath), bus.Interface, "ActivePolicy"},
		{ppd, conn.Object(ppdName, ppdPath), ppdIface, "ActiveProfile"},
	}
	var lat [2][2]stats     // [target][Get, GetAll] µs
	var perCall [2][2]stats // CPU µs per call, one value per daemon
	for mi, method := range []string{"Get", "GetAll"} {
		for ti, t := range targets {
			call := func() error {
				var c *dbus.Call
				if method == "Get" {
					c = t.obj.Call("org.freedesktop.DBus.Properties.Get", 0, t.iface, t.prop)
				} else {
					c = t.obj.Call("org.freedesktop.DBus.Properties.GetAll", 0, t.iface)
				}
				return c.Err
			}
			for i := 0; i < 100; i++ { // warm-up
				if err := call(); err != nil {
					return fmt.Errorf("%s %s: %w", t.p.name, method, err)
				}
			}
			c0 := cpuOf(t.p.pid)
			for i := 0; i < e.o.calls; i++ {
				t0 := time.Now()
				if err := call(); err != nil {
					return fmt.Errorf("%s %s: %w", t.p.name, method, err)
				}
				lat[ti][mi] = append(lat[ti][mi], us(time.Since(t0)))
			}
			perCall[ti][mi] = stats{us(cpuOf(t.p.pid)-c0) / float64(e.o.calls)}
		}
	}
	stopPerf()
	for mi, m := range []string{"Get", "GetAll"} {
		what := "ActivePolicy / ActiveProfile"
		if m == "GetAll" {
			what = "whole interface"
		}
		r.add(row{group: "D-Bus", metric: fmt.Sprintf("%s %s, round trip (%d calls)", m, what, e.o.calls), unit: "µs", ours: lat[0][mi], ppd: lat[1][mi], pcts: true})
		r.add(row{group: "D-Bus", metric: fmt.Sprintf("daemon CPU per %s call", m), unit: "µs", ours: perCall[0][mi], ppd: perCall[1][mi], single: true})
	}
	return nil
}

// propWaiter delivers PropertiesChanged signals of one object.
type propWaiter struct {
	sigs chan *dbus.Signal
}

func newPropWaiter(conn *dbus.Conn, path dbus.ObjectPath) (*propWaiter, error) {
	w := &propWaiter{sigs: make(chan *dbus.Signal, 1024)}
	conn.Signal(w.sigs)
	if err := conn.AddMatchSignal(dbus.WithMatchObjectPath(path), dbus.WithMatchInterface("org.freedesktop.DBus.Properties"), dbus.WithMatchMember("PropertiesChanged")); err != nil {
		return nil, err
	}
	return w, nil
}

func (w *propWaiter) drain() {
	for {
		select {
		case <-w.sigs:
		default:
			return
		}
	}
}

// wait returns when a PropertiesChanged for prop of iface arrives.
func (w *propWaiter) wait(iface, prop string, timeout time.Duration) (time.Time, error) {
	deadline := time.After(timeout)
	for {
		select {
		case s := <-w.sigs:
			if s.Name != "org.freedesktop.DBus.Properties.PropertiesChanged" || len(s.Body) < 2 || s.Body[0] != iface {
				continue
			}
			if m, ok := s.Body[1].(map[string]dbus.Variant); ok {
				if _, ok := m[prop]; ok {
					return time.Now(), nil
				}
			}
		case <-deadline:
			return time.Time{}, fmt.Errorf("no PropertiesChanged for %s within %v", prop, timeout)
		}
	}
}

// cpusetWatch sees IN_MODIFY on every workload's cpuset.cpus.
type cpusetWatch struct {
	fd  int
	wds map[int32]bool
}

func newCpusetWatch(w *workloads) (*cpusetWatch, error) {
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		return nil, err
	}
	cw := &cpusetWatch{fd: fd, wds: map[int32]bool{}}
	for _, c := range w.children {
		wd, err := unix.InotifyAddWatch(fd, filepath.Join(c, "cpuset.cpus"), unix.IN_MODIFY)
		if err != nil {
			unix.Close(fd)
			return nil, err
		}
		cw.wds[int32(wd)] = true
	}
	return cw, nil
}

func (cw *cpusetWatch) close() { unix.Close(cw.fd) }

func (cw *cpusetWatch) drain() {
	buf := make([]byte, 64<<10)
	for {
		if n, err := unix.Read(cw.fd, buf); n <= 0 || err != nil {
			return
		}
	}
}

// waitResult is what waitAllAsync delivers.
type waitResult struct {
	at  time.Time
	err error
}

// waitAllAsync runs waitAll in a goroutine, for a caller that must start
// watching before the call that causes the writes.
func (cw *cpusetWatch) waitAllAsync(timeout time.Duration) <-chan waitResult {
	c := make(chan waitResult, 1)
	go func() {
		at, err := cw.waitAll(timeout)
		c <- waitResult{at, err}
	}()
	return c
}

// waitAll returns the time the last of all watched files was modified
// (as seen here), or an error naming how many were written by the timeout.
func (cw *cpusetWatch) waitAll(timeout time.Duration) (time.Time, error) {
	seen := map[int32]bool{}
	buf := make([]byte, 64<<10)
	deadline := time.Now().Add(timeout)
	var last time.Time
	for len(seen) < len(cw.wds) {
		left := time.Until(deadline)
		if left <= 0 {
			return last, fmt.Errorf("%d of %d cpuset.cpus written within %v", len(seen), len(cw.wds), timeout)
		}
		fds := []unix.PollFd{{Fd: int32(cw.fd), Events: unix.POLLIN}}
		if _, err := unix.Poll(fds, int(left/time.Millisecond)+1); err != nil && !errors.Is(err, unix.EINTR) {
			return last, err
		}
		n, err := unix.Read(cw.fd, buf)
		if err != nil || n <= 0 {
			continue
		}
		now := time.Now()
		for off := 0; off+unix.SizeofInotifyEvent <= n; {
			ev := (*unix.InotifyEvent)(unsafePointer(&buf[off]))
			if cw.wds[ev.Wd] && !seen[ev.Wd] {
				seen[ev.Wd] = true
				last = now
			}
			off += unix.SizeofInotifyEvent + int(ev.Len)
		}
	}
	return last, nil
}

func (e *env) benchSwitch(r *report) error {
	if err := e.switchPPD(r); err != nil {
		return err
	}
	for _, n := range []int{10, 1000} {
		if err := e.switchOurs(r, n); err != nil {
			return err
		}
	}
	return nil
}

func (e *env) switchPPD(r *report) error {
	if !e.polkit {
		r.add(row{group: "policy switch", metric: "power-profiles-daemon Set ActiveProfile", note: "skipped: no polkitd, so power-profiles-daemon refuses the switch"})
		return nil
	}
	p, err := e.startPPDState(true)
	if err != nil {
		return err
	}
	defer e.stop(p)
	conn, err := dbus.Connect(e.busAddr)
	if err != nil {
		return err
	}
	defer conn.Close()
	pw, err := newPropWaiter(conn, ppdPath)
	if err != nil {
		return err
	}
	obj := conn.Object(ppdName, ppdPath)
	var reply, changed stats
	profiles := []string{"power-saver", "balanced"}
	c0 := cpuOf(p.pid)
	for i := 0; i < e.o.switches10; i++ {
		pw.drain()
		t0 := time.Now()
		if err := obj.Call("org.freedesktop.DBus.Properties.Set", 0, ppdIface, "ActiveProfile", dbus.MakeVariant(profiles[i%2])).Err; err != nil {
			return fmt.Errorf("power-profiles-daemon Set ActiveProfile: %w", err)
		}
		t1 := time.Now()
		t2, err := pw.wait(ppdIface, "ActiveProfile", 5*time.Second)
		if err != nil {
			return fmt.Errorf("power-profiles-daemon: %w", err)
		}
		reply = append(reply, ms(t1.Sub(t0)))
		changed = append(changed, ms(t2.Sub(t0)))
		time.Sleep(5 * time.Millisecond)
	}
	cpu := us(cpuOf(p.pid)-c0) / float64(e.o.switches10)
	e.ppdSwitch = &switchResult{reply: reply, changed: changed, cpuPerSwitch: cpu}
	return nil
}

type switchResult struct {
	reply, changed, effect stats
	echoEffect             stats
	cpuPerSwitch           float64
}

// switchOurs times policy switches of our daemon with n workloads: over
// D-Bus (SetPolicy) and through the tree (a write to
// current_sched_policy), then adds the rows: beside power-profiles-daemon's
// profile switch for 10 workloads, beside the kernel's floors otherwise.
func (e *env) switchOurs(r *report, n int) error {
	iters := e.o.switches10
	if n > 10 {
		iters = e.o.switches1000
	}
	p, err := e.startOurs(fmt.Sprintf("switch%d", n), ourOpts{workloads: n})
	if err != nil {
		return err
	}
	defer func() {
		select {
		case <-p.exited:
		default:
			e.stop(p)
		}
	}()
	cw, err := newCpusetWatch(p.wl)
	if err != nil {
		return err
	}
	defer cw.close()
	conn, err := dbus.Connect(e.busAddr)
	if err != nil {
		return err
	}
	defer conn.Close()
	pw, err := newPropWaiter(conn, bus.ObjectPath)
	if err != nil {
		return err
	}
	sw := &switchRig{p: p, cw: cw, pw: pw, obj: conn.Object(bus.Name, bus.ObjectPath), n: n, iters: iters}
	var stopPerf func()
	if n > 10 {
		stopPerf = e.perfRecord("switch1000", p)
	} else {
		stopPerf = e.perfRecord("switch10", p)
	}
	defer stopPerf()
	res := &switchResult{}
	sw.settle()
	if err := sw.setPolicy(res); err != nil {
		return err
	}
	if err := sw.echo(res); err != nil {
		return err
	}
	if n == 10 {
		e.switchRowsPPD(r, res)
		return nil
	}
	e.stop(p) // the floor's siblings are written with no daemon running
	return e.switchRowsFloor(r, res, n, iters)
}

// switchRig is one daemon whose policy switches switchOurs times: the
// watch on its workloads' cpuset.cpus, the waiter for its
// PropertiesChanged and its bus object.
type switchRig struct {
	p        *daemonProc
	cw       *cpusetWatch
	pw       *propWaiter
	obj      dbus.BusObject
	n, iters int // workloads; switches per way of switching
}

// switchPolicies are the two policies the switches alternate between.
var switchPolicies = []string{"powersaving", "performance"}

// settle lets the last switch's writes and signals arrive, then drops
// them.
func (s *switchRig) settle() {
	time.Sleep(20 * time.Millisecond)
	s.cw.drain()
	s.pw.drain()
}

// setPolicy times iters SetPolicy calls into res: to the reply, to every
// cpuset.cpus written and to PropertiesChanged (ms), and the daemon's CPU
// time per switch (µs).
func (s *switchRig) setPolicy(res *switchResult) error {
	c0 := cpuOf(s.p.pid)
	for i := 0; i < s.iters; i++ {
		// The cpuset writes can land before the reply (the daemon persists
		// the choice after applying it): watch for them while the call is
		// in flight, not after it returned.
		written := s.cw.waitAllAsync(5 * time.Second)
		t0 := time.Now()
		if err := s.obj.Call(bus.Interface+".SetPolicy", 0, switchPolicies[i%2]).Err; err != nil {
			return fmt.Errorf("SetPolicy: %w", err)
		}
		t1 := time.Now()
		w := <-written
		t2, err := w.at, w.err
		if err != nil {
			return fmt.Errorf("SetPolicy %s with %d workloads: %w", switchPolicies[i%2], s.n, err)
		}
		t3, err := s.pw.wait(bus.Interface, "ActivePolicy", 5*time.Second)
		if err != nil {
			return err
		}
		res.reply = append(res.reply, ms(t1.Sub(t0)))
		res.effect = append(res.effect, ms(t2.Sub(t0)))
		res.changed = append(res.changed, ms(t3.Sub(t0)))
		s.settle()
	}
	res.cpuPerSwitch = us(cpuOf(s.p.pid)-c0) / float64(s.iters)
	return nil
}

// echo times iters switches through the tree into res.echoEffect (ms, to
// every cpuset.cpus written): one write(2) of the value, as `echo` does
// (in-process, so the fork of a shell is not counted). It continues the
// alternation setPolicy left off.
func (s *switchRig) echo(res *switchResult) error {
	knob := filepath.Join(s.p.treeDir, daemon.TreePrefix, "current_sched_policy")
	for i := 0; i < s.iters; i++ {
		written := s.cw.waitAllAsync(5 * time.Second)
		t0 := time.Now()
		pol := switchPolicies[(s.iters+i)%2] // the SetPolicy loop left switchPolicies[(iters-1)%2]
		if err := writeFile(knob, []byte(pol+"\n")); err != nil {
			return err
		}
		w := <-written
		t2, err := w.at, w.err
		if err != nil {
			return fmt.Errorf("echo %s > current_sched_policy with %d workloads: %w", pol, s.n, err)
		}
		res.echoEffect = append(res.echoEffect, ms(t2.Sub(t0)))
		s.settle()
	}
	return nil
}

// switchRowsPPD adds the rows of 10 workloads' switches, beside
// power-profiles-daemon's (e.ppdSwitch; empty when it was not measured).
func (e *env) switchRowsPPD(r *report, res *switchResult) {
	var ppd switchResult
	if e.ppdSwitch != nil {
		ppd = *e.ppdSwitch
	}
	r.add(row{group: "policy switch", metric: "10 workloads: SetPolicy → every cpuset.cpus written (ppd: Set ActiveProfile → PropertiesChanged)", unit: "ms", ours: res.effect, ppd: ppd.changed, goal: "≤ 1.0×"})
	r.add(row{group: "policy switch", metric: "10 workloads: echo > current_sched_policy → every cpuset.cpus written", unit: "ms", ours: res.echoEffect, ppd: ppd.changed, goal: "≤ 1.0×"})
	r.add(row{group: "policy switch", metric: "10 workloads: call → reply", unit: "ms", ours: res.reply, ppd: ppd.reply})
	r.add(row{group: "policy switch", metric: "10 workloads: call → PropertiesChanged", unit: "ms", ours: res.changed, ppd: ppd.changed})
	r.add(row{group: "policy switch", metric: "10 workloads: daemon CPU per switch", unit: "µs", ours: stats{res.cpuPerSwitch}, ppd: stats{ppd.cpuPerSwitch}, single: true})
}

// switchRowsFloor measures the kernel's floors for n workloads (iters
// rounds each; no daemon may be running) and adds the rows of n
// workloads' switches beside them.
func (e *env) switchRowsFloor(r *report, res *switchResult, n, iters int) error {
	floor, err := e.kernelSwitchFloor(n, iters, floorBare)
	if err != nil {
		return err
	}
	watchedFloor, err := e.kernelSwitchFloor(n, iters, floorWatched)
	if err != nil {
		return err
	}
	rulesFloor, err := e.kernelSwitchFloor(n, iters, floorRules)
	if err != nil {
		return err
	}
	r.add(row{group: "policy switch", metric: fmt.Sprintf("%d workloads: SetPolicy → every cpuset.cpus written (beside: the kernel floor)", n), unit: "ms", ours: res.effect, ppd: floor, goal: "≤ 10 ms; ≤ 1.3× the floor",
		note: fmt.Sprintf("the power-profiles-daemon columns hold the kernel's floor instead: %d sibling cpusets (sched_load_balance 0), cpuset.cpus pre-opened, written in a tight loop with the other of two values; %d rounds of %d writes, no daemon running", n, iters, n)})
	r.add(row{group: "policy switch", metric: fmt.Sprintf("%d workloads: SetPolicy → every cpuset.cpus written (beside: the floor timed as ours)", n), unit: "ms", ours: res.effect, ppd: watchedFloor, goal: "≤ 1.3× the floor",
		note: fmt.Sprintf("the floor's tight loop timed as the daemon's switches are: until this bench's inotify watch on every cpuset.cpus has seen each file written (the watch alone slows the writes); %d rounds", iters)})
	r.add(row{group: "policy switch", metric: fmt.Sprintf("%d workloads: SetPolicy → every cpuset.cpus written (beside: the floor with the state save and re-reads the rules require, timed as ours)", n), unit: "ms", ours: res.effect, ppd: rulesFloor,
		note: fmt.Sprintf("the watched floor plus, per round, state.json saved with a record of each of the %d cgroups and its pending value (statefile.SaveState: write, fsync, rename, directory fsync) before the first write, and each cpuset.cpus re-read (pread, parsed) just before its write: the work the project's rules add to every switch; %d rounds", n, iters)})
	r.add(row{group: "policy switch", metric: fmt.Sprintf("%d workloads: echo > current_sched_policy → every cpuset.cpus written", n), unit: "ms", ours: res.echoEffect, goal: "≤ 10 ms"})
	r.add(row{group: "policy switch", metric: fmt.Sprintf("%d workloads: call → reply", n), unit: "ms", ours: res.reply})
	r.add(row{group: "policy switch", metric: fmt.Sprintf("%d workloads: daemon CPU per switch", n), unit: "µs", ours: stats{res.cpuPerSwitch}, single: true})
	return nil
}

func (e *env) benchPower(r *report) error {
	p, err := e.startOurs("power", ourOpts{noCgroup: true, extra: []string{"--debounce", "1ms", "--settle=-1s"}})
	if err != nil {
		return err
	}
	defer e.stop(p)
	conn, err := dbus.Connect(e.busAddr)
	if err != nil {
		return err
	}
	defer conn.Close()
	pw, err := newPropWaiter(conn, bus.ObjectPath)
	if err != nil {
		return err
	}
	ps := filepath.Join(e.sysRoot, "class/power_supply")
	// In psCase the machine is on AC through two supplies: the AC adapter
	// and a USB-C port (ucsi ...:001). Unplugging: the battery starts
	// discharging and AC goes offline (no verdict change: USB-C still
	// powers it), then the USB-C supply goes offline (timed: → battery).
	online, status := filepath.Join(ps, "ucsi-source-psy-USBC000:001/online"), filepath.Join(ps, "BAT0/status")
	acOnline := filepath.Join(ps, "AC/online")
	quiet := func(path, v string) error {
		if err := os.WriteFile(path, []byte(v+"\n"), 0o644); err != nil {
			return err
		}
		time.Sleep(50 * time.Millisecond)
		pw.drain()
		return nil
	}
	timed := func(path, v string) (float64, error) {
		pw.drain()
		t0 := time.Now()
		if err := os.WriteFile(path, []byte(v+"\n"), 0o644); err != nil {
			return 0, err
		}
		t1, err := pw.wait(bus.Interface, "PowerSource", 5*time.Second)
		if err != nil {
			return 0, fmt.Errorf("write %s to %s: %w", v, path, err)
		}
		time.Sleep(30 * time.Millisecond)
		return ms(t1.Sub(t0)), nil
	}
	var toBat, toAC stats
	for i := 0; i < e.o.powerChanges; i++ {
		if err := quiet(status, "Discharging"); err != nil {
			return err
		}
		if err := quiet(acOnline, "0"); err != nil {
			return err
		}
		d, err := timed(online, "0")
		if err != nil {
			return err
		}
		toBat = append(toBat, d)
		if d, err = timed(online, "1"); err != nil {
			return err
		}
		toAC = append(toAC, d)
		if err := quiet(acOnline, "1"); err != nil {
			return err
		}
		if err := quiet(status, "Not charging"); err != nil {
			return err
		}
	}
	note := "mock ucsi-source-psy-USBC000:001/online write (the last online supply) → fsnotify → debounce 1ms (--debounce 1ms --settle=-1s) → re-read → PropertiesChanged(PowerSource); the 1 ms debounce is included, nothing subtracted. power-profiles-daemon 0.12 does not track the power source (n/a); for reference, upowerd took 0.94 ms from an AC uevent to OnBattery"
	r.add(row{group: "power source", metric: "AC → battery: attribute write → PropertiesChanged", unit: "ms", ours: toBat, note: note})
	r.add(row{group: "power source", metric: "battery → AC: attribute write → PropertiesChanged", unit: "ms", ours: toAC})
	return nil
}

// perfRecord runs `perf record -g` on p during phase when -perf names it.
func (e *env) perfRecord(phase string, p *daemonProc) func() {
	if e.o.perf != phase {
		return func() {}
	}
	out := filepath.Join(e.tmp, "perf-"+phase+".data")
	cmd := exec.Command("perf", "record", "-g", "-e", "cpu-clock", "-F", "4999", "-o", out, "-p", fmt.Sprint(p.pid))
	cmd.Stderr = e.logFile("perf")
	if err := cmd.Start(); err != nil {
		fmt.Fprintf(os.Stderr, "bench: perf: %v\n", err)
		return func() {}
	}
	time.Sleep(300 * time.Millisecond)
	return func() {
		cmd.Process.Signal(os.Interrupt)
		cmd.Wait()
		fmt.Fprintf(os.Stderr, "bench: perf data in %s (perf report -i %s)\n", out, out)
	}
}
