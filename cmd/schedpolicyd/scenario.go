package main

// `schedpolicyd plan --scenario FILE` (issue 35, item 4): an rt-app-like
// time line of workloads run through the daemon's own decisions, second
// by second, against no daemon at all, its energy integrated under every
// model. Modelled, never measured.

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/schedpolicyd/schedpolicyd/acpi"
	"github.com/schedpolicyd/schedpolicyd/daemon"
	"github.com/schedpolicyd/schedpolicyd/daemon/placement"
	"github.com/schedpolicyd/schedpolicyd/daemon/placement/units"
	"github.com/schedpolicyd/schedpolicyd/policy"
	"github.com/schedpolicyd/schedpolicyd/sysfs"
)

// The bounds of a scenario file (docs/INPUTS.md, testdata/scenarios/README.md).
const (
	maxScenarioBytes     = 1 << 20        // the file
	maxScenarioDuration  = 24 * 3600      // s, the time line
	maxScenarioWorkloads = 64             // workloads
	maxScenarioTasks     = 64             // tasks per workload
	maxScenarioPhases    = 64             // phases per task
	maxScenarioInstances = 256            // threads of one task
	maxScenarioPeriodUS  = 10 * 1_000_000 // µs, a task's period
)

// Scenario is a time line of workloads, after rt-app's JSON
// (ARM-software/rt-app doc/tutorial.txt: tasks with instances, phases of
// run and timer period, loop): each workload a managed unit with its
// slice and class, its tasks' threads running run µs of work every
// period µs during each phase. Work is in units of the machine's most
// performant CPU at its top (as rt-app calibrates run on the biggest
// CPU); on a slower CPU it takes longer.
type Scenario struct {
	Name        string `json:"name"`
	Description string `json:"description"`
	// Duration is the time line's length, s (1 .. 86400).
	Duration int `json:"duration"`
	// PowerSource is "ac" or "battery" throughout.
	PowerSource string `json:"power_source"`
	// Battery is the system batteries' charge over time; nil: unknown.
	Battery *ScenarioBattery `json:"battery,omitempty"`
	// LowBattery is the low_battery threshold, % (default 20, as the
	// daemon's; 0 off).
	LowBattery *int               `json:"low_battery,omitempty"`
	Workloads  []ScenarioWorkload `json:"workloads"`
}

// ScenarioBattery is a charge that drains linearly.
type ScenarioBattery struct {
	StartPercent        float64 `json:"start_percent"`
	DrainPercentPerHour float64 `json:"drain_percent_per_hour"`
}

// ScenarioWorkload is one managed workload: a unit in Slice, of Class
// ("" the class the daemon gives a unit of that slice).
type ScenarioWorkload struct {
	Name  string         `json:"name"`
	Slice string         `json:"slice"`
	Class string         `json:"class,omitempty"`
	Tasks []ScenarioTask `json:"tasks"`
}

// ScenarioTask is Instance threads running Phases in order, again from
// the first when Loop, else idle after the last.
type ScenarioTask struct {
	Name     string          `json:"name"`
	Instance int             `json:"instance"`
	Loop     bool            `json:"loop"`
	Phases   []ScenarioPhase `json:"phases"`
}

// ScenarioPhase: Duration s during which each thread runs Run µs of work
// every Period µs (Run 0: asleep).
type ScenarioPhase struct {
	Duration int   `json:"duration"`
	Run      int64 `json:"run"`
	Period   int64 `json:"period"`
}

// loadScenario reads and checks a scenario file. Errors name the file
// and the part that breaks a rule or a bound.
func loadScenario(path string) (Scenario, error) {
	f, err := os.Open(path)
	if err != nil {
		return Scenario{}, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxScenarioBytes+1))
	if err != nil {
		return Scenario{}, err
	}
	if len(b) > maxScenarioBytes {
		return Scenario{}, fmt.Errorf("%s: more than %d bytes", path, maxScenarioBytes)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var s Scenario
	if err := dec.Decode(&s); err != nil {
		return Scenario{}, fmt.Errorf("%s: %v", path, err)
	}
	if err := s.check(); err != nil {
		return Scenario{}, fmt.Errorf("%s: %v", path, err)
	}
	return s, nil
}

