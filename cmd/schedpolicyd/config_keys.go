package main

// The keys of the configuration file: its TOML shape, and the checks that
// turn a decoded file into a fileConfig or into one ConfigError per
// problem, each with its line.

import (
	"bytes"
	"errors"
	"fmt"
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
	"github.com/schedpolicyd/schedpolicyd/internal/names"
	"github.com/schedpolicyd/schedpolicyd/policy"
	"github.com/schedpolicyd/schedpolicyd/tree"
)

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
	Exempt             *[]string  `toml:"exempt"`
	SysfsRoot          *string    `toml:"sysfs_root"`
	StateDir           *string    `toml:"state_dir"`
	Bus                *string    `toml:"bus"`
	Debounce           *string    `toml:"debounce"`
	RecheckInterval    *string    `toml:"recheck_interval"`
	SampleInterval     *string    `toml:"sample_interval"`
	BoostOnBattery     *string    `toml:"boost_on_battery"`
	EPP                *string    `toml:"epp"`
	PlatformProfile    *string    `toml:"platform_profile"`
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

// parseConfig validates data, the content of file name (used in errors).
// It returns the settings the file names, or an error joining one
// *ConfigError per problem in line order: the decoder's (syntax, unknown
// key, wrong type; decodeErrors) or, when the file decodes, every bad
// value.
func parseConfig(name string, data []byte) (fileConfig, error) {
	var raw rawConfig
	dec := toml.NewDecoder(bytes.NewReader(data)).DisallowUnknownFields()
	if err := dec.Decode(&raw); err != nil {
		return fileConfig{}, decodeErrors(name, err)
	}
	p := &configParser{name: name, lines: keyLines(data), fc: fileConfig{Path: name}}
	p.settings(&raw)
	p.sliceRules(raw.Slice)
	if len(p.errs) > 0 {
		sort.SliceStable(p.errs, func(i, j int) bool {
			return p.errs[i].(*ConfigError).Line < p.errs[j].(*ConfigError).Line
		})
		return fileConfig{}, errors.Join(p.errs...)
	}
	return p.fc, nil
}

// configParser checks a decoded file into fc, collecting a *ConfigError
// for every bad value instead of stopping at the first.
type configParser struct {
	name  string         // the file, for the errors
	lines map[string]int // keyLines of the file: where each key is set
	errs  []error
	fc    fileConfig
}

// bad reports a problem with key, at the line the key is set on.
func (p *configParser) bad(key, format string, args ...any) {
	p.errs = append(p.errs, &ConfigError{File: p.name, Line: p.lines[key], Key: key, Err: fmt.Errorf(format, args...)})
}

// wantKnob is the problem of a power_aware value out of range.
const wantKnob = "%d: want 0 (always performance), 1 (automatic) or 2 (always power-aware)"

