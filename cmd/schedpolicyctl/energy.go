package main

import (
	"errors"
	"fmt"
	"io"
	"math"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/godbus/dbus/v5"
)

// energyReport is what `energy` shows, and the JSON shape of
// `energy --json`.
type energyReport struct {
	// Source is the daemon's EnergySource: rapl, battery or none.
	Source string `json:"energy_source"`
	// Measured has one entry per (policy, power source) with measured
	// time, in the daemon's order.
	Measured []energyRow `json:"measured"`
	// Model names the energy model's calibration; Estimates is its
	// estimate for the managed workloads' current load under each policy.
	Model     string     `json:"model"`
	Estimates []estimate `json:"model_estimates"`
	// ModelNote is "" when the model was fitted on a machine of this
	// shape, else why its watts only rank the policies here.
	ModelNote string `json:"model_note,omitempty"`
	// Workloads is the number of managed workloads the model priced.
	Workloads int `json:"workloads"`
	// Energy is the same load's estimate under every model the daemon
	// prices it with (EstimatePowerModels: the machine's own model
	// first, then each bracketing published model), per policy, with
	// its range and its change from performance; absent from a daemon
	// older than EstimatePowerModels.
	Energy *energySpread `json:"energy,omitempty"`
}

// energySpread is energyReport.Energy.
type energySpread struct {
	// Modelled is always true: estimates, never measurements.
	Modelled bool `json:"modelled"`
	// Models are the models' names, the machine's own first.
	Models []string `json:"models"`
	// Policies has one entry per policy, in the daemon's order.
	Policies []policySpread `json:"policies"`
}

// policySpread is one policy's estimates across the models.
type policySpread struct {
	Policy    string       `json:"policy"`
	Estimates []modelWatts `json:"estimates"`
	Range     wattsRange   `json:"range"`
	// VsPerformance is the change from performance's plan of the same
	// load: the smallest across the models (0 when they disagree on its
	// sign), with its spread across them; absent for performance.
	VsPerformance *effect `json:"vs_performance,omitempty"`
}

// modelWatts is one model's estimate of a policy.
type modelWatts struct {
	Model        string  `json:"model"`
	Watts        float64 `json:"watts"`         // the whole machine, W
	PackageWatts float64 `json:"package_watts"` // the packages alone, W
}

// wattsRange is the lowest and highest estimate across the models, W.
type wattsRange struct {
	LowWatts         float64 `json:"low_watts"`
	HighWatts        float64 `json:"high_watts"`
	LowPackageWatts  float64 `json:"low_package_watts"`
	HighPackageWatts float64 `json:"high_package_watts"`
}

// effect is a claimed change of power across the models, W.
type effect struct {
	Watts           float64 `json:"watts"`
	SpreadWatts     float64 `json:"spread_watts"`
	Distinguishable bool    `json:"distinguishable"`
}

// energyRow is one entry of the Energy property (energyEntry, decoded by
// energyFrom) with its average.
type energyRow struct {
	Policy       string  `json:"policy"`
	PowerSource  string  `json:"power_source"`
	Joules       float64 `json:"joules"`        // J
	Seconds      float64 `json:"seconds"`       // s the joules were measured over
	AverageWatts float64 `json:"average_watts"` // joules / seconds, W
}

// estimate is one entry of EstimatePower's answer, a(sdd).
type estimate struct {
	Policy       string  `json:"policy"`
	Watts        float64 `json:"watts"`         // the whole machine, W
	PackageWatts float64 `json:"package_watts"` // the packages alone, W
}

func (c *cli) energy(args []string) int {
	if len(args) > 0 {
		return c.usage("energy", usagef("unexpected argument %q", args[0]))
	}
	if c.compare {
		return c.energyCompare()
	}
	for _, f := range []string{"duration", "interval", "settle", "policies"} {
		if c.given[f] {
			return c.usage("energy", usagef("--%s is an option of --compare", f))
		}
	}
	r, err := c.readEnergy()
	if err != nil {
		return c.fail(err)
	}
	if c.g.json {
		if err := writeJSON(c.stdout, r); err != nil {
			return c.fail(err)
		}
		return exitOK
	}
	writeEnergy(c.stdout, r)
	return exitOK
}

