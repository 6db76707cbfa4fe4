package daemon

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/schedpolicyd/schedpolicyd/acpi"
	"github.com/schedpolicyd/schedpolicyd/daemon/energy"
	"github.com/schedpolicyd/schedpolicyd/daemon/snapshot"
	"github.com/schedpolicyd/schedpolicyd/internal/testutil"
	"github.com/schedpolicyd/schedpolicyd/policy"
)

var metricsSnap = snapshot.Snapshot{
	Policy: policy.Powersaving, Knob: policy.Knob{PowerAware: 1, PowerAwarePolicy: policy.Powersaving},
	PowerSource: acpi.Battery, Boost: "1",
	Workloads: []WorkloadStatus{
		{Name: "build", CPUs: "0-3", Util: 2.34567},
		{Name: "idle", CPUs: "0", Util: 0},
	},
	EnergySource: snapshot.EnergySourceRAPL,
	Energy: []snapshot.EnergyTotal{
		{Policy: policy.Performance, PowerSource: acpi.AC, Joules: 54000.5, Seconds: 3600},
		{Policy: policy.Powersaving, PowerSource: acpi.Battery, Joules: 90, Seconds: 10.25},
	},
}

// TestRenderMetrics: the whole file for a known state, and promtool's
// verdict on it.
func TestRenderMetrics(t *testing.T) {
	got := string(renderMetrics(metricsInput{
		snap: &metricsSnap, stats: Stats{Decisions: 12, CPUSetWrites: 7, Errors: 1},
		zones:   []energy.Zone{{Zone: "intel-rapl:0", Name: "package-0", Joules: 5}, {Zone: "intel-rapl:0:0", Name: "core", Joules: 1.25}},
		started: time.Unix(1796131060, 0),
	}))
	want := `# HELP schedpolicyd_policy The balance policy in force: 1 for it, 0 for the others.
# TYPE schedpolicyd_policy gauge
schedpolicyd_policy{policy="performance"} 0
schedpolicyd_policy{policy="balance"} 0
schedpolicyd_policy{policy="powersaving"} 1
# HELP schedpolicyd_power_aware The power_aware knob: 0 always performance, 1 automatic, 2 always power-aware.
# TYPE schedpolicyd_power_aware gauge
schedpolicyd_power_aware 1
# HELP schedpolicyd_power_source The power source: 1 for the one in force (ac, battery or unknown), 0 for the others.
# TYPE schedpolicyd_power_source gauge
schedpolicyd_power_source{power_source="ac"} 0
schedpolicyd_power_source{power_source="battery"} 1
schedpolicyd_power_source{power_source="unknown"} 0
# HELP schedpolicyd_boost cpufreq boost: 1 on, 0 off (absent where the machine has no boost control).
# TYPE schedpolicyd_boost gauge
schedpolicyd_boost 1
# HELP schedpolicyd_workloads Managed workloads.
# TYPE schedpolicyd_workloads gauge
schedpolicyd_workloads 2
# HELP schedpolicyd_workload_cpus CPUs in the workload's cpuset.
# TYPE schedpolicyd_workload_cpus gauge
schedpolicyd_workload_cpus{workload="build"} 4
schedpolicyd_workload_cpus{workload="idle"} 1
# HELP schedpolicyd_workload_cpuset_info The workload's cpuset as a cpulist, in the cpus label (the value is 1).
# TYPE schedpolicyd_workload_cpuset_info gauge
schedpolicyd_workload_cpuset_info{workload="build",cpus="0-3"} 1
schedpolicyd_workload_cpuset_info{workload="idle",cpus="0"} 1
# HELP schedpolicyd_workload_utilisation_cpus The workload's decayed CPU utilisation, in CPUs (1 = one CPU busy).
# TYPE schedpolicyd_workload_utilisation_cpus gauge
schedpolicyd_workload_utilisation_cpus{workload="build"} 2.346
schedpolicyd_workload_utilisation_cpus{workload="idle"} 0
# HELP schedpolicyd_decisions_total Times the policy was derived and a plan made since the daemon started.
# TYPE schedpolicyd_decisions_total counter
schedpolicyd_decisions_total 12
# HELP schedpolicyd_cpuset_writes_total cpuset.cpus writes that succeeded since the daemon started.
# TYPE schedpolicyd_cpuset_writes_total counter
schedpolicyd_cpuset_writes_total 7
# HELP schedpolicyd_errors_total cpuset writes the kernel refused and failed tree remounts since the daemon started.
# TYPE schedpolicyd_errors_total counter
schedpolicyd_errors_total 1
# HELP schedpolicyd_energy_source What measures energy: 1 for rapl (the packages), battery (the whole machine, on battery only) or none.
# TYPE schedpolicyd_energy_source gauge
schedpolicyd_energy_source{energy_source="rapl"} 1
schedpolicyd_energy_source{energy_source="battery"} 0
schedpolicyd_energy_source{energy_source="none"} 0
# HELP schedpolicyd_energy_joules_total Measured energy per policy and power source in force, in joules, across restarts; updated when a segment closes.
# TYPE schedpolicyd_energy_joules_total counter
schedpolicyd_energy_joules_total{policy="performance",power_source="ac"} 54000.5
schedpolicyd_energy_joules_total{policy="powersaving",power_source="battery"} 90
# HELP schedpolicyd_energy_seconds_total The time the energy was measured over, per policy and power source, in seconds, across restarts.
# TYPE schedpolicyd_energy_seconds_total counter
schedpolicyd_energy_seconds_total{policy="performance",power_source="ac"} 3600
schedpolicyd_energy_seconds_total{policy="powersaving",power_source="battery"} 10.25
# HELP schedpolicyd_rapl_zone_joules_total Energy each RAPL zone counted since the daemon started, in joules, wraps corrected; read at the same moments as the totals.
# TYPE schedpolicyd_rapl_zone_joules_total counter
schedpolicyd_rapl_zone_joules_total{zone="intel-rapl:0",name="package-0"} 5
schedpolicyd_rapl_zone_joules_total{zone="intel-rapl:0:0",name="core"} 1.25
# HELP schedpolicyd_start_time_seconds When the daemon started, in seconds since the Unix epoch.
# TYPE schedpolicyd_start_time_seconds gauge
schedpolicyd_start_time_seconds 1.79613106e+09
`
	if got != want {
		t.Errorf("renderMetrics:\n%s\nwant:\n%s", got, want)
	}
	if out, ok := testutil.CheckMetrics(t, []byte(got)); !ok {
		t.Errorf("promtool check metrics refused it:\n%s", out)
	}
}