func (s Scenario) check() error {
	switch {
	case s.Duration < 1 || s.Duration > maxScenarioDuration:
		return fmt.Errorf("duration %d: want 1 to %d s", s.Duration, maxScenarioDuration)
	case s.PowerSource != string(acpi.AC) && s.PowerSource != string(acpi.Battery):
		return fmt.Errorf("power_source %q: want ac or battery", s.PowerSource)
	case s.LowBattery != nil && (*s.LowBattery < 0 || *s.LowBattery > 100):
		return fmt.Errorf("low_battery %d: want 0 to 100", *s.LowBattery)
	case s.Battery != nil && !(s.Battery.StartPercent >= 0 && s.Battery.StartPercent <= 100 && s.Battery.DrainPercentPerHour >= 0 && s.Battery.DrainPercentPerHour <= 1000):
		return errors.New("battery: start_percent 0 to 100, drain_percent_per_hour 0 to 1000")
	case len(s.Workloads) == 0 || len(s.Workloads) > maxScenarioWorkloads:
		return fmt.Errorf("%d workloads: want 1 to %d", len(s.Workloads), maxScenarioWorkloads)
	}
	seen := map[string]bool{}
	for _, w := range s.Workloads {
		switch {
		case w.Name == "" || len(w.Name) > maxPlanName || strings.ContainsAny(w.Name, " =,:@/"):
			return fmt.Errorf("workload %q: a name of 1 to %d bytes without space, =, comma, :, @ or /", clip(w.Name), maxPlanName)
		case seen[w.Name]:
			return fmt.Errorf("workload %q given twice", w.Name)
		case w.Slice != "" && !validSlice(w.Slice):
			return fmt.Errorf("workload %s: slice %q is no slice name (NAME.slice)", w.Name, clip(w.Slice))
		case len(w.Class) > maxPlanName || strings.ContainsAny(w.Class, " =,:@/"):
			return fmt.Errorf("workload %s: class %q is not a word", w.Name, clip(w.Class))
		case len(w.Tasks) == 0 || len(w.Tasks) > maxScenarioTasks:
			return fmt.Errorf("workload %s: %d tasks, want 1 to %d", w.Name, len(w.Tasks), maxScenarioTasks)
		}
		seen[w.Name] = true
		for _, t := range w.Tasks {
			switch {
			case t.Instance < 1 || t.Instance > maxScenarioInstances:
				return fmt.Errorf("workload %s task %q: instance %d, want 1 to %d", w.Name, clip(t.Name), t.Instance, maxScenarioInstances)
			case len(t.Phases) == 0 || len(t.Phases) > maxScenarioPhases:
				return fmt.Errorf("workload %s task %q: %d phases, want 1 to %d", w.Name, clip(t.Name), len(t.Phases), maxScenarioPhases)
			}
			for i, p := range t.Phases {
				if p.Duration < 1 || p.Duration > maxScenarioDuration || p.Period < 1 || p.Period > maxScenarioPeriodUS || p.Run < 0 || p.Run > p.Period {
					return fmt.Errorf("workload %s task %q phase %d: duration 1 to %d s, period 1 to %d µs, run 0 to period", w.Name, clip(t.Name), i+1, maxScenarioDuration, maxScenarioPeriodUS)
				}
			}
		}
	}
	return nil
}

// duty is task t's work per thread at second sec (0..1), and whether a
// phase runs then.
func (t ScenarioTask) duty(sec int) float64 {
	total := 0
	for _, p := range t.Phases {
		total += p.Duration
	}
	if sec >= total && !t.Loop {
		return 0
	}
	sec %= total
	for _, p := range t.Phases {
		if sec < p.Duration {
			return float64(p.Run) / float64(p.Period)
		}
		sec -= p.Duration
	}
	return 0
}

// at is the workload's work at second sec (in top-CPU units) and its
// threads with something to run then.
func (w ScenarioWorkload) at(sec int) (work float64, threads int) {
	for _, t := range w.Tasks {
		if d := t.duty(sec); d > 0 {
			work += d * float64(t.Instance)
			threads += t.Instance
		}
	}
	return work, threads
}

// scenarioRun is one way of running the scenario: no daemon, or the
// daemon with a knob.
type scenarioRun struct {
	Name string       `json:"run"`
	Knob *policy.Knob `json:"knob,omitempty"` // nil: no daemon
}

// scenarioRuns are the runs reported, no daemon first: the kernel
// spreading every task over the whole machine (what performance does, so
// the daemon under performance is the same run and not repeated), then
// the daemon always balance, always powersaving, and automatic with
// balance on battery (the low-battery tier then switches to powersaving).
var scenarioRuns = []scenarioRun{
	{Name: "no daemon"},
	{Name: "balance", Knob: &policy.Knob{PowerAware: policy.PowerAwareOn, PowerAwarePolicy: policy.Balance}},
	{Name: "powersaving", Knob: &policy.Knob{PowerAware: policy.PowerAwareOn, PowerAwarePolicy: policy.Powersaving}},
	{Name: "automatic (balance)", Knob: &policy.Knob{PowerAware: policy.PowerAwareAuto, PowerAwarePolicy: policy.Balance}},
}

