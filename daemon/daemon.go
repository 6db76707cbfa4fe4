package daemon

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/schedpolicyd/schedpolicyd/acpi"
	"github.com/schedpolicyd/schedpolicyd/daemon/bus"
	"github.com/schedpolicyd/schedpolicyd/daemon/energy"
	"github.com/schedpolicyd/schedpolicyd/daemon/snapshot"
	"github.com/schedpolicyd/schedpolicyd/daemon/statefile"
	"github.com/schedpolicyd/schedpolicyd/policy"
	"github.com/schedpolicyd/schedpolicyd/sysfs"
	"github.com/schedpolicyd/schedpolicyd/systemd"
)

// Defaults of Config, the production paths.
const (
	DefaultTreeDir  = "/run/schedpolicyd/sysfs"
	DefaultStateDir = "/var/lib/schedpolicyd"
	DefaultDebounce = 500 * time.Millisecond
	// DefaultRecheckInterval (0) is automatic: the power monitor re-reads
	// every acpi.DefaultInterval (60 s) only while its event sources do not
	// cover the machine (acpi.MonitorConfig.Interval).
	DefaultRecheckInterval time.Duration = 0
	DefaultSampleInterval                = policy.DefaultSamplePeriod
	// DefaultUPower: follow UPower while it is on the bus.
	DefaultUPower = acpi.UPowerAuto
	// DefaultBoostOnBattery: never touch boost.
	DefaultBoostOnBattery = BoostKeep
)

// BoostMode is Config.BoostOnBattery, the boost_on_battery setting.
type BoostMode string

// Boost modes: on battery cpufreq boost is left alone, disabled or
// enabled.
const (
	BoostKeep    BoostMode = "keep"
	BoostDisable BoostMode = "off"
	BoostEnable  BoostMode = "on"
)

// BoostModes are the words ParseBoostMode accepts, in the order its error
// names them.
var BoostModes = []BoostMode{BoostKeep, BoostDisable, BoostEnable}

// ParseBoostMode returns the boost mode named s (the boost_on_battery key
// and --boost-on-battery), or an error naming the words it accepts.
func ParseBoostMode(s string) (BoostMode, error) {
	if m := BoostMode(s); slices.Contains(BoostModes, m) {
		return m, nil
	}
	return "", fmt.Errorf("boost_on_battery %q: want keep, off or on", s)
}

