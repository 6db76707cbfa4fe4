package main

// The configuration file, schedpolicyd.conf(5).
//
// The file is TOML: one key = value per line, and at the end any number of
// [[slice]] tables (name, policy, always), one per slice rule. The keys are
// spelled as in the issues (snake_case); each one that has a command-line
// flag has the same name with "_" turned into "-", and a flag given on the
// command line wins over the file. On/off settings are TOML booleans
// (power_profiles_api = true), settings with named values are strings
// (boost_on_battery = "off"), durations are strings in Go's syntax
// (debounce = "500ms"). Unknown keys, tables, wrong types and bad values are
// errors that name the file and line; the daemon refuses to start on them
// and, on SIGHUP, keeps the running configuration.

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"
	"time"

	"github.com/schedpolicyd/schedpolicyd/acpi"
	"github.com/schedpolicyd/schedpolicyd/daemon"
	"github.com/schedpolicyd/schedpolicyd/daemon/bus"
	"github.com/schedpolicyd/schedpolicyd/policy"
)

// DefaultConfigPath is where the Debian package installs the conffile.
const DefaultConfigPath = "/etc/schedpolicyd/schedpolicyd.conf"

// Defaults of the settings daemon.Config has no field for yet; the
// accessors below return them when the file does not set the key.
const (
	DefaultPowerAware       = 1             // automatic
	DefaultPowerAwarePolicy = "powersaving" // what modes 1 and 2 use
	DefaultBoostOnBattery   = daemon.DefaultBoostOnBattery
	DefaultUPower           = daemon.DefaultUPower
	DefaultLogLevel         = "info"
	// DefaultPowerProfilesAPI: follow a power-profiles daemon, else serve.
	DefaultPowerProfilesAPI = bus.PowerProfilesAuto
	// DefaultLowBattery: the low-battery tier below 20 % (0 is off).
	DefaultLowBattery = 20
)

// maxConfigSize bounds the file read; a real one is a few hundred bytes.
const maxConfigSize = 1 << 20

// fileConfig is a parsed configuration file. Every field is nil when the
// file does not set the key, so "absent" and "set to the default" stay
// distinguishable and apply only touches what the file names. It is a plain
// value: copy it freely; it holds no resources.
type fileConfig struct {
	// Path is the file this came from; "" when no file was read (the
	// default path did not exist).
	Path string

	// PowerAware is the knob used until a choice is saved in state.json:
	// 0 always performance, 1 automatic, 2 always power-aware.
	PowerAware *int
	// PowerAwarePolicy is "balance" or "powersaving": the policy modes 1
	// and 2 use until a choice is saved.
	PowerAwarePolicy *string
	// TreeDir is where the virtual sysfs tree is served (absolute path).
	TreeDir *string
	// TreeBackend is "auto", "fuse" or "plain".
	TreeBackend *string
	// CgroupRoot is the managed parent cgroup: "auto", "none" or an
	// absolute path.
	CgroupRoot *string
	// Placement is "auto", "systemd" or "cgroupfs".
	Placement *string
	// Manage lists the slices placed with placement "systemd"
	// ("NAME.slice" each).
	Manage []string
	// Exempt lists the workloads never placed: unit or workload names or
	// globs of them (names.ParseExempt), each once.
	Exempt []string
	// SysfsRoot is the sysfs root (absolute path, "/sys" in production).
	SysfsRoot *string
	// StateDir holds state.json (absolute path).
	StateDir *string
	// Bus is "system", "session", "none" or a D-Bus address: the one bus
	// the daemon uses, for its name and the UPower and logind hints ("none":
	// no D-Bus at all).
	Bus *string
	// Debounce delays a re-read after a power event: 0 (the default,
	// 500ms) to 1m (daemon.MinDebounce, daemon.MaxDebounce).
	Debounce *time.Duration
	// RecheckInterval re-reads the power source without events: 1s to 24h
	// (daemon.MinRecheckInterval, daemon.MaxRecheckInterval); 0 automatic;
	// negative never.
	RecheckInterval *time.Duration
	// SampleInterval is the workload utilisation sampling period: 10ms to
	// 1h (daemon.MinSampleInterval, daemon.MaxSampleInterval).
	SampleInterval *time.Duration
	// BoostOnBattery is "keep", "off" or "on": what to do with cpufreq
	// boost while on battery.
	BoostOnBattery *string
	// EPP and PlatformProfile are "auto" or "off": whether the policy
	// moves the CPUs' energy_performance_preference and the ACPI platform
	// profile where no other daemon owns them.
	EPP, PlatformProfile *string
	// UPower is "auto", "on" or "off": whether UPower's OnBattery changes on
	// the system bus are taken as a hint to re-read the power supplies.
	UPower *string
	// PowerProfilesAPI is bus.PowerProfilesAuto ("auto": follow the
	// power-profiles daemon that owns org.freedesktop.UPower.PowerProfiles
	// or net.hadess.PowerProfiles, serve them while none does),
	// bus.PowerProfilesServe (true) or bus.PowerProfilesOff (false).
	PowerProfilesAPI *string
	// ProfileMap is the power_aware (0..2) each followed profile selects,
	// from profile_power_saver, profile_balanced, profile_performance; only
	// the keys the file sets.
	ProfileMap map[string]policy.PowerAware
	// Digest is ConfigDigest of the file's bytes ("" without a file).
	Digest string
	// PowerProfilesUnits are the service units of the power-profiles
	// implementations "auto" leaves the names to while one is installed
	// ("NAME.service" each; bus.DefaultPowerProfilesUnits when unset).
	PowerProfilesUnits []string
	// LowBattery is the low-battery tier in percent: 1–100, or 0 off.
	LowBattery *int
	// TaskClock is whether packed workloads get task-clock counters (the
	// task-clock wake, daemon/placement/clockwake.go; default true).
	TaskClock *bool
	// LogLevel is a logrus level: "debug", "info", "warning", "error".
	LogLevel *string
	// MetricsTextfile is where the node_exporter textfile-collector file
	// is written: "" (none, the default) or an absolute path ending in
	// ".prom".
	MetricsTextfile *string
	// Slices are the [[slice]] rules by slice name; nil when the file
	// has none.
	Slices map[string]policy.SliceRule
}

