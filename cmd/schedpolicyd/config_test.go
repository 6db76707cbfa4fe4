package main

import (
	"errors"
	"flag"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/schedpolicyd/schedpolicyd/daemon"
	"github.com/schedpolicyd/schedpolicyd/daemon/bus"
	"github.com/schedpolicyd/schedpolicyd/internal/testutil"
	"github.com/schedpolicyd/schedpolicyd/policy"
)

func writeConfig(t *testing.T, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "schedpolicyd.conf")
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestConfigMissingFile(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "nope.conf")
	// The default path may be absent: run with built-in defaults.
	fc, err := loadConfig(missing, false)
	if err != nil || !reflect.DeepEqual(fc, fileConfig{}) {
		t.Errorf("loadConfig(missing, default) = %+v, %v; want empty, nil", fc, err)
	}
	// --config names a file that must exist.
	_, err = loadConfig(missing, true)
	if !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("loadConfig(missing, explicit) err = %v, want fs.ErrNotExist", err)
	}
	if err != nil && !strings.Contains(err.Error(), missing) {
		t.Errorf("error %q does not name the file", err)
	}
	// A directory is not a config file, explicit or not.
	if _, err := loadConfig(t.TempDir(), false); err == nil {
		t.Error("loadConfig(directory) succeeded")
	}
}

func TestConfigAllKeys(t *testing.T) {
	p := writeConfig(t, `# every key
power_aware = 2
power_aware_policy = "balance"
tree_dir = "/run/x/tree/"
tree_backend = "plain"
cgroup_root = "none"
placement = "systemd"
manage = ["schedpolicyd.slice", "background.slice"]
sysfs_root = "/tmp/mock"
state_dir = "/var/lib/x"
bus = "unix:path=/tmp/bus"
debounce = "250ms"
recheck_interval = "-1s"
sample_interval = "2s"
boost_on_battery = "off"
upower = "off"
power_profiles_api = true
profile_balanced = 2
low_battery = 15
task_clock = false
log_level = "debug"
metrics_textfile = "/var/lib/prometheus/node-exporter/schedpolicyd.prom"
`)
	fc, err := loadConfig(p, true)
	if err != nil {
		t.Fatal(err)
	}
	if fc.Path != p {
		t.Errorf("Path = %q", fc.Path)
	}
	if a, pol := fc.Knob(); a != 2 || pol != "balance" {
		t.Errorf("Knob() = %d, %q", a, pol)
	}
	if fc.BoostOnBatteryMode() != "off" || fc.UPowerMode() != "off" || fc.PowerProfilesAPIMode() != bus.PowerProfilesServe {
		t.Errorf("accessors: boost=%q upower=%q ppd=%v", fc.BoostOnBatteryMode(), fc.UPowerMode(), fc.PowerProfilesAPIMode())
	}
	if got := fc.LogLevelName("info", nil); got != "debug" {
		t.Errorf("LogLevelName = %q", got)
	}
	var cfg daemon.Config
	fc.apply(&cfg, nil)
	want := daemon.Config{
		TreeDir: "/run/x/tree", TreeBackend: "plain", CgroupRoot: "none", SysfsRoot: "/tmp/mock",
		Placement: "systemd", Manage: []string{"schedpolicyd.slice", "background.slice"},
		StateDir: "/var/lib/x", Bus: "unix:path=/tmp/bus", Debounce: 250 * time.Millisecond,
		RecheckInterval: -time.Second, SampleInterval: 2 * time.Second, PowerProfilesAPI: bus.PowerProfilesServe,
		ProfileMap: map[string]policy.PowerAware{"balanced": 2}, LowBattery: 15, NoTaskClock: true,
		BoostOnBattery: "off", UPower: "off",
		DefaultKnob:     &policy.Knob{PowerAware: 2, PowerAwarePolicy: policy.Balance},
		MetricsTextfile: "/var/lib/prometheus/node-exporter/schedpolicyd.prom",
		ConfigDigest:    ConfigDigest([]byte(testutil.Read(t, p))),
	}
	if !reflect.DeepEqual(cfg, want) {
		t.Errorf("apply:\n got %+v\nwant %+v", cfg, want)
	}
	if !strings.HasPrefix(cfg.ConfigDigest, "sha256:") || len(cfg.ConfigDigest) != len("sha256:")+64 {
		t.Errorf("ConfigDigest %q, want sha256:HEX", cfg.ConfigDigest)
	}
}