// Config is everything the daemon needs; cmd/schedpolicyd fills it from
// flags. Zero durations take the defaults above.
type Config struct {
	// SysfsRoot is the sysfs root read for power_supply, topology and boost
	// ("/sys", or a mock tree).
	SysfsRoot string
	// CgroupRoot is the managed parent cgroup; each direct child is a
	// workload (placement "cgroupfs"). "" disables that placement.
	CgroupRoot string
	// Placement is PlacementCgroupfs (default) or PlacementSystemd: units
	// of the Manage slices placed through systemd's D-Bus API, CgroupRoot
	// unused. The command line resolves "auto" (ResolvePlacement).
	Placement string
	// Manage lists the slices whose direct child services and scopes are
	// workloads with placement "systemd" (nil: DefaultManage).
	Manage []string
	// Slices are the slice rules ([[slice]] in schedpolicyd.conf(5)) by
	// slice name, for placement "systemd": each is policy.SliceRule, its
	// Policy balance or powersaving, and names a slice of Manage (a user
	// slice, app.slice, background.slice or session.slice, names each
	// user's). nil: none. Anything else is an error.
	Slices map[string]policy.SliceRule
	// ProcRoot is /proc (used for cgroup v1 usage accounting).
	ProcRoot string
	// TreeDir is where the virtual sysfs tree is served.
	TreeDir string
	// TreeBackend is how the tree is served ("" means sysfs.BackendAuto).
	TreeBackend sysfs.Backend
	// StateDir holds state.json.
	StateDir string
	// Bus is the one D-Bus the daemon uses, for its own name and for the
	// UPower and logind hints alike: "system", "session", a D-Bus address,
	// or "none" for no D-Bus at all (UPower and Logind are then off; UPower
	// "on" is an error).
	Bus string
	// Events is the power-event source ("" means acpi.EventsAuto).
	Events acpi.EventSource
	// Debounce delays a re-read after an event (default 500 ms; at most
	// MaxDebounce, bounds.go).
	Debounce time.Duration
	// RecheckInterval re-reads the power source even without events: 0
	// (default) automatic — every 60 s, only while no event source covers
	// the machine; positive: always at that period; negative: never (see
	// acpi.MonitorConfig.Interval).
	RecheckInterval time.Duration
	// SampleInterval is the workload utilisation sampling period while
	// any workload is busy (default 1 s; MinSampleInterval to
	// MaxSampleInterval, bounds.go); sampling stops while every workload is
	// idle (see placement.sampling).
	SampleInterval time.Duration
	// UtilHalfLife is the half-life of the decayed utilisation average
	// (default policy.DefaultHalfLife, 2 s; MinUtilHalfLife to
	// MaxUtilHalfLife, bounds.go; see policy/pelt.go).
	UtilHalfLife time.Duration
	// TreeNoPollHack is sysfs.TreeOptions.NoPollHack: set by the daemon
	// binary, which never reads its own tree; a process that does (tests
	// running the daemon in-process) leaves it false.
	TreeNoPollHack bool
	// NoTaskClock turns the task-clock wake off (daemon/clockwake.go):
	// a packed workload turning busy is then noticed by CPU pressure and
	// sampling only.
	NoTaskClock bool
	// DefaultKnob, if set, is the knob used until a choice is saved in
	// state.json (config keys power_aware, power_aware_policy).
	DefaultKnob *policy.Knob
	// BoostOnBattery manages cpufreq boost on power-source changes:
	// BoostKeep (the default: never touch it), BoostDisable or
	// BoostEnable on battery; on AC the value found at start-up is restored, and on exit.
	BoostOnBattery BoostMode
	// UPower ("" means DefaultUPower, acpi.UPowerAuto), Logind and
	// AcpidSocket ("" = off) enable the optional power event sources of
	// package acpi; all of them only trigger a re-read of sysfs. UPower and
	// Logind use Bus.
	UPower      acpi.UPowerMode
	Logind      bool
	AcpidSocket string
	// Settle is the extra re-read after an event-driven one (acpi
	// DefaultSettle when 0; negative disables).
	Settle time.Duration
	// PowerProfilesAPI is the power-profiles D-Bus API
	// (net.hadess.PowerProfiles and org.freedesktop.UPower.PowerProfiles)
	// that GNOME, KDE and powerprofilesctl use: bus.PowerProfilesOff ("",
	// the default here; "false"), bus.PowerProfilesServe ("on", "true":
	// serve it) or bus.PowerProfilesAuto ("auto": follow the process that
	// owns it, serve it while nobody does; bus/ppfollow.go). Other words
	// are an error.
	PowerProfilesAPI string
	// ProfileMap is the power_aware each followed profile ("power-saver",
	// "balanced", "performance") selects; nil or a missing profile:
	// DefaultProfileMap. Another key or a value outside 0..2 is an error.
	ProfileMap map[string]policy.PowerAware
	// PowerProfilesUnits are the systemd service units of the
	// power-profiles implementations: while one is installed (its unit
	// file exists and is not masked) "auto" never serves the names, and
	// a start of one releases them at once (bus/ppunits.go). nil:
	// bus.DefaultPowerProfilesUnits; a name that is not NAME.service is
	// an error.
	PowerProfilesUnits []string
	// LowBattery is the low-battery tier, in percent of the system
	// batteries' charge (acpi.BatteryPercent): below it, on battery, the
	// automatic mode (power_aware 1) uses powersaving whatever
	// power_aware_policy says, until the charge is back at LowBattery +
	// LowBatteryHysteresis. 0 (the default here) turns it off; 1–100, else
	// an error.
	LowBattery int
	// MetricsTextfile, when not "", is where the node_exporter textfile
	// collector file is kept (metrics.go): an absolute path ending in
	// ".prom" in an existing directory, rewritten whenever a value in it
	// changed and removed on a clean stop. "" (the default): none.
	MetricsTextfile string
	// ConfigDigest names the configuration file content this Config was
	// made from, "sha256:HEX" of its bytes ("" without a file), published
	// as the ConfigDigest property so that probe can tell whether the
	// running daemon applies the file as it is now.
	ConfigDigest string
	Log          logrus.FieldLogger

	// pressureFile, for tests: the PSI file the cgroupfs placement's
	// pressure trigger watches instead of the kernel's for the managed
	// parent (<ProcRoot>/pressure/cpu on cgroup v1, machine-wide, which a
	// busy test machine keeps firing).
	pressureFile string
}

