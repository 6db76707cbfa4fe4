package daemon

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/schedpolicyd/schedpolicyd/acpi"
	"github.com/schedpolicyd/schedpolicyd/daemon/bus"
	"github.com/schedpolicyd/schedpolicyd/daemon/energy"
	"github.com/schedpolicyd/schedpolicyd/daemon/energypref"
	"github.com/schedpolicyd/schedpolicyd/daemon/placement"
	"github.com/schedpolicyd/schedpolicyd/daemon/snapshot"
	"github.com/schedpolicyd/schedpolicyd/daemon/statefile"
	"github.com/schedpolicyd/schedpolicyd/policy"
	"github.com/schedpolicyd/schedpolicyd/sysfs"
	"github.com/schedpolicyd/schedpolicyd/systemd"
	"github.com/schedpolicyd/schedpolicyd/tree"
)

// WorkloadStatus describes one managed workload (snapshot.WorkloadStatus),
// as the placement back end reports it.
type WorkloadStatus = snapshot.WorkloadStatus

// ErrStopped is returned by requests made after the event loop ended.
var ErrStopped = errors.New("daemon is stopping")

// Daemon is schedpolicyd. New starts nothing; Run serves until its context
// ends, then restores every workload's original cpuset and unmounts the
// tree.
type Daemon struct {
	cfg    Config
	log    logrus.FieldLogger
	notify notifier

	fs  sysfs.FS
	mon *acpi.Monitor
	// place is the placement engine and its driver, the workloads and
	// their records (backend.go): cgroupfs or systemd units, as
	// Config.Placement says.
	place *placement.Engine
	// store is state.json held in memory (loadState makes it): the loop
	// writes its decision, boost's start-up value and the energy totals
	// into it as they change, the engine its records; it saves itself.
	store *statefile.Store
	tree  tree.Tree
	bus   *bus.Service // nil with bus "none"

	reqs chan func()
	// clockSync asks the loop to sync the task-clock counters with the
	// last plan (daemon/placement/clockwake.go) once the current event is handled: after a
	// D-Bus call's reply, not before (arming 1,000 workloads takes tens of
	// ms). Capacity 1: requests coalesce.
	clockSync chan struct{}
	ready     chan struct{} // closed once READY=1 was sent
	done      chan struct{} // closed when the loop ends

	snap atomic.Pointer[snapshot.Snapshot]

	// Loop-owned state: touched only by the goroutine running Run.

	// dec is the knob's decision: the knob, choices, holds, the power
	// source, the low-battery tier, the followed profile and the policy in
	// force (decider.go).
	dec   *decider
	boost boostState // cpufreq boost: its value, and as found while we manage it (boost.go)
	cpus  cpuView    // the online CPUs, their sched domains and classes (topology.go)
	// kernelPolicy is the value last written to the kernel's own
	// current_sched_policy ("" none yet; writeKernelKnob).
	kernelPolicy string
	// unpublished: recompute leaves publishing to its caller (setKnob
	// publishes a choice only once it is persisted), and its log lines
	// wait in heldLogs, so that the knob change is logged before the policy
	// change it caused, and a change that is not persisted not at all.
	unpublished bool
	heldLogs    []func()
	asideSaid   map[string]string // per knob, the other owner last reported (stepaside.go)
	lpmdOwner   string            // intel-lpmd's unique bus name, "" not running (lpmd.go)
	pref        prefState         // EPP and the platform profile (energypref.go)

	// schedulersSaid is what noteSchedulers last logged (schedulers.go).
	schedulersSaid string

	stats placement.Counters // for Stats; written by the loop only
	// pcfg is what the placement back end reads of cfg
	// (syncPlacementConfig); it holds a pointer to it.
	pcfg placement.Config

	// Energy accounting (package energy; energy_loop.go), loop-owned:
	// the meter, its wrap guard, what is left to save.
	energy energyLoop
	// restartFor: the settings of a reload that stop this daemon for a
	// restart (PrepareRestart); nil for a plain stop.
	restartFor atomic.Pointer[[]string]

	est estimateCache // EstimatePower's last answer (energy_loop.go)

	metrics *metricsFile // nil without Config.MetricsTextfile; loop-owned
	started time.Time    // when Run began
}

