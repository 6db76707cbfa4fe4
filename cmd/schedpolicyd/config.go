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
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	toml "github.com/pelletier/go-toml/v2"
	"github.com/pelletier/go-toml/v2/unstable"
	"github.com/sirupsen/logrus"

	"github.com/schedpolicyd/schedpolicyd/acpi"
	"github.com/schedpolicyd/schedpolicyd/daemon"
	"github.com/schedpolicyd/schedpolicyd/daemon/bus"
	"github.com/schedpolicyd/schedpolicyd/policy"
	"github.com/schedpolicyd/schedpolicyd/sysfs"
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
	// task-clock wake, daemon/clockwake.go; default true).
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

// rawConfig is the TOML shape; pointer fields record presence, and the
// decoder rejects any key not listed here (DisallowUnknownFields).
type rawConfig struct {
	PowerAware         *int64     `toml:"power_aware"`
	PowerAwarePolicy   *string    `toml:"power_aware_policy"`
	TreeDir            *string    `toml:"tree_dir"`
	TreeBackend        *string    `toml:"tree_backend"`
	CgroupRoot         *string    `toml:"cgroup_root"`
	Placement          *string    `toml:"placement"`
	Manage             *[]string  `toml:"manage"`
	SysfsRoot          *string    `toml:"sysfs_root"`
	StateDir           *string    `toml:"state_dir"`
	Bus                *string    `toml:"bus"`
	Debounce           *string    `toml:"debounce"`
	RecheckInterval    *string    `toml:"recheck_interval"`
	SampleInterval     *string    `toml:"sample_interval"`
	BoostOnBattery     *string    `toml:"boost_on_battery"`
	UPower             *string    `toml:"upower"`
	PowerProfilesAPI   any        `toml:"power_profiles_api"`
	ProfilePowerSaver  *int64     `toml:"profile_power_saver"`
	ProfileBalanced    *int64     `toml:"profile_balanced"`
	ProfilePerformance *int64     `toml:"profile_performance"`
	PowerProfilesUnits *[]string  `toml:"power_profiles_units"`
	LowBattery         *int64     `toml:"low_battery"`
	TaskClock          *bool      `toml:"task_clock"`
	LogLevel           *string    `toml:"log_level"`
	MetricsTextfile    *string    `toml:"metrics_textfile"`
	Slice              []rawSlice `toml:"slice"`
}

// rawSlice is one [[slice]] table.
type rawSlice struct {
	Name   *string `toml:"name"`
	Policy *string `toml:"policy"`
	Always *bool   `toml:"always"`
}

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

