package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/godbus/dbus/v5"
	"golang.org/x/sys/unix"

	"github.com/schedpolicyd/schedpolicyd/daemon/bus"
	"github.com/schedpolicyd/schedpolicyd/sysfs"
)

// React: how long a packed workload that turns busy waits for its
// cpuset to widen. A "sampling stopped" trial runs a fresh daemon (so the
// workload's history is that of an idle one, without waiting ~15 s for a
// 2 s half-life to decay a burst away) with reactWorkloads workloads under
// powersaving; w0000 holds a helper process (this binary, -spin-helper)
// that sleeps on a pipe until told to start N CPU-bound threads. Starting
// the threads attaches nothing and writes no cgroup file: the daemon has
// to notice the load itself. "Sampling running" adds a light task in
// w0001, so that the daemon keeps sampling; its one-thread trials share one
// daemon whose workloads but w0001 hold a helper each, each trial bursting
// in the next one that has stayed packed for 1 s.
const (
	reactWorkloads = 4
	spinHelperArg  = "-spin-helper"
)

// spinHelper is the helper's main: each line on stdin is a number of
// CPU-bound threads to run from then on (0: none); EOF exits.
func spinHelper() {
	var stop *atomic.Bool
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		n, _ := strconv.Atoi(strings.TrimSpace(sc.Text()))
		if stop != nil {
			stop.Store(true)
		}
		stop = &atomic.Bool{}
		runtime.GOMAXPROCS(max(n, 1) + 1)
		for i := 0; i < n; i++ {
			go func(s *atomic.Bool) {
				runtime.LockOSThread() // one OS thread each
				for !s.Load() {
				}
			}(stop)
		}
		fmt.Println("ok") // the threads are started (or stopped)
	}
	os.Exit(0)
}

type spinner struct {
	cmd *exec.Cmd
	in  io.WriteCloser
	out *bufio.Reader
}

func (e *env) startSpinner(cgroupDir string) (*spinner, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	s := &spinner{cmd: exec.Command(self, spinHelperArg)}
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if s.in, err = s.cmd.StdinPipe(); err != nil {
		return nil, err
	}
	out, err := s.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	s.out = bufio.NewReader(out)
	if err := s.cmd.Start(); err != nil {
		return nil, err
	}
	e.track(s.cmd)
	if err := writeFile(filepath.Join(cgroupDir, "cgroup.procs"), []byte(strconv.Itoa(s.cmd.Process.Pid))); err != nil {
		s.stop(e)
		return nil, err
	}
	return s, nil
}

// spin starts n threads (stopping any before); it returns once they run.
func (s *spinner) spin(n int) error {
	if _, err := fmt.Fprintf(s.in, "%d\n", n); err != nil {
		return err
	}
	_, err := s.out.ReadString('\n')
	return err
}

func (s *spinner) stop(e *env) {
	s.in.Close()
	done := make(chan struct{})
	go func() { s.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(2 * time.Second):
		s.cmd.Process.Kill()
		<-done
	}
	e.untrack(s.cmd)
}

// lightTask keeps a workload lightly busy (a short process every 50 ms),
// so that the daemon keeps sampling.
func (e *env) lightTask(cgroupDir string) (*exec.Cmd, error) {
	c := exec.Command("sh", "-c", "while :; do sleep 0.05; done")
	c.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	if err := c.Start(); err != nil {
		return nil, err
	}
	e.track(c)
	if err := writeFile(filepath.Join(cgroupDir, "cgroup.procs"), []byte(strconv.Itoa(c.Process.Pid))); err != nil {
		c.Process.Kill()
		c.Wait()
		e.untrack(c)
		return nil, err
	}
	return c, nil
}

func readCPUs(dir string) sysfs.CPUSet {
	b, err := os.ReadFile(filepath.Join(dir, "cpuset.cpus"))
	if err != nil {
		return sysfs.CPUSet{}
	}
	s, err := sysfs.ParseCPUList(strings.TrimSpace(string(b)))
	if err != nil {
		return sysfs.CPUSet{}
	}
	return s
}

// waitFor polls cond every 20 ms up to timeout.
func waitFor(timeout time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if cond() {
			return true
		}
		time.Sleep(20 * time.Millisecond)
	}
	return cond()
}

