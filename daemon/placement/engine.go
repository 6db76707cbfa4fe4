package placement

import (
	"errors"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/schedpolicyd/schedpolicyd/daemon/snapshot"
	"github.com/schedpolicyd/schedpolicyd/daemon/statefile"
	"github.com/schedpolicyd/schedpolicyd/internal/names"
	"github.com/schedpolicyd/schedpolicyd/policy"
	"github.com/schedpolicyd/schedpolicyd/sysfs"
)

// Engine is the placement the daemon's loop holds: one driver (cgroupfs
// or units: Config.Placement picks one) and what every driver shares,
// held once here: the journal of state.json, the sampling back-off, the
// CPU pressure trigger, the one-shot confirmation of a crowded workload,
// the task-clock gate, the planning half of apply (Apply: the driver
// gives the loads, the engine plans and hands it each workload's wanted
// CPUs to write), the policy the last plan was asked for and that plan,
// and the wakes' handling. The daemon never asks which driver it
// holds; the records state.json holds for the other mode are carried
// from state.json to state.json as they are, so a change of placement
// mode between runs loses nothing.
//
// The driver keeps the central promise through the Journal: a value is
// recorded in state.json (through the store the engine keeps: Keep)
// before it is written, and Restore puts back only what still holds a
// value of ours.
//
// Wakes. The loop selects on WakeC(k) for each wake kind k (nil where
// there is none of that kind: the case never fires), on ConfirmC (the
// pending confirmation is due: WakeConfirmDue) and on EventsC (messages
// of the driver's goroutines), counts the event, then calls OnWake(k) or
// OnMsg(msg), which handle it and return the decisions it calls for, in
// order (none, one, or a scan's and then a check's).
//
// The exported fields are the drivers' (sub-packages), which reach them
// through the *Engine they were made with; the loop uses the methods.
// Owned by the event loop, like its driver.
type Engine struct {
	drv Driver

	Cfg   *Config // the daemon's: refreshed on a reload, read on the loop
	Log   logrus.FieldLogger
	Stats *Counters
	// Journal saves state.json, the store's, with the driver's records
	// (journal.go; Keep).
	Journal
	store *statefile.Store
	// records is the driver's records (KeepRecords), by key; nil for a
	// driver that keeps none.
	records records
	// exempt is the exempt list made over D-Bus (AddExempt), kept in
	// state.json; exempted the keys of the workloads exempt at the last
	// plan (exempt.go).
	exempt   []names.Exempt
	exempted map[string]bool
	// LoopDone closes when the daemon's loop ends (a driver's goroutines
	// stop then).
	LoopDone <-chan struct{}
	Traits   Traits
	// Warned: "placement disabled" was said (once until it works again).
	Warned bool

	// Pressure wakes the loop when tasks wait for a CPU, armed only while
	// there is a workload and backing off from wakes that find none
	// crowded (PressureGate); the driver configures it where it opens.
	// While it covers the workloads, sampling stops while every workload
	// is idle.
	Pressure PressureGate
	// Clock wakes the loop when a packed workload turns busy (ClockGate);
	// nil when off (Config.NoTaskClock, or where the driver has none).
	Clock *ClockGate
	// Backoff is the sampling back-off: consecutive samples with every
	// workload idle.
	Backoff SampleBackoff
	// Confirm is the pending one-shot confirmation of a crowded workload
	// (wake.go).
	Confirm Confirmation
	// Asked is the policy the last plan was asked for (LazyInput), Plan
	// that plan, Allowed the CPUs it could give (PlanInput.Allowed),
	// Written how many workloads its apply wrote.
	Asked   policy.Policy
	Plan    policy.Plan
	Allowed sysfs.CPUSet
	Written int
}

