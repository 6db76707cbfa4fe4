package main

import (
	"fmt"
	"runtime"
	"time"
)

// The processes of an idle run, by index in idleRun.procs: ours with 0
// and with idleWorkloads workloads, power-profiles-daemon, the Go floor,
// then (with -before) the -before binary with 0 and with idleWorkloads.
// A run of the others'-load case holds the same but power-profiles-daemon
// (procPPD is nil there and not sampled).
const (
	procOurs0 = iota
	procOurs100
	procPPD
	procFloor
	procBefore0
	procBefore100
)

// benchIdle measures the daemons at rest: wakeups, CPU time, memory and
// threads of ours with 0 and with idleWorkloads workloads, of
// power-profiles-daemon and of a Go program that only waits (the
// runtime's floor), over a first window from readiness and the idle
// window after it, e.o.idleRuns times; then a react daemon that idled as
// long is timed on a burst; then the others'-load case (benchOthersLoad).
// With -before, that binary's daemons (0 and idleWorkloads workloads)
// idle beside ours in the same windows.
//
// The runs idle side by side, all at once (idle processes do not disturb
// each other's wakeups; running them one after the other would take
// idle-runs × 2 windows). Each process that owns a bus name gets a bus
// of its own.
func (e *env) benchIdle(r *report) error {
	var runs []*idleRun
	defer func() {
		for _, ir := range runs {
			ir.stop(e)
			if ir.rd != nil {
				e.stopReact(ir.rd)
			}
		}
	}()
	for run := 0; run < e.o.idleRuns; run++ {
		if err := e.startIdleRun(run, &runs, true); err != nil {
			return err
		}
	}
	a := make([]idleAcc, len(runs[0].procs))
	stopPerf := e.perfRecord("idle", runs[0].procs[procOurs100])
	// Two windows: the first from readiness (adoption, the first
	// samples, the bus's first callers), then the idle one, 60 s after
	// readiness.
	if err := sampleIdle(runs, a, e.o.idle); err != nil {
		return err
	}
	stopPerf()
	for _, ir := range runs {
		ir.stop(e)
	}
	minutes, err := e.idleBursts(runs)
	if err != nil {
		return err
	}
	e.reactRows(r, &minutes, readCPUs(cpusetRoot).Size(), false, fmt.Sprintf("idle for %v first", 2*e.o.idle))
	e.idleRows(r, a)
	return e.benchOthersLoad(r)
}

// othersLoadLoops is the others'-load case's number of CPU-bound busy
// loops: one more than the online CPUs, so that tasks wait for a CPU
// all the time and the machine's CPU pressure never ends.
func othersLoadLoops() int { return runtime.NumCPU() + 1 }

// benchOthersLoad measures ours (and -before's) with 0 and with
// idleWorkloads idle workloads while someone else keeps the machine busy:
// othersLoadLoops CPU-bound threads of another process (this binary's
// spin helper) in the root cpuset, none of them in a workload. Fresh
// daemons and a Go floor program, e.o.idleRuns runs side by side, are
// started on a quiet machine; then the loops start, and the wakeups are
// measured over the second window after that (the first holds the
// daemons' reaction to the load starting: on cgroup v1 the pressure
// trigger is machine-wide, so every daemon holding one is woken).
func (e *env) benchOthersLoad(r *report) error {
	var runs []*idleRun
	defer func() {
		for _, ir := range runs {
			ir.stop(e)
		}
	}()
	for run := 0; run < e.o.idleRuns; run++ {
		if err := e.startIdleRun(run, &runs, false); err != nil {
			return err
		}
	}
	sp, err := e.startSpinner(cpusetRoot)
	if err != nil {
		return err
	}
	defer sp.stop(e)
	n := othersLoadLoops()
	if err := sp.spin(n); err != nil {
		return err
	}
	a := make([]idleAcc, len(runs[0].procs))
	if err := sampleIdle(runs, a, e.o.idle); err != nil {
		return err
	}
	e.othersLoadRows(r, a, n)
	return nil
}

// idleAcc collects one kind of process's samples over the runs: per
// second wakeups and CPU time (ms) in the idle window and in the first
// one, RSS and PSS (MiB) and threads at the idle window's end.
type idleAcc struct{ wake, cpu, rss, pss, threads, startWake, startCPU stats }

// idleRun is one run of the idle phase: its react daemon, whose burst is
// timed after the windows, and the processes sampled (by the proc*
// indices; nil: not in this run), with each one's last sample.
type idleRun struct {
	rd    *reactDaemon
	procs []*daemonProc
	s0    []procSample
}

// stop stops the run's processes (not its react daemon).
func (ir *idleRun) stop(e *env) {
	for _, p := range ir.procs {
		e.stop(p)
	}
	ir.procs = nil
}

