package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

const topoFixtures = "../../sysfs/testdata/topology"

// hybridLoad is a laptop's day: a focused app, another app, background
// work and services. The arm64 machines (8 CPUs) get a lighter focused
// app, which the i7-1260P's load would spread over every CPU.
const (
	hybridLoad      = "game=3.5:8@app.slice/focused,chat=0.3@app.slice,bg1=0.3@background.slice,svc=0.2@system.slice,svc2=0.5:2@system.slice"
	hybridLoadSmall = "game=1.5:2@app.slice/focused,chat=0.3@app.slice,bg1=0.3@background.slice,svc=0.2@system.slice,svc2=0.5:2@system.slice"
)

func planJSON(t *testing.T, args ...string) planReport {
	t.Helper()
	code, out, errs := runPlan(t, append(args, "--json")...)
	if code != 0 {
		t.Fatalf("%v: exit %d: %s", args, code, errs)
	}
	var r planReport
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatal(err)
	}
	return r
}

// TestPlanHybridFixtures: exact cpulists per workload on every hybrid
// fixture. The focused game may use every CPU; its load is planned as
// balance plans it, the performance cores first (fg, the foreground's
// cores: the game's set before issue 34, with its SMT siblings).
// Background, services and the unfocused chat app land on the most
// efficient class and never on a foreground core, under balance as under
// powersaving (before issue 34 the chat app took balance's performance
// cores first). Where the
// LP E-cores are full (two of them on Meteor and Arrow Lake), svc2
// spills onto an E-core beside them.
func TestPlanHybridFixtures(t *testing.T) {
	tests := []struct {
		machine, policy, load string
		want                  map[string]string
	}{
		{"adl-p-i7-1260p", "powersaving", hybridLoad, map[string]string{"game": "0-15", "chat": "10", "bg1": "11", "svc": "11", "svc2": "10", "fg": "0-9"}},
		{"adl-p-i7-1260p", "balance", hybridLoad, map[string]string{"game": "0-15", "chat": "10", "bg1": "11", "svc": "11", "svc2": "10", "fg": "0-9"}},
		{"mtl-u-ultra7-164u", "powersaving", hybridLoad, map[string]string{"game": "0-13", "chat": "12", "bg1": "13", "svc": "12", "svc2": "8,13", "fg": "0-7"}},
		{"mtl-u-ultra7-164u", "balance", hybridLoad, map[string]string{"game": "0-13", "chat": "12", "bg1": "13", "svc": "12", "svc2": "8,13", "fg": "0-7"}},
		{"lnl-ultra5-226v", "powersaving", hybridLoad, map[string]string{"game": "0-7", "chat": "6", "bg1": "7", "svc": "7", "svc2": "6", "fg": "0-5"}},
		{"lnl-ultra5-226v", "balance", hybridLoad, map[string]string{"game": "0-7", "chat": "6", "bg1": "7", "svc": "7", "svc2": "6", "fg": "0-5"}},
		{"arl-h-es", "powersaving", hybridLoad, map[string]string{"game": "0-13", "chat": "12", "bg1": "13", "svc": "12", "svc2": "5,13", "fg": "0-4"}},
		{"arl-h-es", "balance", hybridLoad, map[string]string{"game": "0-13", "chat": "12", "bg1": "13", "svc": "12", "svc2": "5,13", "fg": "0-4"}},
		{"ptl-h-es", "powersaving", hybridLoad, map[string]string{"game": "0-9", "chat": "6", "bg1": "7", "svc": "6", "svc2": "8", "fg": "0-5"}},
		{"ptl-h-es", "balance", hybridLoad, map[string]string{"game": "0-9", "chat": "6", "bg1": "7", "svc": "6", "svc2": "8", "fg": "0-5"}},
		{"strix-point-hx370", "powersaving", hybridLoad, map[string]string{"game": "0-23", "chat": "4", "bg1": "16", "svc": "16", "svc2": "4", "fg": "0-3,12-15"}},
		{"strix-point-hx370", "balance", hybridLoad, map[string]string{"game": "0-23", "chat": "4", "bg1": "16", "svc": "16", "svc2": "4", "fg": "0-3,12-15"}},
		{"rk3588", "powersaving", hybridLoadSmall, map[string]string{"game": "0-7", "chat": "0", "bg1": "1", "svc": "2", "svc2": "2-3", "fg": "4-5"}},
		{"rk3588", "balance", hybridLoadSmall, map[string]string{"game": "0-7", "chat": "0", "bg1": "1", "svc": "2", "svc2": "2-3", "fg": "4-5"}},
		{"sdm850", "powersaving", hybridLoadSmall, map[string]string{"game": "0-7", "chat": "0", "bg1": "1", "svc": "0", "svc2": "2-3", "fg": "4-5"}},
		{"sdm850", "balance", hybridLoadSmall, map[string]string{"game": "0-7", "chat": "0", "bg1": "1", "svc": "0", "svc2": "2-3", "fg": "4-5"}},
		{"apple-m1", "powersaving", hybridLoadSmall, map[string]string{"game": "0-7", "chat": "0", "bg1": "1", "svc": "2", "svc2": "2-3", "fg": "4-5"}},
		{"apple-m1", "balance", hybridLoadSmall, map[string]string{"game": "0-7", "chat": "0", "bg1": "1", "svc": "2", "svc2": "2-3", "fg": "4-5"}},
		// performance is unchanged: every workload may use every CPU.
		{"adl-p-i7-1260p", "performance", hybridLoad, map[string]string{"game": "0-15", "chat": "0-15", "bg1": "0-15", "svc": "0-15", "svc2": "0-15"}},
	}
	for _, tt := range tests {
		t.Run(tt.machine+" "+tt.policy, func(t *testing.T) {
			r := planJSON(t, "--sysfs-root", filepath.Join(topoFixtures, tt.machine), "--policy", tt.policy, "--load", tt.load)
			if r.Foreground != "" {
				r.Workloads["fg"] = r.Foreground
			}
			if !reflect.DeepEqual(r.Workloads, tt.want) {
				t.Errorf("got  %v\nwant %v", r.Workloads, tt.want)
			}
		})
	}
}