// NewEngine makes an engine reading cfg, logging to log (the driver may
// give it its own) and counting in stats; done closes when the daemon's
// loop ends. Drive gives it its driver.
func NewEngine(cfg *Config, log logrus.FieldLogger, stats *Counters, done <-chan struct{}) *Engine {
	e := &Engine{Cfg: cfg, Log: log, Stats: stats, LoopDone: done}
	e.Traits = Traits{
		WakeLog: func() logrus.FieldLogger { return e.Log }, WokenMsg: "woken", DroppedMsg: "the CPU pressure trigger stopped; while every workload is idle, sampling slows down instead of stopping",
		ConfirmedWhy: "crowded workload confirmed",
	}
	return e
}

// Drive makes d the engine's driver (d was made with e).
func (e *Engine) Drive(d Driver) { e.drv = d }

// Driver is the engine's driver.
func (e *Engine) Driver() Driver { return e.drv }

// Mode is the driver's.
func (e *Engine) Mode() string { return e.drv.Mode() }

// Keep has the engine keep its records in s, state.json held in memory:
// it takes those s holds (LoadRecords), before Open, and from now on the
// journal saves through s (Journal.Save: the records put in, then
// s.Checkpoint). A driver that keeps no records saves s as it is.
func (e *Engine) Keep(s *statefile.Store) {
	e.store = s
	e.LoadRecords(s.State())
	e.loadExempt(s.State().Exempt)
	e.Save = func() error {
		e.PutRecords()
		return s.Checkpoint()
	}
}

// LoadRecords takes the records of st of its driver's kind (KeepRecords)
// into its table.
func (e *Engine) LoadRecords(st statefile.State) {
	if e.records != nil {
		e.records.load(e, st)
	}
}

// PutRecords puts the records, as state.json must hold them now
// (Records.List), into the store; nothing before Keep.
func (e *Engine) PutRecords() {
	if e.records != nil && e.store != nil {
		e.records.put(e.store)
	}
}

func (e *Engine) Open() error { return e.drv.Open() }

func (e *Engine) Close() { e.drv.Close() }

func (e *Engine) Scan() bool { return e.drv.Scan() }

// Apply plans placement for policy eff on topo within the online CPUs and
// has the driver write what changed, once the exempt list is applied to
// its workloads (syncExempt). Nothing is planned before state.json is
// up to date (no plan stands then, so no "placing for performance"
// reason either); force with a new policy or new CPUs applies a
// shrinking plan at once (LazyInput). The driver gives the loads
// (Driver.PlanInput), the balancer plans (policy.PlanPlacement), and the
// driver gets each workload's wanted CPUs (Driver.Write), which it
// writes through the journal's steps (Journal.WriteAll).
func (e *Engine) Apply(eff policy.Policy, topo policy.Topology, online sysfs.CPUSet, force bool) {
	e.syncExempt()
	e.Written = 0
	pi, ok := e.drv.PlanInput(online)
	if !ok {
		e.Plan = policy.Plan{Policy: eff}
		return
	}
	if !e.Flush() {
		e.Plan = policy.Plan{Policy: eff, Lazy: e.Plan.Lazy}
		return
	}
	lazy, fresh := LazyInput(e.Plan.Lazy, e.Asked, eff, e.Allowed, pi.Allowed, force)
	e.Allowed, e.Asked = pi.Allowed, eff
	in := policy.Input{
		Topology: topo, Allowed: pi.Allowed.List(), Policy: eff, Loads: pi.Loads,
		Lazy: lazy, Now: time.Now(), MaxInterval: e.Cfg.SampleInterval,
		DisableLazy: fresh,
	}
	if pi.Slices {
		in.Slices = e.Cfg.Slices
	}
	plan := policy.PlanPlacement(in)
	if plan.CPUs == nil {
		plan.CPUs = map[string][]int{}
	}
	for _, n := range pi.Fixed {
		plan.CPUs[n] = pi.Allowed.List()
	}
	if e.Traits.RaceToIdleLog && plan.Policy != e.Plan.Policy && plan.Policy != eff {
		e.Log.WithFields(logrus.Fields{"policy": eff, "placement": plan.Policy}).Info("load exceeds the packing threshold: placing for performance (race to idle)")
	}
	e.Plan = plan
	want := make([]Want, len(pi.Names))
	for i, n := range pi.Names {
		want[i] = Want{Name: n, CPUs: sysfs.NewCPUSet(plan.CPUs[n]...)}
	}
	e.drv.Write(plan, want)
}

