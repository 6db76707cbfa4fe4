package main

import (
	"fmt"
	"strings"
	"testing"
	"time"

	tea "charm.land/bubbletea/v2"
	"github.com/charmbracelet/x/ansi"
	"github.com/godbus/dbus/v5"
)

// The values below are shaped as godbus hands them to a client (arrays of
// structs as [][]any), with the D-Bus contract's signatures.

func topoVariant(cpus ...topCPU) dbus.Variant {
	var raw [][]any
	for _, c := range cpus {
		raw = append(raw, []any{uint32(c.CPU), uint32(c.Package), uint32(c.LLC), uint32(c.Core)})
	}
	return dbus.MakeVariantWithSignature(raw, dbus.ParseSignatureMust("a(uuuu)"))
}

func workloadsVariant(ws ...workload) dbus.Variant {
	raw := [][]any{}
	for _, w := range ws {
		raw = append(raw, []any{w.Name, w.Path, w.CPUs, w.Util, w.Policy})
	}
	return dbus.MakeVariantWithSignature(raw, dbus.ParseSignatureMust("a(sssds)"))
}

func energyVariant(es ...energyEntry) dbus.Variant {
	raw := [][]any{}
	for _, e := range es {
		raw = append(raw, []any{e.Policy, e.Source, e.Joules, e.Seconds})
	}
	return dbus.MakeVariantWithSignature(raw, dbus.ParseSignatureMust("a(ssdd)"))
}

// laptopCPUs is the seed's 4-core/8-thread laptop as the daemon publishes
// it: core c holds CPUs c and c+4.
func laptopCPUs() []topCPU {
	var out []topCPU
	for c := range 8 {
		out = append(out, topCPU{CPU: c, Core: c % 4})
	}
	return out
}

// laptopProps is what GetAll returns on the mock laptop on battery under
// powersaving.
func laptopProps() map[string]dbus.Variant {
	return map[string]dbus.Variant{
		"ActivePolicy":     dbus.MakeVariant("powersaving"),
		"PowerAware":       dbus.MakeVariant(uint32(1)),
		"PowerAwarePolicy": dbus.MakeVariant("powersaving"),
		"PowerSource":      dbus.MakeVariant("battery"),
		"OnBattery":        dbus.MakeVariant(true),
		"Boost":            dbus.MakeVariant("unsupported"),
		"Reason":           dbus.MakeVariant("power_aware=1 (automatic) and the machine runs on battery"),
		"Holds":            dbus.MakeVariantWithSignature([][]any{}, dbus.ParseSignatureMust("a(usss)")),
		"Topology":         topoVariant(laptopCPUs()...),
		"Workloads": workloadsVariant(
			workload{Name: "build", Path: "/cg/build", CPUs: "0,4", Util: 1.5},
			workload{Name: "logs", Path: "/cg/logs", CPUs: "0", Util: 0.1, Policy: ""},
			workload{Name: "video", Path: "/cg/video", CPUs: "0-7", Util: 0.8, Policy: "performance"},
		),
	}
}

func stateOf(props map[string]dbus.Variant) *topState {
	s := &topState{bus: "system"}
	s.setAll(props, time.Date(2026, 12, 1, 13, 5, 17, 0, time.Local))
	return s
}