// WorkloadStatus describes one managed workload (snapshot.WorkloadStatus);
// the name stays here for the placements (placement_create.go, units.go),
// which report it.
type WorkloadStatus = snapshot.WorkloadStatus

// ErrStopped is returned by requests made after the event loop ended.
var ErrStopped = errors.New("daemon is stopping")

// Daemon is schedpolicyd. New starts nothing; Run serves until its context
// ends, then restores every workload's original cpuset and unmounts the
// tree.
type Daemon struct {
	cfg    Config
	log    logrus.FieldLogger
	notify systemd.Notifier

	fs  sysfs.FS
	mon *acpi.Monitor
	// place is the placement back end, the workloads and their records
	// (backend.go): cgroupfs or systemd units, as Config.Placement says.
	place backend
	// kept are the records of state.json as this run found them: the
	// back end's own are replaced at each save (putRecords), the other
	// placement mode's are saved back as they are (loadRecords).
	kept statefile.State
	tree sysfs.Tree
	bus  *bus.Service // nil with bus "none"

	reqs chan func()
	// clockSync asks the loop to sync the task-clock counters with the
	// last plan (clockwake.go) once the current event is handled: after a
	// D-Bus call's reply, not before (arming 1,000 workloads takes tens of
	// ms). Capacity 1: requests coalesce.
	clockSync chan struct{}
	ready     chan struct{} // closed once READY=1 was sent
	done      chan struct{} // closed when the loop ends

	snap atomic.Pointer[snapshot.Snapshot]

	// Loop-owned state: touched only by the goroutine running Run.
	knob       policy.Knob
	knobChosen bool                 // knob is an explicit choice, not the configured default
	boostOrig  []sysfs.BoostSetting // boost as found, while we manage it
	power      acpi.Decision
	boost      string
	topo       policy.Topology
	topoProp   []snapshot.TopologyEntry // the Topology property (topologyEntries)
	classProp  []snapshot.CPUClassEntry // the CPUClasses property (classEntries)
	allowed    sysfs.CPUSet
	effective  policy.Policy
	// boostUncontrollable: boost cannot be controlled on this machine
	// (sysfs.BoostNotControllable); said once, then left alone.
	boostUncontrollable bool
	// kernelPolicy is the value last written to the kernel's own
	// current_sched_policy ("" none yet; writeKernelKnob).
	kernelPolicy string
	// unpublished: recompute leaves publishing to its caller (setKnob
	// publishes a choice only once it is persisted), and its log lines
	// wait in heldLogs, so that the knob change is logged before the policy
	// change it caused, and a change that is not persisted not at all.
	unpublished  bool
	heldLogs     []func()
	lastSaved    statefile.State // what state.json holds, as last saved by saveState
	holds        map[uint32]*snapshot.Hold
	holdIdx      holdIndex // beside holds: cookies, holds per owner (holds.go)
	lastChange   time.Time
	policyReason string
	follow       followState            // the power-profiles daemon followed (follow.go)
	choices      map[string]policy.Knob // explicit choice per power source (choices.go); copy on write
	asideSaid    map[string]string      // per knob, the other owner last reported (stepaside.go)
	classesSaid  string                 // the efficiency classes last logged (classes.go)
	lpmdOwner    string                 // intel-lpmd's unique bus name, "" not running (lpmd.go)
	classes      sysfs.CPUClasses       // the efficiency classes last read (classes.go)
	batteryPct   int                    // the system batteries' charge, percent; -1 unknown
	lowBattery   bool                   // the low-battery tier is in force (lowbattery.go)

	stats counters // for Stats; written by the loop only

	// Energy accounting (package energy; energy_loop.go), loop-owned.
	energy *energy.Meter
	// energyDirty: the totals changed since they were last saved.
	energyDirty bool
	// saveFailing: the last saveBackground failed (and said so).
	saveFailing bool
	// restartFor: the settings of a reload that stop this daemon for a
	// restart (PrepareRestart); nil for a plain stop.
	restartFor atomic.Pointer[[]string]
	// energyRefreshed is when RefreshEnergy last read the counters.
	energyRefreshed time.Time
	// energyGuard fires when RAPL must be read so no wrap is missed; nil
	// before start.
	energyGuard *wrapGuard

	est estimateCache // EstimatePower's last answer (energy_loop.go)

	metrics *metricsFile // nil without Config.MetricsTextfile; loop-owned
	started time.Time    // when Run began
}

