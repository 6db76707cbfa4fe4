package daemon

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/sirupsen/logrus"
	logtest "github.com/sirupsen/logrus/hooks/test"

	"github.com/schedpolicyd/schedpolicyd/internal/testutil"
	"github.com/schedpolicyd/schedpolicyd/sysfs"
)

// schedulerMachine is a topology fixture with a case of
// sysfs/testdata/schedulers laid over it: the sysfs root and the procfs
// root.
func schedulerMachine(t *testing.T, topology, overlay string) (sysfs.FS, string, sysfs.CPUTopology, sysfs.CPUClasses) {
	t.Helper()
	dir := t.TempDir()
	sys, proc := filepath.Join(dir, "sys"), filepath.Join(dir, "proc")
	testutil.CopyFixture(t, "../sysfs/testdata/topology/"+topology, sys)
	if overlay != "" {
		testutil.CopyFixture(t, "../sysfs/testdata/schedulers/"+overlay+"/sys", sys)
		testutil.CopyFixture(t, "../sysfs/testdata/schedulers/"+overlay+"/proc", proc)
	}
	fs, err := sysfs.NewFS(sys)
	if err != nil {
		t.Fatal(err)
	}
	top, err := fs.CPUTopology()
	if err != nil {
		t.Fatal(err)
	}
	return fs, proc, top, fs.CPUClasses(top)
}

// TestReadSchedulers: each case of EAS (active on the mainline RK3588
// with its energy model, schedutil and the sysctl at 1; off by the
// administrator; not possible on the seed's SMT laptop; unknown where the
// energy model cannot be read), a loaded sched_ext scheduler, and
// intel-lpmd, with what the daemon says it does beside each.
func TestReadSchedulers(t *testing.T) {
	const easDoes = "EAS places each task at wake-up on the CPU its energy model prices cheapest, within the task's cpuset: the daemon's cpusets decide which CPUs each workload may use (packing, background work off the focused app's cores), EAS where inside them; the daemon prices homes with the same energy model"
	const cfsDoes = "no other scheduler places work here: CFS spreads tasks within the daemon's cpusets"

	fs, proc, top, cl := schedulerMachine(t, "rk3588-mainline", "eas-on")
	s := ReadSchedulers(fs, proc, top, cl, "not running", "")
	want := Schedulers{
		EAS: EAS{State: EASActive, Sysctl: sysfs.EnergyAware{Present: true, Value: "1"}, EnergyModel: "present (3 performance domains)",
			Asymmetric: true, Governor: "schedutil"},
		SchedExt:  sysfs.SchedExt{Present: true, State: "disabled"},
		IntelLpmd: "not running",
		Does:      []string{easDoes},
	}
	if !reflect.DeepEqual(s, want) {
		t.Errorf("EAS on:\n%+v\nwant\n%+v", s, want)
	}
	if eas, scx := s.Summary(); eas != "active" || scx != "disabled" {
		t.Errorf("EAS on: summary %q %q", eas, scx)
	}

	fs, proc, top, cl = schedulerMachine(t, "rk3588-mainline", "eas-off")
	s = ReadSchedulers(fs, proc, top, cl, "not running", "")
	if s.EAS.State != EASInactive || !reflect.DeepEqual(s.EAS.Why, []string{"sched_energy_aware is 0: the administrator switched EAS off"}) ||
		s.SchedExt.Present || !reflect.DeepEqual(s.Does, []string{cfsDoes}) {
		t.Errorf("EAS off: %+v", s)
	}

	fs, proc, top, cl = schedulerMachine(t, "snb-laptop-4c8t", "eas-impossible")
	s = ReadSchedulers(fs, proc, top, cl, "unknown: bus none", "")
	wantWhy := []string{
		"sched_energy_aware is empty: the kernel says EAS is not possible now",
		"CPU capacities are not asymmetric (one kind of core)",
		"SMT is on (EAS runs only without it)",
		"the cpufreq governor is powersave, not schedutil",
	}
	if s.EAS.State != EASInactive || !reflect.DeepEqual(s.EAS.Why, wantWhy) || !s.EAS.SMT || s.IntelLpmd != "unknown: bus none" {
		t.Errorf("SMT laptop: %+v\nwhy %q", s, s.EAS.Why)
	}
	if eas, _ := s.Summary(); eas != "inactive ("+strings.Join(wantWhy, "; ")+")" {
		t.Errorf("SMT laptop: summary %q", eas)
	}

	// Every condition holds as far as can be read, but the energy model
	// cannot be: debugfs not mounted.
	fs, proc, top, cl = schedulerMachine(t, "rk3588-mainline", "eas-on")
	if err := os.RemoveAll(fs.Path("kernel/debug")); err != nil {
		t.Fatal(err)
	}
	s = ReadSchedulers(fs, proc, top, cl, "not running", "")
	if s.EAS.State != EASUnknown || s.EAS.EnergyModel != "unreadable: debugfs is not mounted or not readable here" ||
		!reflect.DeepEqual(s.EAS.Why, []string{"the energy model is unreadable: debugfs is not mounted or not readable here"}) ||
		len(s.Does) != 1 || !strings.HasPrefix(s.Does[0], "whether EAS runs is unknown") {
		t.Errorf("no debugfs: %+v", s)
	}

	// scx_lavd on a Meteor Lake laptop with intel-lpmd running.
	aside := "intel-lpmd (org.freedesktop.intel_lpmd :1.7) confines work to the LP E-cores 12-13 itself; schedpolicyd packs nothing onto them"
	fs, proc, top, cl = schedulerMachine(t, "mtl-u-ultra7-164u", "scx-lavd")
	s = ReadSchedulers(fs, proc, top, cl, "running", aside)
	wantDoes := []string{
		"sched_ext scheduler lavd replaces CFS for the tasks it runs; it keeps them within their cpusets (the kernel refuses a dispatch outside a task's allowed CPUs), so the daemon's cpusets still say which work may run where; the energy estimates assume CFS's spreading and do not describe lavd",
		aside,
	}
	if !s.SchedExt.Loaded() || s.SchedExt.Ops != "lavd" || !reflect.DeepEqual(s.Does, wantDoes) || s.EAS.State != EASInactive || s.IntelLpmd != "running" {
		t.Errorf("scx_lavd: %+v", s)
	}
	if _, scx := s.Summary(); scx != "enabled, ops lavd" {
		t.Errorf("scx_lavd: summary %q", scx)
	}
}

