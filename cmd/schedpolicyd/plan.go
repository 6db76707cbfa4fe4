package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/schedpolicyd/schedpolicyd/daemon"
	"github.com/schedpolicyd/schedpolicyd/policy"
	"github.com/schedpolicyd/schedpolicyd/sysfs"
)

// planReport is the JSON shape of `schedpolicyd plan --json`.
type planReport struct {
	Topology  string            `json:"topology"` // preset name or sysfs root
	Requested string            `json:"requested_policy"`
	Policy    string            `json:"policy"`    // effective, after any race-to-idle fallback
	Workloads map[string]string `json:"workloads"` // name → cpulist (kernel format)
	// Classes is each workload's class (policy.Class*; "workload" unless
	// its --load names a slice or a class), as the daemon's Workloads
	// property reports it.
	Classes map[string]string `json:"classes"`
	// WorkloadPolicies is the policy each workload was placed with: its
	// class and slice rule against the policy (policy.LoadPolicy), or
	// performance where that policy's plan fell back (race to idle).
	WorkloadPolicies map[string]string `json:"workload_policies"`
	// Slices are the slice rules in force (--config's [[slice]] tables
	// and --slice), "balance" or "powersaving", "+always" when they apply
	// under performance too; omitted when none.
	Slices map[string]string `json:"slices,omitempty"`
	Active planActive        `json:"active"`
	Watts  float64           `json:"watts"` // the energy model's estimate for the loads under this plan
	Model  string            `json:"model"` // which calibration produced Watts
	// ModelDescribes is false when the machine is not of the shape the
	// model was fitted on (policy.EnergyModel.Describes): Watts then only
	// compare policies on it; ModelNote says so, with both shapes.
	ModelDescribes bool   `json:"model_describes_machine"`
	ModelNote      string `json:"model_note,omitempty"`
	// CPUClasses are the machine's efficiency classes, most efficient
	// first, with the watts this plan's load draws on each class's cores
	// (ClassCostFrom says where the classes' costs come from); CPUClass
	// is each CPU's class by CPU number. Both only on a machine of more
	// than one class (sysfs.CPUClasses), so a homogeneous machine's
	// report is as before.
	CPUClasses    []planClass       `json:"cpu_classes,omitempty"`
	CPUClass      map[string]string `json:"cpu_class,omitempty"`
	ClassCostFrom string            `json:"class_cost_from,omitempty"`
	Levels        []string          `json:"levels"`
	Spread        bool              `json:"spread"` // some domain was balanced for performance
	// Current, CurrentActive and Next are there only with --current:
	// each workload's current cpulist (none: a new workload), the
	// active packages, cores and threads of those sets, and what the
	// daemon does next with each workload (planNext: keep, pack, widen,
	// move, place).
	Current       map[string]string `json:"current,omitempty"`
	CurrentActive *planActive       `json:"current_active,omitempty"`
	Next          map[string]string `json:"next,omitempty"`
	// Deferred: lazy balance keeps the current sets, or holds the plan in
	// race to idle (policy.Plan.Deferred).
	Deferred bool `json:"deferred,omitempty"`
	// Lazy is the lazy balance history after this decision, the next
	// decision's input; only with --current, --lazy-record or --raced.
	Lazy *planLazy `json:"lazy,omitempty"`
}

// planLazy is patch 18's history after the planned decision.
type planLazy struct {
	Record     string `json:"record"`       // perf_lb_record, 0x and 16 hex digits; bit 0 this decision
	RaceToIdle bool   `json:"race_to_idle"` // this plan raced to idle, or was held there
	// PackingAllowed: the history allows a power balance, so the next
	// decision packs (and leaves race to idle) if its load allows it.
	PackingAllowed bool `json:"packing_allowed"`
}

// What the daemon does next with a workload, from its current set to the
// plan's (planReport.Next).
const (
	nextKeep  = "keep"  // the same set: nothing written
	nextPack  = "pack"  // fewer CPUs, all of them in the current set
	nextWiden = "widen" // more CPUs, the current ones among them
	nextMove  = "move"  // some other set
	nextPlace = "place" // no current set given: a new workload's first one
)