// resolveConfig is New's validation: cfg with its defaults filled in and
// the sysfs tree at SysfsRoot, or the error New returns. It starts
// nothing; Reload validates a new configuration with it.
func resolveConfig(cfg Config) (Config, sysfs.FS, error) {
	if cfg.Log == nil {
		l := logrus.New()
		l.Out = os.Stderr
		cfg.Log = l
	}
	if cfg.SysfsRoot == "" {
		cfg.SysfsRoot = sysfs.DefaultRoot
	}
	if cfg.ProcRoot == "" {
		cfg.ProcRoot = "/proc"
	}
	if cfg.TreeDir == "" {
		cfg.TreeDir = DefaultTreeDir
	}
	if cfg.TreeBackend == "" {
		cfg.TreeBackend = sysfs.BackendAuto
	}
	if cfg.StateDir == "" {
		cfg.StateDir = DefaultStateDir
	}
	if cfg.Bus == "" {
		cfg.Bus = "system"
	}
	if cfg.Events == "" {
		cfg.Events = acpi.EventsAuto
	}
	if cfg.Debounce == 0 {
		cfg.Debounce = DefaultDebounce
	}
	if cfg.SampleInterval == 0 {
		cfg.SampleInterval = DefaultSampleInterval
	}
	if cfg.UtilHalfLife == 0 {
		cfg.UtilHalfLife = policy.DefaultHalfLife
	}
	if err := checkBounds(cfg); err != nil {
		return Config{}, sysfs.FS{}, err
	}
	if cfg.BoostOnBattery == "" {
		cfg.BoostOnBattery = DefaultBoostOnBattery
	}
	if err := cfg.checkWords(); err != nil {
		return Config{}, sysfs.FS{}, err
	}
	switch cfg.Placement {
	case "":
		cfg.Placement = PlacementCgroupfs
	case PlacementCgroupfs:
	case PlacementSystemd:
		cfg.CgroupRoot = "" // units, not a managed parent
	default:
		return Config{}, sysfs.FS{}, fmt.Errorf("placement %q: want %s or %s", cfg.Placement, PlacementCgroupfs, PlacementSystemd)
	}
	for _, sl := range cfg.Manage {
		if !strings.HasSuffix(sl, ".slice") || strings.ContainsAny(sl, "/ \x00") || sl == ".slice" {
			return Config{}, sysfs.FS{}, fmt.Errorf("manage: %q is not the name of a slice (NAME.slice)", sl)
		}
	}
	if err := checkSlices(cfg.Slices, cfg.Manage); err != nil {
		return Config{}, sysfs.FS{}, err
	}
	if cfg.UPower == "" {
		cfg.UPower = DefaultUPower
	}
	if _, err := acpi.ParseUPowerMode(string(cfg.UPower)); err != nil {
		return Config{}, sysfs.FS{}, err
	}
	if cfg.Bus == "none" && cfg.UPower == acpi.UPowerOn {
		return Config{}, sysfs.FS{}, errors.New(`upower "on" needs D-Bus, and bus is "none": use upower "auto" or "off", or another bus`)
	}
	if cfg.DefaultKnob != nil {
		if err := cfg.DefaultKnob.Validate(); err != nil {
			return Config{}, sysfs.FS{}, fmt.Errorf("default knob: %w", err)
		}
	}
	if err := CheckMetricsTextfile(cfg.MetricsTextfile); err != nil {
		return Config{}, sysfs.FS{}, err
	}
	if err := checkPowerProfiles(&cfg); err != nil {
		return Config{}, sysfs.FS{}, err
	}
	if cfg.LowBattery < 0 || cfg.LowBattery > 100 {
		return Config{}, sysfs.FS{}, fmt.Errorf("low_battery %d: want a percentage 1 to 100, or 0 for off", cfg.LowBattery)
	}
	fs, err := sysfs.NewFS(cfg.SysfsRoot)
	if err != nil {
		return Config{}, sysfs.FS{}, err
	}
	return cfg, fs, nil
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
		cfg:       cfg,
		log:       cfg.Log,
		fs:        fs,
		reqs:      make(chan func()),
		clockSync: make(chan struct{}, 1),
		ready:     make(chan struct{}),
		done:      make(chan struct{}),
		holds:     map[uint32]*snapshot.Hold{},

		batteryPct: -1,
	}
	d.energy = energy.NewMeter(fs, d.log.WithField("component", "energy"), time.Now, nil)
	d.place = d.newBackend()
	d.setMetricsPath(cfg.MetricsTextfile)
	return d, nil
}