// scenarioReport is the JSON of `plan --scenario --json`.
type scenarioReport struct {
	Scenario    string `json:"scenario"`
	Machine     string `json:"machine"`
	Duration    int    `json:"duration_s"`
	PowerSource string `json:"power_source"`
	// Models are the models every run is priced under, the machine's
	// own first (daemon.SpreadModelsFor).
	Models []string            `json:"models"`
	Runs   []scenarioRunReport `json:"runs"`
	// Modelled is always true: estimates, never measurements.
	Modelled bool `json:"modelled"`
}

// scenarioRunReport is one run's result.
type scenarioRunReport struct {
	scenarioRun
	// Joules is the energy under each model (J, in Models' order).
	Joules []float64 `json:"joules"`
	// Relative is Joules over no daemon's, per model.
	Relative []float64 `json:"relative"`
	// Low and High are Relative's range across the models.
	Low  float64 `json:"low"`
	High float64 `json:"high"`
	// VsNoDaemon is the claimed change from no daemon, relative (-0.05:
	// 5 % less): the smallest across the models, 0 when they disagree on
	// its sign, with its spread; Distinguishable when it exceeds it.
	VsNoDaemon      float64 `json:"vs_no_daemon"`
	Spread          float64 `json:"spread"`
	Distinguishable bool    `json:"distinguishable"`
	// UnservedCPUSeconds is work still waiting at the end (CPU·s): a
	// run that saves energy by not doing the work shows it here.
	UnservedCPUSeconds float64 `json:"unserved_cpu_seconds"`
	// PolicySeconds is how long each policy was in force (s), the
	// placements' race to idle counted as performance.
	PolicySeconds map[string]int `json:"policy_seconds"`
	// CPUSetChanges counts workloads given a new cpuset.
	CPUSetChanges int `json:"cpuset_changes"`
}

// scenarioMain is `plan --scenario`: run it on the machine and print the
// report (text or --json).
func scenarioMain(o planOptions, stdout, stderr io.Writer) int {
	if o.loads != "" || o.current != nil || o.lazyRecord != "" || o.raced || o.svgFile != "" || o.allowed != "" {
		return planExit(stderr, usagef("--scenario takes the machine (--sysfs-root or --topology), --slice, --config and --json only"))
	}
	if (o.root == "") == (o.preset == "") {
		return planExit(stderr, usagef("give exactly one of --sysfs-root DIR or --topology PRESET"))
	}
	s, err := loadScenario(o.scenario)
	if err != nil {
		return planExit(stderr, usageError{err})
	}
	rules, err := o.sliceRules()
	if err != nil {
		return planExit(stderr, err)
	}
	m, err := loadPlanMachine(o.preset, o.root)
	if err != nil {
		return planExit(stderr, err)
	}
	r := runScenario(s, m, rules)
	if o.json {
		return writeJSON(stdout, r)
	}
	writeScenarioText(stdout, r)
	return 0
}

// runScenario runs s on machine m with slice rules, every run of
// scenarioRuns, priced under every model.
func runScenario(s Scenario, m planMachine, rules map[string]policy.SliceRule) scenarioReport {
	base := modelFor(m.descs)
	if m.costFrom == "" && m.classes.Classes == nil {
		base = m.model // a preset: its own calibration
	}
	models := daemon.SpreadModelsFor(m.model, base, m.classes, m.topo)
	r := scenarioReport{Scenario: s.Name, Machine: m.name, Duration: s.Duration, PowerSource: s.PowerSource, Modelled: true}
	for _, nm := range models {
		r.Models = append(r.Models, nm.Name)
	}
	for _, run := range scenarioRuns {
		r.Runs = append(r.Runs, runOnce(s, m, rules, models, run))
	}
	nd := r.Runs[0].Joules
	for i := range r.Runs {
		run := &r.Runs[i]
		ones := make([]float64, len(nd))
		run.Low, run.High = math.Inf(1), math.Inf(-1)
		for j, j0 := range nd {
			run.Relative = append(run.Relative, run.Joules[j]/j0)
			run.Low, run.High = math.Min(run.Low, run.Relative[j]), math.Max(run.High, run.Relative[j])
			ones[j] = 1
		}
		e := policy.EffectOf(run.Relative, ones)
		run.VsNoDaemon, run.Spread, run.Distinguishable = e.Watts, e.Spread, e.Distinguishable
		// Six decimals: the same report on every architecture (Go may
		// fuse a multiply and an add on arm64, changing the last bits).
		for j := range run.Relative {
			run.Relative[j] = round6(run.Relative[j])
		}
		run.Low, run.High, run.VsNoDaemon, run.Spread = round6(run.Low), round6(run.High), round6(run.VsNoDaemon), round6(run.Spread)
	}
	return r
}

