package main

// The command line of `schedpolicyd plan`: its flags, and the parsers of
// --load, --slice and --current.

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"math"
	"strconv"
	"strings"

	"github.com/schedpolicyd/schedpolicyd/daemon/placement/units"
	"github.com/schedpolicyd/schedpolicyd/policy"
	"github.com/schedpolicyd/schedpolicyd/sysfs"
)

// planOptions are plan's flags as given; planOptions.input checks them.
type planOptions struct {
	root       string                      // --sysfs-root
	preset     string                      // --topology
	policy     string                      // --policy
	loads      string                      // --load
	configFile string                      // --config
	slices     map[string]policy.SliceRule // --slice, by slice name
	allowed    string                      // --allowed, a cpulist
	current    []string                    // each --current
	lazyRecord string                      // --lazy-record
	raced      bool                        // --raced
	json       bool                        // --json
	writeTree  string                      // --write-sysfs
	svgFile    string                      // --svg
}

// parsePlanFlags parses plan's command line. ok is false when the caller
// should return code at once: 0 after --help, 2 on a usage error
// (parseFlags).
func parsePlanFlags(args []string, stdout, stderr io.Writer) (o planOptions, code int, ok bool) {
	fl := flag.NewFlagSet("schedpolicyd plan", flag.ContinueOnError)
	fl.SetOutput(stderr)
	fl.StringVar(&o.root, "sysfs-root", "", "read the topology from this sysfs root (a mock tree works)")
	fl.StringVar(&o.preset, "topology", "", "use a preset machine: "+strings.Join(presetNames(), ", "))
	fl.StringVar(&o.policy, "policy", "powersaving", "performance, balance or powersaving")
	fl.StringVar(&o.loads, "load", "", "workloads: NAME=UTIL[:THREADS][@SLICE[/CLASS]],... (UTIL in CPUs, 1 = one CPU busy; THREADS defaults to 1; SLICE a unit's slice, giving its class as the daemon does; CLASS e.g. focused)")
	fl.StringVar(&o.configFile, "config", "", "take the [[slice]] rules of this configuration `FILE` (schedpolicyd.conf(5))")
	o.slices = map[string]policy.SliceRule{}
	fl.Func("slice", "a slice rule NAME.slice=balance|powersaving[+always] (repeatable; wins over --config's)", func(v string) error {
		name, r, err := parseSliceFlag(v)
		if err == nil {
			o.slices[name] = r
		}
		return err
	})
	fl.StringVar(&o.allowed, "allowed", "", "cpulist of CPUs to hand out (default: all)")
	fl.Func("current", "plan from the current placement `NAME=CPULIST,...` and show what the daemon does next (a piece without = continues the cpulist before it: a=0-1,3,b=2; NAME * sets every workload not named; repeatable)", func(v string) error {
		o.current = append(o.current, v)
		return nil
	})
	fl.StringVar(&o.lazyRecord, "lazy-record", "", "the lazy balance history of the decisions before, patch 18's perf_lb_record as a number `N` (0x… hex; bit 0 the last decision, set where it was over a threshold); default empty, as after a forced decision")
	fl.BoolVar(&o.raced, "raced", false, "the decision before raced to idle: with a --lazy-record that forbids packing the plan is held there")
	fl.BoolVar(&o.json, "json", false, "print JSON instead of text")
	fl.StringVar(&o.writeTree, "write-sysfs", "", "write the preset's mock sysfs tree into this directory and exit")
	fl.StringVar(&o.svgFile, "svg", "", "also draw the plan as an SVG picture into `FILE` (- for standard output, instead of the text)")
	fl.Usage = func() {
		fmt.Fprintln(fl.Output(), "Usage: schedpolicyd plan (--sysfs-root DIR | --topology PRESET) --policy P --load NAME=UTIL[:THREADS][@SLICE[/CLASS]],... [--slice NAME.slice=POLICY[+always]]... [--config FILE] [--allowed LIST] [--current NAME=CPULIST,...] [--lazy-record N] [--raced] [--json] [--svg FILE]")
		fmt.Fprintln(fl.Output(), "       schedpolicyd plan --topology PRESET --write-sysfs DIR")
		fl.PrintDefaults()
	}
	code, ok = parseFlags(fl, "schedpolicyd plan", args, stdout, stderr)
	return o, code, ok
}

// lazyState is the lazy balance history of --lazy-record and --raced; a
// --lazy-record that is no 64-bit number is a usageError.
func (o planOptions) lazyState() (policy.LazyState, error) {
	lazy := policy.LazyState{RaceToIdle: o.raced}
	if o.lazyRecord != "" {
		var err error
		if lazy.Record, err = strconv.ParseUint(o.lazyRecord, 0, 64); err != nil {
			return lazy, usagef("--lazy-record %q: want a 64-bit number (0x… hex, 0b… binary or decimal)", o.lazyRecord)
		}
	}
	return lazy, nil
}

// sliceRules are the slice rules in force by slice name: --config's
// [[slice]] tables, then --slice's, which win. A configuration file that
// cannot be read or is bad is a usageError.
func (o planOptions) sliceRules() (map[string]policy.SliceRule, error) {
	rules := map[string]policy.SliceRule{}
	if o.configFile != "" {
		fc, err := loadConfig(o.configFile, true)
		if err != nil {
			return nil, usageError{err}
		}
		maps.Copy(rules, fc.Slices)
	}
	maps.Copy(rules, o.slices)
	return rules, nil
}