// TestTopUnitLaptopScreen: the whole 80×24 screen of the seed's laptop
// with three workloads. CPU 0 holds build (1.5 CPUs over 2 → 0.75), logs
// (0.1 over 1) and video (0.8 over 8 → 0.1): 0.95; CPU 4 build and
// video: 0.85 (8.5 cells, rounded up); every other CPU video alone: 0.10.
func TestTopUnitLaptopScreen(t *testing.T) {
	lines, scroll := renderTop(stateOf(laptopProps()), 80, 24, 0)
	want := []string{
		"schedpolicyd top  policy: powersaving  power: battery  boost: unsupported",
		"why: power_aware=1 (automatic) and the machine runs on battery",
		"power_aware=1 (automatic)  power_aware_policy=powersaving  holds: none",
		"watts: – (this schedpolicyd does not measure energy)",
		"",
		"package 0  cpus 0-7  (one LLC)",
		" core 0 cpu0 [##########]  95% abc  cpu4 [#########.]  85% ac",
		" core 1 cpu1 [#.........]  10% c    cpu5 [#.........]  10% c",
		" core 2 cpu2 [#.........]  10% c    cpu6 [#.........]  10% c",
		" core 3 cpu3 [#.........]  10% c    cpu7 [#.........]  10% c",
		"",
		"workloads: 3",
		"   NAME      CPUS          UTIL  POLICY",
		" a build     0,4           1.50  -",
		" b logs      0             0.10  -",
		" c video     0-7           0.80  performance",
		"", "", "", "", "", "", "",
		"q quit  ↑↓ scroll  13:05:17  cpu% = workloads' use spread over their CPUs",
	}
	if scroll != 0 {
		t.Errorf("scroll = %d, want 0", scroll)
	}
	if got := strings.Join(lines, "\n"); got != strings.Join(want, "\n") {
		t.Errorf("screen:\n%s\nwant:\n%s", got, strings.Join(want, "\n"))
	}
	for i, l := range lines {
		if w := ansi.StringWidth(l); w > 80 {
			t.Errorf("line %d is %d cells wide: %q", i+1, w, l)
		}
	}
}

// TestTopUnitWatts: the measured power is the Energy totals of the current
// (policy, power source) as joules/seconds; "–" with why otherwise,
// including against a daemon without the energy properties.
func TestTopUnitWatts(t *testing.T) {
	entries := energyVariant(
		energyEntry{"performance", "battery", 5400, 100},
		energyEntry{"powersaving", "ac", 999, 10},
		energyEntry{"powersaving", "battery", 4000, 100},
	)
	tests := []struct {
		name  string
		props map[string]dbus.Variant
		want  string
	}{
		{"old daemon", nil, "– (this schedpolicyd does not measure energy)"},
		{"no counter", map[string]dbus.Variant{"EnergySource": dbus.MakeVariant("none"), "Energy": energyVariant()}, "– (no energy counter on this machine)"},
		{"measured", map[string]dbus.Variant{"EnergySource": dbus.MakeVariant("rapl"), "Energy": entries},
			"40.0 W avg, powersaving on battery (rapl: 4000 J in 100 s)"},
		{"battery counter", map[string]dbus.Variant{"EnergySource": dbus.MakeVariant("battery"), "Energy": entries},
			"40.0 W avg, powersaving on battery (battery: 4000 J in 100 s)"},
		{"other pairs only", map[string]dbus.Variant{"EnergySource": dbus.MakeVariant("rapl"), "Energy": energyVariant(energyEntry{"performance", "battery", 5400, 100})},
			"– (nothing measured yet for powersaving on battery)"},
		{"no time yet", map[string]dbus.Variant{"EnergySource": dbus.MakeVariant("rapl"), "Energy": energyVariant(energyEntry{"powersaving", "battery", 0, 0})},
			"– (nothing measured yet for powersaving on battery)"},
	}
	for _, tt := range tests {
		props := laptopProps()
		for k, v := range tt.props {
			props[k] = v
		}
		s := stateOf(props)
		if got := s.wattsText(); got != tt.want {
			t.Errorf("%s: %q, want %q", tt.name, got, tt.want)
		}
		if lines, _ := renderTop(s, 80, 24, 0); lines[3] != "watts: "+tt.want {
			t.Errorf("%s: line 4 %q", tt.name, lines[3])
		}
	}
	// A change of policy picks that policy's totals.
	props := laptopProps()
	props["EnergySource"], props["Energy"] = dbus.MakeVariant("rapl"), entries
	s := stateOf(props)
	s.merge(map[string]dbus.Variant{"ActivePolicy": dbus.MakeVariant("performance")}, nil, time.Now())
	if got, want := s.wattsText(), "54.0 W avg, performance on battery (rapl: 5400 J in 100 s)"; got != want {
		t.Errorf("after the switch: %q, want %q", got, want)
	}
}