// waitQuiet waits until the daemon used no CPU for quiet (sampling
// stopped: it samples every second while it samples).
func waitQuiet(pid int, quiet, timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	last, since := cpuOf(pid), time.Now()
	for time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
		c := cpuOf(pid)
		if c != last {
			last, since = c, time.Now()
			continue
		}
		if time.Since(since) >= quiet {
			return true
		}
	}
	return false
}

// reactTrial is one burst's outcome.
type reactTrial struct {
	first, full time.Duration // to the first widening, to ≥ want CPUs; <0: not within the window
	cpu         time.Duration // the daemon's CPU from the burst to the end of the window
	signal      string        // what the daemon's debug log says woke it
	notQuiet    bool          // the daemon had not been quiet for 1.5 s before the burst
}

// burst starts n threads in dir's workload and watches its cpuset.cpus
// until it covers want CPUs (or window passes).
func burst(sp *spinner, dir string, pid, n, want int, window time.Duration) (reactTrial, error) {
	tr := reactTrial{first: -1, full: -1}
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		return tr, err
	}
	defer unix.Close(fd)
	if _, err := unix.InotifyAddWatch(fd, filepath.Join(dir, "cpuset.cpus"), unix.IN_MODIFY); err != nil {
		return tr, err
	}
	before := readCPUs(dir).Size()
	c0 := cpuOf(pid)
	t0 := time.Now()
	if err := sp.spin(n); err != nil {
		return tr, err
	}
	buf := make([]byte, 4096)
	deadline := t0.Add(window)
	for tr.full < 0 {
		if cur := readCPUs(dir).Size(); cur > before || cur >= want {
			at := time.Since(t0)
			if tr.first < 0 && cur > before {
				tr.first = at
			}
			if cur >= want {
				tr.full = at
				if before >= want {
					tr.full = 0 // covered from the start
				}
				break
			}
		}
		left := time.Until(deadline)
		if left <= 0 {
			break
		}
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		if _, err := unix.Poll(fds, int(left/time.Millisecond)+1); err != nil && !errors.Is(err, unix.EINTR) {
			return tr, err
		}
		unix.Read(fd, buf)
	}
	// The daemon's CPU: up to the widening and 200 ms after it (its
	// writes, save and publication), or the whole window.
	if tr.full >= 0 {
		time.Sleep(200 * time.Millisecond)
	} else {
		time.Sleep(time.Until(deadline))
	}
	tr.cpu = cpuOf(pid) - c0
	return tr, nil
}

// wakeSignal returns the signal the daemon's debug log names for its first
// widening of workload name after offset in its log (daemon "woken" lines).
func wakeSignal(log string, offset int64, name string) string {
	b, err := os.ReadFile(log)
	if err != nil || int64(len(b)) < offset {
		return "?"
	}
	sig := "periodic sample (no wake logged)"
	for _, l := range strings.Split(string(b[offset:]), "\n") {
		if strings.Contains(l, "woken") {
			if i := strings.Index(l, "signal="); i >= 0 {
				f := strings.Fields(l[i+len("signal="):])
				if len(f) > 0 {
					sig = strings.Trim(f[0], `"`)
				}
				if j := strings.Index(l, "signal=\""); j >= 0 {
					if k := strings.Index(l[j+8:], "\""); k >= 0 {
						sig = l[j+8 : j+8+k]
					}
				}
			}
		}
		if strings.Contains(l, "cpuset written") && strings.Contains(l, "workload="+name) {
			return sig
		}
	}
	return sig
}

func logSize(path string) int64 {
	if fi, err := os.Stat(path); err == nil {
		return fi.Size()
	}
	return 0
}

// reactDaemon is one fresh daemon, workloads packed under powersaving,
// the spinner in w0000 and (sampling) a light task in w0001.
type reactDaemon struct {
	p     *daemonProc
	sps   []reactTarget // every workload with a helper, w0000 first
	light *exec.Cmd
	log   string
}

// reactTarget is a workload with a helper.
type reactTarget struct {
	dir string
	sp  *spinner
}