// planClass is one efficiency class in the plan report.
type planClass struct {
	Name     string  `json:"name"`     // LPE, E, P; little, mid, big
	CPUs     string  `json:"cpus"`     // cpulist
	Capacity int     `json:"capacity"` // 1..1024, the biggest CPU = 1024
	Cost     float64 `json:"cost"`     // energy per unit of work, the most performant class = 1 (estimate)
	Watts    float64 `json:"watts"`    // the model's watts of this class's cores and threads under this plan
}

// planActive counts the union of the workloads' cpusets: what the plan
// allows to run, not a guess of which CPUs are busy.
type planActive struct {
	Packages int    `json:"packages"`
	Cores    int    `json:"cores"`
	Threads  int    `json:"threads"`
	CPUs     string `json:"cpus"`
}

// planMain runs the balancer offline on a sysfs root or a preset machine and
// prints the plan and the energy estimate. It reads only.
func planMain(args []string, stdout, stderr io.Writer) int {
	fl := flag.NewFlagSet("schedpolicyd plan", flag.ContinueOnError)
	fl.SetOutput(stderr)
	root := fl.String("sysfs-root", "", "read the topology from this sysfs root (a mock tree works)")
	preset := fl.String("topology", "", "use a preset machine: "+strings.Join(presetNames(), ", "))
	pol := fl.String("policy", "powersaving", "performance, balance or powersaving")
	loadSpec := fl.String("load", "", "workloads: NAME=UTIL[:THREADS][@SLICE[/CLASS]],... (UTIL in CPUs, 1 = one CPU busy; THREADS defaults to 1; SLICE a unit's slice, giving its class as the daemon does; CLASS e.g. focused)")
	configFile := fl.String("config", "", "take the [[slice]] rules of this configuration `FILE` (schedpolicyd.conf(5))")
	sliceRules := map[string]policy.SliceRule{}
	fl.Func("slice", "a slice rule NAME.slice=balance|powersaving[+always] (repeatable; wins over --config's)", func(v string) error {
		name, r, err := parseSliceFlag(v)
		if err == nil {
			sliceRules[name] = r
		}
		return err
	})
	allowedSpec := fl.String("allowed", "", "cpulist of CPUs to hand out (default: all)")
	var currentSpecs []string
	fl.Func("current", "plan from the current placement `NAME=CPULIST,...` and show what the daemon does next (a piece without = continues the cpulist before it: a=0-1,3,b=2; NAME * sets every workload not named; repeatable)", func(v string) error {
		currentSpecs = append(currentSpecs, v)
		return nil
	})
	lazyRecord := fl.String("lazy-record", "", "the lazy balance history of the decisions before, patch 18's perf_lb_record as a number `N` (0x… hex; bit 0 the last decision, set where it was over a threshold); default empty, as after a forced decision")
	raced := fl.Bool("raced", false, "the decision before raced to idle: with a --lazy-record that forbids packing the plan is held there")
	asJSON := fl.Bool("json", false, "print JSON instead of text")
	writeTree := fl.String("write-sysfs", "", "write the preset's mock sysfs tree into this directory and exit")
	svgFile := fl.String("svg", "", "also draw the plan as an SVG picture into `FILE` (- for standard output, instead of the text)")
	fl.Usage = func() {
		fmt.Fprintln(fl.Output(), "Usage: schedpolicyd plan (--sysfs-root DIR | --topology PRESET) --policy P --load NAME=UTIL[:THREADS][@SLICE[/CLASS]],... [--slice NAME.slice=POLICY[+always]]... [--config FILE] [--allowed LIST] [--current NAME=CPULIST,...] [--lazy-record N] [--raced] [--json] [--svg FILE]")
		fmt.Fprintln(fl.Output(), "       schedpolicyd plan --topology PRESET --write-sysfs DIR")
		fl.PrintDefaults()
	}
	if code, ok := parseFlags(fl, "schedpolicyd plan", args, stdout, stderr); !ok {
		return code
	}
	fail := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "schedpolicyd plan: "+format+"\n", a...)
		return 2
	}
	if *writeTree != "" {
		p, ok := presets[*preset]
		if !ok {
			return fail("--write-sysfs needs --topology PRESET (one of %s)", strings.Join(presetNames(), ", "))
		}
		if err := writeSysfsTree(*writeTree, p.cpus()); err != nil {
			fmt.Fprintf(stderr, "schedpolicyd plan: %v\n", err)
			return 1
		}
		return 0
	}
	if (*root == "") == (*preset == "") {
		return fail("give exactly one of --sysfs-root DIR or --topology PRESET")
	}
	policyName, err := policy.ParsePolicy(*pol)
	if err != nil {
		return fail("%v", err)
	}
	loads, err := parseLoads(*loadSpec)
	if err != nil {
		return fail("%v", err)
	}
	var lazy policy.LazyState
	if *lazyRecord != "" {
		if lazy.Record, err = strconv.ParseUint(*lazyRecord, 0, 64); err != nil {
			return fail("--lazy-record %q: want a 64-bit number (0x… hex, 0b… binary or decimal)", *lazyRecord)
		}
	}
	lazy.RaceToIdle = *raced
	rules := map[string]policy.SliceRule{}
	if *configFile != "" {
		fc, err := loadConfig(*configFile, true)
		if err != nil {
			fmt.Fprintf(stderr, "schedpolicyd plan: %v\n", err)
			return 2
		}
		for n, r := range fc.Slices {
			rules[n] = r
		}
	}
	for n, r := range sliceRules {
		rules[n] = r
	}
	var descs []policy.CPUDesc
	var classes sysfs.CPUClasses
	model := policy.SNBLaptop
	name := *preset
	costFrom := ""
	if *preset != "" {
		p, ok := presets[*preset]
		if !ok {
			return fail("unknown preset %q (one of %s)", *preset, strings.Join(presetNames(), ", "))
		}
		descs, model = p.cpus(), p.model
	} else {
		name = *root
		fsys, err := sysfs.NewFS(*root)
		if err != nil {
			fmt.Fprintf(stderr, "schedpolicyd plan: %v\n", err)
			return 1
		}
		if descs, classes, err = readMachine(fsys); err != nil {
			fmt.Fprintf(stderr, "schedpolicyd plan: %v\n", err)
			return 1
		}
		model, costFrom = daemon.ClassModel(modelFor(descs), fsys, classes)
	}
	topo, err := policy.BuildTopology(descs)
	if err != nil {
		fmt.Fprintf(stderr, "schedpolicyd plan: %v\n", err)
		return 1
	}
	var allowed []int
	for _, d := range descs {
		allowed = append(allowed, d.ID)
	}
	if *allowedSpec != "" {
		set, err := sysfs.ParseCPUList(*allowedSpec)
		if err != nil {
			return fail("--allowed: %v", err)
		}
		known := map[int]bool{}
		for _, id := range allowed {
			known[id] = true
		}
		for _, id := range set.List() {
			if !known[id] {
				return fail("--allowed: CPU %d is not in the topology (CPUs %s)", id, sysfs.NewCPUSet(allowed...))
			}
		}
		allowed = set.List()
	}
	var current map[string]sysfs.CPUSet
	if len(currentSpecs) > 0 {
		if current, err = parseCurrent(currentSpecs, loads, descs); err != nil {
			return fail("%v", err)
		}
		for i := range loads {
			if c, ok := current[loads[i].Name]; ok {
				loads[i].Current = c.List()
			}
		}
	}
	plan := policy.PlanPlacement(policy.Input{Topology: topo, Allowed: allowed, Policy: policyName, Loads: loads, Slices: rules, Lazy: lazy})
	est := model.Simulate(topo, plan, loads)
	r := planReport{
		Topology: name, Requested: string(policyName), Policy: string(plan.Policy),
		Workloads: map[string]string{}, Watts: math.Round(est.Watts*10) / 10, Model: model.Name,
		Levels: topo.Levels(allowed), Spread: plan.Spread,
		Classes: map[string]string{}, WorkloadPolicies: map[string]string{},
	}
	for _, l := range loads {
		r.Workloads[l.Name] = sysfs.NewCPUSet(plan.CPUs[l.Name]...).String()
		r.Classes[l.Name] = l.Class
		r.WorkloadPolicies[l.Name] = string(plan.Policies[l.Name])
	}
	if len(rules) > 0 {
		r.Slices = map[string]string{}
		for n, sr := range rules {
			r.Slices[n] = string(sr.Policy)
			if sr.Always {
				r.Slices[n] += "+always"
			}
		}
	}
	r.Active = activeCounts(descs, plan.Active)
	r.Deferred = plan.Deferred
	if current != nil {
		r.Current, r.Next = map[string]string{}, map[string]string{}
		var union sysfs.CPUSet
		for _, l := range loads {
			c, ok := current[l.Name]
			if ok {
				r.Current[l.Name] = c.String()
				union = union.Union(c)
			}
			r.Next[l.Name] = planNext(c, ok, sysfs.NewCPUSet(plan.CPUs[l.Name]...))
		}
		ca := activeCounts(descs, union.List())
		r.CurrentActive = &ca
	}
	if current != nil || *lazyRecord != "" || *raced {
		r.Lazy = &planLazy{Record: fmt.Sprintf("0x%016x", plan.Lazy.Record), RaceToIdle: plan.Lazy.RaceToIdle,
			PackingAllowed: plan.Lazy.PowerBalanceAllowed()}
	}
	if classes.Hybrid() {
		r.ClassCostFrom, r.CPUClass = costFrom, map[string]string{}
		for i, cl := range classes.Classes {
			pc := planClass{Name: cl.Name, CPUs: cl.CPUs.String(), Capacity: cl.Capacity, Cost: model.ClassCost[i]}
			if i < len(est.ClassWatts) {
				pc.Watts = math.Round(est.ClassWatts[i]*10) / 10
			}
			r.CPUClasses = append(r.CPUClasses, pc)
			for _, id := range cl.CPUs.List() {
				r.CPUClass[strconv.Itoa(id)] = cl.Name
			}
		}
	}
	if r.ModelDescribes = model.Describes(topo); !r.ModelDescribes {
		shape, _ := policy.ShapeOf(topo)
		r.ModelNote = fmt.Sprintf("the %s model was fitted on %s; this machine is %s: its watts compare the policies, they are no estimate of this machine's power",
			model.Name, model.Machine, shape)
	}
	if *svgFile != "" {
		if code, done := planSVG(*svgFile, descs, r, loads, plan, stdout, stderr); done {
			return code
		}
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(r); err != nil {
			return 1
		}
		return 0
	}
	fmt.Fprintf(stdout, "topology:  %s (%d CPUs; domain levels %s)\n", r.Topology, len(descs), strings.Join(r.Levels, " "))
	fmt.Fprintf(stdout, "policy:    %s", r.Policy)
	if r.Policy != r.Requested {
		fmt.Fprintf(stdout, " (requested %s; %s)", r.Requested, raceWhy(r))
	}
	fmt.Fprintln(stdout)
	if len(r.Slices) > 0 {
		var rs []string
		for n, v := range r.Slices {
			rs = append(rs, n+"="+v)
		}
		slices.Sort(rs)
		fmt.Fprintf(stdout, "slices:    %s\n", strings.Join(rs, " "))
	}
	fmt.Fprintln(stdout, "workloads:")
	// The NAME column is as wide as the longest name (unit names such as
	// systemd-journald.service are longer than the usual 16).
	nw := 16
	for _, l := range loads {
		nw = max(nw, len(l.Name))
	}
	if r.Current != nil {
		fmt.Fprintf(stdout, "  %-*s %-12s %-12s %-12s %-6s %s\n", nw, "NAME", "CLASS", "POLICY", "CURRENT", "NEXT", "CPUS")
	} else {
		fmt.Fprintf(stdout, "  %-*s %-12s %-12s %s\n", nw, "NAME", "CLASS", "POLICY", "CPUS")
	}
	for _, l := range loads {
		why := ""
		if pol := r.WorkloadPolicies[l.Name]; pol != r.Policy {
			why = "  (" + placedWhy(policyName, l, rules, plan.Policies[l.Name]) + ")"
		}
		if r.Current != nil {
			cur := r.Current[l.Name]
			if cur == "" {
				cur = "-"
			}
			fmt.Fprintf(stdout, "  %-*s %-12s %-12s %-12s %-6s %s%s%s\n", nw, l.Name, r.Classes[l.Name], r.WorkloadPolicies[l.Name], cur, r.Next[l.Name], r.Workloads[l.Name], byClass(classes, plan.CPUs[l.Name]), why)
			continue
		}
		fmt.Fprintf(stdout, "  %-*s %-12s %-12s %s%s%s\n", nw, l.Name, r.Classes[l.Name], r.WorkloadPolicies[l.Name], r.Workloads[l.Name], byClass(classes, plan.CPUs[l.Name]), why)
	}
	fmt.Fprintf(stdout, "active:    %d packages, %d cores, %d threads (%s)\n", r.Active.Packages, r.Active.Cores, r.Active.Threads, r.Active.CPUs)
	if c := r.CurrentActive; c != nil {
		fmt.Fprintf(stdout, "current:   %d packages, %d cores, %d threads (%s)\n", c.Packages, c.Cores, c.Threads, orNone(c.CPUs))
		fmt.Fprintf(stdout, "next:      %s\n", nextSummary(r))
	}
	if z := r.Lazy; z != nil {
		fmt.Fprintf(stdout, "lazy:      record %s after this decision; %s\n", z.Record, lazyWhy(z))
	}
	fmt.Fprintf(stdout, "energy:    %.1f W (model %s; an estimate, not a measurement)\n", r.Watts, r.Model)
	if r.ModelNote != "" {
		fmt.Fprintf(stdout, "           %s\n", r.ModelNote)
	}
	if len(r.CPUClasses) > 0 {
		var ws []string
		for _, c := range r.CPUClasses {
			ws = append(ws, fmt.Sprintf("%s %.1f W", c.Name, c.Watts))
		}
		fmt.Fprintf(stdout, "           by class: %s (cores and threads; the rest is platform and uncore)\n", strings.Join(ws, ", "))
		fmt.Fprintf(stdout, "           class costs per unit of work from %s\n", r.ClassCostFrom)
		fmt.Fprintln(stdout, "classes:")
		for _, c := range r.CPUClasses {
			fmt.Fprintf(stdout, "  %-6s %-16s capacity %4d, cost %.2f\n", c.Name, c.CPUs, c.Capacity, c.Cost)
		}
	}
	return 0
}