// New validates cfg and returns a daemon that has not started anything.
// Zero durations take their defaults; a duration out of its bounds (see
// MinDebounce and the rest in bounds.go, e.g. a SampleInterval above
// MaxSampleInterval) is an error naming the field, as are unknown words in
// TreeBackend, Events, BoostOnBattery and UPower, UPower "on" with Bus
// "none", an invalid DefaultKnob and a SysfsRoot that is not a directory.
func New(cfg Config) (*Daemon, error) {
	cfg, fs, err := resolveConfig(cfg)
	if err != nil {
		return nil, err
	}
	d := &Daemon{
		notify:    systemd.Notifier{},
		cfg:       cfg,
		log:       cfg.Log,
		fs:        fs,
		reqs:      make(chan func()),
		clockSync: make(chan struct{}, 1),
		ready:     make(chan struct{}),
		done:      make(chan struct{}),
		dec:       newDecider(decisionSettingsOf(cfg)),
	}
	d.energy.meter = energy.NewMeter(fs, d.log.WithField("component", "energy"), time.Now, nil)
	// The energy preferences' records go into state.json before each
	// write of theirs (record before writing), through the store.
	d.pref.act = energypref.New(fs, func([]statefile.PrefRecord) error { return d.save() })
	d.place = d.newBackend()
	// Nothing loaded yet: the start's loadState makes the store anew from
	// state.json (keepState).
	d.store = statefile.NewStore(cfg.StateDir, statefile.State{}, d.log)
	d.keepDecision()
	d.place.Keep(d.store)
	d.setMetricsPath(cfg.MetricsTextfile)
	return d, nil
}

// Ready is closed once the daemon is fully up (tree served, bus joined,
// first plan applied, READY=1 sent). It is never closed if Run fails at
// start-up; select on Done too.
func (d *Daemon) Ready() <-chan struct{} { return d.ready }

// Done is closed when Run has returned.
func (d *Daemon) Done() <-chan struct{} { return d.done }

// Snapshot returns the latest published state. Safe for concurrent use.
func (d *Daemon) Snapshot() snapshot.Snapshot {
	if s := d.snap.Load(); s != nil {
		return *s
	}
	return snapshot.Snapshot{}
}

// do runs fn on the event loop and returns its error; it is how the tree and
// D-Bus handlers (other goroutines) change loop state.
func (d *Daemon) do(ctx context.Context, fn func() error) error {
	errc := make(chan error, 1)
	select {
	case d.reqs <- func() { errc <- fn() }:
	case <-d.done:
		return ErrStopped
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case err := <-errc:
		return err
	case <-d.done:
		return ErrStopped
	}
}

// Run starts the daemon and serves until ctx is cancelled (SIGTERM/SIGINT
// in main). In order: lock the state and tree directories (one daemon per
// machine state), load the persisted state, read power source, boost and
// topology, lock the managed parent cgroup (one manager per parent;
// daemon/placement/cgroupfs) and adopt the workloads, serve the tree, join the bus, apply
// the first plan, then send READY=1. On return every workload's original
// cpuset.cpus has been written back, the originals are dropped from the
// state file and the tree is unmounted. The error is nil after a clean
// stop; start-up failures are returned: ErrAlreadyRunning (naming the pid
// of the daemon that holds the state directory, the tree or the managed
// parent), a state or tree directory that is unusable or that others could
// write (lock.go), a tree that cannot be served.
//
// Run is start (everything opened, in order), the wait for the power
// monitor's first state, READY=1, and loop (loop.go); start's stop closes
// it all, in reverse order, once the loop has restored the workloads.
func (d *Daemon) Run(ctx context.Context) error {
	defer close(d.done)
	d.started = time.Now()
	stop, err := d.start(ctx)
	if err != nil {
		return err
	}
	defer stop()
	src := loopSources{power: d.mon.C(), hotplug: d.mon.CPUHotplug(), treeLost: treeGone(d.tree)}
	// The monitor delivers its first state once its event sources are
	// open: only then is the daemon ready (no event is missed after
	// READY=1).
	select {
	case st, ok := <-src.power:
		if ok {
			d.onPowerState(st)
		}
	case <-ctx.Done():
		d.shutdown()
		return nil
	}
	if err := d.notify.Ready(d.status()); err != nil {
		d.log.WithError(err).Warn("sd_notify READY failed")
	}
	d.log.WithFields(logrus.Fields{"policy": d.dec.effective, "power": d.dec.power.Source}).Info("ready")
	close(d.ready)
	iv, err := d.notify.WatchdogInterval()
	if err != nil {
		d.log.WithError(err).Error("no watchdog pings: if systemd's watchdog is on for this unit, it will stop the daemon")
	}
	src.watchdog = iv
	return d.loop(ctx, src)
}