// checkWords returns the error of the first of TreeBackend, Events and
// BoostOnBattery that is not one of its words (the same message the flags
// give).
func (cfg Config) checkWords() error {
	if _, err := sysfs.ParseBackend(string(cfg.TreeBackend)); err != nil {
		return err
	}
	if _, err := acpi.ParseEventSource(string(cfg.Events)); err != nil {
		return err
	}
	_, err := ParseBoostMode(string(cfg.BoostOnBattery))
	return err
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
// cglock.go) and adopt the workloads, serve the tree, join the bus, apply
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
	d.log.WithFields(logrus.Fields{"policy": d.effective, "power": d.power.Source}).Info("ready")
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
	stateLock, err := prepareStateDir(d.cfg.StateDir)
	if err != nil {
		return nil, err
	}
	undo = append(undo, func() { stateLock.Close() })
	treeLock, err := prepareTreeDir(d.cfg.TreeDir)
	if err != nil {
		return nil, err
	}
	// After the tree is closed (undone after it): the tree directory, its
	// lock file and the directories made for them go, unless something
	// else is in them.
	undo = append(undo, treeLock.release)

	d.loadState()
	if d.power, err = acpi.Read(d.fs); err != nil {
		d.log.WithError(err).Warn("cannot read power supplies, assuming AC")
		d.power = acpi.Decision{Source: acpi.Unknown, Reason: "power_supply unreadable: " + err.Error()}
	}
	d.startKnobForSource()
	d.boost, _ = d.fs.Boost()
	d.readTopology()

	if err := d.place.open(); errors.Is(err, ErrAlreadyRunning) {
		return nil, err
	}
	undo = append(undo, d.place.close)
	d.place.scan()
	// The tree and the bus serve the snapshot: have a true one before
	// either can be read.
	d.effective, d.policyReason = d.decide()
	d.lastChange = time.Now()
	d.energy.Start(d.energyKey(), d.power.Source == acpi.Battery)
	d.energyGuard = &wrapGuard{}
	undo = append(undo, d.energyGuard.stop)
	d.armEnergyGuard()
	d.log.WithField("source", d.energy.Source()).Info("energy source")
	d.snap.Store(d.newSnapshot())

	tree, err := sysfs.ServeTree(d.treeOptions(ctx, d.cfg.TreeBackend))
	if err != nil {
		return nil, fmt.Errorf("serve tree at %s: %w", d.cfg.TreeDir, err)
	}
	d.tree = tree
	undo = append(undo, func() {
		// The tree served now: the loop may have remounted it.
		if d.tree == nil {
			return
		}
		if err := d.tree.Close(); err != nil {
			d.log.WithError(err).Warn("closing tree")
		}
	})
	d.log.WithFields(logrus.Fields{"dir": tree.Dir(), "backend": tree.Backend()}).Info("serving sched_policy tree")

	var wg sync.WaitGroup
	undo = append(undo, wg.Wait)
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
		}, d)
		d.bus.Connect(ctx) // a failure is logged; Keep retries
	}
	undo = append(undo, d.bus.Close)
	wg.Go(func() { d.bus.Keep(bgCtx) })

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
	d.knob, d.knobChosen = st.StartKnob(d.cfg.DefaultKnob), st.Chosen
	d.choices = st.Choices
	if st.ChoicesErr != nil {
		d.log.WithError(st.ChoicesErr).Warn("ignoring the saved per-source choices")
	}
	d.loadRecords(st)
	if st.EnergyErr != nil {
		d.log.WithError(st.EnergyErr).Warn("ignoring the saved energy totals")
	}
	d.energy = energy.NewMeter(d.fs, d.log.WithField("component", "energy"), time.Now, st.Energy)
	if n := st.Unfinished(); n != "" {
		d.log.WithField("found", n).Warn("the last run did not finish its stop: each value it set is checked now, restored where it is still ours, and kept where someone else changed it since")
	}
	d.recoverBoost(st.Boost)
}