// settings checks the top-level keys of raw into p.fc, by kind of value.
func (p *configParser) settings(raw *rawConfig) {
	fc := &p.fc
	fc.PowerAware = p.intIn("power_aware", raw.PowerAware, 0, 2, wantKnob)
	// Settings with named values; the file and the flags accept the same
	// words.
	for _, s := range []struct {
		key     string
		dst     **string
		v       *string
		allowed []string
	}{
		{"power_aware_policy", &fc.PowerAwarePolicy, raw.PowerAwarePolicy, []string{"balance", "powersaving"}},
		{"tree_backend", &fc.TreeBackend, raw.TreeBackend, words(tree.Backends)},
		{"boost_on_battery", &fc.BoostOnBattery, raw.BoostOnBattery, words(daemon.BoostModes)},
		{"epp", &fc.EPP, raw.EPP, words(daemon.PrefModes)},
		{"platform_profile", &fc.PlatformProfile, raw.PlatformProfile, words(daemon.PrefModes)},
		{"upower", &fc.UPower, raw.UPower, words(acpi.UPowerModes)},
		{"placement", &fc.Placement, raw.Placement, []string{"auto", daemon.PlacementSystemd, daemon.PlacementCgroupfs}},
	} {
		*s.dst = p.enum(s.key, s.v, s.allowed...)
	}
	fc.Manage = p.names("manage", raw.Manage, validSlice, "%q: want slice names, \"NAME.slice\"")
	fc.Exempt = p.exempt(raw.Exempt)
	fc.PowerProfilesUnits = p.names("power_profiles_units", raw.PowerProfilesUnits, validServiceUnit, "%q: want service unit names, \"NAME.service\"")
	for _, s := range []struct {
		key string
		dst **string
		v   *string
	}{
		{"tree_dir", &fc.TreeDir, raw.TreeDir},
		{"sysfs_root", &fc.SysfsRoot, raw.SysfsRoot},
		{"state_dir", &fc.StateDir, raw.StateDir},
	} {
		*s.dst = p.absPath(s.key, s.v)
	}
	fc.CgroupRoot = p.cgroupRoot(raw.CgroupRoot)
	fc.Bus = p.bus(raw.Bus)
	if fc.Bus != nil && *fc.Bus == "none" && fc.UPower != nil && *fc.UPower == "on" {
		// daemon.New refuses the pair too (also when a flag sets one).
		p.bad("upower", "\"on\" needs D-Bus, and bus is \"none\": use \"auto\" or \"off\", or another bus")
	}
	// The bounds are package daemon's (daemon.MinSampleInterval and the
	// rest), which daemon.New checks too.
	for _, s := range []struct {
		key   string
		dst   **time.Duration
		v     *string
		check func(time.Duration) error
	}{
		{"debounce", &fc.Debounce, raw.Debounce, daemon.CheckDebounce},
		{"recheck_interval", &fc.RecheckInterval, raw.RecheckInterval, daemon.CheckRecheckInterval},
		{"sample_interval", &fc.SampleInterval, raw.SampleInterval, daemon.CheckSampleInterval},
	} {
		*s.dst = p.duration(s.key, s.v, s.check)
	}
	fc.PowerProfilesAPI = p.powerProfilesAPI(raw.PowerProfilesAPI)
	fc.TaskClock = raw.TaskClock
	fc.LowBattery = p.intIn("low_battery", raw.LowBattery, 0, 100, "%d: want a percentage 1 to 100, or 0 for off")
	p.profileMap(raw)
	fc.LogLevel = p.check("log_level", raw.LogLevel, func(v string) error { _, err := logrus.ParseLevel(v); return err },
		"%q: want \"debug\", \"info\", \"warning\" or \"error\"")
	fc.MetricsTextfile = p.check("metrics_textfile", raw.MetricsTextfile, daemon.CheckMetricsTextfile,
		"%q: want \"\" (none) or an absolute path ending in .prom, e.g. \"/var/lib/prometheus/node-exporter/schedpolicyd.prom\" (the textfile collector reads only *.prom)")
}

// profileMap checks profile_power_saver, profile_balanced and
// profile_performance into fc.ProfileMap by profile name; it stays nil
// when the file sets none of them.
func (p *configParser) profileMap(raw *rawConfig) {
	for _, s := range []struct {
		key, profile string
		v            *int64
	}{
		{"profile_power_saver", "power-saver", raw.ProfilePowerSaver},
		{"profile_balanced", "balanced", raw.ProfileBalanced},
		{"profile_performance", "performance", raw.ProfilePerformance},
	} {
		n := p.intIn(s.key, s.v, 0, 2, wantKnob)
		if n == nil {
			continue
		}
		if p.fc.ProfileMap == nil {
			p.fc.ProfileMap = map[string]policy.PowerAware{}
		}
		p.fc.ProfileMap[s.profile] = policy.PowerAware(*n)
	}
}

// intIn is v when it is within lo..hi; nil when unset or out of range,
// which is reported with format (given v).
func (p *configParser) intIn(key string, v *int64, lo, hi int64, format string) *int {
	if v == nil {
		return nil
	}
	if *v < lo || *v > hi {
		p.bad(key, format, *v)
		return nil
	}
	n := int(*v)
	return &n
}

// enum is v when it is one of allowed; nil when unset or not.
func (p *configParser) enum(key string, v *string, allowed ...string) *string {
	if v == nil {
		return nil
	}
	for _, a := range allowed {
		if *v == a {
			return v
		}
	}
	p.bad(key, "%q: want %s", *v, quoteList(allowed))
	return nil
}