// readEnergy asks the daemon to close the running segment
// (RefreshEnergy), then reads the totals and the model's estimate.
func (c *cli) readEnergy() (energyReport, error) {
	cl, err := c.dial()
	if err != nil {
		return energyReport{}, err
	}
	defer cl.Close()
	if err := cl.call("RefreshEnergy", nil); err != nil {
		return energyReport{}, err
	}
	props, err := cl.properties()
	if err != nil {
		return energyReport{}, err
	}
	r := energyReport{Measured: []energyRow{}, Estimates: []estimate{}}
	bad := func(name string, err error) error {
		return &cliError{exitFailure, fmt.Sprintf("property %s has type %s: %v", name, props[name].Signature(), err)}
	}
	v, ok := props["EnergySource"]
	if !ok {
		return energyReport{}, &cliError{exitFailure, "the running schedpolicyd has no EnergySource property; is it older than schedpolicyctl?"}
	}
	if err := v.Store(&r.Source); err != nil {
		return energyReport{}, bad("EnergySource", err)
	}
	ev, ok := props["Energy"]
	if !ok {
		return energyReport{}, &cliError{exitFailure, "the running schedpolicyd has no Energy property; is it older than schedpolicyctl?"}
	}
	es, err := energyFrom(ev)
	if err != nil {
		return energyReport{}, bad("Energy", err)
	}
	for _, e := range es {
		row := energyRow{Policy: e.Policy, PowerSource: e.Source, Joules: e.Joules, Seconds: e.Seconds}
		if e.Seconds > 0 {
			row.AverageWatts = e.Joules / e.Seconds
		}
		r.Measured = append(r.Measured, row)
	}
	if v, ok := props["Workloads"]; ok {
		if ws, err := workloadsFrom(v); err == nil {
			r.Workloads = len(ws)
		}
	}
	var rawEst, rawSpread [][]any
	call := cl.obj.Call(iface+".EstimatePowerModels", 0)
	var de dbus.Error
	if errors.As(call.Err, &de) && de.Name == errUnknownMethod {
		// A daemon older than EstimatePowerModels: its own model only.
		var raw [][]any
		if err := cl.call("EstimatePower", []any{&r.Model, &r.ModelNote, &raw}); err != nil {
			return energyReport{}, err
		}
		for _, e := range raw {
			var x estimate
			if err := dbus.Store(e, &x.Policy, &x.Watts, &x.PackageWatts); err != nil {
				return energyReport{}, &cliError{exitFailure, fmt.Sprintf("EstimatePower: unexpected reply: %v", err)}
			}
			r.Estimates = append(r.Estimates, x)
		}
		return r, nil
	}
	if call.Err != nil {
		return energyReport{}, busError(cl.bus, "EstimatePowerModels", call.Err)
	}
	if err := call.Store(&r.Model, &r.ModelNote, &rawEst, &rawSpread); err != nil {
		return energyReport{}, &cliError{exitFailure, fmt.Sprintf("EstimatePowerModels: unexpected reply: %v", err)}
	}
	if r.Estimates, r.Energy, err = spreadFrom(rawEst, rawSpread); err != nil {
		return energyReport{}, &cliError{exitFailure, fmt.Sprintf("EstimatePowerModels: unexpected reply: %v", err)}
	}
	return r, nil
}

// spreadFrom decodes EstimatePowerModels' estimates, a(ssdd), and spread,
// a(sddddddb): the machine's own model's estimates (the first model's)
// and every model's, per policy.
func spreadFrom(rawEst, rawSpread [][]any) ([]estimate, *energySpread, error) {
	own := []estimate{}
	sp := &energySpread{Modelled: true, Models: []string{}, Policies: []policySpread{}}
	byPolicy := map[string][]modelWatts{}
	for _, e := range rawEst {
		var model string
		var x estimate
		if err := dbus.Store(e, &model, &x.Policy, &x.Watts, &x.PackageWatts); err != nil {
			return nil, nil, err
		}
		if len(sp.Models) == 0 || sp.Models[len(sp.Models)-1] != model {
			sp.Models = append(sp.Models, model)
		}
		if len(sp.Models) == 1 {
			own = append(own, x)
		}
		byPolicy[x.Policy] = append(byPolicy[x.Policy], modelWatts{Model: model, Watts: x.Watts, PackageWatts: x.PackageWatts})
	}
	for _, e := range rawSpread {
		var p policySpread
		var ef effect
		if err := dbus.Store(e, &p.Policy, &p.Range.LowWatts, &p.Range.HighWatts, &p.Range.LowPackageWatts, &p.Range.HighPackageWatts,
			&ef.Watts, &ef.SpreadWatts, &ef.Distinguishable); err != nil {
			return nil, nil, err
		}
		p.Estimates = byPolicy[p.Policy]
		if p.Estimates == nil {
			p.Estimates = []modelWatts{}
		}
		if p.Policy != "performance" {
			p.VsPerformance = &ef
		}
		sp.Policies = append(sp.Policies, p)
	}
	return own, sp, nil
}

// energySourceText says what each source measures.
var energySourceText = map[string]string{
	"rapl":    "RAPL package counters: the processor packages alone, on AC and on battery",
	"battery": "the system batteries' discharge: the whole machine, measured only while on battery",
	"none":    "none: no readable RAPL counter and no system battery with a power reading (see schedpolicyd probe)",
}