func TestConfigDefaultsWhenEmpty(t *testing.T) {
	fc, err := loadConfig(writeConfig(t, "# nothing set\n\n"), true)
	if err != nil {
		t.Fatal(err)
	}
	if a, pol := fc.Knob(); a != 1 || pol != "powersaving" {
		t.Errorf("Knob() = %d, %q; want 1, powersaving", a, pol)
	}
	if fc.BoostOnBatteryMode() != "keep" || fc.UPowerMode() != "auto" || fc.PowerProfilesAPIMode() != "auto" {
		t.Errorf("defaults: boost=%q upower=%q ppd=%v", fc.BoostOnBatteryMode(), fc.UPowerMode(), fc.PowerProfilesAPIMode())
	}
	if got := fc.LogLevelName("warning", nil); got != "warning" {
		t.Errorf("LogLevelName = %q, want the flag's value", got)
	}
	cfg := daemon.Config{TreeDir: "/a", Debounce: time.Second}
	fc.apply(&cfg, nil)
	if cfg.TreeDir != "/a" || cfg.Debounce != time.Second {
		t.Errorf("an empty file changed the config: %+v", cfg)
	}
}

// TestConfigFlagsOverride: a flag given on the command line beats the file;
// flags left at their default do not.
func TestConfigFlagsOverride(t *testing.T) {
	fc, err := loadConfig(writeConfig(t, "tree_dir = \"/from/file\"\ndebounce = \"1s\"\nbus = \"session\"\nlog_level = \"debug\"\n"), true)
	if err != nil {
		t.Fatal(err)
	}
	fl := flag.NewFlagSet("t", flag.ContinueOnError)
	var cfg daemon.Config
	fl.StringVar(&cfg.TreeDir, "tree-dir", "/default", "")
	fl.DurationVar(&cfg.Debounce, "debounce", 500*time.Millisecond, "")
	fl.StringVar(&cfg.Bus, "bus", "system", "")
	level := fl.String("log-level", "info", "")
	if err := fl.Parse([]string{"--tree-dir", "/from/flag", "--log-level", "error"}); err != nil {
		t.Fatal(err)
	}
	set := map[string]bool{}
	fl.Visit(func(f *flag.Flag) { set[f.Name] = true })
	fc.apply(&cfg, set)
	if cfg.TreeDir != "/from/flag" {
		t.Errorf("TreeDir = %q, want the flag's", cfg.TreeDir)
	}
	if cfg.Debounce != time.Second || cfg.Bus != "session" {
		t.Errorf("Debounce = %v, Bus = %q; want the file's", cfg.Debounce, cfg.Bus)
	}
	if got := fc.LogLevelName(*level, set); got != "error" {
		t.Errorf("LogLevelName = %q, want the flag's error", got)
	}
}