// TestTopUnitServer: two packages of two LLCs of two cores of two threads
// (Intel numbering: sibling of c is c+8) show package and LLC lines with
// their cpulists; on a short screen the machine scrolls, clamped at both
// ends, and the footer says which lines are shown.
func TestTopUnitServer(t *testing.T) {
	var cpus []topCPU
	for c := range 16 {
		core := c % 8
		cpus = append(cpus, topCPU{CPU: c, Package: core / 4 * 4, LLC: core / 2 * 2, Core: core})
	}
	props := laptopProps()
	props["Topology"] = topoVariant(cpus...)
	props["Workloads"] = workloadsVariant(workload{Name: "db", CPUs: "4-5,12-13", Util: 2})
	s := stateOf(props)
	lines, _ := renderTop(s, 80, 0, 0)
	body := strings.Join(lines[5:], "\n")
	want := strings.Join([]string{
		"package 0  cpus 0-3,8-11  (2 LLCs)",
		" llc 0  cpus 0-1,8-9",
		" core 0  cpu0  [..........]   0% -  cpu8  [..........]   0% -",
		" core 1  cpu1  [..........]   0% -  cpu9  [..........]   0% -",
		" llc 1  cpus 2-3,10-11",
		" core 2  cpu2  [..........]   0% -  cpu10 [..........]   0% -",
		" core 3  cpu3  [..........]   0% -  cpu11 [..........]   0% -",
		"package 1  cpus 4-7,12-15  (2 LLCs)",
		" llc 0  cpus 4-5,12-13",
		" core 4  cpu4  [#####.....]  50% a  cpu12 [#####.....]  50% a",
		" core 5  cpu5  [#####.....]  50% a  cpu13 [#####.....]  50% a",
		" llc 1  cpus 6-7,14-15",
		" core 6  cpu6  [..........]   0% -  cpu14 [..........]   0% -",
		" core 7  cpu7  [..........]   0% -  cpu15 [..........]   0% -",
		"",
		"workloads: 1",
		"   NAME      CPUS          UTIL  POLICY",
		" a db        4-5,12-13     2.00  -",
		"",
		"cpu% = workloads' use spread over their CPUs",
	}, "\n")
	if body != want {
		t.Errorf("snapshot body:\n%s\nwant:\n%s", body, want)
	}

	// 12 rows: 5 header lines, 6 of the machine's 18, the footer.
	lines, scroll := renderTop(s, 80, 12, 3)
	if scroll != 3 || len(lines) != 12 || lines[5] != " core 1  cpu1  [..........]   0% -  cpu9  [..........]   0% -" ||
		lines[11] != "q quit  ↑↓ scroll  lines 4-9/18  cpu% = workloads' use spread over their CPUs" {
		t.Errorf("scrolled by 3:\n%s", strings.Join(lines, "\n"))
	}
	if _, scroll := renderTop(s, 80, 12, 100); scroll != 12 {
		t.Errorf("scroll past the end = %d, want 12 (the last 6 of 18 lines)", scroll)
	}
	if _, scroll := renderTop(s, 80, 12, -5); scroll != 0 {
		t.Errorf("scroll before the start = %d, want 0", scroll)
	}
}

// TestTopUnitOldDaemon: without a Topology property the CPUs the
// workloads hold are shown, each as its own core, and top says why.
func TestTopUnitOldDaemon(t *testing.T) {
	props := laptopProps()
	delete(props, "Topology")
	props["Workloads"] = workloadsVariant(workload{Name: "build", CPUs: "2-3", Util: 1})
	lines, _ := renderTop(stateOf(props), 80, 0, 0)
	want := []string{
		"CPUs the workloads hold (this schedpolicyd publishes no Topology)",
		"package 0  cpus 2-3  (one LLC)",
		" core 2 cpu2 [#####.....]  50% a",
		" core 3 cpu3 [#####.....]  50% a",
	}
	if got := strings.Join(lines[5:9], "\n"); got != strings.Join(want, "\n") {
		t.Errorf("got:\n%s\nwant:\n%s", got, strings.Join(want, "\n"))
	}
}