// writeEnergy prints the table: one row per measured (policy, power
// source), a row for each policy never measured, and the model's estimate
// for the policy beside it — for the packages alone when RAPL measures.
func writeEnergy(w io.Writer, r energyReport) {
	what := energySourceText[r.Source]
	if what == "" {
		what = printable(r.Source)
	}
	fmt.Fprintf(w, "energy source: %s\n", what)
	model := map[string]float64{}
	for _, e := range r.Estimates {
		if r.Source == "rapl" {
			model[e.Policy] = e.PackageWatts
		} else {
			model[e.Policy] = e.Watts
		}
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "POLICY\tSOURCE\tENERGY\tTIME\tAVERAGE\tMODEL\n")
	modelCell := func(p string) string {
		if v, ok := model[p]; ok {
			return fmt.Sprintf("%.1f W", v)
		}
		return "-"
	}
	for _, p := range policies {
		rows := 0
		for _, e := range r.Measured {
			if e.Policy != p {
				continue
			}
			rows++
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%.2f W\t%s\n", p, printable(e.PowerSource), formatJoules(e.Joules), formatSeconds(e.Seconds), e.AverageWatts, modelCell(p))
		}
		if rows == 0 {
			fmt.Fprintf(tw, "%s\t-\t-\t-\t-\t%s\n", p, modelCell(p))
		}
	}
	tw.Flush()
	part := "the whole machine"
	if r.Source == "rapl" {
		part = "the packages alone, as RAPL measures"
	}
	fmt.Fprintf(w, "model: %s, %s, for the current load of %s; an estimate, not a measurement\n",
		printable(r.Model), part, plural(r.Workloads, "managed workload"))
	if r.ModelNote != "" {
		fmt.Fprintf(w, "  note: %s\n", printable(r.ModelNote))
	}
	if r.Energy != nil {
		writeSpread(w, *r.Energy, r.Source == "rapl")
	}
}

// writeSpread prints every model's estimate per policy, each policy's
// range across them, and each policy's change from performance: the
// smallest across the models, or "not distinguishable" when it is no
// larger than their spread. packages: the packages' watts (RAPL
// measures them), else the whole machine's.
func writeSpread(w io.Writer, e energySpread, packages bool) {
	part := "the whole machine"
	if packages {
		part = "the packages alone"
	}
	fmt.Fprintf(w, "under every model (modelled, not measured; W, %s):\n", part)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprint(tw, "MODEL")
	for _, p := range e.Policies {
		fmt.Fprintf(tw, "\t%s", strings.ToUpper(printable(p.Policy)))
	}
	fmt.Fprintln(tw)
	watts := func(m modelWatts) float64 {
		if packages {
			return m.PackageWatts
		}
		return m.Watts
	}
	for _, m := range e.Models {
		fmt.Fprint(tw, printable(m))
		for _, p := range e.Policies {
			cell := "-"
			for _, x := range p.Estimates {
				if x.Model == m {
					cell = fmt.Sprintf("%.1f", watts(x))
				}
			}
			fmt.Fprintf(tw, "\t%s", cell)
		}
		fmt.Fprintln(tw)
	}
	fmt.Fprint(tw, "range")
	for _, p := range e.Policies {
		lo, hi := p.Range.LowWatts, p.Range.HighWatts
		if packages {
			lo, hi = p.Range.LowPackageWatts, p.Range.HighPackageWatts
		}
		fmt.Fprintf(tw, "\t%.1f-%.1f", lo, hi)
	}
	fmt.Fprintln(tw)
	tw.Flush()
	for _, p := range e.Policies {
		v := p.VsPerformance
		if v == nil {
			continue
		}
		what := printable(p.Policy) + " vs performance: "
		switch {
		case v.Distinguishable:
			fmt.Fprintf(w, "%s%+.1f W (the smallest change across the models; spread %.1f W)\n", what, v.Watts, v.SpreadWatts)
		case v.Watts == 0 && v.SpreadWatts == 0:
			fmt.Fprintf(w, "%sno change under any model\n", what)
		default:
			fmt.Fprintf(w, "%snot distinguishable (smallest change %+.1f W, spread across the models %.1f W)\n", what, v.Watts, v.SpreadWatts)
		}
	}
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}

// formatJoules prints J, kJ or MJ with four significant figures or so.
func formatJoules(j float64) string {
	switch a := math.Abs(j); {
	case a >= 1e7:
		return fmt.Sprintf("%.1f MJ", j/1e6)
	case a >= 1e4:
		return fmt.Sprintf("%.1f kJ", j/1e3)
	}
	return fmt.Sprintf("%.1f J", j)
}

// formatSeconds prints s below a minute, then minutes, then hours.
func formatSeconds(s float64) string {
	if s < 60 {
		return fmt.Sprintf("%.1f s", s)
	}
	d := time.Duration(s * float64(time.Second)).Round(time.Second)
	if d < time.Hour {
		return fmt.Sprintf("%dm%02ds", int(d.Minutes()), int(d.Seconds())%60)
	}
	return fmt.Sprintf("%dh%02dm", int(d.Hours()), int(d.Minutes())%60)
}