// parseSliceFlag parses --slice NAME.slice=balance|powersaving[+always].
func parseSliceFlag(v string) (string, policy.SliceRule, error) {
	name, val, ok := strings.Cut(v, "=")
	if !ok || !validSlice(name) {
		return "", policy.SliceRule{}, fmt.Errorf("%q: want NAME.slice=balance|powersaving[+always]", v)
	}
	pol, always := strings.CutSuffix(val, "+always")
	if pol != string(policy.Balance) && pol != string(policy.Powersaving) {
		return "", policy.SliceRule{}, fmt.Errorf("%q: the policy must be balance or powersaving (a slice's policy is the least packing of its units)", v)
	}
	return name, policy.SliceRule{Policy: policy.Policy(pol), Always: always}, nil
}

// parseLoads parses NAME=UTIL[:THREADS][@SLICE[/CLASS]],...: a workload
// with a slice gets the class the daemon gives a unit of that slice
// (units.UnitClass), unless CLASS names one; without, ClassWorkload.
func parseLoads(s string) ([]policy.Load, error) {
	if strings.TrimSpace(s) == "" {
		return nil, errors.New("--load is required (NAME=UTIL[:THREADS],...)")
	}
	var out []policy.Load
	seen := map[string]bool{}
	for _, part := range strings.Split(s, ",") {
		name, val, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok || name == "" {
			return nil, fmt.Errorf("--load %q: want NAME=UTIL[:THREADS]", part)
		}
		if seen[name] {
			return nil, fmt.Errorf("--load: workload %q given twice", name)
		}
		seen[name] = true
		val, where, hasSlice := strings.Cut(val, "@")
		slice, class, hasClass := strings.Cut(where, "/")
		switch {
		case hasSlice && !validSlice(slice):
			return nil, fmt.Errorf("--load %q: SLICE must be a slice name, NAME.slice", part)
		case hasClass && (class == "" || strings.ContainsAny(class, " =,:@/")):
			return nil, fmt.Errorf("--load %q: CLASS must be a word (focused, app, background, session, service, …)", part)
		case !hasClass && hasSlice:
			class = units.UnitClass(name, slice)
		case !hasClass:
			class = policy.ClassWorkload
		}
		us, ts, hasT := strings.Cut(val, ":")
		u, err := strconv.ParseFloat(us, 64)
		if err != nil || u < 0 || math.IsNaN(u) || math.IsInf(u, 0) {
			return nil, fmt.Errorf("--load %q: UTIL must be a number ≥ 0 (CPUs)", part)
		}
		threads := 1
		if hasT {
			if threads, err = strconv.Atoi(ts); err != nil || threads < 1 {
				return nil, fmt.Errorf("--load %q: THREADS must be an integer ≥ 1", part)
			}
		}
		out = append(out, policy.Load{Name: name, Util: u, Threads: threads, Class: class, Slice: slice})
	}
	return out, nil
}

// parseCurrent parses --current NAME=CPULIST,... (each value of the
// repeated flag): a piece without "=" continues the cpulist before it
// (a=0-1,3,b=2), and NAME "*" gives every workload not named its set.
// Every NAME must be a workload of loads, every CPU one of descs.
func parseCurrent(specs []string, loads []policy.Load, descs []policy.CPUDesc) (map[string]sysfs.CPUSet, error) {
	known := map[string]bool{}
	for _, l := range loads {
		known[l.Name] = true
	}
	var ids []int
	for _, d := range descs {
		ids = append(ids, d.ID)
	}
	cpus := sysfs.NewCPUSet(ids...)
	type entry struct{ name, list string }
	var entries []entry
	for _, spec := range specs {
		for _, piece := range strings.Split(spec, ",") {
			piece = strings.TrimSpace(piece)
			name, list, ok := strings.Cut(piece, "=")
			switch {
			case ok:
				entries = append(entries, entry{name, list})
			case len(entries) > 0 && piece != "":
				entries[len(entries)-1].list += "," + piece
			default:
				return nil, fmt.Errorf("--current %q: want NAME=CPULIST,...", spec)
			}
		}
	}
	out := map[string]sysfs.CPUSet{}
	var rest *sysfs.CPUSet
	for _, e := range entries {
		if e.name != "*" && !known[e.name] {
			return nil, fmt.Errorf("--current: %q is no workload of --load", e.name)
		}
		if _, dup := out[e.name]; dup || e.name == "*" && rest != nil {
			return nil, fmt.Errorf("--current: workload %q given twice", e.name)
		}
		set, err := sysfs.ParseCPUList(e.list)
		if err != nil || set.IsEmpty() {
			return nil, fmt.Errorf("--current %s=%s: want a non-empty cpulist", e.name, e.list)
		}
		if extra := set.Difference(cpus); !extra.IsEmpty() {
			return nil, fmt.Errorf("--current %s=%s: CPUs %s are not in the topology (CPUs %s)", e.name, e.list, extra, cpus)
		}
		if e.name == "*" {
			rest = &set
			continue
		}
		out[e.name] = set
	}
	if rest != nil {
		for _, l := range loads {
			if _, ok := out[l.Name]; !ok {
				out[l.Name] = *rest
			}
		}
	}
	return out, nil
}