// start opens, in order, everything the loop serves: the state and tree
// directories' locks, state.json (loadState), the power source, boost and
// topology, the placement back end and its workloads, the first snapshot
// and the energy meter's wrap guard, the tree, the bus and its keeper, the
// first decision, and the power monitor. It returns stop, which closes
// them in reverse order (the bus, the background goroutines, the tree,
// the guard, the back end, the locks); on an error it has closed what it
// opened already.
func (d *Daemon) start(ctx context.Context) (stop func(), err error) {
	var undo []func()
	unwind := func() {
		for i := len(undo) - 1; i >= 0; i-- {
			undo[i]()
		}
	}
	defer func() {
		if err != nil {
			unwind()
		}
	}()
	stateLock, err := statefile.PrepareStateDir(d.cfg.StateDir)
	if err != nil {
		return nil, err
	}
	undo = append(undo, func() { stateLock.Close() })
	treeLock, err := statefile.PrepareTreeDir(d.cfg.TreeDir)
	if err != nil {
		return nil, err
	}
	// After the tree is closed (undone after it): the tree directory, its
	// lock file and the directories made for them go, unless something
	// else is in them.
	undo = append(undo, treeLock.Release)

	d.loadState()
	if d.dec.power, err = acpi.Read(d.fs); err != nil {
		d.log.WithError(err).Warn("cannot read power supplies, assuming AC")
		d.dec.power = acpi.Decision{Source: acpi.Unknown, Reason: "power_supply unreadable: " + err.Error()}
	}
	d.dec.startKnobForSource(time.Now())
	d.keepDecision()
	d.boost.value, _ = d.fs.Boost()
	d.readTopology()

	if err := d.place.Open(); errors.Is(err, ErrAlreadyRunning) {
		return nil, err
	}
	undo = append(undo, d.place.Close)
	d.place.Scan()
	// The tree and the bus serve the snapshot: have a true one before
	// either can be read.
	d.dec.settle(time.Now())
	d.energy.meter.Start(d.dec.energyKey(), d.dec.onBattery())
	d.energy.guard = &wrapGuard{}
	undo = append(undo, d.energy.guard.stop)
	d.energy.armGuard()
	d.log.WithField("source", d.energy.meter.Source()).Info("energy source")
	d.snap.Store(d.newSnapshot())

	if err := d.serveTree(ctx); err != nil {
		return nil, err
	}
	undo = append(undo, d.closeTree)

	var wg sync.WaitGroup
	undo = append(undo, wg.Wait)
	undo = append(undo, d.pref.wg.Wait) // askPrefOwners' questions, ended by stopBg below
	bgCtx, stopBg := context.WithCancel(ctx)
	undo = append(undo, stopBg)

	// The first bus connection is made before READY=1; if the bus is
	// unreachable, the keeper goroutine retries with backoff.
	if busLog := d.log.WithField("component", "dbus"); d.cfg.Bus == "none" {
		busLog.Info("D-Bus disabled (bus none): no bus name, no UPower or resume hints")
	} else {
		d.bus = bus.New(bus.Config{
			Bus: d.cfg.Bus, PowerProfilesAPI: d.cfg.PowerProfilesAPI,
			PowerProfilesUnits: d.cfg.PowerProfilesUnits, Log: busLog,
		}, controller{d})
		d.bus.Connect(ctx) // a failure is logged; Keep retries
	}
	undo = append(undo, d.bus.Close)
	wg.Go(func() { d.bus.Keep(bgCtx) })
	d.pref.ctx = bgCtx
	d.askPrefOwners(bgCtx)
	if d.pref.act != nil && d.cfg.Bus != "none" {
		addr := d.cfg.Bus
		d.pref.wg.Go(func() { d.followPrefOwners(bgCtx, addr) })
	}

	d.writeKernelKnob()
	d.applyBoost()
	d.recompute("start", true)

	bus, upower, logind := d.monitorBus()
	d.mon = acpi.NewMonitor(acpi.MonitorConfig{
		FS: d.fs, Events: d.cfg.Events, Debounce: d.cfg.Debounce, Interval: d.cfg.RecheckInterval,
		Settle: d.cfg.Settle, UPower: upower, Logind: logind, AcpidSocket: d.cfg.AcpidSocket,
		Bus: bus, Log: d.log.WithField("component", "acpi"),
	})
	wg.Go(func() {
		if err := d.mon.Run(bgCtx); err != nil {
			d.log.WithError(err).Error("power monitor stopped")
		}
	})
	return unwind, nil
}

