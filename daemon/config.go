package daemon

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/schedpolicyd/schedpolicyd/acpi"
	"github.com/schedpolicyd/schedpolicyd/cgroup"
	"github.com/schedpolicyd/schedpolicyd/daemon/placement"
	"github.com/schedpolicyd/schedpolicyd/internal/names"
	"github.com/schedpolicyd/schedpolicyd/policy"
	"github.com/schedpolicyd/schedpolicyd/sysfs"
	"github.com/schedpolicyd/schedpolicyd/tree"
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

// PrefMode is Config.EPP and Config.PlatformProfile, the epp and
// platform_profile settings: PrefAuto moves the knob with the policy
// where no other daemon owns it (daemon/energypref.go), PrefOff never
// touches it.
type PrefMode string

// The energy preference modes.
const (
	PrefAuto PrefMode = "auto"
	PrefOff  PrefMode = "off"
)

// PrefModes are the words ParsePrefMode accepts.
var PrefModes = []PrefMode{PrefAuto, PrefOff}

// ParsePrefMode returns the mode named s for setting key ("epp",
// "platform_profile"), or an error naming the words it accepts.
func ParsePrefMode(key, s string) (PrefMode, error) {
	if m := PrefMode(s); slices.Contains(PrefModes, m) {
		return m, nil
	}
	return "", fmt.Errorf("%s %q: want auto or off", key, s)
}

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
	// Exempt is the exempt setting: workloads never placed, each a unit's
	// or workload's name or a glob of them, optionally narrowed to a
	// manager (names.ParseExempt: [system/|user:UID/]PATTERN), at most
	// names.MaxExempts, each once; nil: none. Beside them, those exempt
	// over D-Bus (state.json). Anything else is an error.
	Exempt []string
	// ProcRoot is /proc (used for cgroup v1 usage accounting).
	ProcRoot string
	// RunRoot is /run: the users' managers' sockets are at
	// <RunRoot>/user/UID/systemd/private (placement "systemd").
	RunRoot string
	// TreeDir is where the virtual sysfs tree is served.
	TreeDir string
	// TreeBackend is how the tree is served ("" means tree.BackendAuto).
	TreeBackend tree.Backend
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
	// TreeNoPollHack is tree.TreeOptions.NoPollHack: set by the daemon
	// binary, which never reads its own tree; a process that does (tests
	// running the daemon in-process) leaves it false.
	TreeNoPollHack bool
	// NoTaskClock turns the task-clock wake off (daemon/placement/clockwake.go):
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
	// EPP and PlatformProfile ("" means PrefAuto) move the cpufreq
	// policies' energy_performance_preference and the ACPI platform
	// profile with the policy where no other daemon owns them
	// (energypref.go), or never touch them (PrefOff).
	EPP, PlatformProfile PrefMode
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
	if cfg.RunRoot == "" {
		cfg.RunRoot = "/run"
	}
	if cfg.TreeDir == "" {
		cfg.TreeDir = DefaultTreeDir
	}
	if cfg.TreeBackend == "" {
		cfg.TreeBackend = tree.BackendAuto
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
	if cfg.EPP == "" {
		cfg.EPP = PrefAuto
	}
	if cfg.PlatformProfile == "" {
		cfg.PlatformProfile = PrefAuto
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
	if err := placement.CheckSlices(cfg.Slices, cfg.Manage); err != nil {
		return Config{}, sysfs.FS{}, err
	}
	if err := checkExempt(cfg.Exempt); err != nil {
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

// checkWords returns the error of the first of TreeBackend, Events and
// BoostOnBattery that is not one of its words (the same message the flags
// give).
func (cfg Config) checkWords() error {
	if _, err := tree.ParseBackend(string(cfg.TreeBackend)); err != nil {
		return err
	}
	if _, err := acpi.ParseEventSource(string(cfg.Events)); err != nil {
		return err
	}
	if _, err := ParseBoostMode(string(cfg.BoostOnBattery)); err != nil {
		return err
	}
	if _, err := ParsePrefMode("epp", string(cfg.EPP)); err != nil {
		return err
	}
	_, err := ParsePrefMode("platform_profile", string(cfg.PlatformProfile))
	return err
}

// Placement modes (Config.Placement).
const (
	// PlacementCgroupfs places the direct children of CgroupRoot by writing
	// their cpuset.cpus: machines without systemd, and cgroup v1, where
	// systemd never manages cpusets.
	PlacementCgroupfs = placement.Cgroupfs
	// PlacementSystemd places the units of the managed slices through
	// systemd's D-Bus API (SetUnitProperties AllowedCPUs=, runtime only):
	// on a systemd machine a cgroup has one writer, systemd (systemd's
	// docs/CGROUP_DELEGATION.md).
	PlacementSystemd = placement.Systemd
)

// ResolvePlacement turns a placement setting into a mode and says why:
// "auto" is PlacementSystemd where systemd is PID 1 (/run/systemd/system
// exists, sd_booted(3)) and /sys/fs/cgroup is cgroup v2, else
// PlacementCgroupfs; any other value is returned as it is (New validates
// it).
func ResolvePlacement(mode string) (string, string) {
	if mode != "auto" && mode != "" {
		return mode, "configured"
	}
	if _, err := os.Stat(sdBootedDir); err != nil {
		return PlacementCgroupfs, "auto: systemd is not PID 1 here"
	}
	if !cgroup.IsUnified(cgroupMount) {
		return PlacementCgroupfs, "auto: /sys/fs/cgroup is cgroup v1, where systemd never manages cpusets"
	}
	return PlacementSystemd, "auto: systemd is PID 1 and /sys/fs/cgroup is cgroup v2"
}

// DefaultManage is the slices placed by default with placement "systemd":
// the daemon's own (schedpolicyctl run starts transient scopes there) and
// the system services.
var DefaultManage = placement.DefaultManage

// checkExempt checks the exempt setting: at most names.MaxExempts
// entries of names.ParseExempt, each once.
func checkExempt(list []string) error {
	if len(list) > names.MaxExempts {
		return fmt.Errorf("exempt: %d entries, at most %d", len(list), names.MaxExempts)
	}
	seen := map[string]bool{}
	for _, s := range list {
		if _, err := names.ParseExempt(s); err != nil {
			return fmt.Errorf("exempt: %w", err)
		}
		if seen[s] {
			return fmt.Errorf("exempt: %q given twice", s)
		}
		seen[s] = true
	}
	return nil
}
