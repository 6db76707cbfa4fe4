package main

import (
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"

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
	// Reasons says why a workload's home is not the one the class order
	// alone gives (policy.Plan.Reasons): the energy models' choice, or
	// background work sharing the foreground's cores because nothing
	// else is left; omitted when there is nothing to say.
	Reasons map[string]string `json:"reasons,omitempty"`
	// Foreground is the cpulist of the cores the foreground's load (the
	// focused app, session units: policy.Foreground) is planned on, on a
	// hybrid machine that packs (policy.Plan.Foreground): background,
	// services and unfocused apps are kept off them while another core
	// is left; the foreground itself may use every CPU. Omitted when
	// there is none.
	Foreground string     `json:"foreground,omitempty"`
	Active     planActive `json:"active"`
	Watts      float64    `json:"watts"` // the energy model's estimate for the loads under this plan
	Model      string     `json:"model"` // which calibration produced Watts
	// ModelDescribes is false when the machine is not of the shape the
	// model was fitted on (policy.EnergyModel.Describes): Watts then only
	// compare policies on it; ModelNote says so, with both shapes.
	ModelDescribes bool   `json:"model_describes_machine"`
	ModelNote      string `json:"model_note,omitempty"`
	// Energy is the estimate under the machine's model and under each
	// bracketing published model, their range, and the effect against
	// performance claimed from them (issue 35, item 3): modelled, never
	// measured.
	Energy planEnergy `json:"energy"`
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

// planEnergy is planReport.Energy.
type planEnergy struct {
	// Estimates are the watts of this plan's load under each model, the
	// machine's own first (policy.SpreadModels), rounded to 0.1 W.
	Estimates []planEstimate `json:"estimates"`
	Range     planRange      `json:"range"`
	// VsPerformance is the effect of this plan against performance's
	// (every workload on every allowed CPU) for the same load: the
	// smallest change across the models with their spread; absent for
	// a performance plan.
	VsPerformance *planEffect `json:"vs_performance,omitempty"`
	// Modelled is always true: these are estimates, not measurements.
	Modelled bool `json:"modelled"`
}

// planEstimate is one model's estimate.
type planEstimate struct {
	Model string  `json:"model"`
	Watts float64 `json:"watts"`
}

// planRange is the lowest and highest estimate.
type planRange struct {
	LowWatts  float64 `json:"low_watts"`
	HighWatts float64 `json:"high_watts"`
}

// planEffect is a claimed effect (policy.Effect), W rounded to 0.1.
type planEffect struct {
	Watts           float64 `json:"watts"`
	SpreadWatts     float64 `json:"spread_watts"`
	Distinguishable bool    `json:"distinguishable"`
}

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
// prints the plan and the energy estimate (text, --json or --svg). It reads
// only; --write-sysfs writes a preset's mock sysfs tree instead. It returns
// the exit status: 0, 1 when the machine cannot be read or an output
// written, 2 on a usage error (a bad flag, load or configuration file).
func planMain(args []string, stdout, stderr io.Writer) int {
	o, code, ok := parsePlanFlags(args, stdout, stderr)
	if !ok {
		return code
	}
	if o.writeTree != "" {
		return planExit(stderr, writePresetTree(o.preset, o.writeTree))
	}
	if o.scenario != "" {
		return scenarioMain(o, stdout, stderr)
	}
	in, err := o.input()
	if err != nil {
		return planExit(stderr, err)
	}
	plan := policy.PlanPlacement(policy.Input{Topology: in.topo, Allowed: in.allowed, Policy: in.policy, Loads: in.loads, Slices: in.rules, Lazy: in.lazy})
	r := in.report(plan)
	if o.svgFile != "" {
		if code, done := planSVG(o.svgFile, in.descs, r, in.loads, plan, stdout, stderr); done {
			return code
		}
	}
	if o.json {
		return writeJSON(stdout, r)
	}
	writePlanText(stdout, r, in, plan)
	return 0
}

// usageError is a bad command line or configuration file: plan exits
// with status 2 on it, where other errors are 1.
type usageError struct{ error }

func usagef(format string, a ...any) error { return usageError{fmt.Errorf(format, a...)} }

// planExit prints err, if any, after "schedpolicyd plan: " and returns
// the exit status: 0 for nil, 2 for a usageError, else 1.
func planExit(stderr io.Writer, err error) int {
	if err == nil {
		return 0
	}
	fmt.Fprintf(stderr, "schedpolicyd plan: %v\n", err)
	if errors.As(err, new(usageError)) {
		return 2
	}
	return 1
}

// planInput is what plan places: the machine and the flags' policy,
// loads, slice rules, lazy history and current sets, all checked.
type planInput struct {
	planMachine
	allowed []int         // CPU numbers to hand out (--allowed; default all)
	policy  policy.Policy // the requested policy
	// loads are --load's workloads, in its order; with --current, each
	// has its current set.
	loads   []policy.Load
	rules   map[string]policy.SliceRule // --config's [[slice]] rules, then --slice's
	lazy    policy.LazyState
	current map[string]sysfs.CPUSet // --current by workload; nil without it
	// showLazy: --lazy-record or --raced was given, so the report shows
	// the history after the decision as --current does.
	showLazy bool
}

// input checks the options in the order of their errors' precedence and
// reads the machine. Errors: a usageError for a bad flag, load or
// configuration file or an unknown preset; any other for a machine that
// cannot be read.
func (o planOptions) input() (planInput, error) {
	if (o.root == "") == (o.preset == "") {
		return planInput{}, usagef("give exactly one of --sysfs-root DIR or --topology PRESET")
	}
	in := planInput{showLazy: o.lazyRecord != "" || o.raced}
	var err error
	if in.policy, err = policy.ParsePolicy(o.policy); err != nil {
		return planInput{}, usageError{err}
	}
	if in.loads, err = parseLoads(o.loads); err != nil {
		return planInput{}, usageError{err}
	}
	if in.lazy, err = o.lazyState(); err != nil {
		return planInput{}, err
	}
	if in.rules, err = o.sliceRules(); err != nil {
		return planInput{}, err
	}
	if in.planMachine, err = loadPlanMachine(o.preset, o.root); err != nil {
		return planInput{}, err
	}
	if in.allowed, err = allowedCPUs(o.allowed, in.descs); err != nil {
		return planInput{}, err
	}
	if len(o.current) > 0 {
		if in.current, err = parseCurrent(o.current, in.loads, in.descs); err != nil {
			return planInput{}, usageError{err}
		}
		for i := range in.loads {
			if c, ok := in.current[in.loads[i].Name]; ok {
				in.loads[i].Current = c.List()
			}
		}
	}
	return in, nil
}

// allowedCPUs is --allowed (spec, a cpulist) checked against the machine:
// every CPU of descs, in their order, when spec is empty, else spec's CPUs
// in ascending order; spec never takes more than sysfs.MaxCPUs CPUs
// (topologyCPUList). A bad cpulist or a CPU not in descs is a usageError
// naming --allowed, the first such CPU and the topology's CPUs.
func allowedCPUs(spec string, descs []policy.CPUDesc) ([]int, error) {
	var all []int
	for _, d := range descs {
		all = append(all, d.ID)
	}
	if spec == "" {
		return all, nil
	}
	set, beyond, err := topologyCPUList(spec)
	switch {
	case beyond != "":
		return nil, usagef("--allowed: CPU %s is not in the topology (CPUs %s)", beyond, sysfs.NewCPUSet(all...))
	case err != nil:
		return nil, usagef("--allowed: %v", err)
	}
	known := map[int]bool{}
	for _, id := range all {
		known[id] = true
	}
	for _, id := range set.List() {
		if !known[id] {
			return nil, usagef("--allowed: CPU %d is not in the topology (CPUs %s)", id, sysfs.NewCPUSet(all...))
		}
	}
	return set.List(), nil
}

// report describes plan, the balancer's placement of in, with the energy
// model's estimate of it: the JSON of --json, and what the text and the
// picture are drawn from.
func (in planInput) report(plan policy.Plan) planReport {
	est := in.model.Simulate(in.topo, plan, in.loads)
	r := planReport{
		Topology: in.name, Requested: string(in.policy), Policy: string(plan.Policy),
		Workloads: map[string]string{}, Watts: math.Round(est.Watts*10) / 10, Model: in.model.Name,
		Levels: in.topo.Levels(in.allowed), Spread: plan.Spread,
		Classes: map[string]string{}, WorkloadPolicies: map[string]string{},
	}
	for _, l := range in.loads {
		r.Workloads[l.Name] = sysfs.NewCPUSet(plan.CPUs[l.Name]...).String()
		r.Classes[l.Name] = l.Class
		r.WorkloadPolicies[l.Name] = string(plan.Policies[l.Name])
	}
	r.Slices = sliceWords(in.rules)
	if len(plan.Reasons) > 0 {
		r.Reasons = plan.Reasons
	}
	if len(plan.Foreground) > 0 {
		r.Foreground = sysfs.NewCPUSet(plan.Foreground...).String()
	}
	r.Active = activeCounts(in.descs, plan.Active)
	r.Deferred = plan.Deferred
	if in.current != nil {
		in.reportCurrent(&r, plan)
	}
	if in.current != nil || in.showLazy {
		r.Lazy = &planLazy{Record: fmt.Sprintf("0x%016x", plan.Lazy.Record), RaceToIdle: plan.Lazy.RaceToIdle,
			PackingAllowed: plan.Lazy.PowerBalanceAllowed()}
	}
	if in.classes.Hybrid() {
		in.reportClasses(&r, est)
	}
	r.Energy = in.reportSpread(plan)
	if r.ModelDescribes = in.model.Describes(in.topo); !r.ModelDescribes {
		shape, _ := policy.ShapeOf(in.topo)
		r.ModelNote = fmt.Sprintf("the %s model was fitted on %s; this machine is %s: its watts compare the policies, they are no estimate of this machine's power",
			in.model.Name, in.model.Machine, shape)
	}
	return r
}

// sliceWords are the rules as planReport.Slices gives them: the policy,
// "+always" when it applies under performance too; nil without rules.
func sliceWords(rules map[string]policy.SliceRule) map[string]string {
	if len(rules) == 0 {
		return nil
	}
	out := map[string]string{}
	for n, sr := range rules {
		out[n] = string(sr.Policy)
		if sr.Always {
			out[n] += "+always"
		}
	}
	return out
}

// reportCurrent fills r's Current, CurrentActive and Next from --current.
func (in planInput) reportCurrent(r *planReport, plan policy.Plan) {
	r.Current, r.Next = map[string]string{}, map[string]string{}
	var union sysfs.CPUSet
	for _, l := range in.loads {
		c, ok := in.current[l.Name]
		if ok {
			r.Current[l.Name] = c.String()
			union = union.Union(c)
		}
		r.Next[l.Name] = planNext(c, ok, sysfs.NewCPUSet(plan.CPUs[l.Name]...))
	}
	ca := activeCounts(in.descs, union.List())
	r.CurrentActive = &ca
}

// reportClasses fills r's CPUClasses, CPUClass and ClassCostFrom on a
// machine of more than one class, with est's watts by class.
func (in planInput) reportClasses(r *planReport, est policy.Estimate) {
	r.ClassCostFrom, r.CPUClass = in.costFrom, map[string]string{}
	for i, cl := range in.classes.Classes {
		pc := planClass{Name: cl.Name, CPUs: cl.CPUs.String(), Capacity: cl.Capacity, Cost: in.model.ClassCost[i]}
		if i < len(est.ClassWatts) {
			pc.Watts = math.Round(est.ClassWatts[i]*10) / 10
		}
		r.CPUClasses = append(r.CPUClasses, pc)
		for _, id := range cl.CPUs.List() {
			r.CPUClass[strconv.Itoa(id)] = cl.Name
		}
	}
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

// activeCounts counts the packages, cores and threads of the CPUs active
// (CPU numbers of descs) and lists them.
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

// reportSpread prices plan's load under every model (policy.SpreadModels)
// and, for a packing plan, against performance's plan of the same load.
func (in planInput) reportSpread(plan policy.Plan) planEnergy {
	base := modelFor(in.descs)
	if in.name != "" && in.costFrom == "" && in.classes.Classes == nil {
		base = in.model // a preset: its own calibration
	}
	models := daemon.SpreadModelsFor(in.model, base, in.classes, in.topo)
	round := func(w float64) float64 { return math.Round(w*10) / 10 }
	e := planEnergy{Modelled: true, Range: planRange{LowWatts: math.Inf(1), HighWatts: math.Inf(-1)}}
	var perf policy.Plan
	packing := plan.Policy != policy.Performance
	if packing {
		perf = policy.PlanPlacement(policy.Input{Topology: in.topo, Allowed: in.allowed, Policy: policy.Performance, Loads: in.loads})
	}
	var a, b []float64
	for _, m := range models {
		w := m.Model.Simulate(in.topo, plan, in.loads).Watts
		e.Estimates = append(e.Estimates, planEstimate{Model: m.Name, Watts: round(w)})
		e.Range.LowWatts, e.Range.HighWatts = math.Min(e.Range.LowWatts, round(w)), math.Max(e.Range.HighWatts, round(w))
		if packing {
			a, b = append(a, w), append(b, m.Model.Simulate(in.topo, perf, in.loads).Watts)
		}
	}
	if packing {
		ef := policy.EffectOf(a, b)
		e.VsPerformance = &planEffect{Watts: round(ef.Watts), SpreadWatts: round(ef.Spread), Distinguishable: ef.Distinguishable}
	}
	return e
}