// raceWhy says why r's policy is performance though a packing policy was
// requested: the load over the whole set's threshold, or the lazy history
// holding the plan in race to idle.
func raceWhy(r planReport) string {
	if r.Deferred {
		return "race to idle, held by the lazy balance history"
	}
	return "the load exceeds its threshold: race to idle"
}

// planNext is what the daemon does next with a workload whose current set
// is cur (known: one was given) and whose plan is want (planReport.Next).
func planNext(cur sysfs.CPUSet, known bool, want sysfs.CPUSet) string {
	switch {
	case !known:
		return nextPlace
	case want.Equal(cur):
		return nextKeep
	case want.IsSubsetOf(cur):
		return nextPack
	case cur.IsSubsetOf(want):
		return nextWiden
	}
	return nextMove
}

// nextSummary is the "next:" line of --current: how many sets the daemon
// writes, and whether lazy balance holds them.
func nextSummary(r planReport) string {
	changed := 0
	for _, n := range r.Next {
		if n != nextKeep {
			changed++
		}
	}
	var s string
	switch {
	case changed == 0:
		s = "every workload keeps its set"
	case changed == 1:
		s = fmt.Sprintf("1 of %d workloads gets a new set", len(r.Next))
	default:
		s = fmt.Sprintf("%d of %d workloads get a new set", changed, len(r.Next))
	}
	switch {
	case r.Deferred && r.Policy != r.Requested:
		s += " (race to idle held: the lazy balance history forbids packing)"
	case r.Deferred:
		s += " (lazy balance defers packing: the current sets stay, those short of CPUs grow)"
	case changed == 0:
		s += " (they use no more packages, cores or capped CPUs than a fresh packing)"
	}
	return s
}