func (e *Engine) Restore() bool { return e.drv.Restore() }

func (e *Engine) Count() int { return e.drv.Count() }

// Hotplug has the driver follow a change of the online CPUs (Hotplugger:
// cgroup v1's parent gets back CPUs that came online, trimmed cpusets
// are re-read); the caller re-plans.
func (e *Engine) Hotplug(before, after sysfs.CPUSet) {
	if h, ok := e.drv.(Hotplugger); ok {
		h.Hotplug(before, after)
	}
}

// Rebalance scans, re-reads what the workloads hold (Rechecker) and their
// load, and forgets the lazy history: the next apply plans afresh
// (Daemon.Rebalance).
func (e *Engine) Rebalance() {
	e.drv.Scan()
	if r, ok := e.drv.(Rechecker); ok {
		r.Recheck()
	}
	e.drv.Sample()
	e.Plan.Lazy = policy.LazyState{}
}

// Sampling reports whether the loop samples periodically now: at most
// once a period, and only while a workload is busy, so that an idle
// machine is not woken. It does while any workload is busy, and for
// IdleSamplesBeforeBackoff samples after the last busy one. Then it
// stops if something will wake it when a workload gets busy again — the
// CPU pressure trigger (PressureGate.Covers) and the driver's own wakes
// (cgroupfs: a task attached) — and keeps sampling at the backed-off
// period (SampleEvery) where there is no trigger. A driver that Polls
// is sampled whatever the back-off.
func (e *Engine) Sampling() bool {
	if p, ok := e.drv.(Poller); ok && p.Polls() {
		return true
	}
	if e.drv.Count() == 0 {
		return false
	}
	return e.Backoff.Sampling(e.Pressure.Covers())
}

// SampleEvery is the current sampling period: the configured one while
// any workload is busy or sampling can stop (Sampling), else doubling
// while all are idle, never beyond maxSamplePeriod (saturating: any
// configured period gives a positive one). A task attached, CPU pressure,
// a new workload or a policy change brings it back to the configured
// period.
func (e *Engine) SampleEvery() time.Duration {
	return e.Backoff.Every(e.Cfg.SampleInterval, e.Pressure.Covers())
}

// OnSample is one periodic sample: the driver's refresh (Refresher), the
// load signals, the back-off, and a confirmation for workloads that look
// crowded (wake.go). It reports whether the workloads changed.
func (e *Engine) OnSample() (changed bool) {
	busy := false
	if r, ok := e.drv.(Refresher); ok {
		changed, busy = r.Refresh()
	}
	e.Backoff.Sampled(e.drv.Sample() || busy)
	e.StartConfirm("sample", false)
	return changed
}

// Freshen, before a forced decision, samples at once where sampling
// stopped while every workload looked idle (Traits.FreshenIdle: or
// backed off): a workload may have become busy since without tasks
// waiting for a CPU (one busy thread per workload). A policy, power or
// workload change is then planned on fresh load signals, and watched
// closely for a while.
func (e *Engine) Freshen() {
	stale := e.drv.Count() > 0 && !e.Sampling()
	if e.Traits.FreshenIdle {
		stale = e.Backoff.Idle()
	}
	if stale {
		e.Backoff.Reset()
		e.drv.Sample()
	}
}

// SyncClock has the driver give the task-clock counters to the workloads
// the last plan packed and close the others' (Clocked); more: some are
// left for another call (Daemon.requestClockSync).
func (e *Engine) SyncClock() (more bool) {
	if c, ok := e.drv.(Clocked); ok {
		return c.SyncClock()
	}
	return false
}

