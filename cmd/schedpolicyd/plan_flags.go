package main

// The command line of `schedpolicyd plan`: its flags, and the parsers of
// --load, --slice and --current.

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/schedpolicyd/schedpolicyd/daemon/placement/units"
	"github.com/schedpolicyd/schedpolicyd/policy"
	"github.com/schedpolicyd/schedpolicyd/sysfs"
)

// The bounds of plan's inputs (plan --help, schedpolicyd(8) and
// docs/INPUTS.md say them). A --allowed or --current cpulist may name
// only CPUs of the topology, and is parsed with sysfs.MaxCPUs as its bound
// (topologyCPUList), so a long or wide list takes no more room than that
// many CPUs.
const (
	// maxPlanLoads is the most --load entries (workloads).
	maxPlanLoads = 1024
	// maxPlanThreads is the most THREADS of one --load entry and of all
	// together: so many the energy model still places one at a time
	// (policy.MaxSimulatedThreads), which takes time in proportion to
	// them.
	maxPlanThreads = policy.MaxSimulatedThreads
	// maxPlanUtil is the largest UTIL, in CPUs: sysfs.MaxCPUs, more CPUs
	// than any machine has.
	maxPlanUtil = sysfs.MaxCPUs
	// maxPlanName is the most bytes of a NAME, SLICE or CLASS of
	// --load: systemd's UNIT_NAME_MAX without its NUL, the longest unit
	// name, so any unit the daemon places fits.
	maxPlanName = 255
)

