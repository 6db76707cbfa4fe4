package main

import (
	"bytes"
	"encoding/json"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/godbus/dbus/v5"

	"github.com/schedpolicyd/schedpolicyd/internal/testutil"
)

// TestCtlEnergy: the real daemon on the mock Surface Pro on battery
// (power_now 7.21 W, no workloads): `energy` closes the running segment
// and shows powersaving on battery at exactly 7.21 W beside the model's
// 12.0 W (the laptop calibration's idle platform, the only load there is).
func TestCtlEnergy(t *testing.T) {
	d := startDaemon(t, "none")
	time.Sleep(1200 * time.Millisecond)
	r := d.inProcess("energy", "--json")
	if r.code != 0 {
		t.Fatalf("energy --json: %v", r)
	}
	var rep energyReport
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
		t.Fatalf("%v\n%s", err, r.stdout)
	}
	if rep.Source != "battery" || len(rep.Measured) != 1 || rep.Model != "snb-laptop-4c8t" || len(rep.Estimates) != 3 || rep.Workloads != 0 {
		t.Fatalf("energy --json = %+v", rep)
	}
	m := rep.Measured[0]
	if m.Policy != "powersaving" || m.PowerSource != "battery" || m.Seconds < 1.2 || math.Abs(m.AverageWatts-7.21) > 1e-9 || math.Abs(m.Joules/m.Seconds-7.21) > 1e-9 {
		t.Errorf("measured %+v, want powersaving on battery at 7.21 W for ≥ 1.2 s", m)
	}
	for i, p := range policies {
		if e := rep.Estimates[i]; e.Policy != p || e.Watts != 12 || e.PackageWatts != 0 {
			t.Errorf("estimate %d = %+v, want %s at 12 W (0 W for the packages)", i, e, p)
		}
	}

	// Under every model: the calibration (the mock laptop is the seed's
	// SMT machine of one kind of core) and the five bracketing models,
	// the idle platform alone under each, no change anywhere.
	models := []string{"snb-laptop-4c8t", "m1-measured", "juno-r0", "gs101-dt", "rk3588-dt", "intel-hybrid-em"}
	if e := rep.Energy; e == nil || !e.Modelled || !reflect.DeepEqual(e.Models, models) || len(e.Policies) != 3 {
		t.Fatalf("energy --json's energy = %+v", rep.Energy)
	}
	for i, p := range rep.Energy.Policies {
		if p.Policy != policies[i] || len(p.Estimates) != len(models) || p.Range != (wattsRange{12, 12, 0, 0}) {
			t.Errorf("policy %d = %+v", i, p)
		}
		if (i == 0) != (p.VsPerformance == nil) || i > 0 && *p.VsPerformance != (effect{}) {
			t.Errorf("%s vs performance = %+v", p.Policy, p.VsPerformance)
		}
		for j, e := range p.Estimates {
			if e != (modelWatts{models[j], 12, 0}) {
				t.Errorf("%s estimate %d = %+v", p.Policy, j, e)
			}
		}
	}

	// The real binary's table.
	out := d.run(t, "energy")
	if out.code != 0 {
		t.Fatalf("energy: %v", out)
	}
	for _, want := range []string{
		"energy source: the system batteries' discharge: the whole machine, measured only while on battery\n",
		"POLICY       SOURCE   ENERGY  TIME   AVERAGE  MODEL\n",
		"performance  -        -       -      -        12.0 W\n",
		"powersaving  battery  ",
		"  7.21 W   12.0 W\n",
		"model: snb-laptop-4c8t, the whole machine, for the current load of 0 managed workloads; an estimate, not a measurement\n",
		"under every model (modelled, not measured; W, the whole machine):\n",
		"MODEL            PERFORMANCE  BALANCE    POWERSAVING\n",
		"juno-r0          12.0         12.0       12.0\n",
		"range            12.0-12.0    12.0-12.0  12.0-12.0\n",
		"balance vs performance: no change under any model\n",
		"powersaving vs performance: no change under any model\n",
	} {
		if !strings.Contains(out.stdout, want) {
			t.Errorf("energy output lacks %q:\n%s", want, out.stdout)
		}
	}
	if r := d.inProcess("energy", "x"); r.code != exitUsage || !strings.Contains(r.stderr, `unexpected argument "x"`) {
		t.Errorf("energy x: %v, want a usage error", r)
	}
}