// lazyWhy says what the history after a decision allows the next one.
func lazyWhy(z *planLazy) string {
	switch {
	case z.PackingAllowed:
		return "the next decision may pack"
	case z.RaceToIdle:
		return "the next decision stays in race to idle (packing waits for 32 decisions below the threshold, at most 4 over it in the 32 before)"
	}
	return "the next decision keeps the current sets (packing waits for 32 decisions below the threshold, at most 4 over it in the 32 before)"
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

// byClass names the classes of a workload's CPUs on a machine of more
// than one class, e.g. "  [P 0,2 + E 8-9]" (most performant first); ""
// on a homogeneous machine, so its lines stay as they were.
func byClass(c sysfs.CPUClasses, cpus []int) string {
	if !c.Hybrid() || len(cpus) == 0 {
		return ""
	}
	set := sysfs.NewCPUSet(cpus...)
	var parts []string
	for i := len(c.Classes) - 1; i >= 0; i-- {
		if in := set.Intersect(c.Classes[i].CPUs); !in.IsEmpty() {
			parts = append(parts, c.Classes[i].Name+" "+in.String())
		}
	}
	return "  [" + strings.Join(parts, " + ") + "]"
}

// placedWhy says why workload l was placed with got rather than the
// machine's policy: its slice's rule or its class, and whether that
// policy's plan raced to idle.
func placedWhy(machine policy.Policy, l policy.Load, rules map[string]policy.SliceRule, got policy.Policy) string {
	byClass := policy.ClassPolicy(machine, l.Class)
	want, why := byClass, "class "+l.Class
	if r, ok := rules[l.Slice]; ok {
		if want = policy.LoadPolicy(machine, l.Class, &r); want != byClass {
			why = "rule of " + l.Slice
		}
	}
	if got != want {
		return fmt.Sprintf("%s by %s; its plan races to idle", want, why)
	}
	return why
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
// (daemon.UnitClass), unless CLASS names one; without, ClassWorkload.
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
			class = daemon.UnitClass(name, slice)
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

func activeCounts(descs []policy.CPUDesc, active []int) planActive {
	byID := map[int]policy.CPUDesc{}
	for _, d := range descs {
		byID[d.ID] = d
	}
	pk, co := map[int]bool{}, map[int]bool{}
	for _, id := range active {
		d := byID[id]
		pk[d.Package], co[d.Core] = true, true
	}
	return planActive{Packages: len(pk), Cores: len(co), Threads: len(active), CPUs: sysfs.NewCPUSet(active...).String()}
}

// cpuDescsFromSysfs reads the topology under fsys and converts it as the
// daemon does (daemon.ClassedCPUDescs).
func cpuDescsFromSysfs(fsys sysfs.FS) ([]policy.CPUDesc, error) {
	descs, _, err := readMachine(fsys)
	return descs, err
}

// readMachine reads the topology and the efficiency classes under fsys.
func readMachine(fsys sysfs.FS) ([]policy.CPUDesc, sysfs.CPUClasses, error) {
	t, err := fsys.CPUTopology()
	if err != nil {
		return nil, sysfs.CPUClasses{}, err
	}
	classes := fsys.CPUClasses(t)
	return daemon.ClassedCPUDescs(t, classes), classes, nil
}

// modelFor picks the energy calibration for a machine read from sysfs: the
// server one for multi-package machines, the laptop one otherwise.
func modelFor(descs []policy.CPUDesc) policy.EnergyModel {
	pk := map[int]bool{}
	for _, d := range descs {
		pk[d.Package] = true
	}
	if len(pk) > 1 {
		return policy.SNBServer
	}
	return policy.SNBLaptop
}

// preset is a machine of the seed thread, described in Go; its mock sysfs
// tree under sysfs/testdata/topology/<name>/ is generated from it
// (sysfs/testdata/gen_topology.sh).
type preset struct {
	sockets, nodesPerSocket, llcsPerNode, coresPerLLC, threads int
	// distance(a, b) between nodes; nil: 10 local, 21 remote
	distance func(a, b int) int
	model    policy.EnergyModel
}

var presets = map[string]preset{
	// The seed's SNB laptop, 4 cores × HT (patch 17).
	"snb-laptop-4c8t": {sockets: 1, nodesPerSocket: 1, llcsPerNode: 1, coresPerLLC: 4, threads: 2, model: policy.SNBLaptop},
	// 2-socket Nehalem EP, 4 cores × HT per socket.
	"nhm-ep-2s4c2t": {sockets: 2, nodesPerSocket: 1, llcsPerNode: 1, coresPerLLC: 4, threads: 2, model: policy.SNBServer},
	// The seed's 2-socket SNB EP, 8 cores × HT per socket (patches 17, 18).
	"snb-ep-2s8c2t": {sockets: 2, nodesPerSocket: 1, llcsPerNode: 1, coresPerLLC: 8, threads: 2, model: policy.SNBServer},
	// Mike Galbraith's 4-node 40-core box (aim7 on the cover-letter
	// thread), no SMT.
	"numa-4n10c": {sockets: 4, nodesPerSocket: 1, llcsPerNode: 1, coresPerLLC: 10, threads: 1, model: policy.SNBServer},
	// Scale test: 32 sockets × 4 LLCs × 16 cores × HT = 4096 CPUs, two
	// NUMA distances (16 within a group of 8 sockets, 32 beyond).
	"big-4096": {sockets: 32, nodesPerSocket: 1, llcsPerNode: 4, coresPerLLC: 16, threads: 2, model: policy.SNBServer,
		distance: func(a, b int) int {
			switch {
			case a == b:
				return 10
			case a/8 == b/8:
				return 16
			}
			return 32
		}},
}

func presetNames() []string {
	var out []string
	for n := range presets {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

// cpus lays the machine out with Linux's Intel numbering: first thread of
// every core in order, then the second threads (sibling of c is c + cores).
func (p preset) cpus() []policy.CPUDesc {
	nodes := p.sockets * p.nodesPerSocket
	coresPerNode := p.llcsPerNode * p.coresPerLLC
	cores := nodes * coresPerNode
	dist := p.distance
	if dist == nil {
		dist = func(a, b int) int {
			if a == b {
				return 10
			}
			return 21
		}
	}
	rows := make([][]int, nodes)
	for a := range nodes {
		for b := range nodes {
			rows[a] = append(rows[a], dist(a, b))
		}
	}
	var out []policy.CPUDesc
	for t := range p.threads {
		for c := range cores {
			node := c / coresPerNode
			llc := c / p.coresPerLLC
			pkg := node / p.nodesPerSocket
			out = append(out, policy.CPUDesc{
				ID: t*cores + c, Core: c, Cluster: c,
				LLC: llc * p.coresPerLLC, Package: pkg * p.nodesPerSocket * coresPerNode, Node: node,
				Distance: rows[node],
			})
		}
	}
	return out
}

// writeSysfsTree writes a minimal kernel-shaped sysfs tree for the CPUs:
// cpu/online, per CPU topology/{core_cpus_list,thread_siblings_list,
// package_cpus_list,core_siblings_list,physical_package_id},
// cache/index3/{level,type,shared_cpu_list}, cpufreq/{scaling_cur_freq,
// scaling_max_freq}, and node/nodeN/{cpulist,distance}. Group ids must be
// the first CPU of their group (as cpus() makes them).
func writeSysfsTree(dir string, cpus []policy.CPUDesc) error {
	// Precompute masks per group for speed on big machines.
	maskOf := func(key func(policy.CPUDesc) int) map[int]string {
		groups := map[int][]int{}
		for _, c := range cpus {
			groups[key(c)] = append(groups[key(c)], c.ID)
		}
		out := map[int]string{}
		for k, ids := range groups {
			out[k] = sysfs.NewCPUSet(ids...).String()
		}
		return out
	}
	core := maskOf(func(c policy.CPUDesc) int { return c.Core })
	pkg := maskOf(func(c policy.CPUDesc) int { return c.Package })
	llc := maskOf(func(c policy.CPUDesc) int { return c.LLC })
	node := maskOf(func(c policy.CPUDesc) int { return c.Node })
	put := func(path, v string) error {
		p := filepath.Join(dir, path)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		return os.WriteFile(p, []byte(v+"\n"), 0o644)
	}
	var ids []int
	pkgNum := map[int]int{}
	for _, c := range cpus {
		ids = append(ids, c.ID)
		if _, ok := pkgNum[c.Package]; !ok {
			pkgNum[c.Package] = len(pkgNum)
		}
	}
	all := sysfs.NewCPUSet(ids...).String()
	for _, f := range []string{"online", "possible", "present"} {
		if err := put("devices/system/cpu/"+f, all); err != nil {
			return err
		}
	}
	for _, c := range cpus {
		d := fmt.Sprintf("devices/system/cpu/cpu%d/", c.ID)
		files := [][2]string{
			{"topology/core_cpus_list", core[c.Core]},
			{"topology/thread_siblings_list", core[c.Core]},
			{"topology/package_cpus_list", pkg[c.Package]},
			{"topology/core_siblings_list", pkg[c.Package]},
			{"topology/physical_package_id", strconv.Itoa(pkgNum[c.Package])},
			{"cache/index3/level", "3"},
			{"cache/index3/type", "Unified"},
			{"cache/index3/shared_cpu_list", llc[c.LLC]},
			{"cpufreq/scaling_cur_freq", "3000000"},
			{"cpufreq/scaling_max_freq", "3000000"},
		}
		for _, f := range files {
			if err := put(d+f[0], f[1]); err != nil {
				return err
			}
		}
	}
	seen := map[int]bool{}
	var nodes []int
	for _, c := range cpus {
		if !seen[c.Node] {
			seen[c.Node] = true
			nodes = append(nodes, c.Node)
			var row []string
			for _, v := range c.Distance {
				row = append(row, strconv.Itoa(v))
			}
			d := fmt.Sprintf("devices/system/node/node%d/", c.Node)
			if err := put(d+"cpulist", node[c.Node]); err != nil {
				return err
			}
			if err := put(d+"distance", strings.Join(row, " ")); err != nil {
				return err
			}
		}
	}
	return put("devices/system/node/online", sysfs.NewCPUSet(nodes...).String())
}

// planSVG writes the picture of the plan to file ("-": standard output,
// which then carries nothing else: done). A file is written whole or not
// at all (a temporary file renamed over it).
func planSVG(file string, descs []policy.CPUDesc, r planReport, loads []policy.Load, plan policy.Plan, stdout, stderr io.Writer) (code int, done bool) {
	if file == "-" {
		if err := writePlanSVG(stdout, descs, r, loads, plan); err != nil {
			fmt.Fprintf(stderr, "schedpolicyd plan: --svg: %v\n", err)
			return 1, true
		}
		return 0, true
	}
	tmp, err := os.CreateTemp(filepath.Dir(file), "."+filepath.Base(file)+".*")
	if err == nil {
		err = writePlanSVG(tmp, descs, r, loads, plan)
		if cerr := tmp.Close(); err == nil {
			err = cerr
		}
		if err == nil {
			err = os.Chmod(tmp.Name(), 0o644)
		}
		if err == nil {
			err = os.Rename(tmp.Name(), file)
		}
		if err != nil {
			os.Remove(tmp.Name())
		}
	}
	if err != nil {
		fmt.Fprintf(stderr, "schedpolicyd plan: --svg %s: %v\n", file, err)
		return 1, true
	}
	return 0, false
}