// WakeC is the channel of wake kind k: the CPU pressure trigger, the end
// of its back-off and its loss, the task-clock gate, and the driver's own
// (Watcher); nil where there is none.
func (e *Engine) WakeC(k Wake) <-chan struct{} {
	switch k {
	case WakePressure:
		return e.Pressure.C()
	case WakePressureDone:
		return e.Pressure.Done()
	case WakePressureResume:
		return e.Pressure.ResumeC()
	case WakeClock:
		return e.Clock.C()
	}
	if w, ok := e.drv.(Watcher); ok {
		return w.WakeC(k)
	}
	return nil
}

// ConfirmC fires when the pending confirmation is due.
func (e *Engine) ConfirmC() <-chan time.Time { return e.Confirm.C() }

// EventsC is the channel of the driver's messages (EventSource); nil
// without.
func (e *Engine) EventsC() <-chan Event {
	if s, ok := e.drv.(EventSource); ok {
		return s.EventsC()
	}
	return nil
}

// OnWake handles wake k on the loop and returns the decisions it asks
// for.
func (e *Engine) OnWake(k Wake) Asks {
	switch k {
	case WakePressure:
		e.Stats.PressureWakes.Add(1)
		e.pressureWake()
		return Asks{{"cpu pressure", false}}
	case WakePressureDone:
		err := e.Pressure.Dropped()
		e.Traits.WakeLog().WithError(err).Warn(e.Traits.DroppedMsg)
		return nil
	case WakePressureResume:
		e.Pressure.Resume()
		return nil
	case WakeClock:
		e.clockWake()
		return nil
	case WakeConfirmDue:
		if e.confirmWake() {
			return Asks{{e.Traits.ConfirmedWhy, false}}
		}
		return nil
	}
	if w, ok := e.drv.(Watcher); ok {
		return w.OnWake(k)
	}
	return nil
}

// OnMsg handles a message of the driver's (EventSource).
func (e *Engine) OnMsg(msg Event) Asks {
	if s, ok := e.drv.(EventSource); ok {
		return s.OnMsg(msg)
	}
	return nil
}

// Create makes workload name with pid in it (Creator; CreateWorkload);
// the caller re-plans.
func (e *Engine) Create(name string, pid int) (string, error) {
	if c, ok := e.drv.(Creator); ok {
		return c.Create(name, pid)
	}
	return "", errors.New(e.drv.Mode() + " placement cannot create workloads")
}

// SetOverride sets or clears a workload's own policy (Overrider;
// SetWorkloadPolicy); the caller re-plans.
func (e *Engine) SetOverride(name string, pol policy.Policy) error {
	if o, ok := e.drv.(Overrider); ok {
		return o.SetOverride(name, pol)
	}
	return errors.New(e.drv.Mode() + " placement has no workload overrides")
}

// Status lists the workloads as published (Reporter).
func (e *Engine) Status() []snapshot.WorkloadStatus {
	if r, ok := e.drv.(Reporter); ok {
		return r.Status()
	}
	return nil
}

// ModelLoads adds the workloads to EstimatePower's input (Reporter).
func (e *Engine) ModelLoads(in *ModelInput) {
	if r, ok := e.drv.(Reporter); ok {
		r.ModelLoads(in)
	}
}

// Placed says what the last apply did (Reporter).
func (e *Engine) Placed() (moved, managed int, applied []string) {
	if r, ok := e.drv.(Reporter); ok {
		return r.Placed()
	}
	return 0, 0, nil
}

// LastPlan is the plan of the last apply (its Policy says whether it
// placed for performance, race to idle; its lazy history, whether a
// packing is deferred).
func (e *Engine) LastPlan() policy.Plan { return e.Plan }