// TestWriteEnergy: the table for a RAPL machine compares the packages'
// measured watts with the model's package watts; a policy never measured
// gets its row with the model alone.
func TestWriteEnergy(t *testing.T) {
	r := energyReport{
		Source: "rapl",
		Measured: []energyRow{
			{Policy: "performance", PowerSource: "ac", Joules: 54000, Seconds: 3600, AverageWatts: 15},
			{Policy: "powersaving", PowerSource: "ac", Joules: 90.5, Seconds: 10, AverageWatts: 9.05},
			{Policy: "powersaving", PowerSource: "battery", Joules: 2.5e7, Seconds: 90061, AverageWatts: 2.5e7 / 90061},
		},
		Model: "snb-laptop-4c8t",
		Estimates: []estimate{
			{Policy: "performance", Watts: 68, PackageWatts: 56},
			{Policy: "balance", Watts: 54, PackageWatts: 42},
			{Policy: "powersaving", Watts: 40, PackageWatts: 28},
		},
		Workloads: 1,
	}
	var b bytes.Buffer
	writeEnergy(&b, r)
	want := `energy source: RAPL package counters: the processor packages alone, on AC and on battery
POLICY       SOURCE   ENERGY   TIME    AVERAGE   MODEL
performance  ac       54.0 kJ  1h00m   15.00 W   56.0 W
balance      -        -        -       -         42.0 W
powersaving  ac       90.5 J   10.0 s  9.05 W    28.0 W
powersaving  battery  25.0 MJ  25h01m  277.59 W  28.0 W
model: snb-laptop-4c8t, the packages alone, as RAPL measures, for the current load of 1 managed workload; an estimate, not a measurement
`
	if got := b.String(); got != want {
		t.Errorf("writeEnergy:\n%s\nwant:\n%s", got, want)
	}
	// On a machine of another shape the model says its watts only rank.
	r.ModelNote = "the snb-laptop-4c8t model was fitted on 1 package × 4 cores × 2 threads; this machine is 1 package × 2 cores × 1 thread: its watts compare the policies, they are no estimate of this machine's power"
	b.Reset()
	writeEnergy(&b, r)
	if got := b.String(); got != want+"  note: "+r.ModelNote+"\n" {
		t.Errorf("writeEnergy with a note:\n%s", got)
	}

	// Every model's estimate (the packages', as RAPL measures), each
	// policy's range and its change from performance: one model's
	// smallest change larger than the spread, one not, one none.
	r.ModelNote = ""
	r.Energy = &energySpread{Modelled: true, Models: []string{"snb-laptop-4c8t", "m1-measured"}, Policies: []policySpread{
		{Policy: "performance", Estimates: []modelWatts{{"snb-laptop-4c8t", 68, 56}, {"m1-measured", 45, 33}},
			Range: wattsRange{45, 68, 33, 56}},
		{Policy: "balance", Estimates: []modelWatts{{"snb-laptop-4c8t", 68, 56}, {"m1-measured", 45, 33}},
			Range: wattsRange{45, 68, 33, 56}, VsPerformance: &effect{}},
		{Policy: "powersaving", Estimates: []modelWatts{{"snb-laptop-4c8t", 40, 28}, {"m1-measured", 30.04, 18.04}},
			Range: wattsRange{30.04, 40, 18.04, 28}, VsPerformance: &effect{Watts: -14.96, SpreadWatts: 13.04, Distinguishable: true}},
	}}
	b.Reset()
	writeEnergy(&b, r)
	spread := `under every model (modelled, not measured; W, the packages alone):
MODEL            PERFORMANCE  BALANCE    POWERSAVING
snb-laptop-4c8t  56.0         56.0       28.0
m1-measured      33.0         33.0       18.0
range            33.0-56.0    33.0-56.0  18.0-28.0
balance vs performance: no change under any model
powersaving vs performance: -15.0 W (the smallest change across the models; spread 13.0 W)
`
	if got := b.String(); got != want+spread {
		t.Errorf("writeEnergy with every model:\n%s\nwant:\n%s", got, want+spread)
	}
	r.Energy.Policies[2].VsPerformance = &effect{Watts: -5.04, SpreadWatts: 8.97}
	b.Reset()
	writeEnergy(&b, r)
	if got, line := b.String(), "powersaving vs performance: not distinguishable (smallest change -5.0 W, spread across the models 9.0 W)\n"; !strings.HasSuffix(got, line) {
		t.Errorf("writeEnergy, not distinguishable:\n%s\nwant it to end in %q", got, line)
	}
}