// TestRenderMetricsHostileNames: workload names are directory names
// anyone who may mkdir in the managed parent chooses; whatever they hold,
// the file parses and no series repeats.
func TestRenderMetricsHostileNames(t *testing.T) {
	snap := metricsSnap
	snap.Boost, snap.Energy, snap.EnergySource = "unsupported", nil, ""
	snap.Workloads = nil
	for _, n := range []string{`a"b`, `back\slash`, "new\nline", "tab\there", "ünïcödé ☃", "bad\xffutf8", `"bad\xffutf8"`, "", "{}=,"} {
		snap.Workloads = append(snap.Workloads, WorkloadStatus{Name: n, CPUs: "0-1"})
	}
	snap.Workloads = append(snap.Workloads, WorkloadStatus{Name: "bad\xffutf8", CPUs: "2"}) // the same label twice
	b := renderMetrics(metricsInput{snap: &snap, started: time.Unix(1, 0)})
	out, ok := testutil.CheckMetrics(t, b)
	if !ok {
		t.Errorf("promtool check metrics refused it:\n%s\n%s", out, b)
	}
	for _, want := range []string{`workload="a\"b"`, `workload="back\\slash"`, `workload="new\nline"`, "workload=\"tab\there\"", `workload="\"bad\\xffutf8\""`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("no %s in\n%s", want, b)
		}
	}
	if strings.Contains(string(b), "schedpolicyd_boost ") || strings.Count(string(b), `"\"bad\\xffutf8\""`) != 3 {
		t.Errorf("boost shown though unsupported, or a label repeated:\n%s", b)
	}
}