// onWake counts an event and has the back end handle wake k.
func (d *Daemon) onWake(k wake) {
	d.stats.events.Add(1)
	d.place.onWake(k, d.recompute)
}

// onSample is the loop's periodic sample: the back end's (a scan where
// nothing watches the workloads, their load signals, a confirmation for
// any that look crowded: wake.go), then a decision.
func (d *Daemon) onSample() {
	changed := d.place.onSample()
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

func (d *Daemon) onPowerState(st acpi.State) {
	// The monitor already logged the change with its reason.
	from := d.power.Source
	d.power = st.Power
	d.boost = st.Boost
	d.setBatteryPercent(st.BatteryPercent)
	if from != st.Power.Source {
		d.log.WithFields(logrus.Fields{"from": from, "to": st.Power.Source, "trigger": st.Trigger}).Debug("power source applied")
		d.applyBoost()
		d.knobForSource(from, st.Power.Source)
	}
	d.recompute("power source", true)
}

// onHotplug handles CPUs going online or offline: the topology is re-read,
// the placement follows (placement.hotplug: the v1 parent gets back CPUs
// that came online, cpusets the kernel trimmed are re-read) and the plan is
// recomputed, so no cpuset we write names an offline CPU and CPUs that
// come back are handed out again.
func (d *Daemon) onHotplug() {
	before := d.allowed
	d.readTopology()
	if d.allowed.Equal(before) {
		return
	}
	d.log.WithFields(logrus.Fields{"from": before.String(), "to": d.allowed.String()}).Info("online CPUs changed")
	d.place.hotplug(before, d.allowed)
	d.recompute("cpu hotplug", true)
}

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
	d.noteClasses(classes)
	d.classProp = classEntries(classes, d.classProp)
	d.classes = classes
	d.topo = topo
	d.topoProp = topologyEntries(t, d.topoProp)
	d.allowed = t.Online
}