func round6(x float64) float64 { return math.Round(x*1e6) / 1e6 }

// scenarioStep is the daemon's decision period: its sample period, at
// which it decides while a workload is busy (policy.DefaultSamplePeriod).
const scenarioStep = policy.DefaultSamplePeriod

// runOnce runs s once: each second, the effective policy (the daemon's
// own decision, daemon.PolicyReplay), a plan from the workloads' decayed
// utilisation (policy.UtilAverage, the daemon's half-life) with the lazy
// history and race-to-idle hold of the previous one (placement.LazyInput,
// policy.PlanPlacement), then the second's work run on that plan and
// priced under each model (policy.EnergyModel.Simulate). No daemon is
// every workload on every CPU, as performance places it.
func runOnce(s Scenario, m planMachine, rules map[string]policy.SliceRule, models []policy.NamedModel, run scenarioRun) scenarioRunReport {
	out := scenarioRunReport{scenarioRun: run, Joules: make([]float64, len(models)), PolicySeconds: map[string]int{}}
	allowed := make([]int, 0, len(m.descs))
	capOf := map[int]float64{}
	for _, d := range m.descs {
		allowed = append(allowed, d.ID)
		c := float64(d.Capacity)
		if c <= 0 {
			c = 1024
		}
		capOf[d.ID] = c
	}
	online := sysfs.NewCPUSet(allowed...)
	lowBattery := 20
	if s.LowBattery != nil {
		lowBattery = *s.LowBattery
	}
	knob := policy.Knob{PowerAware: policy.PowerAwareOff, PowerAwarePolicy: policy.Powersaving}
	if run.Knob != nil {
		knob = *run.Knob
	}
	replay := daemon.NewPolicyReplay(knob, lowBattery)
	avgs := make([]policy.UtilAverage, len(s.Workloads))
	usage := make([]time.Duration, len(s.Workloads))
	backlog := make([]float64, len(s.Workloads))
	classes := make([]string, len(s.Workloads))
	for i, w := range s.Workloads {
		classes[i] = w.Class
		if classes[i] == "" {
			classes[i] = policy.ClassWorkload
			if w.Slice != "" {
				classes[i] = units.UnitClass(w.Name, w.Slice)
			}
		}
		avgs[i] = avgs[i].Update(0, 0, policy.DefaultHalfLife)
	}
	var prev policy.Plan
	var asked policy.Policy
	start := time.Unix(0, 0)
	for sec := 0; sec < s.Duration; sec++ {
		pct := -1
		if s.Battery != nil {
			pct = int(math.Floor(s.Battery.StartPercent - s.Battery.DrainPercentPerHour*float64(sec)/3600))
		}
		eff := replay.Decide(acpi.Source(s.PowerSource), pct)
		loads := make([]policy.Load, len(s.Workloads))
		for i, w := range s.Workloads {
			work, _ := w.at(sec)
			loads[i] = policy.Load{Name: w.Name, Util: avgs[i].Util, Current: prev.CPUs[w.Name], Class: classes[i], Slice: w.Slice,
				Threads: max(1, int(math.Round(work+backlog[i])))}
			if work+backlog[i] == 0 {
				loads[i].Threads = 0
			}
		}
		plan := policy.Plan{Policy: policy.Performance, CPUs: map[string][]int{}}
		if run.Knob == nil {
			for _, w := range s.Workloads {
				plan.CPUs[w.Name] = allowed
			}
		} else {
			lazy, fresh := placement.LazyInput(prev.Lazy, asked, eff, online, online, eff != asked)
			asked = eff
			plan = policy.PlanPlacement(policy.Input{Topology: m.topo, Allowed: allowed, Policy: eff, Loads: loads,
				Lazy: lazy, Now: start.Add(time.Duration(sec) * scenarioStep), MaxInterval: scenarioStep, DisableLazy: fresh, Slices: rules})
			for _, w := range s.Workloads {
				if prev.CPUs != nil && !sameCPUs(prev.CPUs[w.Name], plan.CPUs[w.Name]) {
					out.CPUSetChanges++
				}
			}
		}
		out.PolicySeconds[string(plan.Policy)]++
		// The second's work on this plan: CPU time is work × 1024 / the
		// mean capacity of the workload's CPUs (as the planner converts
		// demand), plus what waited from before.
		run := make([]policy.Load, len(s.Workloads))
		demand, fit := 0.0, make([]float64, len(s.Workloads))
		for i, w := range s.Workloads {
			work, threads := w.at(sec)
			set := plan.CPUs[w.Name]
			mean := 0.0
			for _, c := range set {
				mean += capOf[c]
			}
			if len(set) > 0 {
				mean /= float64(len(set))
			}
			cpu := backlog[i]
			if mean > 0 {
				cpu += work * 1024 / mean
			}
			fit[i] = math.Min(cpu, float64(len(set)))
			backlog[i] = cpu - fit[i]
			demand += fit[i]
			run[i] = policy.Load{Name: w.Name, Util: fit[i], Threads: max(threads, int(math.Ceil(fit[i]-1e-9)))}
		}
		served := 0.0
		for j, nm := range models {
			e := nm.Model.Simulate(m.topo, plan, run)
			out.Joules[j] += e.Watts * scenarioStep.Seconds()
			if j == 0 {
				served = e.BusyThreads
			}
		}
		// Work CFS could not fit where cpusets overlap waits too, shared
		// out by each workload's part of what was asked.
		if short := demand - served; short > 1e-9 && demand > 0 {
			for i := range fit {
				backlog[i] += short * fit[i] / demand
				fit[i] -= short * fit[i] / demand
			}
		}
		for i := range s.Workloads {
			usage[i] += time.Duration(fit[i] * float64(scenarioStep))
			avgs[i] = avgs[i].Update(usage[i], scenarioStep, policy.DefaultHalfLife)
		}
		prev = plan
	}
	for _, b := range backlog {
		out.UnservedCPUSeconds += b
	}
	out.UnservedCPUSeconds = math.Round(out.UnservedCPUSeconds*1000) / 1000
	for j := range out.Joules {
		out.Joules[j] = math.Round(out.Joules[j]*10) / 10
	}
	return out
}