func TestConfigErrors(t *testing.T) {
	tests := []struct {
		name    string
		content string
		line    int
		key     string
		want    string // substring of the message
	}{
		// syntax
		{"missing value", "power_aware = 1\ndebounce =\n", 2, "", "start of value"},
		{"unterminated string", "bus = \"system\n", 1, "", ""},
		{"duplicate key", "upower = \"on\"\nupower = \"off\"\n", 2, "", "upower"},
		// unknown keys and tables
		{"unknown key", "power_aware = 1\n\npowersave = true\n", 3, "powersave", "unknown setting"},
		{"misspelt key", "power-aware = 1\n", 1, "power-aware", "unknown setting"},
		{"table", "[daemon]\ntree_dir = \"/x\"\n", 1, "daemon", "unknown setting"},
		// wrong types
		{"knob as string", "power_aware = \"1\"\n", 1, "power_aware", "want an integer"},
		{"bool as string", "power_profiles_api = \"on\"\n", 1, "power_profiles_api", `want true, false or "auto"`},
		{"api as integer", "power_profiles_api = 1\n", 1, "power_profiles_api", `want true, false or "auto"`},
		{"low_battery out of range", "low_battery = 101\n", 1, "low_battery", "want a percentage"},
		{"low_battery negative", "low_battery = -1\n", 1, "low_battery", "want a percentage"},
		{"task_clock as string", "task_clock = \"no\"\n", 1, "task_clock", "want true or false"},
		{"profile map out of range", "profile_power_saver = 3\n", 1, "profile_power_saver", "want 0"},
		{"profile map as string", "profile_balanced = \"1\"\n", 1, "profile_balanced", "want an integer"},
		{"duration as integer", "debounce = 500\n", 1, "debounce", "duration string"},
		{"enum as bool", "boost_on_battery = false\n", 1, "boost_on_battery", "want a string"},
		// bad values
		{"knob out of range", "power_aware = 3\n", 1, "power_aware", "want 0"},
		{"negative knob", "\n\npower_aware = -1\n", 3, "power_aware", "want 0"},
		{"policy performance", "power_aware_policy = \"performance\"\n", 1, "power_aware_policy", `"balance" or "powersaving"`},
		{"policy case", "power_aware_policy = \"Balance\"\n", 1, "power_aware_policy", ""},
		{"backend", "tree_backend = \"nfs\"\n", 1, "tree_backend", `"auto", "fuse" or "plain"`},
		{"boost", "# c\nboost_on_battery = \"disable\"\n", 2, "boost_on_battery", `"keep", "off" or "on"`},
		{"upower yes", "upower = \"yes\"\n", 1, "upower", `"auto", "on" or "off"`},
		{"relative tree", "tree_dir = \"run/tree\"\n", 1, "tree_dir", "absolute path"},
		{"empty state dir", "state_dir = \"\"\n", 1, "state_dir", "absolute path"},
		{"relative cgroup", "cgroup_root = \"schedpolicyd\"\n", 1, "cgroup_root", "absolute path"},
		{"placement", "placement = \"units\"\n", 1, "placement", `"auto", "systemd" or "cgroupfs"`},
		{"manage not a slice", "\nmanage = [\"system.slice\", \"cron.service\"]\n", 2, "manage", `"cron.service": want slice names`},
		{"manage path", "manage = [\"a/b.slice\"]\n", 1, "manage", "want slice names"},
		{"exempt bad glob", "exempt = [\"ok.scope\", \"app[.scope\"]\n", 1, "exempt", `"app[.scope": not a valid glob (path.Match: syntax error in pattern) (want a unit or workload name, or a glob of them, optionally after system/ or user:UID/)`},
		{"exempt manager", "\nexempt = [\"home/x\"]\n", 2, "exempt", `"home/x": "home" is not a manager`},
		{"exempt twice", "exempt = [\"a*\", \"a*\"]\n", 1, "exempt", `"a*": given twice`},
		{"exempt too many", "exempt = [" + strings.Repeat("\"x\",", 257) + "]\n", 1, "exempt", "257 entries: at most 256"},
		{"exempt not a list", "exempt = \"a*\"\n", 1, "exempt", "an array of unit or workload names or globs"},
		{"manage string", "manage = \"system.slice\"\n", 1, "manage", "an array of slice names"},
		{"bus word", "bus = \"systembus\"\n", 1, "bus", "D-Bus address"},
		{"upower on without a bus", "bus = \"none\"\n# hints\nupower = \"on\"\n", 3, "upower", `"on" needs D-Bus, and bus is "none"`},
		{"debounce unit", "debounce = \"500\"\n", 1, "debounce", "duration"},
		{"debounce negative", "debounce = \"-1s\"\n", 1, "debounce", "at least 0s and at most 1m"},
		{"recheck too short", "recheck_interval = \"10ms\"\n", 1, "recheck_interval", "at least 1s"},
		{"sample too short", "sample_interval = \"1ms\"\n", 1, "sample_interval", "at least 10ms"},
		{"log level", "log_level = \"loud\"\n", 1, "log_level", "want"},
		{"relative metrics file", "\nmetrics_textfile = \"schedpolicyd.prom\"\n", 2, "metrics_textfile", "absolute path ending in .prom"},
		{"metrics file not .prom", "metrics_textfile = \"/var/lib/prometheus/node-exporter/schedpolicyd.txt\"\n", 1, "metrics_textfile", "reads only *.prom"},
		{"metrics file as bool", "metrics_textfile = true\n", 1, "metrics_textfile", "want a string"},
		// [[slice]] rules
		{"slice without name", "[[slice]]\npolicy = \"powersaving\"\n", 1, "slice.name", "missing"},
		{"slice name not a slice", "[[slice]]\nname = \"cron.service\"\npolicy = \"balance\"\n", 2, "slice.name", `"cron.service": want a slice name`},
		{"slice twice", "[[slice]]\nname = \"a.slice\"\npolicy = \"balance\"\n[[slice]]\nname = \"a.slice\"\npolicy = \"powersaving\"\n", 5, "slice.name", "a second [[slice]]"},
		{"slice without policy", "[[slice]]\nname = \"a.slice\"\n", 1, "slice.policy", "missing"},
		{"slice policy unknown", "[[slice]]\nname = \"a.slice\"\npolicy = \"eco\"\n", 3, "slice.policy", `"eco": want "balance" or "powersaving"`},
		{"slice policy performance", "[[slice]]\nname = \"a.slice\"\npolicy = \"performance\"\n", 3, "slice.policy", "would change nothing"},
		{"slice always as string", "[[slice]]\nname = \"a.slice\"\npolicy = \"balance\"\nalways = \"yes\"\n", 4, "slice.always", "want true or false"},
		{"slice unknown key", "[[slice]]\nname = \"a.slice\"\npolcy = \"balance\"\n", 3, "slice.polcy", "unknown setting in [[slice]]"},
		{"setting after a slice", "[[slice]]\nname = \"a.slice\"\npolicy = \"balance\"\nupower = \"off\"\n", 4, "slice.upower", "top-level settings go before the first [[slice]]"},
		{"slice not managed", "manage = [\"system.slice\"]\n[[slice]]\nname = \"a.slice\"\npolicy = \"balance\"\n", 3, "slice.name", `"a.slice" is not in manage (line 1)`},
		{"slice as a table", "[slice]\nname = \"a.slice\"\n", 1, "slice", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := writeConfig(t, tt.content)
			fc, err := loadConfig(p, false)
			if err == nil {
				t.Fatalf("accepted: %+v", fc)
			}
			var ce *ConfigError
			if !errors.As(err, &ce) {
				t.Fatalf("err %v (%T) is not a *ConfigError", err, err)
			}
			if ce.File != p || ce.Line != tt.line || (tt.key != "" && ce.Key != tt.key) {
				t.Errorf("got file %q line %d key %q; want %q line %d key %q (%v)", ce.File, ce.Line, ce.Key, p, tt.line, tt.key, err)
			}
			prefix := p + ":" + strconv.Itoa(tt.line) + ": "
			if !strings.HasPrefix(err.Error(), prefix) {
				t.Errorf("message %q does not start with %q", err, prefix)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("message %q lacks %q", err, tt.want)
			}
			if !reflect.DeepEqual(fc, fileConfig{}) {
				t.Errorf("a bad file returned settings: %+v", fc)
			}
		})
	}
}