func (d *Daemon) shutdown() {
	if r := d.restartFor.Load(); r != nil {
		d.log.WithField("settings", *r).Info("reload: restoring every workload's original CPUs (cpuset.cpus, AllowedCPUs=) to start again with the new configuration")
	} else {
		d.notify.Stopping()
		d.log.Info("stopping: restoring every workload's original CPUs (cpuset.cpus, AllowedCPUs=)")
	}
	if !d.place.restore() {
		d.log.Warn("not everything could be restored; state.json keeps what is left for the next start")
	}
	d.restoreBoost()
	// The running energy segment ends with the daemon.
	d.energy.CloseSegment(d.energyKey(), d.power.Source == acpi.Battery)
	// What is restored is dropped from state.json; what is not (and the
	// records of other cgroups, and the workloads we created, which the
	// next start still removes once their tasks are gone) stays.
	if err := d.saveState(d.stateWith(d.knob)); err != nil {
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

// saveState writes st to state.json (statefile.SaveState) and remembers it.
func (d *Daemon) saveState(st statefile.State) error {
	if err := statefile.SaveState(d.cfg.StateDir, st); err != nil {
		return err
	}
	d.lastSaved = st
	return nil
}

// saveBackground saves state.json for the placement and the energy
// totals, which retry at every event and sample until it works: a failure
// is logged once, at error level with its cause, its repeats at debug
// level, and the first save that works again once (saveFailing).
func (d *Daemon) saveBackground() error {
	err := d.saveState(d.stateWith(d.knob))
	switch {
	case err != nil && !d.saveFailing:
		d.log.WithError(err).Error("cannot save state.json; no cpuset or AllowedCPUs= is changed, and energy totals are kept in memory, until it can be")
		d.saveFailing = true
	case err != nil:
		d.log.WithError(err).Debug("cannot save state.json yet")
	case d.saveFailing:
		d.log.Info("state.json saved again")
		d.saveFailing = false
	}
	return err
}

// stateWith is what state.json must hold with knob k: the knob, the boost
// setting found at start-up while we manage it, the placement's records
// (and the other placement mode's, as they were found), the energy totals
// and the per-source choices.
func (d *Daemon) stateWith(k policy.Knob) statefile.State {
	st := statefile.State{Knob: k, Chosen: d.knobChosen, Boost: d.boostOrig, Cgroups: d.kept.Cgroups, Units: d.kept.Units, Energy: d.energy.Totals(), Choices: d.choices}
	d.place.putRecords(&st)
	return st
}

// StartOnly names the settings that differ between the running
// configuration old and nc (both as resolveConfig leaves them) and that
// are read only as the daemon starts: the event sources, the roots and
// directories, the bus, the placement. Sorted; nil when none differs.
func startOnly(old, nc Config) []string {
	var out []string
	for name, changed := range map[string]bool{
		"sysfs_root": nc.SysfsRoot != old.SysfsRoot, "cgroup_root": nc.CgroupRoot != old.CgroupRoot,
		"tree_dir": nc.TreeDir != old.TreeDir, "tree_backend": nc.TreeBackend != old.TreeBackend,
		"state_dir": nc.StateDir != old.StateDir, "bus": nc.Bus != old.Bus, "events": nc.Events != old.Events,
		"debounce": nc.Debounce != old.Debounce, "recheck_interval": nc.RecheckInterval != old.RecheckInterval,
		"upower": nc.UPower != old.UPower, "logind": nc.Logind != old.Logind, "acpid_socket": nc.AcpidSocket != old.AcpidSocket,
		"placement": nc.Placement != old.Placement, "manage": !reflect.DeepEqual(nc.Manage, old.Manage),
		"task_clock": nc.NoTaskClock != old.NoTaskClock,
	} {
		if changed {
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out
}

// ReloadNeedsRestart checks cfg as Reload does and names the settings in
// which it differs from the running configuration that only a start
// reads (nil: Reload applies all of cfg). The caller then stops this
// daemon for a restart (PrepareRestart, then ending Run's context) and
// runs a new one with cfg: every workload is restored first and placed
// again by the new one. Errors: an invalid cfg, or a stopped daemon.
func (d *Daemon) ReloadNeedsRestart(ctx context.Context, cfg Config) ([]string, error) {
	nc, _, err := resolveConfig(cfg)
	if err != nil {
		return nil, err
	}
	var names []string
	err = d.do(ctx, func() error { names = startOnly(d.cfg, nc); return nil })
	return names, err
}

// PrepareRestart makes the stop that follows (Run's context ends) one of
// a restart with a new configuration (ReloadNeedsRestart): it restores
// every workload as a stop does, but tells systemd nothing (the new
// daemon's READY=1 ends the reload), and says why.
func (d *Daemon) PrepareRestart(settings []string) {
	d.restartFor.Store(&settings)
}

// Reload applies a new configuration (SIGHUP). The validated cfg replaces
// the running one for what can change at run time — boost_on_battery,
// power_profiles_api and power_profiles_units (the bus connection is
// remade), the profile map, the slice rules, low_battery, the sampling
// period, metrics_textfile (the file at the old path is removed), the
// default knob. What only a start reads (ReloadNeedsRestart) is not
// applied here: a warning names it. It returns an error only for an
// invalid cfg or a stopped daemon; nothing changes then.
func (d *Daemon) Reload(ctx context.Context, cfg Config) error {
	nc, _, err := resolveConfig(cfg) // the same validation and defaults as at start
	if err != nil {
		return err
	}
	return d.do(ctx, func() error {
		old := d.cfg
		if restart := startOnly(old, nc); len(restart) > 0 {
			d.log.WithField("settings", restart).Warn("reload: these settings change at the next start")
		}
		d.cfg.SampleInterval = nc.SampleInterval
		d.cfg.ConfigDigest = nc.ConfigDigest
		d.cfg.DefaultKnob = nc.DefaultKnob
		if nc.DefaultKnob != nil && !d.knobChosen && *nc.DefaultKnob != d.knob {
			// No explicit choice yet: the configured default follows the
			// file.
			d.log.WithFields(logrus.Fields{"power_aware": nc.DefaultKnob.PowerAware, "power_aware_policy": nc.DefaultKnob.PowerAwarePolicy}).Info("reload: default knob changed")
			d.knob = *nc.DefaultKnob
			if err := d.saveState(d.stateWith(d.knob)); err != nil {
				d.log.WithError(err).Warn("reload: cannot save state")
			}
		} else if nc.DefaultKnob != nil && d.knobChosen && *nc.DefaultKnob != d.knob {
			d.log.Info("reload: the configured default knob is not applied: a choice made through the tree, D-Bus or the CLI is in force")
		}
		if nc.BoostOnBattery != old.BoostOnBattery {
			d.cfg.BoostOnBattery = nc.BoostOnBattery
			if nc.BoostOnBattery == BoostKeep {
				d.restoreBoost()
			}
			d.boostUncontrollable = false
			d.applyBoost()
		}
		if nc.MetricsTextfile != old.MetricsTextfile {
			d.cfg.MetricsTextfile = nc.MetricsTextfile
			d.setMetricsPath(nc.MetricsTextfile) // written by the recompute below
		}
		if !reflect.DeepEqual(nc.Slices, old.Slices) {
			d.cfg.Slices = nc.Slices
			d.log.WithField("slices", sliceRulesString(nc.Slices)).Info("reload: slice rules changed")
		}
		d.cfg.ProfileMap = nc.ProfileMap
		d.cfg.LowBattery = nc.LowBattery
		d.setBatteryPercent(d.batteryPct)
		if nc.PowerProfilesAPI != old.PowerProfilesAPI || !slices.Equal(nc.PowerProfilesUnits, old.PowerProfilesUnits) {
			d.cfg.PowerProfilesAPI, d.cfg.PowerProfilesUnits = nc.PowerProfilesAPI, nc.PowerProfilesUnits
			// The connection closes, and Keep reconnects with the
			// new setting.
			d.bus.Reconfigure(nc.PowerProfilesAPI, nc.PowerProfilesUnits)
		}
		d.recompute("reload", true)
		return nil
	})
}
