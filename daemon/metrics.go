package daemon

// The node_exporter textfile-collector file: the
// daemon's state as Prometheus metrics in the text exposition format
// (https://prometheus.io/docs/instrumenting/exposition_formats/), written
// to Config.MetricsTextfile whenever a published value changed, never on a
// timer, and never over a socket: node_exporter, which runs on every node
// of a fleet already, serves it (docs/FLEET.md).
//
// The format is written here rather than with client_golang: that library
// and the protobuf runtime it needs would add megabytes to the binary and
// to the resident memory of every start (docs/BENCHMARKS.md), for a few
// dozen lines of text. The tests check the output with the reference
// parser, promtool check metrics.

import (
	"bytes"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/sirupsen/logrus"

	"github.com/schedpolicyd/schedpolicyd/acpi"
	"github.com/schedpolicyd/schedpolicyd/daemon/energy"
	"github.com/schedpolicyd/schedpolicyd/daemon/snapshot"
	"github.com/schedpolicyd/schedpolicyd/policy"
	"github.com/schedpolicyd/schedpolicyd/sysfs"
)

// CheckMetricsTextfile validates Config.MetricsTextfile: "" (off) or an
// absolute, clean path whose name ends in ".prom", the only files the
// textfile collector reads. The error names the value.
func CheckMetricsTextfile(p string) error {
	if p == "" {
		return nil
	}
	if !filepath.IsAbs(p) || filepath.Clean(p) != p || !strings.HasSuffix(p, ".prom") || filepath.Base(p) == ".prom" {
		return fmt.Errorf("metrics textfile %q: want an absolute path to a file ending in .prom (node_exporter's textfile collector reads only *.prom), or \"\" for none", p)
	}
	return nil
}

// metricsFile is the textfile the loop keeps current; the loop owns it.
type metricsFile struct {
	path    string
	log     logrus.FieldLogger
	last    []byte // what the file holds, as last written
	failing string // the error of the last write, said once; "" after a success
}

// update writes b to the file when it differs from what was written last:
// a temporary file in the same directory (named so the collector skips
// it: it does not end in .prom), then a rename over the old one, so a
// scrape sees the old file or the new, never half of one. A failure is
// logged once until a write succeeds, and retried at the next change.
func (m *metricsFile) update(b []byte) {
	if m == nil || m.path == "" || bytes.Equal(b, m.last) {
		return
	}
	if err := writeFileAtomic(m.path, b); err != nil {
		if msg := err.Error(); msg != m.failing {
			m.failing = msg
			m.log.WithError(err).Warn("cannot write the metrics textfile; retrying at the next change")
		}
		return
	}
	if m.failing != "" {
		m.log.WithField("file", m.path).Info("metrics textfile written again")
	}
	m.failing, m.last = "", b
}

// remove deletes the file (a clean stop, or another path on reload), so
// that metrics nobody keeps current do not look current.
func (m *metricsFile) remove() {
	if m == nil || m.path == "" || m.last == nil {
		return
	}
	if err := os.Remove(m.path); err != nil && !os.IsNotExist(err) {
		m.log.WithError(err).Warn("cannot remove the metrics textfile")
	}
	m.last = nil
}