// TestTopUnitHostileNames: a workload name cannot move the cursor, and a
// long one is cut to its column.
func TestTopUnitHostileNames(t *testing.T) {
	props := laptopProps()
	props["Workloads"] = workloadsVariant(
		workload{Name: "evil\x1b[2J\r", CPUs: "0"},
		workload{Name: strings.Repeat("x", 40), CPUs: "1"},
	)
	lines, _ := renderTop(stateOf(props), 80, 24, 0)
	screen := strings.Join(lines, "\n")
	if strings.ContainsAny(screen, "\x1b\r") {
		t.Errorf("a control character reached the screen:\n%q", screen)
	}
	for _, want := range []string{` a evil\x1b[2J\r`, " b " + strings.Repeat("x", 27) + "…  1 "} {
		if !strings.Contains(screen, want) {
			t.Errorf("screen lacks %q:\n%s", want, screen)
		}
	}
}

// TestTopUnitModel drives the Bubble Tea model as the program does: the
// feed's messages change the screen, the daemon leaving and coming back
// is shown, q quits, a lost bus ends with its error.
func TestTopUnitModel(t *testing.T) {
	m := &topModel{s: topState{bus: "unix:path=/x"}, now: func() time.Time { return time.Date(2026, 1, 2, 3, 4, 5, 0, time.Local) }}
	screen := func() string { return m.View().Content }
	m.Update(tea.WindowSizeMsg{Width: 80, Height: 24})
	m.Update(topGoneMsg{})
	if got := screen(); !strings.HasPrefix(got, "schedpolicyd top  schedpolicyd is not running on the bus at unix:path=/x\nwaiting for it to join the bus\n") {
		t.Errorf("before the daemon:\n%s", got)
	}
	m.Update(topAllMsg{laptopProps()})
	if got := screen(); !strings.HasPrefix(got, "schedpolicyd top  policy: powersaving  power: battery") || strings.Count(got, "\n") != 23 {
		t.Errorf("after GetAll (%d lines):\n%s", strings.Count(got, "\n")+1, got)
	}
	m.Update(topChangedMsg{changed: map[string]dbus.Variant{
		"ActivePolicy": dbus.MakeVariant("performance"),
		"PowerAware":   dbus.MakeVariant(uint32(0)),
		"Reason":       dbus.MakeVariant("power_aware=0: always performance"),
	}})
	got := screen()
	for _, want := range []string{"policy: performance  power: battery", "\nwhy: power_aware=0: always performance\n", "power_aware=0 (always performance)", " 03:04:05 "} {
		if !strings.Contains(got, want) {
			t.Errorf("after PropertiesChanged the screen lacks %q:\n%s", want, got)
		}
	}
	// An invalidated property that could not be read again is dropped.
	m.Update(topChangedMsg{invalidated: []string{"Topology"}})
	if got := screen(); !strings.Contains(got, "publishes no Topology") {
		t.Errorf("after Topology was invalidated:\n%s", got)
	}
	m.Update(topGoneMsg{})
	if got := screen(); !strings.Contains(got, "schedpolicyd is not running") || strings.Contains(got, "workloads:") {
		t.Errorf("after the daemon left:\n%s", got)
	}
	if _, cmd := m.Update(tea.KeyPressMsg{Code: 'j', Text: "j"}); cmd != nil {
		t.Errorf("j returned a command")
	}
	if _, cmd := m.Update(tea.KeyPressMsg{Code: 'q', Text: "q"}); cmd == nil || fmt.Sprintf("%T", cmd()) != "tea.QuitMsg" {
		t.Errorf("q does not quit")
	}
	lost := &cliError{exitFailure, "lost the connection"}
	if _, cmd := m.Update(topLostMsg{lost}); cmd == nil || m.err != lost {
		t.Errorf("a lost bus does not end top with its error")
	}
}