// startIdleRun starts run number run's buses and processes: with quiet,
// a react daemon and power-profiles-daemon too (the quiet idle case),
// else only ours, the Go floor and -before's (the others'-load case). The
// run is appended to *runs before its processes start, so that the
// caller's cleanup stops whatever did start when one fails.
func (e *env) startIdleRun(run int, runs *[]*idleRun, quiet bool) error {
	tag := "idle"
	if !quiet {
		tag = "load"
	}
	bus := func(i int) (string, error) { return e.startBus(fmt.Sprintf("%s%d-%d", tag, run, i)) }
	ir := &idleRun{procs: make([]*daemonProc, procFloor+1)}
	if e.o.before != "" {
		ir.procs = make([]*daemonProc, procBefore100+1)
	}
	ir.s0 = make([]procSample, len(ir.procs))
	*runs = append(*runs, ir)
	if quiet {
		b, err := bus(0)
		if err != nil {
			return err
		}
		if ir.rd, err = e.startReact(fmt.Sprintf("idle-react%d", run), false, b, 0, false); err != nil {
			return err
		}
	}
	type ourProc struct {
		i   int    // index in procs
		bin string // "" = -bin
	}
	ours := []ourProc{{procOurs0, ""}, {procOurs100, ""}}
	if e.o.before != "" {
		ours = append(ours, ourProc{procBefore0, e.o.before}, ourProc{procBefore100, e.o.before})
	}
	for _, o := range ours {
		b, err := bus(1 + o.i)
		if err != nil {
			return err
		}
		oo := ourOpts{bus: b, bin: o.bin}
		if !quiet {
			// Each wake's signal in the log (-keep): the others'-load
			// windows are about what wakes the daemon.
			oo.extra = []string{"--log-level", "debug"}
		}
		n := "0"
		if o.i == procOurs100 || o.i == procBefore100 {
			oo.workloads, oo.sleepers, n = idleWorkloads, idleSleepers, fmt.Sprint(idleWorkloads)
		}
		p, err := e.startOurs(fmt.Sprintf("%s%s-%d-p%d", tag, n, run, o.i), oo)
		if err != nil {
			return err
		}
		ir.procs[o.i] = p
	}
	if quiet {
		b, err := bus(1 + procPPD)
		if err != nil {
			return err
		}
		if ir.procs[procPPD], err = e.startPPDOn(b, false); err != nil {
			return err
		}
	}
	gf, err := e.startGoFloor()
	if err != nil {
		return err
	}
	ir.procs[procFloor] = gf
	return nil
}

// sampleIdle samples every run's processes now, after e.o.idle (the
// first window: a[i].startWake, startCPU) and after e.o.idle more (the
// idle window: a[i].wake, cpu, rss, pss, threads); a[i] is procs[i]'s,
// nil ones skipped.
func sampleIdle(runs []*idleRun, a []idleAcc, idle time.Duration) error {
	var err error
	for _, ir := range runs {
		for i, p := range ir.procs {
			if p == nil {
				continue
			}
			if ir.s0[i], err = sampleProc(p.pid); err != nil {
				return err
			}
		}
	}
	time.Sleep(idle)
	for _, ir := range runs {
		for i, p := range ir.procs {
			if p == nil {
				continue
			}
			s1, err := sampleProc(p.pid)
			if err != nil {
				return err
			}
			sw, cpu := s1.since(ir.s0[i])
			a[i].startWake = append(a[i].startWake, float64(sw)/s1.at.Sub(ir.s0[i].at).Seconds())
			a[i].startCPU = append(a[i].startCPU, ms(cpu))
			ir.s0[i] = s1
		}
	}
	time.Sleep(idle)
	for _, ir := range runs {
		for i, p := range ir.procs {
			if p == nil {
				continue
			}
			s1, err := sampleProc(p.pid)
			if err != nil {
				return err
			}
			dt := s1.at.Sub(ir.s0[i].at).Seconds()
			sw, cpu := s1.since(ir.s0[i])
			a[i].wake = append(a[i].wake, float64(sw)/dt)
			a[i].cpu = append(a[i].cpu, ms(cpu))
			a[i].rss = append(a[i].rss, float64(s1.rssKiB)/1024)
			a[i].pss = append(a[i].pss, float64(s1.pssKiB)/1024)
			a[i].threads = append(a[i].threads, float64(s1.threads))
		}
	}
	return nil
}

// idleBursts times one burst in each run's react daemon, in its packed
// workload, after minutes of idleness with sampling stopped, and stops
// the daemon. The bursts run one after the other: on v1 the trigger is
// machine-wide, so an earlier burst wakes the later daemons too; each
// burst waits until its daemon was quiet for 1.5 s again.
func (e *env) idleBursts(runs []*idleRun) (reactResult, error) {
	var minutes reactResult
	for _, ir := range runs {
		quiet := waitQuiet(ir.rd.p.pid, 1500*time.Millisecond, 10*time.Second)
		t, err := e.reactBurst(ir.rd, ir.rd.sps[0], readCPUs(cpusetRoot).Size())
		e.stopReact(ir.rd)
		ir.rd = nil
		if err != nil {
			return minutes, err
		}
		t.notQuiet = !quiet
		minutes.add(t)
	}
	return minutes, nil
}