// check is v when ok accepts it; nil when unset or not, which is reported
// with format (given v).
func (p *configParser) check(key string, v *string, ok func(string) error, format string) *string {
	if v == nil {
		return nil
	}
	if err := ok(*v); err != nil {
		p.bad(key, format, *v)
		return nil
	}
	return v
}

// names is the list v without the names ok rejects, each reported with
// format; nil when unset, empty (not nil) when set to none.
func (p *configParser) names(key string, v *[]string, ok func(string) bool, format string) []string {
	if v == nil {
		return nil
	}
	out := []string{}
	for _, n := range *v {
		if !ok(n) {
			p.bad(key, format, n)
			continue
		}
		out = append(out, n)
	}
	return out
}

// exempt is the exempt list: at most names.MaxExempts entries of
// names.ParseExempt, each once; each one refused is reported with why.
// nil when unset, empty (not nil) when set to none.
func (p *configParser) exempt(v *[]string) []string {
	if v == nil {
		return nil
	}
	if len(*v) > names.MaxExempts {
		p.bad("exempt", "%d entries: at most %d", len(*v), names.MaxExempts)
		return nil
	}
	out := []string{}
	for _, s := range *v {
		var ee *names.ExemptError
		switch _, err := names.ParseExempt(s); {
		case errors.As(err, &ee):
			p.bad("exempt", "%q: %s (want a unit or workload name, or a glob of them, optionally after system/ or user:UID/)", s, ee.Why)
		case slices.Contains(out, s):
			p.bad("exempt", "%q: given twice", s)
		default:
			out = append(out, s)
		}
	}
	return out
}

// validServiceUnit reports whether u names a service unit: "NAME.service",
// no slash or white space.
func validServiceUnit(u string) bool {
	name, ok := strings.CutSuffix(u, ".service")
	return ok && name != "" && !strings.ContainsAny(u, "/ \t\n")
}

// validSlice reports whether s names a slice unit: "NAME.slice", no
// slash, space or NUL.
func validSlice(s string) bool {
	return strings.HasSuffix(s, ".slice") && s != ".slice" && !strings.ContainsAny(s, "/ \x00")
}

// words turns a setting's accepted values (tree.Backends, ...) into the
// strings the configuration file is checked against, so the file and the
// flags accept the same words.
func words[T ~string](vs []T) []string {
	out := make([]string, len(vs))
	for i, v := range vs {
		out[i] = string(v)
	}
	return out
}

// absPath is v cleaned when it is an absolute path; nil when unset or
// relative.
func (p *configParser) absPath(key string, v *string) *string {
	if v == nil {
		return nil
	}
	if !filepath.IsAbs(*v) {
		p.bad(key, "%q: want an absolute path", *v)
		return nil
	}
	c := filepath.Clean(*v)
	return &c
}

// cgroupRoot is cgroup_root: "auto", "none" or an absolute path.
func (p *configParser) cgroupRoot(v *string) *string {
	if v != nil && (*v == "auto" || *v == "none") {
		return v
	}
	return p.absPath("cgroup_root", v)
}

// bus is bus: "system", "session", "none" or a D-Bus address.
func (p *configParser) bus(v *string) *string {
	if v == nil {
		return nil
	}
	switch b := *v; {
	case b == "system" || b == "session" || b == "none":
		return v
	case strings.Contains(b, ":") && strings.Contains(b, "="):
		return v // transport:key=value[,...]
	}
	p.bad("bus", "%q: want \"system\", \"session\", \"none\" or a D-Bus address such as \"unix:path=/run/dbus/system_bus_socket\"", *v)
	return nil
}

// duration is v parsed as a Go duration within check's bounds; nil when
// unset, unparsable or out of bounds.
func (p *configParser) duration(key string, v *string, check func(time.Duration) error) *time.Duration {
	if v == nil {
		return nil
	}
	d, err := time.ParseDuration(*v)
	if err != nil {
		p.bad(key, "%q: want a duration such as \"500ms\", \"2s\" or \"1m\"", *v)
		return nil
	}
	if err := check(d); err != nil {
		p.bad(key, "%q: %v", *v, err)
		return nil
	}
	return &d
}

