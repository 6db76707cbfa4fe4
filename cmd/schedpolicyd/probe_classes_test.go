package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/godbus/dbus/v5"

	"github.com/schedpolicyd/schedpolicyd/daemon/bus"
	"github.com/schedpolicyd/schedpolicyd/internal/testutil"
)

func runProbe(t *testing.T, args ...string) (string, probeReport) {
	t.Helper()
	conf := filepath.Join(t.TempDir(), "empty.conf")
	if err := os.WriteFile(conf, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	base := []string{"--state-dir", t.TempDir(), "--config", conf}
	if !slices.Contains(args, "--bus") {
		base = append(base, "--bus", "none")
	}
	var out, errb bytes.Buffer
	if code := probeMain(append(base, args...), &out, &errb); code != 0 {
		t.Fatalf("probe %v: exit %d: %s", args, code, errb.String())
	}
	var jout, jerr bytes.Buffer
	if code := probeMain(append(append(base, args...), "--json"), &jout, &jerr); code != 0 {
		t.Fatalf("probe --json %v: exit %d: %s", args, code, jerr.String())
	}
	var r probeReport
	if err := json.Unmarshal(jout.Bytes(), &r); err != nil {
		t.Fatal(err)
	}
	return out.String(), r
}

// TestProbeCPUClasses: probe --json's cpu_classes, most efficient first,
// with capacity and evidence; the text names each class and its
// evidence; a homogeneous machine has one class.
func TestProbeCPUClasses(t *testing.T) {
	text, r := runProbe(t, "--sysfs-root", filepath.Join(topoFixtures, "mtl-u-ultra7-164u"))
	want := []probeClass{
		{Name: "LPE", CPUs: "12-13", Capacity: 358, CapacityFrom: "highest_perf (derived)", Cores: 2, Evidence: "in devices/cpu_atom/cpus without a level-3 cache",
			CostFrom: "class ratio 0.25, published figures (the weakest source; docs/HYBRID-PLACEMENT.md)"},
		{Name: "E", CPUs: "4-11", Capacity: 648, CapacityFrom: "highest_perf (derived)", Cores: 8, Evidence: "in devices/cpu_atom/cpus with a level-3 cache",
			CostFrom: "class ratio 0.35, published figures (the weakest source; docs/HYBRID-PLACEMENT.md)"},
		{Name: "P", CPUs: "0-3", Capacity: 1024, CapacityFrom: "highest_perf (derived)", Cores: 2, Evidence: "in devices/cpu_core/cpus",
			CostFrom: "class ratio 1.00, published figures (the weakest source; docs/HYBRID-PLACEMENT.md)"},
	}
	if !reflect.DeepEqual(r.CPUClasses, want) || r.CPUClassRule != "pmu" {
		t.Errorf("cpu_classes %+v (%s)\nwant %+v", r.CPUClasses, r.CPUClassRule, want)
	}
	for _, line := range []string{
		"  classes:     3 by pmu, most efficient first: LPE 12-13, E 4-11, P 0-3\n",
		"  class LPE:   12-13, 2 cores, capacity 358 (highest_perf (derived)): in devices/cpu_atom/cpus without a level-3 cache\n",
		"  class P:     0-3, 2 cores, capacity 1024 (highest_perf (derived)): in devices/cpu_core/cpus\n",
	} {
		if !strings.Contains(text, line) {
			t.Errorf("probe text lacks %q:\n%s", line, text)
		}
	}
	_, r = runProbe(t, "--sysfs-root", filepath.Join(topoFixtures, "strix-point-hx370"))
	if len(r.CPUClasses) != 2 || r.CPUClasses[0].Name != "E" || r.CPUClasses[0].CPUs != "4-11,16-23" || r.CPUClasses[1].CPUs != "0-3,12-15" || r.CPUClassRule != "l3+max_freq" {
		t.Errorf("strix point: %+v (%s)", r.CPUClasses, r.CPUClassRule)
	}
	text, r = runProbe(t, "--sysfs-root", filepath.Join(topoFixtures, "laptop-4c8t"))
	if len(r.CPUClasses) != 1 || r.CPUClasses[0].Name != "all" || r.CPUClasses[0].CPUs != "0-7" || r.CPUClassRule != "homogeneous" ||
		!strings.Contains(text, "  classes:     one, all 0-7 (no sysfs rung separates the CPUs: homogeneous)\n") {
		t.Errorf("homogeneous: %+v\n%s", r.CPUClasses, text)
	}
}

// TestProbeIntelLpmd: probe asks the bus who owns intel-lpmd's name
// (starting nothing) and, on a machine with LP E-cores, says their
// confinement is left to it.
func TestProbeIntelLpmd(t *testing.T) {
	addr := testutil.StartBus(t, testutil.BusOptions{AnyUser: true}).Addr
	root := filepath.Join(topoFixtures, "mtl-u-ultra7-164u")
	text, r := runProbe(t, "--sysfs-root", root, "--bus", addr)
	if r.IntelLpmd.State != "not running" || r.IntelLpmd.StepAside != "" || !strings.Contains(text, "  intel-lpmd:  not running\n") {
		t.Errorf("without lpmd: %+v\n%s", r.IntelLpmd, text)
	}
	conn, err := dbus.Connect(addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if rep, err := conn.RequestName(bus.LpmdName, dbus.NameFlagDoNotQueue); err != nil || rep != dbus.RequestNameReplyPrimaryOwner {
		t.Fatalf("cannot own %s: %v %v", bus.LpmdName, rep, err)
	}
	text, r = runProbe(t, "--sysfs-root", root, "--bus", addr)
	owner := conn.Names()[0]
	want := "intel-lpmd (org.freedesktop.intel_lpmd " + owner + ") confines work to the LP E-cores 12-13 itself; schedpolicyd packs nothing onto them"
	if r.IntelLpmd.State != "running" || r.IntelLpmd.Owner != owner || r.IntelLpmd.StepAside != want ||
		!strings.Contains(text, "  steps aside: "+want+"\n") {
		t.Errorf("with lpmd: %+v\n%s", r.IntelLpmd, text)
	}
	// No LP E-cores (an i7-1260P): nothing to leave to it.
	if _, r = runProbe(t, "--sysfs-root", filepath.Join(topoFixtures, "adl-p-i7-1260p"), "--bus", addr); r.IntelLpmd.State != "running" || r.IntelLpmd.StepAside != "" {
		t.Errorf("no LPE: %+v", r.IntelLpmd)
	}
}

// TestProbeIntelLpmdQuietWithoutLPE: on a machine without LP E-cores probe
// says nothing of an intel-lpmd that does not run.
func TestProbeIntelLpmdQuietWithoutLPE(t *testing.T) {
	addr := testutil.StartBus(t, testutil.BusOptions{AnyUser: true}).Addr
	text, r := runProbe(t, "--sysfs-root", filepath.Join(topoFixtures, "strix-point-hx370"), "--bus", addr)
	if r.IntelLpmd.State != "not running" || strings.Contains(text, "intel-lpmd") {
		t.Errorf("%+v\n%s", r.IntelLpmd, text)
	}
}
