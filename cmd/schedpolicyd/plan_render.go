package main

// What `schedpolicyd plan` prints: the report as JSON (--json) or as text.

import (
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/schedpolicyd/schedpolicyd/policy"
	"github.com/schedpolicyd/schedpolicyd/sysfs"
)

// writePlanText prints r, the report of plan for in, as text: the machine
// and policy, a table of the workloads, then the active CPUs, the
// current placement and history where given, and the energy estimate.
func writePlanText(w io.Writer, r planReport, in planInput, plan policy.Plan) {
	fmt.Fprintf(w, "topology:  %s (%d CPUs; domain levels %s)\n", r.Topology, len(in.descs), strings.Join(r.Levels, " "))
	fmt.Fprintf(w, "policy:    %s", r.Policy)
	if r.Policy != r.Requested {
		fmt.Fprintf(w, " (requested %s; %s)", r.Requested, raceWhy(r))
	}
	fmt.Fprintln(w)
	if len(r.Slices) > 0 {
		var rs []string
		for n, v := range r.Slices {
			rs = append(rs, n+"="+v)
		}
		slices.Sort(rs)
		fmt.Fprintf(w, "slices:    %s\n", strings.Join(rs, " "))
	}
	writePlanWorkloads(w, r, in, plan)
	if r.Foreground != "" {
		fmt.Fprintf(w, "foreground: %s%s  (the cores the foreground's load is planned on; it may use every CPU, background, services and unfocused apps are kept off these)\n", r.Foreground, byClass(in.classes, plan.Foreground))
	}
	fmt.Fprintf(w, "active:    %d packages, %d cores, %d threads (%s)\n", r.Active.Packages, r.Active.Cores, r.Active.Threads, r.Active.CPUs)
	if c := r.CurrentActive; c != nil {
		fmt.Fprintf(w, "current:   %d packages, %d cores, %d threads (%s)\n", c.Packages, c.Cores, c.Threads, orNone(c.CPUs))
		fmt.Fprintf(w, "next:      %s\n", nextSummary(r))
	}
	if z := r.Lazy; z != nil {
		fmt.Fprintf(w, "lazy:      record %s after this decision; %s\n", z.Record, lazyWhy(z))
	}
	writePlanEnergy(w, r)
}

// writePlanWorkloads prints the "workloads:" table: one row per workload
// in --load order, with CURRENT and NEXT columns under --current, and why
// a workload was placed with another policy than the machine's.
func writePlanWorkloads(w io.Writer, r planReport, in planInput, plan policy.Plan) {
	fmt.Fprintln(w, "workloads:")
	// The NAME column is as wide as the longest name (unit names such as
	// systemd-journald.service are longer than the usual 16).
	nw := 16
	for _, l := range in.loads {
		nw = max(nw, len(l.Name))
	}
	if r.Current != nil {
		fmt.Fprintf(w, "  %-*s %-12s %-12s %-12s %-6s %s\n", nw, "NAME", "CLASS", "POLICY", "CURRENT", "NEXT", "CPUS")
	} else {
		fmt.Fprintf(w, "  %-*s %-12s %-12s %s\n", nw, "NAME", "CLASS", "POLICY", "CPUS")
	}
	for _, l := range in.loads {
		var whys []string
		if pol := r.WorkloadPolicies[l.Name]; pol != r.Policy {
			whys = append(whys, placedWhy(in.policy, l, in.rules, plan.Policies[l.Name]))
		}
		if h := r.Reasons[l.Name]; h != "" {
			whys = append(whys, h)
		}
		why := ""
		if len(whys) > 0 {
			why = "  (" + strings.Join(whys, "; ") + ")"
		}
		if r.Current != nil {
			cur := r.Current[l.Name]
			if cur == "" {
				cur = "-"
			}
			fmt.Fprintf(w, "  %-*s %-12s %-12s %-12s %-6s %s%s%s\n", nw, l.Name, r.Classes[l.Name], r.WorkloadPolicies[l.Name], cur, r.Next[l.Name], r.Workloads[l.Name], byClass(in.classes, plan.CPUs[l.Name]), why)
			continue
		}
		fmt.Fprintf(w, "  %-*s %-12s %-12s %s%s%s\n", nw, l.Name, r.Classes[l.Name], r.WorkloadPolicies[l.Name], r.Workloads[l.Name], byClass(in.classes, plan.CPUs[l.Name]), why)
	}
}

// writePlanEnergy prints the "energy:" line, the model's note when it was
// not fitted on this machine's shape, and on a machine of more than one
// class the watts and costs by class.
func writePlanEnergy(w io.Writer, r planReport) {
	// The headline is the first model of the spread (policy.SpreadModels):
	// on a machine with classes, the calibration priced with the
	// machine's own model or its class ratios, named as the spread names
	// it.
	model := r.Model
	if len(r.Energy.Estimates) > 0 && r.Energy.Estimates[0].Model != r.Model {
		model = r.Energy.Estimates[0].Model + " on the " + r.Model + " calibration"
	}
	fmt.Fprintf(w, "energy:    %.1f W (model %s; an estimate, not a measurement)\n", r.Watts, model)
	if r.ModelNote != "" {
		fmt.Fprintf(w, "           %s\n", r.ModelNote)
	}
	writePlanSpread(w, r.Energy)
	if len(r.CPUClasses) == 0 {
		return
	}
	var ws []string
	for _, c := range r.CPUClasses {
		ws = append(ws, fmt.Sprintf("%s %.1f W", c.Name, c.Watts))
	}
	fmt.Fprintf(w, "           by class: %s (cores and threads; the rest is platform and uncore)\n", strings.Join(ws, ", "))
	fmt.Fprintf(w, "           class costs per unit of work from %s\n", r.ClassCostFrom)
	fmt.Fprintln(w, "classes:")
	for _, c := range r.CPUClasses {
		fmt.Fprintf(w, "  %-6s %-16s capacity %4d, cost %.2f at its top state\n", c.Name, c.CPUs, c.Capacity, c.Cost)
	}
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

// writePlanSpread prints the estimates under every model, their range,
// and the effect against performance: the smallest across the models, or
// "not distinguishable" when it is no larger than their spread.
func writePlanSpread(w io.Writer, e planEnergy) {
	var es []string
	for _, m := range e.Estimates {
		es = append(es, fmt.Sprintf("%s %.1f W", m.Model, m.Watts))
	}
	fmt.Fprintf(w, "           modelled, not measured: %s; range %.1f-%.1f W\n", strings.Join(es, ", "), e.Range.LowWatts, e.Range.HighWatts)
	if v := e.VsPerformance; v != nil {
		if v.Distinguishable {
			fmt.Fprintf(w, "           vs performance: %+.1f W (the smallest change across the models; spread %.1f W)\n", v.Watts, v.SpreadWatts)
		} else {
			fmt.Fprintf(w, "           vs performance: not distinguishable (smallest change %+.1f W, spread across the models %.1f W)\n", v.Watts, v.SpreadWatts)
		}
	}
}