// powerProfilesAPI is power_profiles_api, a TOML boolean or "auto", as
// the mode daemon.Config wants: bus.PowerProfilesServe, bus.PowerProfilesOff
// or bus.PowerProfilesAuto; nil when unset or anything else.
func (p *configParser) powerProfilesAPI(v any) *string {
	var m string
	switch v := v.(type) {
	case nil:
		return nil
	case bool:
		m = bus.PowerProfilesOff
		if v {
			m = bus.PowerProfilesServe
		}
	case string:
		if v != "auto" {
			p.bad("power_profiles_api", "%q: want true, false or \"auto\"", v)
			return nil
		}
		m = bus.PowerProfilesAuto
	default:
		p.bad("power_profiles_api", "%v: want true, false or \"auto\"", v)
		return nil
	}
	return &m
}

// sliceRules checks the [[slice]] tables into fc.Slices by slice name
// (nil when there are none). A [slice] table is reported and its rules
// are not read.
func (p *configParser) sliceRules(tables []rawSlice) {
	if l, ok := p.lines["[slice]"]; ok {
		p.errs = append(p.errs, &ConfigError{File: p.name, Line: l, Key: "slice", Err: errors.New("[slice]: want [[slice]], one table per slice rule")})
		return
	}
	seen := map[string]bool{}
	for i, rs := range tables {
		name, r, ok := p.sliceRule(i, rs, seen)
		if !ok {
			continue
		}
		if p.fc.Slices == nil {
			p.fc.Slices = map[string]policy.SliceRule{}
		}
		p.fc.Slices[name] = r
	}
}

// sliceRule checks [[slice]] table number i (from 0), rs, after fc.Manage
// is checked. seen holds the slices the tables before named; rs's name
// is added once it is valid. ok is false after a problem, reported at the
// line of the key at fault, else at the table's header.
func (p *configParser) sliceRule(i int, rs rawSlice, seen map[string]bool) (name string, r policy.SliceRule, ok bool) {
	badAt := func(key, format string, args ...any) {
		at := fmt.Sprintf("slice[%d]", i)
		if _, ok := p.lines[at+"."+key]; ok {
			at += "." + key
		}
		p.errs = append(p.errs, &ConfigError{File: p.name, Line: p.lines[at], Key: "slice." + key, Err: fmt.Errorf(format, args...)})
	}
	switch {
	case rs.Name == nil:
		badAt("name", "missing: each [[slice]] names its slice (name = \"background.slice\")")
		return "", r, false
	case !validSlice(*rs.Name):
		badAt("name", "%q: want a slice name, \"NAME.slice\"", *rs.Name)
		return "", r, false
	case seen[*rs.Name]:
		badAt("name", "%q: a second [[slice]] for the same slice", *rs.Name)
		return "", r, false
	}
	seen[*rs.Name] = true
	switch {
	case rs.Policy == nil:
		badAt("policy", "missing: want \"balance\" or \"powersaving\"")
		return "", r, false
	case *rs.Policy == string(policy.Performance):
		badAt("policy", "\"performance\": a slice's policy is the least packing of its units, and performance would change nothing; want \"balance\" or \"powersaving\" (`schedpolicyctl exempt UNIT` or `schedpolicyctl workload-policy UNIT performance` frees one unit)")
		return "", r, false
	case *rs.Policy != string(policy.Balance) && *rs.Policy != string(policy.Powersaving):
		badAt("policy", "%q: want \"balance\" or \"powersaving\"", *rs.Policy)
		return "", r, false
	}
	if p.fc.Manage != nil && !slices.Contains(p.fc.Manage, *rs.Name) {
		// Without manage in the file, daemon.New checks the rule
		// against the default or --manage.
		badAt("name", "%q is not in manage (line %d): its rule would never apply", *rs.Name, p.lines["manage"])
		return "", r, false
	}
	r.Policy = policy.Policy(*rs.Policy)
	if rs.Always != nil {
		r.Always = *rs.Always
	}
	return *rs.Name, r, true
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
		"placement", "manage", "exempt", "sysfs_root", "state_dir", "bus", "debounce", "recheck_interval", "sample_interval",
		"boost_on_battery", "epp", "platform_profile", "upower", "power_profiles_api", "profile_power_saver", "profile_balanced",
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
		return `an array of slice names (manage = ["schedpolicyd.slice", "system.slice", "app.slice", "background.slice", "session.slice"])`
	case "exempt":
		return `an array of unit or workload names or globs (exempt = ["app-steam*.scope"])`
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