// TestConfigSlices: [[slice]] tables become the slice rules, by name.
func TestConfigSlices(t *testing.T) {
	p := writeConfig(t, `placement = "systemd"
manage = ["system.slice", "background.slice", "batch.slice"]

[[slice]]
name = "background.slice"
policy = "powersaving"

[[slice]]
name = "batch.slice"
policy = "balance"
always = true
`)
	fc, err := loadConfig(p, true)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]policy.SliceRule{
		"background.slice": {Policy: policy.Powersaving},
		"batch.slice":      {Policy: policy.Balance, Always: true},
	}
	if !reflect.DeepEqual(fc.Slices, want) {
		t.Errorf("Slices = %+v, want %+v", fc.Slices, want)
	}
	var cfg daemon.Config
	fc.apply(&cfg, nil)
	if !reflect.DeepEqual(cfg.Slices, want) {
		t.Errorf("applied Slices = %+v, want %+v", cfg.Slices, want)
	}
	if _, err := daemon.New(withSafeDefaults(cfg)); err != nil {
		t.Errorf("daemon.New refused the rules: %v", err)
	}
	// A rule for a slice that is not managed would never apply.
	cfg.Manage = []string{"system.slice"}
	if _, err := daemon.New(withSafeDefaults(cfg)); err == nil || !strings.Contains(err.Error(), "background.slice: not in manage (system.slice)") {
		t.Errorf("daemon.New with a rule outside manage: %v", err)
	}
}