// TestDaemonLogsSchedulers: the daemon says once at start what it finds
// of the other schedulers (a procfs root where sched_energy_aware is
// empty, the seed's SMT laptop, no sched_ext), and not again at the next
// reading of the topology when nothing changed.
func TestDaemonLogsSchedulers(t *testing.T) {
	m := newMockLaptop(t)
	proc := t.TempDir()
	testutil.CopyFixture(t, "../sysfs/testdata/schedulers/eas-impossible/proc", proc)
	log := testutil.Logger(t)
	hook := logtest.NewLocal(log)
	d := m.startWith(t, func(c *Config) { c.Log = log; c.ProcRoot = proc })
	entries := func() []logrus.Entry {
		var out []logrus.Entry
		for _, e := range hook.AllEntries() {
			if e.Message == "other schedulers" {
				out = append(out, *e)
			}
		}
		return out
	}
	got := entries()
	if len(got) != 1 {
		t.Fatalf("%d \"other schedulers\" entries, want 1", len(got))
	}
	wantEAS := "inactive (sched_energy_aware is empty: the kernel says EAS is not possible now; CPU capacities are not asymmetric (one kind of core); SMT is on (EAS runs only without it); the cpufreq governor is none (no cpufreq), not schedutil)"
	if f := got[0].Data; f["eas"] != wantEAS || f["sched_ext"] != "not in this kernel" || f["intel_lpmd"] != "not running" ||
		f["does"] != "no other scheduler places work here: CFS spreads tasks within the daemon's cpusets" {
		t.Errorf("logged %v", f)
	}
	if err := d.do(context.Background(), func() error { d.readTopology(); return nil }); err != nil {
		t.Fatal(err)
	}
	if n := len(entries()); n != 1 {
		t.Errorf("%d entries after reading the topology again, want still 1", n)
	}
}