// TestPlanHybridEnergyRanks: on every machine of more than one class the
// model ranks powersaving ≤ balance ≤ performance for light background
// load, and prices it per class.
func TestPlanHybridEnergyRanks(t *testing.T) {
	entries, err := os.ReadDir(topoFixtures)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range entries {
		root := filepath.Join(topoFixtures, e.Name())
		var w [3]float64
		hybrid := false
		for i, pol := range []string{"powersaving", "balance", "performance"} {
			r := planJSON(t, "--sysfs-root", root, "--policy", pol, "--load", "bg1=0.3@background.slice,svc=0.2@system.slice,idx=0.6:2@background.slice")
			w[i] = r.Watts
			hybrid = len(r.CPUClasses) > 1
			if hybrid && len(r.CPUClasses) != len(r.CPUClass) && len(r.CPUClass) == 0 {
				t.Errorf("%s: no per-CPU class", e.Name())
			}
		}
		if !hybrid {
			continue
		}
		n++
		if w[0] > w[1] || w[1] > w[2] {
			t.Errorf("%s: %.1f / %.1f / %.1f W, want powersaving ≤ balance ≤ performance", e.Name(), w[0], w[1], w[2])
		}
	}
	if n < 9 {
		t.Errorf("only %d hybrid fixtures found, want the 9 of gen_topology.sh", n)
	}
}

// TestPlanHybridReport: the classes and each CPU's class in JSON, the
// classes of each workload's CPUs and the watts per class in text; none of
// it on a homogeneous machine.
func TestPlanHybridReport(t *testing.T) {
	root := filepath.Join(topoFixtures, "adl-p-i7-1260p")
	r := planJSON(t, "--sysfs-root", root, "--policy", "powersaving", "--load", "bg=0.3@background.slice")
	var names []string
	for _, c := range r.CPUClasses {
		names = append(names, c.Name+":"+c.CPUs)
	}
	if strings.Join(names, " ") != "E:8-15 P:0-7" || r.CPUClass["0"] != "P" || r.CPUClass["15"] != "E" || len(r.CPUClass) != 16 ||
		r.CPUClasses[0].Capacity != 580 || r.CPUClasses[0].Cost != 0.35 || r.CPUClasses[0].Watts <= 0 || r.CPUClasses[1].Watts != 0 ||
		!strings.HasPrefix(r.ClassCostFrom, "published figures") {
		t.Errorf("classes %+v, cpu_class %v, from %q", r.CPUClasses, r.CPUClass, r.ClassCostFrom)
	}
	code, out, _ := runPlan(t, "--sysfs-root", root, "--policy", "powersaving", "--load", "game=3.5:8@app.slice/focused,bg=0.3@background.slice")
	for _, line := range []string{
		"  game             focused      performance  0-15  [P 0-7 + E 8-15]  (class focused)\n",
		"foreground: 0-9  [P 0-7 + E 8-9]  (the cores the foreground's load is planned on; it may use every CPU, background, services and unfocused apps are kept off these)\n",
		"  bg               background   powersaving  10  [E 10]\n",
		"           by class: E ",
		"classes:\n  E      8-15             capacity  580, cost 0.35 at its top state\n  P      0-7              capacity 1024, cost 1.00 at its top state\n",
	} {
		if code != 0 || !strings.Contains(out, line) {
			t.Errorf("text lacks %q:\n%s", line, out)
		}
	}
	// The kernel's energy model, where debugfs has one, prices the
	// classes (Apple M1: 0.90 / 4.84 mW per unit of capacity).
	m1 := planJSON(t, "--sysfs-root", filepath.Join(topoFixtures, "apple-m1"), "--policy", "powersaving", "--load", "bg=0.3@background.slice")
	if m1.ClassCostFrom != "the kernel's energy model (debugfs energy_model)" || len(m1.CPUClasses) != 2 || m1.CPUClasses[0].Cost < 0.18 || m1.CPUClasses[0].Cost > 0.19 {
		t.Errorf("apple-m1: %+v from %q", m1.CPUClasses, m1.ClassCostFrom)
	}
	// Homogeneous: nothing new.
	h := planJSON(t, "--sysfs-root", filepath.Join(topoFixtures, "strix-halo-16c"), "--policy", "powersaving", "--load", "bg=0.3@background.slice")
	if h.CPUClasses != nil || h.CPUClass != nil || h.ClassCostFrom != "" {
		t.Errorf("homogeneous machine reports classes: %+v", h)
	}
	if _, out, _ := runPlan(t, "--sysfs-root", filepath.Join(topoFixtures, "strix-halo-16c"), "--policy", "powersaving", "--load", "bg=0.3@background.slice"); strings.Contains(out, "[") || strings.Contains(out, "classes:") {
		t.Errorf("homogeneous text output changed:\n%s", out)
	}
}

