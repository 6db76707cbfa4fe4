package main

import (
	"fmt"
	"io"
	"math"
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
	if ws, err := workloadsFrom(props["Workloads"]); err == nil {
		r.Workloads = len(ws)
	}
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