// StopWakes drops the pending confirmation, closes the pressure trigger
// and the task-clock gate (the driver closes, or its watch goes).
func (e *Engine) StopWakes() {
	e.Confirm.Drop()
	e.Pressure.Close()
	e.Clock.Close()
	e.Clock = nil
}

// StartConfirm starts a confirmation (signal names what woke the loop)
// over the driver's crowded workloads (Confirmer.Crowded), unless one is
// pending; it returns what was crowded.
func (e *Engine) StartConfirm(signal string, atWake bool) Crowding {
	c, ok := e.drv.(Confirmer)
	if !ok {
		return Crowding{}
	}
	cr := c.Crowded(atWake)
	if e.Confirm.Start(signal, cr.Names, c.RunDelay) {
		e.Log.WithFields(logrus.Fields{"signal": signal, cr.Field: strings.Join(cr.Desc, ",")}).Debug("crowded: confirming")
	}
	return cr
}

// pressureWake samples at once because the CPU pressure trigger fired and
// starts a confirmation for the crowded workloads. With one crowded, the
// sampling looks every period from now (its back-off reset) and so does
// the trigger (PressureGate.Woke); with none — the pressure is someone
// else's — the sample counts as a periodic one (sampling stays stopped
// while every workload is idle) and the trigger backs off. Which signal
// woke the loop and the back-off are logged at debug level.
func (e *Engine) pressureWake() {
	busy := e.drv.Sample()
	cr := e.StartConfirm("cpu pressure", true)
	found := len(cr.Names) > 0
	if found {
		e.Backoff.Reset() // look at once, then every period
	} else {
		e.Backoff.Sampled(busy)
	}
	mute := e.Pressure.Woke(found)
	f := logrus.Fields{"signal": "cpu pressure", "pressure_backoff": mute}
	if e.Traits.WokenDesc {
		f[cr.Field] = strings.Join(cr.Desc, ",")
	}
	e.Traits.WakeLog().WithFields(f).Debug(e.Traits.WokenMsg)
}

// confirmWake ends the pending confirmation: each candidate still placed
// whose threads were runnable on average for more than its CPU count plus
// WakeMargin is saturated (Confirmer.Saturated raises its load), and the
// borderline ones get one more confirmation at once. It reports whether
// any was saturated (then the caller plans).
func (e *Engine) confirmWake() bool {
	c, ok := e.drv.(Confirmer)
	if !ok {
		e.Confirm.Drop()
		return false
	}
	signal, retried := e.Confirm.Signal, e.Confirm.Retried
	cands := slices.Collect(maps.Keys(e.Confirm.Cands))
	r := e.Confirm.Finish(c.CPUs, c.RunDelay)
	LogConfirmed(e.Log, signal, r.Saturated, r.Light)
	if len(r.Names) > 0 {
		e.Pressure.Reset() // ours is busy: listen to the pressure again
	}
	c.Saturated(r.Names)
	e.Confirm.Retry(signal, retried, r, c.RunDelay)
	// Confirmed either way: their counters would signal every period while
	// they stay busy (ClockGate); a retry keeps its candidates'.
	e.Clock.Settle(cands, r.Names, func(n string) bool { _, again := e.Confirm.Cands[n]; return again })
	return len(r.Names) > 0
}

// clockWake handles the counters' signal: a confirmation (wake.go) starts
// over the packed workloads that signalled a burst (ClockGate.bursts),
// unless one is pending; the signal is logged at debug level as "task
// clock".
func (e *Engine) clockWake() {
	k, ok := e.drv.(Clocked)
	c, ok2 := e.drv.(Confirmer)
	if !ok || !ok2 {
		return
	}
	if e.Clock.ConfirmBursts(k.Names(), c.CPUs, k.ClockCrowded, &e.Confirm, c.RunDelay, e.Stats) {
		e.Backoff.Reset() // busy: sample every period from now
		e.Pressure.Reset()
	}
}