// clip is s for an error message: s itself up to 64 bytes, else its first
// 64 bytes or so (at a character's start) and "…", so that a message about
// a huge argument stays a line.
func clip(s string) string {
	const most = 64
	if len(s) <= most {
		return s
	}
	i := most
	for i > 0 && !utf8.RuneStart(s[i]) {
		i--
	}
	return s[:i] + "…"
}

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
	scenario   string                      // --scenario
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
	fl.StringVar(&o.loads, "load", "", fmt.Sprintf("workloads: NAME=UTIL[:THREADS][@SLICE[/CLASS]],... (UTIL in CPUs, 1 = one CPU busy; THREADS defaults to 1; SLICE a unit's slice, giving its class as the daemon does; CLASS e.g. focused). At most %d workloads; UTIL 0 to %d; THREADS 1 to %d, and at most %d all together; NAME, SLICE and CLASS at most %d bytes",
		maxPlanLoads, maxPlanUtil, maxPlanThreads, maxPlanThreads, maxPlanName))
	fl.StringVar(&o.configFile, "config", "", "take the [[slice]] rules of this configuration `FILE` (schedpolicyd.conf(5))")
	o.slices = map[string]policy.SliceRule{}
	fl.Func("slice", "a slice rule NAME.slice=balance|powersaving[+always] (repeatable; wins over --config's)", func(v string) error {
		name, r, err := parseSliceFlag(v)
		if err == nil {
			o.slices[name] = r
		}
		return err
	})
	fl.StringVar(&o.allowed, "allowed", "", "cpulist of CPUs to hand out, each a CPU of the topology (default: all)")
	fl.Func("current", "plan from the current placement `NAME=CPULIST,...` and show what the daemon does next (a piece without = continues the cpulist before it: a=0-1,3,b=2; NAME * sets every workload not named; each NAME a workload of --load, each CPU one of the topology; repeatable)", func(v string) error {
		o.current = append(o.current, v)
		return nil
	})
	fl.StringVar(&o.lazyRecord, "lazy-record", "", "the lazy balance history of the decisions before, patch 18's perf_lb_record as a number `N` (0x… hex; bit 0 the last decision, set where it was over a threshold); default empty, as after a forced decision")
	fl.BoolVar(&o.raced, "raced", false, "the decision before raced to idle: with a --lazy-record that forbids packing the plan is held there")
	fl.BoolVar(&o.json, "json", false, "print JSON instead of text")
	fl.StringVar(&o.writeTree, "write-sysfs", "", "write the preset's mock sysfs tree into this directory and exit")
	fl.StringVar(&o.scenario, "scenario", "", "run the rt-app-like time line in `FILE` (testdata/scenarios/README.md) through the daemon's decisions against no daemon, and print each run's energy relative to no daemon under every model (modelled, not measured)")
	fl.StringVar(&o.svgFile, "svg", "", "also draw the plan as an SVG picture into `FILE` (- for standard output, instead of the text)")
	fl.Usage = func() {
		fmt.Fprintln(fl.Output(), "Usage: schedpolicyd plan (--sysfs-root DIR | --topology PRESET) --policy P --load NAME=UTIL[:THREADS][@SLICE[/CLASS]],... [--slice NAME.slice=POLICY[+always]]... [--config FILE] [--allowed LIST] [--current NAME=CPULIST,...] [--lazy-record N] [--raced] [--json] [--svg FILE]")
		fmt.Fprintln(fl.Output(), "       schedpolicyd plan (--sysfs-root DIR | --topology PRESET) --scenario FILE [--slice ...] [--config FILE] [--json]")
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
// THREADS defaults to 1. Errors, each naming --load and the entry (clipped)
// and the bound it breaks: more than maxPlanLoads entries (found before
// any is parsed), a NAME, SLICE or CLASS of more than maxPlanName bytes,
// a UTIL not from 0 to maxPlanUtil, a THREADS not from 1 to
// maxPlanThreads, THREADS adding up to more than maxPlanThreads, a NAME
// given twice, and entries not of this form.
func parseLoads(s string) ([]policy.Load, error) {
	if strings.TrimSpace(s) == "" {
		return nil, errors.New("--load is required (NAME=UTIL[:THREADS],...)")
	}
	if n := strings.Count(s, ",") + 1; n > maxPlanLoads {
		return nil, fmt.Errorf("--load: %d workloads, at most %d", n, maxPlanLoads)
	}
	var out []policy.Load
	seen := map[string]bool{}
	total := 0 // THREADS so far
	for _, part := range strings.Split(s, ",") {
		name, val, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok || name == "" {
			return nil, fmt.Errorf("--load %q: want NAME=UTIL[:THREADS]", clip(part))
		}
		if len(name) > maxPlanName {
			return nil, fmt.Errorf("--load %q: NAME has %d bytes, at most %d", clip(part), len(name), maxPlanName)
		}
		if seen[name] {
			return nil, fmt.Errorf("--load: workload %q given twice", name)
		}
		seen[name] = true
		val, where, hasSlice := strings.Cut(val, "@")
		slice, class, hasClass := strings.Cut(where, "/")
		switch {
		case len(slice) > maxPlanName:
			return nil, fmt.Errorf("--load %q: SLICE has %d bytes, at most %d", clip(part), len(slice), maxPlanName)
		case len(class) > maxPlanName:
			return nil, fmt.Errorf("--load %q: CLASS has %d bytes, at most %d", clip(part), len(class), maxPlanName)
		case hasSlice && !validSlice(slice):
			return nil, fmt.Errorf("--load %q: SLICE must be a slice name, NAME.slice", clip(part))
		case hasClass && (class == "" || strings.ContainsAny(class, " =,:@/")):
			return nil, fmt.Errorf("--load %q: CLASS must be a word (focused, app, background, session, service, …)", clip(part))
		case !hasClass && hasSlice:
			class = units.UnitClass(name, slice)
		case !hasClass:
			class = policy.ClassWorkload
		}
		us, ts, hasT := strings.Cut(val, ":")
		u, err := strconv.ParseFloat(us, 64)
		if err != nil || !(u >= 0 && u <= maxPlanUtil) {
			return nil, fmt.Errorf("--load %q: UTIL must be a number from 0 to %d (CPUs)", clip(part), maxPlanUtil)
		}
		threads := 1
		if hasT {
			if threads, err = strconv.Atoi(ts); err != nil || threads < 1 || threads > maxPlanThreads {
				return nil, fmt.Errorf("--load %q: THREADS must be an integer from 1 to %d", clip(part), maxPlanThreads)
			}
		}
		if total += threads; total > maxPlanThreads {
			return nil, fmt.Errorf("--load %q: the workloads' THREADS add up to %d with it, at most %d", clip(part), total, maxPlanThreads)
		}
		out = append(out, policy.Load{Name: name, Util: u, Threads: threads, Class: class, Slice: slice})
	}
	return out, nil
}

// parseCurrent parses --current NAME=CPULIST,... (each value of the
// repeated flag): a piece without "=" continues the cpulist before it
// (a=0-1,3,b=2), and NAME "*" gives every workload not named its set.
// Every NAME must be a workload of loads, named once, and every CPU one
// of descs; no cpulist takes more than sysfs.MaxCPUs CPUs
// (topologyCPUList). Errors name --current, the entry (clipped) and, for
// CPUs not in the topology, them and the topology's CPUs.
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
	// entry is one NAME=CPULIST, its list as the pieces that make it: a
	// list of many pieces is joined once, not piece by piece.
	type entry struct {
		name   string
		pieces []string
	}
	var entries []entry
	named := map[string]bool{}
	for _, spec := range specs {
		for _, piece := range strings.Split(spec, ",") {
			piece = strings.TrimSpace(piece)
			name, list, ok := strings.Cut(piece, "=")
			switch {
			case ok && name != "*" && !known[name]:
				return nil, fmt.Errorf("--current: %q is no workload of --load", clip(name))
			case ok && named[name]:
				return nil, fmt.Errorf("--current: workload %q given twice", name)
			case ok:
				named[name] = true
				entries = append(entries, entry{name, []string{list}})
			case len(entries) > 0 && piece != "":
				entries[len(entries)-1].pieces = append(entries[len(entries)-1].pieces, piece)
			default:
				return nil, fmt.Errorf("--current %q: want NAME=CPULIST,...", clip(spec))
			}
		}
	}
	out := map[string]sysfs.CPUSet{}
	var rest *sysfs.CPUSet
	for _, e := range entries {
		list := strings.Join(e.pieces, ",")
		set, beyond, err := topologyCPUList(list)
		switch {
		case beyond != "":
			return nil, fmt.Errorf("--current %s=%s: CPU %s is not in the topology (CPUs %s)", e.name, clip(list), beyond, cpus)
		case err != nil || set.IsEmpty():
			return nil, fmt.Errorf("--current %s=%s: want a non-empty cpulist", e.name, clip(list))
		}
		if extra := set.Difference(cpus); !extra.IsEmpty() {
			return nil, fmt.Errorf("--current %s=%s: CPUs %s are not in the topology (CPUs %s)", e.name, clip(list), extra, cpus)
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

// topologyCPUList parses list, a cpulist of --allowed or --current, for
// the caller to check its CPUs against the topology's: with sysfs.MaxCPUs
// as the bound (sysfs.ParseCPUListBelow), so that it takes at most that
// many CPUs (64 KiB) however long or wide it is, and the caller can name
// each CPU the topology lacks. A list naming a CPU at or beyond the bound
// has beyond, that CPU (clipped), and an empty set. err is a bad list's.
func topologyCPUList(list string) (set sysfs.CPUSet, beyond string, err error) {
	set, err = sysfs.ParseCPUListBelow(list, sysfs.MaxCPUs)
	if re := (*sysfs.CPURangeError)(nil); errors.As(err, &re) {
		return sysfs.CPUSet{}, clip(re.CPU), nil
	}
	return set, "", err
}