// parseConfig validates data, the content of file name (used in errors).
func parseConfig(name string, data []byte) (fileConfig, error) {
	fc := fileConfig{Path: name}
	var raw rawConfig
	dec := toml.NewDecoder(bytes.NewReader(data)).DisallowUnknownFields()
	if err := dec.Decode(&raw); err != nil {
		return fileConfig{}, decodeErrors(name, err)
	}
	lines := keyLines(data)
	var errs []error
	bad := func(key, format string, args ...any) {
		errs = append(errs, &ConfigError{File: name, Line: lines[key], Key: key, Err: fmt.Errorf(format, args...)})
	}

	if raw.PowerAware != nil {
		if v := *raw.PowerAware; v < 0 || v > 2 {
			bad("power_aware", "%d: want 0 (always performance), 1 (automatic) or 2 (always power-aware)", v)
		} else {
			n := int(v)
			fc.PowerAware = &n
		}
	}
	enum := func(key string, v *string, allowed ...string) *string {
		if v == nil {
			return nil
		}
		for _, a := range allowed {
			if *v == a {
				return v
			}
		}
		bad(key, "%q: want %s", *v, quoteList(allowed))
		return nil
	}
	fc.PowerAwarePolicy = enum("power_aware_policy", raw.PowerAwarePolicy, "balance", "powersaving")
	fc.TreeBackend = enum("tree_backend", raw.TreeBackend, words(sysfs.Backends)...)
	fc.BoostOnBattery = enum("boost_on_battery", raw.BoostOnBattery, words(daemon.BoostModes)...)
	fc.UPower = enum("upower", raw.UPower, words(acpi.UPowerModes)...)
	fc.Placement = enum("placement", raw.Placement, "auto", daemon.PlacementSystemd, daemon.PlacementCgroupfs)
	if raw.Manage != nil {
		fc.Manage = []string{}
		for _, sl := range *raw.Manage {
			if !validSlice(sl) {
				bad("manage", "%q: want slice names, \"NAME.slice\"", sl)
				continue
			}
			fc.Manage = append(fc.Manage, sl)
		}
	}

	if raw.PowerProfilesUnits != nil {
		fc.PowerProfilesUnits = []string{}
		for _, u := range *raw.PowerProfilesUnits {
			if name, ok := strings.CutSuffix(u, ".service"); !ok || name == "" || strings.ContainsAny(u, "/ \t\n") {
				bad("power_profiles_units", "%q: want service unit names, \"NAME.service\"", u)
				continue
			}
			fc.PowerProfilesUnits = append(fc.PowerProfilesUnits, u)
		}
	}

	absPath := func(key string, v *string) *string {
		if v == nil {
			return nil
		}
		if !filepath.IsAbs(*v) {
			bad(key, "%q: want an absolute path", *v)
			return nil
		}
		c := filepath.Clean(*v)
		return &c
	}
	fc.TreeDir = absPath("tree_dir", raw.TreeDir)
	fc.SysfsRoot = absPath("sysfs_root", raw.SysfsRoot)
	fc.StateDir = absPath("state_dir", raw.StateDir)
	if raw.CgroupRoot != nil {
		switch *raw.CgroupRoot {
		case "auto", "none":
			fc.CgroupRoot = raw.CgroupRoot
		default:
			fc.CgroupRoot = absPath("cgroup_root", raw.CgroupRoot)
		}
	}
	if raw.Bus != nil {
		switch b := *raw.Bus; {
		case b == "system" || b == "session" || b == "none":
			fc.Bus = raw.Bus
		case strings.Contains(b, ":") && strings.Contains(b, "="):
			fc.Bus = raw.Bus // transport:key=value[,...]
		default:
			bad("bus", "%q: want \"system\", \"session\", \"none\" or a D-Bus address such as \"unix:path=/run/dbus/system_bus_socket\"", b)
		}
	}

	if fc.Bus != nil && *fc.Bus == "none" && fc.UPower != nil && *fc.UPower == "on" {
		// daemon.New refuses the pair too (also when a flag sets one).
		bad("upower", "\"on\" needs D-Bus, and bus is \"none\": use \"auto\" or \"off\", or another bus")
	}

	// The bounds are package daemon's (daemon.MinSampleInterval and the
	// rest), which daemon.New checks too.
	duration := func(key string, v *string, check func(time.Duration) error) *time.Duration {
		if v == nil {
			return nil
		}
		d, err := time.ParseDuration(*v)
		if err != nil {
			bad(key, "%q: want a duration such as \"500ms\", \"2s\" or \"1m\"", *v)
			return nil
		}
		if err := check(d); err != nil {
			bad(key, "%q: %v", *v, err)
			return nil
		}
		return &d
	}
	fc.Debounce = duration("debounce", raw.Debounce, daemon.CheckDebounce)
	fc.RecheckInterval = duration("recheck_interval", raw.RecheckInterval, daemon.CheckRecheckInterval)
	fc.SampleInterval = duration("sample_interval", raw.SampleInterval, daemon.CheckSampleInterval)
	switch v := raw.PowerProfilesAPI.(type) {
	case nil:
	case bool:
		m := bus.PowerProfilesOff
		if v {
			m = bus.PowerProfilesServe
		}
		fc.PowerProfilesAPI = &m
	case string:
		if v == "auto" {
			m := bus.PowerProfilesAuto
			fc.PowerProfilesAPI = &m
		} else {
			bad("power_profiles_api", "%q: want true, false or \"auto\"", v)
		}
	default:
		bad("power_profiles_api", "%v: want true, false or \"auto\"", v)
	}
	fc.TaskClock = raw.TaskClock
	if raw.LowBattery != nil {
		if v := *raw.LowBattery; v < 0 || v > 100 {
			bad("low_battery", "%d: want a percentage 1 to 100, or 0 for off", v)
		} else {
			n := int(v)
			fc.LowBattery = &n
		}
	}
	for key, prof := range map[string]*int64{"profile_power_saver": raw.ProfilePowerSaver, "profile_balanced": raw.ProfileBalanced, "profile_performance": raw.ProfilePerformance} {
		if prof == nil {
			continue
		}
		if *prof < 0 || *prof > 2 {
			bad(key, "%d: want 0 (always performance), 1 (automatic) or 2 (always power-aware)", *prof)
			continue
		}
		if fc.ProfileMap == nil {
			fc.ProfileMap = map[string]policy.PowerAware{}
		}
		fc.ProfileMap[strings.ReplaceAll(strings.TrimPrefix(key, "profile_"), "_", "-")] = policy.PowerAware(*prof)
	}
	if raw.LogLevel != nil {
		if _, err := logrus.ParseLevel(*raw.LogLevel); err != nil {
			bad("log_level", "%q: want \"debug\", \"info\", \"warning\" or \"error\"", *raw.LogLevel)
		} else {
			fc.LogLevel = raw.LogLevel
		}
	}
	if raw.MetricsTextfile != nil {
		if err := daemon.CheckMetricsTextfile(*raw.MetricsTextfile); err != nil {
			bad("metrics_textfile", "%q: want \"\" (none) or an absolute path ending in .prom, e.g. \"/var/lib/prometheus/node-exporter/schedpolicyd.prom\" (the textfile collector reads only *.prom)", *raw.MetricsTextfile)
		} else {
			fc.MetricsTextfile = raw.MetricsTextfile
		}
	}
	seenSlice := map[string]bool{}
	if l, ok := lines["[slice]"]; ok {
		errs = append(errs, &ConfigError{File: name, Line: l, Key: "slice", Err: errors.New("[slice]: want [[slice]], one table per slice rule")})
		raw.Slice = nil
	}
	for i, rs := range raw.Slice {
		at := func(key string) string {
			if _, ok := lines[fmt.Sprintf("slice[%d].%s", i, key)]; ok {
				return fmt.Sprintf("slice[%d].%s", i, key)
			}
			return fmt.Sprintf("slice[%d]", i)
		}
		badAt := func(key, format string, args ...any) {
			errs = append(errs, &ConfigError{File: name, Line: lines[at(key)], Key: "slice." + key, Err: fmt.Errorf(format, args...)})
		}
		switch {
		case rs.Name == nil:
			badAt("name", "missing: each [[slice]] names its slice (name = \"background.slice\")")
			continue
		case !validSlice(*rs.Name):
			badAt("name", "%q: want a slice name, \"NAME.slice\"", *rs.Name)
			continue
		case seenSlice[*rs.Name]:
			badAt("name", "%q: a second [[slice]] for the same slice", *rs.Name)
			continue
		}
		seenSlice[*rs.Name] = true
		var r policy.SliceRule
		switch {
		case rs.Policy == nil:
			badAt("policy", "missing: want \"balance\" or \"powersaving\"")
			continue
		case *rs.Policy == string(policy.Performance):
			badAt("policy", "\"performance\": a slice's policy is the least packing of its units, and performance would change nothing; want \"balance\" or \"powersaving\" (SetWorkloadPolicy exempts one workload)")
			continue
		case *rs.Policy != string(policy.Balance) && *rs.Policy != string(policy.Powersaving):
			badAt("policy", "%q: want \"balance\" or \"powersaving\"", *rs.Policy)
			continue
		}
		if fc.Manage != nil && !slices.Contains(fc.Manage, *rs.Name) {
			// Without manage in the file, daemon.New checks the rule
			// against the default or --manage.
			badAt("name", "%q is not in manage (line %d): its rule would never apply", *rs.Name, lines["manage"])
			continue
		}
		r.Policy = policy.Policy(*rs.Policy)
		if rs.Always != nil {
			r.Always = *rs.Always
		}
		if fc.Slices == nil {
			fc.Slices = map[string]policy.SliceRule{}
		}
		fc.Slices[*rs.Name] = r
	}
	if len(errs) > 0 {
		sort.SliceStable(errs, func(i, j int) bool {
			return errs[i].(*ConfigError).Line < errs[j].(*ConfigError).Line
		})
		return fileConfig{}, errors.Join(errs...)
	}
	return fc, nil
}