// startReact starts a daemon with workloads workloads (reactWorkloads
// when 0) packed under powersaving, a helper in w0000 (and, with rotate,
// in every workload but w0001), a light task in w0001 when sampling.
func (e *env) startReact(tag string, sampling bool, busAddr string, workloads int, rotate bool) (*reactDaemon, error) {
	if workloads == 0 {
		workloads = reactWorkloads
	}
	p, err := e.startOurs(tag, ourOpts{workloads: workloads, bus: busAddr, extra: []string{"--log-level", "debug"}})
	if err != nil {
		return nil, err
	}
	rd := &reactDaemon{p: p, log: p.cmd.Stdout.(*os.File).Name()}
	if busAddr == "" {
		busAddr = e.busAddr
	}
	conn, err := dbus.Connect(busAddr)
	if err != nil {
		e.stopReact(rd)
		return nil, err
	}
	defer conn.Close()
	if err := conn.Object(bus.Name, bus.ObjectPath).Call(bus.Interface+".SetPolicy", 0, "powersaving").Err; err != nil {
		e.stopReact(rd)
		return nil, fmt.Errorf("SetPolicy powersaving: %w", err)
	}
	for i, c := range p.wl.children {
		if i == 1 || i > 0 && !rotate {
			continue
		}
		sp, err := e.startSpinner(c)
		if err != nil {
			e.stopReact(rd)
			return nil, err
		}
		rd.sps = append(rd.sps, reactTarget{dir: c, sp: sp})
	}
	if sampling {
		if rd.light, err = e.lightTask(p.wl.children[1]); err != nil {
			e.stopReact(rd)
			return nil, err
		}
	}
	if err := waitPacked(p.wl.children[0], 15*time.Second); err != nil {
		e.stopReact(rd)
		return nil, fmt.Errorf("%w; see %s", err, rd.log)
	}
	return rd, nil
}

// waitPacked waits until dir's cpuset holds one CPU, and still does 1 s
// later (the attaches wake the daemon, which may widen and shrink again
// before the burst).
func waitPacked(dir string, timeout time.Duration) error {
	packedSince := time.Time{}
	if !waitFor(timeout, func() bool {
		if readCPUs(dir).Size() != 1 {
			packedSince = time.Time{}
			return false
		}
		if packedSince.IsZero() {
			packedSince = time.Now()
		}
		return time.Since(packedSince) >= time.Second
	}) {
		return fmt.Errorf("%s not packed to one CPU for 1 s within %v (cpuset.cpus %s)", filepath.Base(dir), timeout, readCPUs(dir))
	}
	return nil
}

func (e *env) stopReact(rd *reactDaemon) {
	for _, t := range rd.sps {
		t.sp.stop(e)
	}
	if rd.light != nil {
		syscall.Kill(-rd.light.Process.Pid, syscall.SIGKILL) // sh and its sleep
		rd.light.Process.Kill()
		rd.light.Wait()
		e.untrack(rd.light)
	}
	e.stop(rd.p)
}

// reactRun is one trial on a fresh daemon: n threads, sampling stopped
// (once the daemon was quiet for 1.5 s) or running.
func (e *env) reactRun(n int, sampling bool) (reactTrial, error) {
	tag := fmt.Sprintf("react%d", n)
	if sampling {
		tag += "s"
	}
	rd, err := e.startReact(tag, sampling, "", 0, false)
	if err != nil {
		return reactTrial{}, err
	}
	defer e.stopReact(rd)
	if sampling {
		time.Sleep(1500 * time.Millisecond)
		return e.reactBurst(rd, rd.sps[0], n)
	}
	// On cgroup v1 the PSI trigger is the machine's: another process's
	// CPU pressure (a VM on this shared machine) wakes the daemon too, and
	// then it samples. Such trials are counted, not dropped.
	quiet := waitQuiet(rd.p.pid, 1500*time.Millisecond, 3*time.Second)
	tr, err := e.reactBurst(rd, rd.sps[0], n)
	tr.notQuiet = !quiet
	return tr, err
}