// ConfigError is one problem in a configuration file: File and Line (1-based;
// 0 when unknown) locate it, Key names the setting ("" for a syntax error).
// Its message reads "FILE:LINE: KEY: problem". Unwrap gives the cause, e.g.
// an *os.PathError for an unreadable file.
type ConfigError struct {
	File string
	Line int
	Key  string
	Err  error
}

func (e *ConfigError) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Line > 0 {
		fmt.Fprintf(&b, ":%d", e.Line)
	}
	b.WriteString(": ")
	if e.Key != "" {
		b.WriteString(e.Key + ": ")
	}
	b.WriteString(e.Err.Error())
	return b.String()
}

func (e *ConfigError) Unwrap() error { return e.Err }

// loadConfig reads and validates the configuration file at path.
//
// Results:
//   - the file does not exist and explicit is false (the default path):
//     an empty fileConfig (Path "") and nil — running without a file is
//     normal;
//   - the file does not exist and explicit is true (--config was given):
//     an error wrapping fs.ErrNotExist;
//   - the file cannot be read, is not valid TOML, has an unknown key, a
//     table, a value of the wrong type or a bad value: an error listing
//     every problem found, each a *ConfigError with file and line
//     (errors.As finds the first);
//   - otherwise the settings the file names, and nil.
//
// It has no side effects and is safe to call again on SIGHUP.
func loadConfig(path string, explicit bool) (fileConfig, error) {
	f, err := os.Open(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) && !explicit {
			return fileConfig{}, nil
		}
		return fileConfig{}, &ConfigError{File: path, Err: err}
	}
	defer f.Close()
	data, err := readAllLimited(f, maxConfigSize)
	if err != nil {
		return fileConfig{}, &ConfigError{File: path, Err: err}
	}
	fc, err := parseConfig(path, data)
	if err == nil {
		fc.Digest = ConfigDigest(data)
	}
	return fc, err
}

// ConfigDigest is the digest daemon.Config.ConfigDigest names a
// configuration file's content by: "sha256:" and the hex SHA-256 of data.
func ConfigDigest(data []byte) string {
	sum := sha256.Sum256(data)
	return "sha256:" + hex.EncodeToString(sum[:])
}

func readAllLimited(f *os.File, limit int64) ([]byte, error) {
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > limit {
		return nil, fmt.Errorf("larger than %d bytes; is this really a configuration file?", limit)
	}
	return data, nil
}

// configFlags maps each key that has a daemon flag to the flag's name.
var configFlags = map[string]string{
	"tree_dir":           "tree-dir",
	"tree_backend":       "tree-backend",
	"cgroup_root":        "cgroup-root",
	"placement":          "placement",
	"manage":             "manage",
	"sysfs_root":         "sysfs-root",
	"state_dir":          "state-dir",
	"bus":                "bus",
	"debounce":           "debounce",
	"recheck_interval":   "recheck-interval",
	"sample_interval":    "sample-interval",
	"log_level":          "log-level",
	"power_profiles_api": "power-profiles-api",
	"low_battery":        "low-battery",
	"task_clock":         "task-clock",
	"boost_on_battery":   "boost-on-battery",
	"epp":                "epp",
	"platform_profile":   "platform-profile",
	"upower":             "upower",
	"metrics_textfile":   "metrics-textfile",
}

// word sets *dst to the file's word v for key (checked by parseConfig)
// unless the key's flag was given.
func word[T ~string](dst *T, v *string, setFlags map[string]bool, key string) {
	if v != nil && !setFlags[configFlags[key]] {
		*dst = T(*v)
	}
}