// TestPlanHybridSVG: on a hybrid machine every core carries its class
// (data-class, the class's colour on its border, "core 8 · E") and the
// legend has a row per class; a homogeneous machine's picture has none of
// it (its bytes are checked by TestPlanSVGDocs).
func TestPlanHybridSVG(t *testing.T) {
	code, out, errs := runPlan(t, "--sysfs-root", filepath.Join(topoFixtures, "adl-p-i7-1260p"), "--policy", "powersaving", "--load", "bg=0.3@background.slice", "--svg", "-")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	cores := map[string]int{}
	for _, part := range strings.Split(out, `class="core `)[1:] {
		_, rest, _ := strings.Cut(part, `data-class="`)
		name, _, _ := strings.Cut(rest, `"`)
		cores[name]++
	}
	if !reflect.DeepEqual(cores, map[string]int{"P": 4, "E": 8}) {
		t.Errorf("cores by class %v, want 4 P and 8 E", cores)
	}
	for _, s := range []string{`>core 8 · E<`, `>core 0 · P<`, `stroke="#228833"`, `stroke="#aa3377"`,
		`data-class="E"`, `class E: cpus 8-15, capacity 580, energy per unit of work 0.35 (estimate)`} {
		if !strings.Contains(out, s) {
			t.Errorf("SVG lacks %q", s)
		}
	}
	_, out, _ = runPlan(t, "--sysfs-root", filepath.Join(topoFixtures, "strix-halo-16c"), "--policy", "powersaving", "--load", "bg=0.3@background.slice", "--svg", "-")
	if strings.Contains(out, "data-class") || strings.Contains(out, "cpu-class") {
		t.Error("homogeneous machine's SVG marks classes")
	}
}