// reactSampling runs the "sampling running" trials of n threads on one
// daemon, each in the next workload of the rotation once it is packed.
// Only for bursts that widen nothing: a widening burst places everything
// for performance on a 2-CPU machine (race to idle), and packing again
// after a 2 s half-life takes longer than starting a fresh daemon.
func (e *env) reactSampling(n int, rr *reactResult) error {
	rd, err := e.startReact(fmt.Sprintf("react%ds", n), true, "", 0, true)
	if err != nil {
		return err
	}
	defer e.stopReact(rd)
	time.Sleep(1500 * time.Millisecond)
	for i := 0; i < e.o.reactTrials; i++ {
		t := rd.sps[i%len(rd.sps)]
		if err := waitPacked(t.dir, 30*time.Second); err != nil {
			return fmt.Errorf("trial %d: %w; see %s", i, err, rd.log)
		}
		tr, err := e.reactBurst(rd, t, n)
		if err != nil {
			return err
		}
		rr.add(tr)
	}
	return nil
}

func (e *env) reactBurst(rd *reactDaemon, t reactTarget, n int) (reactTrial, error) {
	allowed := readCPUs(rd.p.wl.dir).Size()
	want := min(n, allowed)
	window := 5 * time.Second
	if want <= 1 {
		window = 1500 * time.Millisecond // one thread on one CPU stays there
	}
	off := logSize(rd.log)
	tr, err := burst(t.sp, t.dir, rd.p.pid, n, want, window)
	if err != nil {
		return tr, err
	}
	tr.signal = wakeSignal(rd.log, off, filepath.Base(t.dir))
	t.sp.spin(0)
	return tr, nil
}

// reactResult gathers the trials of one case.
type reactResult struct {
	first, full, cpu stats
	missed           int // no widening within the window
	notQuiet         int // trials whose daemon was not quiet before the burst
	signals          map[string]int
	trials           int
}

func (rr *reactResult) add(t reactTrial) {
	rr.trials++
	if t.notQuiet {
		rr.notQuiet++
	}
	if rr.signals == nil {
		rr.signals = map[string]int{}
	}
	if t.first >= 0 {
		rr.first = append(rr.first, ms(t.first))
		rr.signals[t.signal]++
	} else {
		rr.missed++
	}
	if t.full >= 0 {
		rr.full = append(rr.full, ms(t.full))
	}
	rr.cpu = append(rr.cpu, ms(t.cpu))
}

func (rr *reactResult) signalNote() string {
	var parts []string
	for s, c := range rr.signals {
		parts = append(parts, fmt.Sprintf("%s %d", s, c))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

func (e *env) benchReact(r *report) error {
	ncpu := readCPUs(cpusetRoot).Size()
	for _, sampling := range []bool{false, true} {
		for _, n := range []int{1, ncpu} {
			var rr reactResult
			if sampling && n == 1 {
				// One thread stays in its one CPU: no widening, nothing
				// to decay, so the trials can share a daemon.
				if err := e.reactSampling(n, &rr); err != nil {
					return err
				}
			} else {
				for i := 0; i < e.o.reactTrials; i++ {
					t, err := e.reactRun(n, sampling)
					if err != nil {
						return err
					}
					rr.add(t)
				}
			}
			e.reactRows(r, &rr, n, sampling, "")
		}
	}
	return nil
}

func (e *env) reactRows(r *report, rr *reactResult, n int, sampling bool, mode string) {
	if mode == "" {
		mode = "sampling stopped"
		if sampling {
			mode = "sampling running"
		}
	}
	g := fmt.Sprintf("react, %s", mode)
	what := fmt.Sprintf("%d CPU-bound thread(s) in a 1-CPU workload", n)
	goal := "p50 ≤ 100, p99 ≤ 300"
	note := fmt.Sprintf("%d trials; %d without a widening within the window; %d whose daemon had used CPU within 1.5 s before the burst (woken by other processes' CPU pressure: v1's trigger is machine-wide); the signal the debug log names before the first widening: %s", rr.trials, rr.missed, rr.notQuiet, rr.signalNote())
	if n == 1 {
		goal = "no widening (1 thread uses 1 CPU)"
	}
	r.add(row{group: g, metric: what + ": burst → first cpuset widening", unit: "ms", ours: rr.first, goal: goal, trials: true, note: note})
	r.add(row{group: g, metric: what + fmt.Sprintf(": burst → cpuset covers %d CPU(s)", min(n, readCPUs(cpusetRoot).Size())), unit: "ms", ours: rr.full, trials: true})
	r.add(row{group: g, metric: what + ": daemon CPU per trial", unit: "ms", ours: rr.cpu, trials: true})
}