// serveTree serves the sched_policy tree at Config.TreeDir (d.tree).
// Errors name the directory.
func (d *Daemon) serveTree(ctx context.Context) error {
	tree, err := tree.ServeTree(d.treeOptions(ctx, d.cfg.TreeBackend))
	if err != nil {
		return fmt.Errorf("serve tree at %s: %w", d.cfg.TreeDir, err)
	}
	d.tree = tree
	d.log.WithFields(logrus.Fields{"dir": tree.Dir(), "backend": tree.Backend()}).Info("serving sched_policy tree")
	return nil
}

// closeTree closes the tree served now (the loop may have remounted it;
// nil when none is).
func (d *Daemon) closeTree() {
	if d.tree == nil {
		return
	}
	if err := d.tree.Close(); err != nil {
		d.log.WithError(err).Warn("closing tree")
	}
}

// loadState takes what state.json holds (statefile.LoadState): the knob
// and the per-source choices, the placement's records, the energy totals
// and boost's start-up value. An unreadable file is warned about and
// defaults are used; a corrupt one is kept beside, renamed.
func (d *Daemon) loadState() {
	st, err := statefile.LoadState(d.cfg.StateDir)
	if err != nil {
		d.log.WithError(err).Warn("ignoring saved state, using defaults")
		if errors.Is(err, statefile.ErrCorruptState) {
			// Keep it: it may hold originals a person can still put back
			// by hand (or a newer version's records after a downgrade).
			from := filepath.Join(d.cfg.StateDir, statefile.StateFile)
			to := fmt.Sprintf("%s.corrupt-%d", from, time.Now().Unix())
			if err := os.Rename(from, to); err == nil {
				d.log.WithField("file", to).Warn("the unusable state file is kept as it was")
			}
		}
	}
	d.keepState(st)
	if st.ChoicesErr != nil {
		d.log.WithError(st.ChoicesErr).Warn("ignoring the saved per-source choices")
	}
	if st.EnergyErr != nil {
		d.log.WithError(st.EnergyErr).Warn("ignoring the saved energy totals")
	}
	if st.ExemptErr != nil {
		d.log.WithError(st.ExemptErr).Warn("ignoring some saved exemptions")
	}
	if n := st.Unfinished(); n != "" {
		d.log.WithField("found", n).Warn("the last run did not finish its stop: each value it set is checked now, restored where it is still ours, and kept where someone else changed it since")
	}
	recoverBoost(d.fs, d.store, d.log, st.Boost)
	if st.PrefsErr != nil {
		d.log.WithError(st.PrefsErr).Warn("ignoring the saved energy preference records")
	}
	d.pref.act.Adopt(st.Prefs)
	d.pref.restore(d.log, d.dec.effective, d.dec.power.Source, "energy preferences restored to the values a previous run that did not stop cleanly found")
}

// keepState makes the store of state.json from st, what it holds: the
// decision takes its knob and choices, the meter its energy totals, the
// engine its records (and carries the other placement mode's as they
// are); what the store holds is what they made of it. Boost's start-up
// value is recoverBoost's.
func (d *Daemon) keepState(st statefile.State) {
	d.store = statefile.NewStore(d.cfg.StateDir, st, d.log)
	d.dec.loadState(st)
	d.keepDecision()
	d.energy.meter = energy.NewMeter(d.fs, d.log.WithField("component", "energy"), time.Now, st.Energy)
	d.store.SetEnergy(d.energy.meter.Totals())
	d.store.SetBoost(nil)
	d.place.Keep(d.store)
}

// keepDecision writes the decision's part of state.json into the store
// (decider.putState): after each change of the knob, whether it is
// chosen and since when, or the per-source choices.
func (d *Daemon) keepDecision() { d.dec.putState(d.store) }

// onWake counts an event and has the back end handle wake k.
func (d *Daemon) onWake(k placement.Wake) {
	d.stats.Events.Add(1)
	d.place.OnWake(k).Do(d.recompute)
}

// onSample is the loop's periodic sample: the back end's (a scan where
// nothing watches the workloads, their load signals, a confirmation for
// any that look crowded: wake.go), then a decision.
func (d *Daemon) onSample() {
	changed := d.place.OnSample()
	d.recompute("sample", changed)
}