func TestFormatEnergyUnits(t *testing.T) {
	for _, c := range []struct {
		j, s         float64
		wantJ, wantS string
	}{
		{0, 0, "0.0 J", "0.0 s"},
		{9999.94, 59.94, "9999.9 J", "59.9 s"},
		{10000, 60, "10.0 kJ", "1m00s"},
		{9999949, 3599.4, "9999.9 kJ", "59m59s"},
		{1e7, 3600, "10.0 MJ", "1h00m"},
	} {
		if got := formatJoules(c.j); got != c.wantJ {
			t.Errorf("formatJoules(%v) = %q, want %q", c.j, got, c.wantJ)
		}
		if got := formatSeconds(c.s); got != c.wantS {
			t.Errorf("formatSeconds(%v) = %q, want %q", c.s, got, c.wantS)
		}
	}
}

// oldDaemon answers as a schedpolicyd from before EstimatePowerModels:
// the energy properties, RefreshEnergy and EstimatePower only.
type oldDaemon struct{}

func (oldDaemon) RefreshEnergy() *dbus.Error { return nil }

func (oldDaemon) EstimatePower() (string, string, []estimate, *dbus.Error) {
	return "snb-laptop-4c8t", "", []estimate{{"performance", 20, 8}, {"balance", 19, 7}, {"powersaving", 18, 6}}, nil
}

func (oldDaemon) GetAll(string) (map[string]dbus.Variant, *dbus.Error) {
	return map[string]dbus.Variant{
		"EnergySource": dbus.MakeVariant("none"),
		"Energy": dbus.MakeVariant([]struct {
			P, S string
			J, T float64
		}{}),
	}, nil
}

// TestCtlEnergyOldDaemon: against a daemon without EstimatePowerModels,
// `energy` shows its own model's estimate as before, with no line or
// field of the other models.
func TestCtlEnergyOldDaemon(t *testing.T) {
	addr := testutil.StartBus(t, testutil.BusOptions{}).Addr
	conn, err := dbus.Connect(addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if err := conn.Export(oldDaemon{}, objectPath, iface); err != nil {
		t.Fatal(err)
	}
	if err := conn.Export(oldDaemon{}, objectPath, "org.freedesktop.DBus.Properties"); err != nil {
		t.Fatal(err)
	}
	if r, err := conn.RequestName(busName, dbus.NameFlagDoNotQueue); err != nil || r != dbus.RequestNameReplyPrimaryOwner {
		t.Fatalf("RequestName: %v %v", r, err)
	}
	var out, errb bytes.Buffer
	if code := run([]string{"--bus", addr, "energy", "--json"}, &out, &errb); code != 0 {
		t.Fatalf("energy --json: %d %s", code, errb.String())
	}
	var rep energyReport
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatal(err)
	}
	want := energyReport{Source: "none", Measured: []energyRow{}, Model: "snb-laptop-4c8t",
		Estimates: []estimate{{"performance", 20, 8}, {"balance", 19, 7}, {"powersaving", 18, 6}}}
	if !reflect.DeepEqual(rep, want) || strings.Contains(out.String(), `"energy"`) {
		t.Errorf("energy --json = %+v\n%s\nwant %+v", rep, out.String(), want)
	}
	out.Reset()
	if code := run([]string{"--bus", addr, "energy"}, &out, &errb); code != 0 || strings.Contains(out.String(), "under every model") ||
		!strings.Contains(out.String(), "powersaving  -       -       -     -        18.0 W\n") {
		t.Errorf("energy: %d\n%s", code, out.String())
	}
}