// decodeErrors turns the TOML decoder's errors (syntax, unknown key, wrong
// type) into ConfigErrors with the line the decoder reports.
func decodeErrors(name string, err error) error {
	var strict *toml.StrictMissingError
	if errors.As(err, &strict) {
		var errs []error
		for i := range strict.Errors {
			e := &strict.Errors[i]
			row, _ := e.Position()
			key := strings.Join(e.Key(), ".")
			msg := fmt.Errorf("unknown setting (known: %s, and [[slice]] tables; see schedpolicyd.conf(5))", strings.Join(configKeys(), ", "))
			if strings.HasPrefix(key, "slice.") {
				msg = errors.New("unknown setting in [[slice]] (known: name, policy, always; top-level settings go before the first [[slice]])")
			}
			errs = append(errs, &ConfigError{File: name, Line: row, Key: key, Err: msg})
		}
		return errors.Join(errs...)
	}
	var de *toml.DecodeError
	if errors.As(err, &de) {
		row, _ := de.Position()
		key := strings.Join(de.Key(), ".")
		msg := strings.TrimPrefix(de.Error(), "toml: ")
		if key != "" {
			if want := configKeyType(key); want != "" && strings.Contains(msg, "cannot decode") {
				msg = "wrong type: want " + want
			}
		}
		return &ConfigError{File: name, Line: row, Key: key, Err: errors.New(msg)}
	}
	return &ConfigError{File: name, Err: err}
}