// TestMetricsTextfile: the daemon keeps the file current, rewrites it
// only when a value changed (here nothing samples: no cgroups), leaves no
// temporary file, moves it on reload and removes it on a clean stop.
func TestMetricsTextfile(t *testing.T) {
	m := newMockLaptop(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "schedpolicyd.prom")
	d, cancel, done := m.startCfg(t, func(c *Config) { c.CgroupRoot = ""; c.MetricsTextfile = path })
	read := func() string { return testutil.Read(t, path) }
	if s := read(); !strings.Contains(s, `schedpolicyd_policy{policy="performance"} 1`) || !strings.Contains(s, `schedpolicyd_power_source{power_source="ac"} 1`) {
		t.Fatalf("at start:\n%s", s)
	}
	if out, ok := testutil.CheckMetrics(t, []byte(read())); !ok {
		t.Errorf("promtool check metrics:\n%s", out)
	}
	ino := func() uint64 {
		st, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		return inodeOf(st)
	}
	first := ino()
	time.Sleep(300 * time.Millisecond)
	// A publication that changes no value (a refresh with nothing to
	// measure) does not rewrite it either.
	controller{d}.RefreshEnergy(context.Background())
	if ino() != first {
		t.Errorf("the file was rewritten although nothing changed")
	}

	// A change: the knob, through the tree.
	knob := filepath.Join(m.tree, TreePrefix, "current_sched_policy")
	if err := os.WriteFile(knob, []byte("powersaving\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "powersaving in the file", func() (bool, string) {
		s := read()
		return strings.Contains(s, `schedpolicyd_policy{policy="powersaving"} 1`) && strings.Contains(s, "schedpolicyd_power_aware 2"), s
	})
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Errorf("%d entries in the directory, want only the file (no temporary left)", len(entries))
	}

	// Reload to another path: the old file goes, the new one comes.
	path2 := filepath.Join(dir, "other.prom")
	cfg := d.cfg
	cfg.MetricsTextfile = path2
	if err := d.Reload(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Errorf("old file after reload: %v", err)
	}
	if s := testutil.Read(t, path2); !strings.Contains(s, `schedpolicyd_policy{policy="powersaving"} 1`) {
		t.Errorf("new file after reload:\n%s", s)
	}
	cancel()
	<-done
	if _, err := os.Stat(path2); !os.IsNotExist(err) {
		t.Errorf("file after a clean stop: %v, want it removed", err)
	}
}

// TestMetricsTextfileDirMissing: a directory that is not there (the
// collector not installed yet) costs a warning, not the daemon; the file
// comes with the first change after the directory does.
func TestMetricsTextfileDirMissing(t *testing.T) {
	m := newMockLaptop(t)
	dir := filepath.Join(t.TempDir(), "node-exporter")
	path := filepath.Join(dir, "schedpolicyd.prom")
	_, _, _ = m.startCfg(t, func(c *Config) { c.CgroupRoot = ""; c.MetricsTextfile = path })
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Fatalf("file without its directory: %v", err)
	}
	os.Mkdir(dir, 0o755)
	if err := os.WriteFile(filepath.Join(m.tree, TreePrefix, "power_aware"), []byte("0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "the file once its directory exists", func() (bool, string) {
		b, err := os.ReadFile(path)
		return err == nil && strings.Contains(string(b), "schedpolicyd_power_aware 0"), string(b)
	})
}

func TestCheckMetricsTextfile(t *testing.T) {
	for p, ok := range map[string]bool{
		"": true, "/var/lib/prometheus/node-exporter/schedpolicyd.prom": true,
		"relative.prom": false, "/var/lib/x/schedpolicyd.txt": false, "/var/lib/x/.prom": false,
		"/var/lib/../x/a.prom": false, "/var/lib/x/": false,
	} {
		if err := CheckMetricsTextfile(p); (err == nil) != ok {
			t.Errorf("CheckMetricsTextfile(%q) = %v, want ok %v", p, err, ok)
		}
	}
	if _, err := New(Config{SysfsRoot: t.TempDir(), MetricsTextfile: "metrics.prom"}); err == nil || !strings.Contains(err.Error(), ".prom") {
		t.Errorf("New with a relative metrics path: %v", err)
	}
}

func inodeOf(fi os.FileInfo) uint64 { return fi.Sys().(*syscall.Stat_t).Ino }