// withSafeDefaults makes cfg a Config daemon.New accepts without touching
// the host: a mock sysfs root and no bus.
func withSafeDefaults(cfg daemon.Config) daemon.Config {
	cfg.SysfsRoot = "../../sysfs/testdata/topology/snb-laptop-4c8t"
	cfg.Bus = "none"
	return cfg
}

// TestConfigAllErrorsReported: several bad values are all reported, in
// line order, so one edit fixes them all.
func TestConfigAllErrorsReported(t *testing.T) {
	p := writeConfig(t, "upower = \"maybe\"\npower_aware = 9\ndebounce = \"soon\"\n")
	_, err := loadConfig(p, true)
	if err == nil {
		t.Fatal("accepted")
	}
	lines := strings.Split(err.Error(), "\n")
	if len(lines) != 3 {
		t.Fatalf("want 3 problems, got %q", err)
	}
	for i, l := range lines {
		if !strings.HasPrefix(l, p+":"+strconv.Itoa(i+1)+": ") {
			t.Errorf("problem %d: %q", i+1, l)
		}
	}
}

// TestConfigShippedFile: the conffile the package installs parses, sets
// nothing (every key is commented out), and documents every key with its
// default; uncommenting every key gives a valid file equal to the defaults.
func TestConfigShippedFile(t *testing.T) {
	const shipped = "../../packaging/schedpolicyd.conf"
	b, err := os.ReadFile(shipped)
	if err != nil {
		t.Fatal(err)
	}
	fc, err := parseConfig(shipped, b)
	if err != nil {
		t.Fatalf("shipped config: %v", err)
	}
	if !reflect.DeepEqual(fc, fileConfig{Path: shipped}) {
		t.Errorf("shipped config sets values; every key should be commented out: %+v", fc)
	}
	var un []string
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "#") && strings.Contains(l, " = ") && !strings.HasPrefix(l, "# ") {
			un = append(un, strings.TrimPrefix(l, "#"))
		}
	}
	all := strings.Join(un, "\n") + "\n"
	fc, err = parseConfig(shipped+" (uncommented)", []byte(all))
	if err != nil {
		t.Fatalf("uncommented shipped config: %v\n%s", err, all)
	}
	lines := keyLines([]byte(all))
	for _, k := range configKeys() {
		if _, ok := lines[k]; !ok {
			t.Errorf("shipped config does not document %s", k)
		}
	}
	if a, pol := fc.Knob(); a != DefaultPowerAware || pol != DefaultPowerAwarePolicy {
		t.Errorf("documented knob default %d %q", a, pol)
	}
	if fc.BoostOnBatteryMode() != DefaultBoostOnBattery || fc.UPowerMode() != DefaultUPower || fc.PowerProfilesAPIMode() != DefaultPowerProfilesAPI || *fc.LogLevel != DefaultLogLevel {
		t.Errorf("documented defaults differ: %+v", fc)
	}
	want := daemon.Config{
		TreeDir: daemon.DefaultTreeDir, TreeBackend: "auto", CgroupRoot: "auto", SysfsRoot: "/sys",
		Placement: "auto", Manage: daemon.DefaultManage,
		StateDir: daemon.DefaultStateDir, Bus: "system", Debounce: daemon.DefaultDebounce,
		RecheckInterval: daemon.DefaultRecheckInterval, SampleInterval: daemon.DefaultSampleInterval,
		BoostOnBattery: DefaultBoostOnBattery, UPower: DefaultUPower, EPP: daemon.PrefAuto, PlatformProfile: daemon.PrefAuto,
		DefaultKnob:      &policy.Knob{PowerAware: DefaultPowerAware, PowerAwarePolicy: DefaultPowerAwarePolicy},
		PowerProfilesAPI: DefaultPowerProfilesAPI, ProfileMap: daemon.DefaultProfileMap,
		PowerProfilesUnits: bus.DefaultPowerProfilesUnits,
		LowBattery:         DefaultLowBattery,
	}
	var cfg daemon.Config
	fc.apply(&cfg, nil)
	if !reflect.DeepEqual(cfg, want) {
		t.Errorf("documented defaults differ from the daemon's:\n got %+v\nwant %+v", cfg, want)
	}
}