// writeFileAtomic replaces path with b through a temporary file in the
// same directory (mode 0644) and a rename. Not fsynced: the file is
// rewritten at the next change and at every start. The directory must
// exist.
func writeFileAtomic(path string, b []byte) error {
	dir, base := filepath.Split(path)
	f, err := os.CreateTemp(dir, "."+base+".*.tmp")
	if err != nil {
		return err
	}
	tmp := f.Name()
	_, err = f.Write(b)
	if err == nil {
		err = f.Chmod(0o644)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// metricsInput is everything the file shows.
type metricsInput struct {
	snap    *snapshot.Snapshot
	stats   Stats
	zones   []energy.Zone
	started time.Time
}

// renderMetrics formats in as the text exposition format. Families without
// samples are left out. Workload names are label values: escaped as the
// format says (\\, \", \n); a name that is not UTF-8 is shown Go-quoted,
// and a later workload whose label would repeat an earlier one's is left
// out, so the file always parses.
func renderMetrics(in metricsInput) []byte {
	var m metricsWriter
	m.state(in.snap)
	m.workloads(in.snap.Workloads)
	m.counters(in.stats)
	m.energy(in.snap, in.zones)
	m.family("schedpolicyd_start_time_seconds", "gauge", "When the daemon started, in seconds since the Unix epoch.")
	m.sample("schedpolicyd_start_time_seconds", float64(in.started.Unix()))
	return m.b.Bytes()
}

// metricsWriter writes families and samples of the text exposition format.
type metricsWriter struct{ b bytes.Buffer }

func (m *metricsWriter) family(name, typ, help string) {
	fmt.Fprintf(&m.b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, typ)
}

// sample writes one sample; labels are name, value pairs.
func (m *metricsWriter) sample(name string, v float64, labels ...string) {
	m.b.WriteString(name)
	if len(labels) > 0 {
		m.b.WriteByte('{')
		for i := 0; i < len(labels); i += 2 {
			if i > 0 {
				m.b.WriteByte(',')
			}
			m.b.WriteString(labels[i] + `="` + escapeLabel(labels[i+1]) + `"`)
		}
		m.b.WriteByte('}')
	}
	m.b.WriteString(" " + formatValue(v) + "\n")
}

func one(ok bool) float64 {
	if ok {
		return 1
	}
	return 0
}

// state: the policy, the knob, the power source and boost.
func (m *metricsWriter) state(s *snapshot.Snapshot) {
	m.family("schedpolicyd_policy", "gauge", "The balance policy in force: 1 for it, 0 for the others.")
	for _, p := range policy.AvailablePolicies {
		m.sample("schedpolicyd_policy", one(s.Policy == p), "policy", string(p))
	}
	m.family("schedpolicyd_power_aware", "gauge", "The power_aware knob: 0 always performance, 1 automatic, 2 always power-aware.")
	m.sample("schedpolicyd_power_aware", float64(s.Knob.PowerAware))
	m.family("schedpolicyd_power_source", "gauge", "The power source: 1 for the one in force (ac, battery or unknown), 0 for the others.")
	for _, src := range []acpi.Source{acpi.AC, acpi.Battery, acpi.Unknown} {
		m.sample("schedpolicyd_power_source", one(s.PowerSource == src), "power_source", string(src))
	}
	if s.Boost == sysfs.BoostOn || s.Boost == sysfs.BoostOff {
		m.family("schedpolicyd_boost", "gauge", "cpufreq boost: 1 on, 0 off (absent where the machine has no boost control).")
		m.sample("schedpolicyd_boost", one(s.Boost == sysfs.BoostOn))
	}
}

// workloads: how many, and each one's CPUs and utilisation, labelled by a
// name that parses and is not repeated.
func (m *metricsWriter) workloads(all []snapshot.WorkloadStatus) {
	m.family("schedpolicyd_workloads", "gauge", "Managed workloads.")
	m.sample("schedpolicyd_workloads", float64(len(all)))
	type wl struct {
		label, cpus string
		n           int
		util        float64
	}
	var ws []wl
	seen := map[string]bool{}
	for _, w := range all {
		l := w.Name
		if !utf8.ValidString(l) {
			l = strconv.Quote(l)
		}
		if seen[l] {
			continue
		}
		seen[l] = true
		n := 0
		if set, err := sysfs.ParseCPUList(w.CPUs); err == nil {
			n = set.Size()
		}
		ws = append(ws, wl{l, w.CPUs, n, w.Util})
	}
	if len(ws) == 0 {
		return
	}
	m.family("schedpolicyd_workload_cpus", "gauge", "CPUs in the workload's cpuset.")
	for _, w := range ws {
		m.sample("schedpolicyd_workload_cpus", float64(w.n), "workload", w.label)
	}
	m.family("schedpolicyd_workload_cpuset_info", "gauge", "The workload's cpuset as a cpulist, in the cpus label (the value is 1).")
	for _, w := range ws {
		m.sample("schedpolicyd_workload_cpuset_info", 1, "workload", w.label, "cpus", w.cpus)
	}
	m.family("schedpolicyd_workload_utilisation_cpus", "gauge", "The workload's decayed CPU utilisation, in CPUs (1 = one CPU busy).")
	for _, w := range ws {
		m.sample("schedpolicyd_workload_utilisation_cpus", math.Round(w.util*1000)/1000, "workload", w.label)
	}
}

// counters: decisions, writes and errors since the start.
func (m *metricsWriter) counters(st Stats) {
	m.family("schedpolicyd_decisions_total", "counter", "Times the policy was derived and a plan made since the daemon started.")
	m.sample("schedpolicyd_decisions_total", float64(st.Decisions))
	m.family("schedpolicyd_cpuset_writes_total", "counter", "cpuset.cpus writes that succeeded since the daemon started.")
	m.sample("schedpolicyd_cpuset_writes_total", float64(st.CPUSetWrites))
	m.family("schedpolicyd_errors_total", "counter", "cpuset writes the kernel refused and failed tree remounts since the daemon started.")
	m.sample("schedpolicyd_errors_total", float64(st.Errors))
}

// energy: what measures it, the totals per policy and power source, and
// the RAPL zones' counts.
func (m *metricsWriter) energy(s *snapshot.Snapshot, zones []energy.Zone) {
	m.family("schedpolicyd_energy_source", "gauge", "What measures energy: 1 for rapl (the packages), battery (the whole machine, on battery only) or none.")
	for _, src := range []string{snapshot.EnergySourceRAPL, snapshot.EnergySourceBattery, snapshot.EnergySourceNone} {
		m.sample("schedpolicyd_energy_source", one(s.EnergySourceName() == src), "energy_source", src)
	}
	if len(s.Energy) > 0 {
		m.family("schedpolicyd_energy_joules_total", "counter", "Measured energy per policy and power source in force, in joules, across restarts; updated when a segment closes.")
		for _, e := range s.Energy {
			m.sample("schedpolicyd_energy_joules_total", e.Joules, "policy", string(e.Policy), "power_source", string(e.PowerSource))
		}
		m.family("schedpolicyd_energy_seconds_total", "counter", "The time the energy was measured over, per policy and power source, in seconds, across restarts.")
		for _, e := range s.Energy {
			m.sample("schedpolicyd_energy_seconds_total", e.Seconds, "policy", string(e.Policy), "power_source", string(e.PowerSource))
		}
	}
	if len(zones) > 0 {
		m.family("schedpolicyd_rapl_zone_joules_total", "counter", "Energy each RAPL zone counted since the daemon started, in joules, wraps corrected; read at the same moments as the totals.")
		for _, z := range zones {
			m.sample("schedpolicyd_rapl_zone_joules_total", z.Joules, "zone", z.Zone, "name", z.Name)
		}
	}
}

// escapeLabel escapes a label value: backslash, double quote and line feed.
func escapeLabel(v string) string {
	if !strings.ContainsAny(v, "\\\"\n") {
		return v
	}
	return strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`).Replace(v)
}

// formatValue prints a sample value; the values here are finite.
func formatValue(v float64) string {
	return strconv.FormatFloat(v, 'g', -1, 64)
}