// TestPlanHybridSVGDoc: docs/plan-adl-p-i7-1260p-powersaving.svg (in the
// README and docs/HYBRID-PLACEMENT.md) is what plan draws for the issue's
// i7-1260P example now; -update-svg rewrites it.
func TestPlanHybridSVGDoc(t *testing.T) {
	doc := filepath.Join("..", "..", "docs", "plan-adl-p-i7-1260p-powersaving.svg")
	code, got, errs := runPlan(t, "--sysfs-root", filepath.Join(topoFixtures, "adl-p-i7-1260p"), "--policy", "powersaving",
		"--load", "game=3.5:8@app.slice/focused,bg1=0.3@background.slice,svc=0.2@system.slice,svc2=0.5:2@system.slice", "--svg", "-")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	if *updateSVG {
		if err := os.WriteFile(doc, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	committed, err := os.ReadFile(doc)
	if err != nil {
		t.Fatalf("%v (write it with go test ./cmd/schedpolicyd -run TestPlanHybridSVGDoc -update-svg)", err)
	}
	if string(committed) != got {
		t.Errorf("%s is not what plan draws now; rewrite it with go test ./cmd/schedpolicyd -run TestPlanHybridSVGDoc -update-svg", doc)
	}
}

// TestPlanEnergyHomes (issue 35, item 2): on RK3588 with its mainline
// energy model a light background task's cheapest home is an A76 the
// focused app does not use (at 1200 MHz 0.444 mW per unit of work, below
// an A55 at any state), and the plan says so; on gs101 it is an A76 (mid)
// rather than an A55 at a high state; where the machine has no model of
// its own and the published models disagree, the reason says so and the
// class order's home stands when it costs least in the worst of them.
func TestPlanEnergyHomes(t *testing.T) {
	const load = "game=1.5:2@app.slice/focused,bg1=0.3@background.slice"
	for _, tt := range []struct{ machine, bg, why string }{
		{"rk3588-mainline", "6", "big cheaper than little by this machine's energy model: 0.456 vs 0.539 per unit of work"},
		{"gs101", "4", "mid cheaper than little by this machine's energy model: 0.206 vs 0.296 per unit of work"},
		{"adl-p-i7-1260p", "8", "models disagree: E by m1-measured/juno-r0/intel-hybrid-em, P by gs101-dt/rk3588-dt; E costs least in the worst (0.571 per unit of work)"},
	} {
		r := planJSON(t, "--sysfs-root", filepath.Join(topoFixtures, tt.machine), "--policy", "balance", "--load", load)
		if r.Workloads["bg1"] != tt.bg || r.Reasons["bg1"] != tt.why {
			t.Errorf("%s: bg1 on %s (%q), want %s (%q)", tt.machine, r.Workloads["bg1"], r.Reasons["bg1"], tt.bg, tt.why)
		}
	}
}

// TestProbeCostSources (issue 35, item 1): probe names where each class's
// costs come from: the kernel's energy model, one derived from cpufreq and
// a core type's published coefficients, or the class ratios.
func TestProbeCostSources(t *testing.T) {
	for _, tt := range []struct{ machine, want string }{
		{"rk3588-mainline", "               costs from the kernel's energy model, domain cpu4 (CPUs 4-5, 7 states, µW)\n"},
		{"lnl-ultra5-226v", "               costs from the kernel's energy model, domain cpu4 (CPUs 4, 4 states, artificial costs)\n"},
		{"rk3588", "               costs from derived: 8 frequencies (scaling_available_frequencies) × Cortex-A55's dynamic-power-coefficient 70 and voltages from gs101.dtsi (an estimate)\n"},
		{"strix-point-hx370", "               costs from class ratio 0.50, published figures (the weakest source; docs/HYBRID-PLACEMENT.md)\n"},
	} {
		var out, errb bytes.Buffer
		probeMain([]string{"--sysfs-root", filepath.Join(topoFixtures, tt.machine)}, &out, &errb)
		if !strings.Contains(out.String(), tt.want) {
			t.Errorf("%s: probe lacks %q:\n%s", tt.machine, tt.want, out.String())
		}
	}
}

// TestPlanSharedCoreNote: where the focused app's load covers every core
// (rk3588: a busy 8-thread game races to idle over the whole machine),
// background and service work is placed beside it, and plan says so for
// each such workload, where the balancer decides it (Plan.Reasons), in
// text and JSON; where a core is left (the same load on the i7-1260P),
// nothing is said of sharing.
func TestPlanSharedCoreNote(t *testing.T) {
	load := "game=3.5:8@app.slice/focused,bg1=0.3@background.slice,svc=0.2@system.slice,svc2=0.5:2@system.slice"
	const why = "shares the foreground's cores: no other CPU is allowed"
	r := planJSON(t, "--sysfs-root", filepath.Join(topoFixtures, "rk3588"), "--policy", "powersaving", "--load", load)
	if r.Workloads["game"] != "0-7" || r.Reasons["bg1"] != why || r.Reasons["svc"] != why || r.Reasons["svc2"] != why {
		t.Errorf("rk3588: game %s, reasons %q; want game 0-7 and %q for bg1, svc, svc2", r.Workloads["game"], r.Reasons, why)
	}
	if code, out, _ := runPlan(t, "--sysfs-root", filepath.Join(topoFixtures, "rk3588"), "--policy", "powersaving", "--load", load); code != 0 || !strings.Contains(out, "  bg1              background   powersaving  0  [little 0]  ("+why+")\n") {
		t.Errorf("rk3588 text lacks the reason:\n%s", out)
	}
	r = planJSON(t, "--sysfs-root", filepath.Join(topoFixtures, "adl-p-i7-1260p"), "--policy", "powersaving", "--load", load)
	for n, w := range r.Reasons {
		if strings.Contains(w, "foreground's cores") {
			t.Errorf("i7-1260P: %s: %q, want nothing of sharing", n, w)
		}
	}
}