func sameCPUs(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// writeScenarioText prints the report: each run's energy relative to no
// daemon under each model, the range and the claimed change.
func writeScenarioText(w io.Writer, r scenarioReport) {
	fmt.Fprintf(w, "scenario:  %s, %d s on %s, machine %s\n", r.Scenario, r.Duration, r.PowerSource, r.Machine)
	fmt.Fprintf(w, "modelled, not measured: energy relative to no daemon under each model (no daemon: every task spread over the whole machine)\n")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprint(tw, "RUN")
	for _, m := range r.Models {
		fmt.Fprintf(tw, "\t%s", m)
	}
	fmt.Fprint(tw, "\tRANGE\tCLAIMED\n")
	for _, run := range r.Runs {
		fmt.Fprint(tw, run.Name)
		for j, rel := range run.Relative {
			if run.Knob == nil {
				fmt.Fprintf(tw, "\t%.0f J", run.Joules[j])
				continue
			}
			fmt.Fprintf(tw, "\t%.3f", rel)
		}
		switch {
		case run.Knob == nil:
			fmt.Fprint(tw, "\t-\t-\n")
		case run.VsNoDaemon == 0 && run.Spread == 0:
			fmt.Fprintf(tw, "\t%.3f-%.3f\tno change under any model\n", run.Low, run.High)
		case run.Distinguishable:
			fmt.Fprintf(tw, "\t%.3f-%.3f\t%+.1f %%\n", run.Low, run.High, 100*run.VsNoDaemon)
		default:
			fmt.Fprintf(tw, "\t%.3f-%.3f\tnot distinguishable (%+.1f %%, spread %.1f points)\n", run.Low, run.High, 100*run.VsNoDaemon, 100*run.Spread)
		}
	}
	tw.Flush()
	for _, run := range r.Runs[1:] {
		var ps []string
		for _, p := range policy.AvailablePolicies {
			if n := run.PolicySeconds[string(p)]; n > 0 {
				ps = append(ps, fmt.Sprintf("%s %d s", p, n))
			}
		}
		fmt.Fprintf(w, "%s: placed as %s; %d cpuset changes; %.1f CPU·s of work still waiting at the end\n",
			run.Name, strings.Join(ps, ", "), run.CPUSetChanges, run.UnservedCPUSeconds)
	}
}