// apply copies the settings the file names into cfg, except those whose
// flag is in setFlags (flag names without dashes, e.g. "tree-dir", as
// flag.FlagSet.Visit reports them): the command line wins. Call it after
// flag parsing and before "auto"/"none" in cfg.CgroupRoot are resolved.
// power_aware and power_aware_policy become cfg.DefaultKnob (used until a
// choice is saved in state.json); log_level is read with LogLevelName.
func (fc fileConfig) apply(cfg *daemon.Config, setFlags map[string]bool) {
	str := func(dst *string, v *string, key string) {
		if v != nil && !setFlags[configFlags[key]] {
			*dst = *v
		}
	}
	dur := func(dst *time.Duration, v *time.Duration, key string) {
		if v != nil && !setFlags[configFlags[key]] {
			*dst = *v
		}
	}
	str(&cfg.TreeDir, fc.TreeDir, "tree_dir")
	word(&cfg.TreeBackend, fc.TreeBackend, setFlags, "tree_backend")
	str(&cfg.CgroupRoot, fc.CgroupRoot, "cgroup_root")
	str(&cfg.Placement, fc.Placement, "placement")
	if fc.Manage != nil && !setFlags["manage"] {
		cfg.Manage = fc.Manage
	}
	if len(fc.Exempt) > 0 {
		cfg.Exempt = fc.Exempt
	}
	str(&cfg.SysfsRoot, fc.SysfsRoot, "sysfs_root")
	str(&cfg.StateDir, fc.StateDir, "state_dir")
	str(&cfg.Bus, fc.Bus, "bus")
	dur(&cfg.Debounce, fc.Debounce, "debounce")
	dur(&cfg.RecheckInterval, fc.RecheckInterval, "recheck_interval")
	dur(&cfg.SampleInterval, fc.SampleInterval, "sample_interval")
	word(&cfg.BoostOnBattery, fc.BoostOnBattery, setFlags, "boost_on_battery")
	word(&cfg.EPP, fc.EPP, setFlags, "epp")
	word(&cfg.PlatformProfile, fc.PlatformProfile, setFlags, "platform_profile")
	word(&cfg.UPower, fc.UPower, setFlags, "upower")
	str(&cfg.MetricsTextfile, fc.MetricsTextfile, "metrics_textfile")
	if fc.PowerProfilesAPI != nil && !setFlags["power-profiles-api"] {
		cfg.PowerProfilesAPI = *fc.PowerProfilesAPI
	}
	if fc.ProfileMap != nil {
		cfg.ProfileMap = fc.ProfileMap
	}
	if fc.PowerProfilesUnits != nil {
		cfg.PowerProfilesUnits = fc.PowerProfilesUnits
	}
	cfg.ConfigDigest = fc.Digest
	if fc.LowBattery != nil && !setFlags["low-battery"] {
		cfg.LowBattery = *fc.LowBattery
	}
	if fc.TaskClock != nil && !setFlags["task-clock"] {
		cfg.NoTaskClock = !*fc.TaskClock
	}
	if fc.Slices != nil {
		cfg.Slices = fc.Slices
	}
	if fc.PowerAware != nil || fc.PowerAwarePolicy != nil {
		aware, pap := fc.Knob()
		cfg.DefaultKnob = &policy.Knob{PowerAware: policy.PowerAware(aware), PowerAwarePolicy: policy.Policy(pap)}
	}
}

// Knob returns the default knob: power_aware (0, 1 or 2) and
// power_aware_policy ("balance" or "powersaving"), each from the file or
// its default (1, "powersaving"). A choice saved in state.json wins over
// both.
func (fc fileConfig) Knob() (powerAware int, powerAwarePolicy string) {
	powerAware, powerAwarePolicy = DefaultPowerAware, DefaultPowerAwarePolicy
	if fc.PowerAware != nil {
		powerAware = *fc.PowerAware
	}
	if fc.PowerAwarePolicy != nil {
		powerAwarePolicy = *fc.PowerAwarePolicy
	}
	return powerAware, powerAwarePolicy
}

// BoostOnBatteryMode returns boost_on_battery: "keep" (default), "off" or
// "on".
func (fc fileConfig) BoostOnBatteryMode() daemon.BoostMode {
	if fc.BoostOnBattery != nil {
		return daemon.BoostMode(*fc.BoostOnBattery)
	}
	return DefaultBoostOnBattery
}

// UPowerMode returns upower: "auto" (default: use UPower when it is on the
// bus), "on" or "off".
func (fc fileConfig) UPowerMode() acpi.UPowerMode {
	if fc.UPower != nil {
		return acpi.UPowerMode(*fc.UPower)
	}
	return DefaultUPower
}

// PowerProfilesAPIMode returns power_profiles_api as daemon.Config wants
// it: "auto" (default), "on" (true) or "off" (false).
func (fc fileConfig) PowerProfilesAPIMode() string {
	if fc.PowerProfilesAPI != nil {
		return *fc.PowerProfilesAPI
	}
	return DefaultPowerProfilesAPI
}

// LogLevelName returns the log level to use: flagValue when --log-level is
// in setFlags, else the file's log_level, else flagValue (the flag's
// default, "info").
func (fc fileConfig) LogLevelName(flagValue string, setFlags map[string]bool) string {
	if fc.LogLevel != nil && !setFlags["log-level"] {
		return *fc.LogLevel
	}
	return flagValue
}