// monitorBus is what the power monitor's D-Bus sources get: the daemon's
// own bus (Config.Bus: the one bus the daemon uses, for its name and for
// the UPower and logind hints alike) with the configured UPower and Logind;
// with "none", no bus at all — both off, nothing connects.
func (d *Daemon) monitorBus() (bus string, upower acpi.UPowerMode, logind bool) {
	if d.cfg.Bus == "none" {
		return "", acpi.UPowerOff, false
	}
	return d.cfg.Bus, d.cfg.UPower, d.cfg.Logind
}

// onHotplug handles CPUs going online or offline: the topology is re-read,
// the placement follows (placement.hotplug: the v1 parent gets back CPUs
// that came online, cpusets the kernel trimmed are re-read) and the plan is
// recomputed, so no cpuset we write names an offline CPU and CPUs that
// come back are handed out again.
func (d *Daemon) onHotplug() {
	before := d.cpus.allowed
	d.readTopology()
	if d.cpus.allowed.Equal(before) {
		return
	}
	d.log.WithFields(logrus.Fields{"from": before.String(), "to": d.cpus.allowed.String()}).Info("online CPUs changed")
	d.place.Hotplug(before, d.cpus.allowed)
	d.recompute("cpu hotplug", true)
	d.applyPrefs(true) // a policy whose CPU came online: its value, its original recorded first
}

// readTopology reads the CPUs again (cpuView.update): the topology, the
// efficiency classes, the LP E-cores left to intel-lpmd while it runs
// (said once), the sched domains; the efficiency classes are logged when
// they changed. An unreadable topology keeps the last one, with a warning.
func (d *Daemon) readTopology() {
	t, err := d.fs.CPUTopology()
	if err != nil {
		d.log.WithError(err).Warn("cannot read CPU topology")
		return
	}
	classes := d.fs.CPUClasses(t)
	descs := ClassedCPUDescs(t, classes)
	aside := LpmdStepAside(d.lpmdOwner, classes)
	if aside != "" {
		reserveLPE(descs, classes)
	}
	d.stepAside("LPE confinement", aside)
	topo, err := policy.BuildTopology(descs)
	if err != nil {
		d.log.WithError(err).Warn("cannot build sched domains from the CPU topology")
		return
	}
	// Packing plans fill the cheapest home for their load first
	// (issue 35): the machine's own energy model, else the published
	// ones (MachineEnergy).
	topo = topo.WithHomes(MachineEnergy(policy.ModelFor(topo), d.fs, classes).Homes)
	if said, say := d.cpus.update(t, topo, classes); say {
		d.log.WithFields(map[string]any{"classes": said, "rule": classes.Rule}).Info("cpu efficiency classes")
	}
	d.noteSchedulers(t, classes, aside)
}

func (d *Daemon) shutdown() {
	if r := d.restartFor.Load(); r != nil {
		d.log.WithField("settings", *r).Info("reload: restoring every workload's original CPUs (cpuset.cpus, AllowedCPUs=) to start again with the new configuration")
	} else {
		d.notify.Stopping()
		d.log.Info("stopping: restoring every workload's original CPUs (cpuset.cpus, AllowedCPUs=)")
	}
	if !d.place.Restore() {
		d.log.Warn("not everything could be restored; state.json keeps what is left for the next start")
	}
	d.boost.restore(d.fs, d.store, d.log, d.save)
	d.pref.restore(d.log, d.dec.effective, d.dec.power.Source, "energy preferences restored to the values found")
	// The running energy segment ends with the daemon.
	d.energy.closeSegment(d.dec.energyKey(), d.dec.onBattery(), d.store)
	// What is restored is dropped from state.json; what is not (and the
	// records of other cgroups, and the workloads we created, which the
	// next start still removes once their tasks are gone) stays.
	if err := d.save(); err != nil {
		d.log.WithError(err).Warn("cannot update state.json after restoring")
	}
	d.metrics.remove()
}

// setMetricsPath points the metrics textfile at p ("" none), removing the
// file at the old path.
func (d *Daemon) setMetricsPath(p string) {
	if d.metrics != nil && d.metrics.path == p {
		return
	}
	d.metrics.remove()
	d.metrics = nil
	if p != "" {
		d.metrics = &metricsFile{path: p, log: d.log.WithField("component", "metrics")}
	}
}

// save writes state.json now (statefile.Store.Save), the placement's
// and the energy preferences' records as they are now put in first.
func (d *Daemon) save() error {
	d.place.PutRecords()
	d.store.SetPrefs(d.pref.act.Records())
	return d.store.Save()
}