func TestTopUnitCPUList(t *testing.T) {
	for in, want := range map[string]string{"": "", "0": "0", "0-3,8": "0-3,8", "5,1-2,2": "1-2,5", "3-1": "", "x,4": "4", "0-7": "0-7"} {
		if got := formatCPUList(cpuList(in)); got != want {
			t.Errorf("%q → %q, want %q", in, got, want)
		}
	}
}

func classesVariant(cs ...topClass) dbus.Variant {
	raw := [][]any{}
	for _, c := range cs {
		raw = append(raw, []any{c.Name, formatCPUList(c.CPUs), uint32(c.Capacity)})
	}
	return dbus.MakeVariantWithSignature(raw, dbus.ParseSignatureMust("a(ssu)"))
}

// TestTopUnitHybrid: on a hybrid machine (a Lunar Lake: 4 P-cores, 4 LP
// E-cores, one LLC each) top lists the classes under the first package
// and ends each core's label with its class; one class ("all") marks
// nothing, as on the laptop screen above.
func TestTopUnitHybrid(t *testing.T) {
	props := laptopProps()
	var cpus []topCPU
	for c := range 8 {
		cpus = append(cpus, topCPU{CPU: c, Core: c, LLC: c / 4 * 4})
	}
	props["Topology"] = topoVariant(cpus...)
	props["CPUClasses"] = classesVariant(topClass{"LPE", []int{4, 5, 6, 7}, 689}, topClass{"P", []int{0, 1, 2, 3}, 1024})
	props["Workloads"] = workloadsVariant(workload{Name: "indexer", Path: "/cg/indexer", CPUs: "4", Util: 0.3})
	lines, _ := renderTop(stateOf(props), 100, 0, 0)
	want := []string{
		"package 0  cpus 0-7  (2 LLCs)",
		" classes, most efficient first: LPE 4-7 (capacity 689), P 0-3 (capacity 1024)",
		" llc 0  cpus 0-3",
		" core 0 P   cpu0 [..........]   0% -",
		" llc 1  cpus 4-7",
		" core 4 LPE cpu4 [###.......]  30% a",
		" core 5 LPE cpu5 [..........]   0% -",
	}
	got := strings.Join(lines, "\n")
	for _, w := range want {
		if !strings.Contains(got, w+"\n") {
			t.Errorf("screen lacks %q:\n%s", w, got)
		}
	}
	props["CPUClasses"] = classesVariant(topClass{"all", []int{0, 1, 2, 3, 4, 5, 6, 7}, 1024})
	lines, _ = renderTop(stateOf(props), 100, 0, 0)
	if got := strings.Join(lines, "\n"); strings.Contains(got, "classes") || !strings.Contains(got, " core 4 cpu4 [###.......]  30% a\n") {
		t.Errorf("one class marked:\n%s", got)
	}
}

// TestTopUnitCoreNames: cores are named by their lowest CPU, as the
// Topology property, plan, probe and plan --svg name them — on a machine
// whose SMT siblings are neighbours (cores 0-1 and 2-3: cores 0 and 2),
// not numbered 0, 1 in order.
func TestTopUnitCoreNames(t *testing.T) {
	props := laptopProps()
	props["Topology"] = topoVariant(topCPU{CPU: 0, Core: 0}, topCPU{CPU: 1, Core: 0}, topCPU{CPU: 2, Core: 2}, topCPU{CPU: 3, Core: 2})
	props["Workloads"] = workloadsVariant()
	lines, _ := renderTop(stateOf(props), 80, 0, 0)
	got := strings.Join(lines, "\n")
	for _, want := range []string{"\n core 0 cpu0 [", "\n core 2 cpu2 ["} {
		if !strings.Contains(got, want) {
			t.Errorf("top lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, " core 1 ") {
		t.Errorf("top numbers cores in order:\n%s", got)
	}
}