// configKeys lists the keys rawConfig accepts, in file order.
func configKeys() []string {
	return []string{"power_aware", "power_aware_policy", "tree_dir", "tree_backend", "cgroup_root",
		"placement", "manage", "sysfs_root", "state_dir", "bus", "debounce", "recheck_interval", "sample_interval",
		"boost_on_battery", "upower", "power_profiles_api", "profile_power_saver", "profile_balanced",
		"profile_performance", "power_profiles_units", "low_battery", "task_clock", "log_level", "metrics_textfile"}
}

// configKeyType describes the TOML type a key wants, for type errors.
func configKeyType(key string) string {
	switch key {
	case "power_aware":
		return "an integer 0, 1 or 2 (power_aware = 1)"
	case "low_battery":
		return "an integer percentage 0 to 100 (low_battery = 20)"
	case "profile_power_saver", "profile_balanced", "profile_performance":
		return fmt.Sprintf("an integer 0, 1 or 2 (%s = 1)", key)
	case "power_profiles_api":
		return `true, false or "auto" (power_profiles_api = "auto")`
	case "manage":
		return `an array of slice names (manage = ["schedpolicyd.slice", "system.slice"])`
	case "power_profiles_units":
		return `an array of service unit names (power_profiles_units = ["power-profiles-daemon.service"])`
	case "slice":
		return `[[slice]] tables (see schedpolicyd.conf(5))`
	case "slice.name", "slice.policy":
		return fmt.Sprintf("a string (%s = \"...\")", strings.TrimPrefix(key, "slice."))
	case "slice.always":
		return "true or false (always = true)"
	case "task_clock":
		return "true or false (task_clock = true)"

	case "debounce", "recheck_interval", "sample_interval":
		return fmt.Sprintf("a duration string (%s = \"500ms\")", key)
	case "":
		return ""
	}
	for _, k := range configKeys() {
		if k == key {
			return fmt.Sprintf("a string (%s = \"...\")", key)
		}
	}
	return ""
}

// keyLines maps each top-level key of a TOML document to the 1-based line
// it is set on, each [[slice]] table N (from 0) as "slice[N]" to its
// header's line and its keys as "slice[N].KEY". Only called on a document
// the decoder accepted.
func keyLines(data []byte) map[string]int {
	lines := map[string]int{}
	var p unstable.Parser
	p.Reset(data)
	prefix, nslice := "", 0
	for p.NextExpression() {
		e := p.Expression()
		switch e.Kind {
		case unstable.ArrayTable, unstable.Table:
			prefix = "?."
			it := e.Key()
			if !it.Next() || string(it.Node().Data) != "slice" {
				continue
			}
			at := p.Shape(it.Node().Raw).Start.Line
			if e.Kind == unstable.Table {
				lines["[slice]"] = at
				continue
			}
			prefix = fmt.Sprintf("slice[%d]", nslice)
			lines[prefix] = at
			prefix += "."
			nslice++
			continue
		case unstable.KeyValue:
		default:
			continue
		}
		it := e.Key()
		var parts []string
		var first *unstable.Node
		for it.Next() {
			n := it.Node()
			if first == nil {
				first = n
			}
			parts = append(parts, string(n.Data))
		}
		if first != nil {
			lines[prefix+strings.Join(parts, ".")] = p.Shape(first.Raw).Start.Line
		}
	}
	return lines
}

func quoteList(vs []string) string {
	q := make([]string, len(vs))
	for i, v := range vs {
		q[i] = fmt.Sprintf("%q", v)
	}
	if len(q) == 1 {
		return q[0]
	}
	return strings.Join(q[:len(q)-1], ", ") + " or " + q[len(q)-1]
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
	str(&cfg.SysfsRoot, fc.SysfsRoot, "sysfs_root")
	str(&cfg.StateDir, fc.StateDir, "state_dir")
	str(&cfg.Bus, fc.Bus, "bus")
	dur(&cfg.Debounce, fc.Debounce, "debounce")
	dur(&cfg.RecheckInterval, fc.RecheckInterval, "recheck_interval")
	dur(&cfg.SampleInterval, fc.SampleInterval, "sample_interval")
	word(&cfg.BoostOnBattery, fc.BoostOnBattery, setFlags, "boost_on_battery")
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

// validSlice reports whether s names a slice unit: "NAME.slice", no
// slash, space or NUL.
func validSlice(s string) bool {
	return strings.HasSuffix(s, ".slice") && s != ".slice" && !strings.ContainsAny(s, "/ \x00")
}

// words turns a setting's accepted values (sysfs.Backends, ...) into the
// strings the configuration file is checked against, so the file and the
// flags accept the same words.
func words[T ~string](vs []T) []string {
	out := make([]string, len(vs))
	for i, v := range vs {
		out[i] = string(v)
	}
	return out
}