// idleRows adds the idle phase's rows: ours with 0 and with idleWorkloads
// workloads (a[procOurs0], a[procOurs100]) beside power-profiles-daemon
// and, for wakeups, beside the Go floor; with -before, that binary's
// wakeups beside ours.
func (e *env) idleRows(r *report, a []idleAcc) {
	win := fmt.Sprintf("the %v window that starts %v after readiness", e.o.idle, e.o.idle)
	first := fmt.Sprintf("the first %v after readiness: start-up work (adopting workloads, the first samples until every workload is found idle, the bus's first callers) is in it", e.o.idle)
	for i, label := range []string{"0 workloads", fmt.Sprintf("%d workloads (%d with a sleeping task)", idleWorkloads, idleSleepers)} {
		g := "idle, " + label
		ours, ppd, floor := a[procOurs0+i], a[procPPD], a[procFloor]
		r.add(row{group: g, metric: "wakeups (context switches, all threads)", unit: "/s", ours: ours.wake, ppd: ppd.wake, goal: map[int]string{0: "0", 1: "≤ 1/s, only while busy"}[i], note: win})
		r.add(row{group: g, metric: "CPU time in the window", unit: "ms", ours: ours.cpu, ppd: ppd.cpu})
		r.add(row{group: g, metric: "wakeups in the first window", unit: "/s", ours: ours.startWake, ppd: ppd.startWake, note: first})
		r.add(row{group: g, metric: "CPU time in the first window", unit: "ms", ours: ours.startCPU, ppd: ppd.startCPU})
		r.add(row{group: g, metric: "wakeups beside the Go runtime's floor", unit: "/s", ours: ours.wake, ppd: floor.wake, goal: "= floor",
			note: "the power-profiles-daemon columns hold a static Go program that only waits for SIGTERM (signal.Notify), run side by side in the same window"})
		if e.o.before != "" {
			r.add(row{group: g, metric: "wakeups beside -before's", unit: "/s", ours: ours.wake, ppd: a[procBefore0+i].wake, goal: "≤ 1.0×",
				note: fmt.Sprintf("the power-profiles-daemon columns hold the -before binary (%s) with the same workloads, run side by side in the same window", e.o.before)})
		}
		r.add(row{group: g, metric: "RSS", unit: "MiB", ours: ours.rss, ppd: ppd.rss, goal: "≤ 1.5×"})
		r.add(row{group: g, metric: "PSS", unit: "MiB", ours: ours.pss, ppd: ppd.pss})
		r.add(row{group: g, metric: "threads", unit: "", ours: ours.threads, ppd: ppd.threads})
	}
}

// othersLoadRows adds the others'-load case's rows: ours with 0 and with
// idleWorkloads idle workloads beside the Go floor and, with -before,
// beside that binary, while n busy loops of another process run.
func (e *env) othersLoadRows(r *report, a []idleAcc, n int) {
	win := fmt.Sprintf("%d CPU-bound busy loops of another process (online CPUs + 1, in the root cpuset, none in a workload) run from readiness on; the wakeups are those of the %v window that starts %v after the loops did (the first holds the reaction to the load starting)", n, e.o.idle, e.o.idle)
	for i, label := range []string{"0 workloads", fmt.Sprintf("%d idle workloads (%d with a sleeping task)", idleWorkloads, idleSleepers)} {
		g := fmt.Sprintf("idle beside others' load (%d busy loops), %s", n, label)
		ours, floor := a[procOurs0+i], a[procFloor]
		r.add(row{group: g, metric: "wakeups beside the Go runtime's floor", unit: "/s", ours: ours.wake, ppd: floor.wake, goal: map[int]string{0: "= floor", 1: "1 pressure wake / 32 s"}[i],
			note: win + "; the power-profiles-daemon columns hold the Go floor program, run side by side in the same window"})
		r.add(row{group: g, metric: "CPU time in the window", unit: "ms", ours: ours.cpu, ppd: floor.cpu})
		r.add(row{group: g, metric: "wakeups in the first window", unit: "/s", ours: ours.startWake, ppd: floor.startWake})
		if e.o.before != "" {
			b := a[procBefore0+i]
			r.add(row{group: g, metric: "wakeups beside -before's", unit: "/s", ours: ours.wake, ppd: b.wake,
				note: fmt.Sprintf("the power-profiles-daemon columns hold the -before binary (%s) with the same workloads, beside the same loops in the same window", e.o.before)})
			r.add(row{group: g, metric: "CPU time in the window beside -before's", unit: "ms", ours: ours.cpu, ppd: b.cpu})
		}
	}
}
