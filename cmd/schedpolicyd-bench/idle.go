package main

import (
	"fmt"
	"time"
)

// benchIdle measures the daemons at rest: wakeups, CPU time, memory and
// threads of ours with 0 and with idleWorkloads workloads, of
// power-profiles-daemon and of a Go program that only waits (the
// runtime's floor), over a first window from readiness and the idle
// window after it, e.o.idleRuns times; then a react daemon that idled as
// long is timed on a burst.
//
// The runs idle side by side, all at once (idle processes do not disturb
// each other's wakeups; running them one after the other would take
// idle-runs × 2 windows). Each process that owns a bus name gets a bus
// of its own.
func (e *env) benchIdle(r *report) error {
	var a [4]idleAcc // by idleRun.procs: ours 0, ours 100, ppd, the Go floor
	var runs []*idleRun
	defer func() {
		for _, ir := range runs {
			for _, p := range ir.procs {
				e.stop(p)
			}
			if ir.rd != nil {
				e.stopReact(ir.rd)
			}
		}
	}()
	for run := 0; run < e.o.idleRuns; run++ {
		if err := e.startIdleRun(run, &runs); err != nil {
			return err
		}
	}
	stopPerf := e.perfRecord("idle", runs[0].procs[1])
	// Two windows: the first from readiness (adoption, the first
	// samples, the bus's first callers), then the idle one, 60 s after
	// readiness.
	if err := sampleIdle(runs, &a, e.o.idle); err != nil {
		return err
	}
	stopPerf()
	for _, ir := range runs {
		for _, p := range ir.procs {
			e.stop(p)
		}
		ir.procs = nil
	}
	minutes, err := e.idleBursts(runs)
	if err != nil {
		return err
	}
	e.reactRows(r, &minutes, readCPUs(cpusetRoot).Size(), false, fmt.Sprintf("idle for %v first", 2*e.o.idle))
	e.idleRows(r, &a)
	return nil
}

// idleAcc collects one kind of process's samples over the runs: per
// second wakeups and CPU time (ms) in the idle window and in the first
// one, RSS and PSS (MiB) and threads at the idle window's end.
type idleAcc struct{ wake, cpu, rss, pss, threads, startWake, startCPU stats }

// idleRun is one run of the idle phase: its react daemon, whose burst is
// timed after the windows, and the processes sampled (ours with 0 and
// with idleWorkloads workloads, power-profiles-daemon, the Go floor),
// with each one's last sample.
type idleRun struct {
	rd    *reactDaemon
	procs []*daemonProc
	s0    [4]procSample
}

// startIdleRun starts run number run's buses and processes. The run is
// appended to *runs before its processes start, so that the caller's
// cleanup stops whatever did start when one fails.
func (e *env) startIdleRun(run int, runs *[]*idleRun) error {
	var buses [4]string
	for i := range buses {
		b, err := e.startBus(fmt.Sprintf("idle%d-%d", run, i))
		if err != nil {
			return err
		}
		buses[i] = b
	}
	ir := &idleRun{}
	*runs = append(*runs, ir)
	rd, err := e.startReact(fmt.Sprintf("idle-react%d", run), false, buses[0], 0, false)
	if err != nil {
		return err
	}
	ir.rd = rd
	o0, err := e.startOurs(fmt.Sprintf("idle0-%d", run), ourOpts{bus: buses[1]})
	if err != nil {
		return err
	}
	ir.procs = append(ir.procs, o0)
	o100, err := e.startOurs(fmt.Sprintf("idle100-%d", run), ourOpts{workloads: idleWorkloads, sleepers: idleSleepers, bus: buses[2]})
	if err != nil {
		return err
	}
	ir.procs = append(ir.procs, o100)
	ppd, err := e.startPPDOn(buses[3], false)
	if err != nil {
		return err
	}
	ir.procs = append(ir.procs, ppd)
	gf, err := e.startGoFloor()
	if err != nil {
		return err
	}
	ir.procs = append(ir.procs, gf)
	return nil
}

// sampleIdle samples every run's processes now, after e.o.idle (the
// first window: a[i].startWake, startCPU) and after e.o.idle more (the
// idle window: a[i].wake, cpu, rss, pss, threads).
func sampleIdle(runs []*idleRun, a *[4]idleAcc, idle time.Duration) error {
	var err error
	for _, ir := range runs {
		for i, p := range ir.procs {
			if ir.s0[i], err = sampleProc(p.pid); err != nil {
				return err
			}
		}
	}
	time.Sleep(idle)
	for _, ir := range runs {
		for i, p := range ir.procs {
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
// workloads (a[0], a[1]) beside power-profiles-daemon (a[2]) and, for
// wakeups, beside the Go floor (a[3]).
func (e *env) idleRows(r *report, a *[4]idleAcc) {
	win := fmt.Sprintf("the %v window that starts %v after readiness", e.o.idle, e.o.idle)
	first := fmt.Sprintf("the first %v after readiness: start-up work (adopting workloads, the first samples until every workload is found idle, the bus's first callers) is in it", e.o.idle)
	for i, label := range []string{"0 workloads", fmt.Sprintf("%d workloads (%d with a sleeping task)", idleWorkloads, idleSleepers)} {
		g := "idle, " + label
		r.add(row{group: g, metric: "wakeups (context switches, all threads)", unit: "/s", ours: a[i].wake, ppd: a[2].wake, goal: map[int]string{0: "0", 1: "≤ 1/s, only while busy"}[i], note: win})
		r.add(row{group: g, metric: "CPU time in the window", unit: "ms", ours: a[i].cpu, ppd: a[2].cpu})
		r.add(row{group: g, metric: "wakeups in the first window", unit: "/s", ours: a[i].startWake, ppd: a[2].startWake, note: first})
		r.add(row{group: g, metric: "CPU time in the first window", unit: "ms", ours: a[i].startCPU, ppd: a[2].startCPU})
		r.add(row{group: g, metric: "wakeups beside the Go runtime's floor", unit: "/s", ours: a[i].wake, ppd: a[3].wake, goal: "= floor",
			note: "the power-profiles-daemon columns hold a static Go program that only waits for SIGTERM (signal.Notify), run side by side in the same window"})
		r.add(row{group: g, metric: "RSS", unit: "MiB", ours: a[i].rss, ppd: a[2].rss, goal: "≤ 1.5×"})
		r.add(row{group: g, metric: "PSS", unit: "MiB", ours: a[i].pss, ppd: a[2].pss})
		r.add(row{group: g, metric: "threads", unit: "", ours: a[i].threads, ppd: a[2].threads})
	}
}
