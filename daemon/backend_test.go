package daemon

import (
	"reflect"
	"testing"
	"time"

	"github.com/schedpolicyd/schedpolicyd/cgroup"
	"github.com/schedpolicyd/schedpolicyd/daemon/placement"
	"github.com/schedpolicyd/schedpolicyd/daemon/placement/cgroupfs"
	"github.com/schedpolicyd/schedpolicyd/daemon/placement/units"
	"github.com/schedpolicyd/schedpolicyd/daemon/statefile"
	"github.com/schedpolicyd/schedpolicyd/internal/testutil"
)

// Both placements are drivers (the compile-time checks beside each type
// say so too), and New's engine holds the one Config.Placement names.
var (
	_ placement.Driver = (*cgroupfs.Placement)(nil)
	_ placement.Driver = (*units.Placement)(nil)
)

// What tests see of d's placement through the engine (on the loop).

// pressureWake handles a CPU pressure wake as the loop does (the
// decision it asks for is the caller's).
func pressureWake(d *Daemon) func() {
	return func() { d.place.OnWake(placement.WakePressure) }
}

// workloadRunDelay is workload name's threads' run and run-queue wait time
// (placement.Confirmer.RunDelay).
func workloadRunDelay(d *Daemon, name string) (run, wait time.Duration, err error) {
	return d.place.Driver().(placement.Confirmer).RunDelay(name)
}

// runnable is how many threads of the workload directory dir are
// runnable now (cgroup.DirRunnable, under d's procfs).
func runnable(d *Daemon, dir string) (int, error) {
	proc := d.cfg.ProcRoot
	if proc == "" {
		proc = "/proc"
	}
	return cgroup.DirRunnable(dir, proc)
}

// workloadLoad is workload name's runnable threads at the last sample and
// its decayed utilisation, in CPUs, as the energy model reads them
// (Engine.ModelLoads); 0, 0 if not listed.
func workloadLoad(d *Daemon, name string) (threads int, util float64) {
	in := d.modelInput()
	for _, l := range append(in.Placed, in.Fixed...) {
		if l.Name == name {
			return l.Threads, l.Util
		}
	}
	return 0, 0
}

func TestNewHoldsOneBackend(t *testing.T) {
	for _, c := range []struct {
		placement, mode string
		want            placement.Driver
	}{
		{"", PlacementCgroupfs, (*cgroupfs.Placement)(nil)},
		{PlacementCgroupfs, PlacementCgroupfs, (*cgroupfs.Placement)(nil)},
		{PlacementSystemd, PlacementSystemd, (*units.Placement)(nil)},
	} {
		d, err := New(Config{SysfsRoot: t.TempDir(), Placement: c.placement, Log: testutil.Logger(t)})
		if err != nil {
			t.Fatal(err)
		}
		if reflect.TypeOf(d.place.Driver()) != reflect.TypeOf(c.want) || d.place.Mode() != c.mode {
			t.Errorf("placement %q: driver %T (%s), want %T (%s)", c.placement, d.place.Driver(), d.place.Mode(), c.want, c.mode)
		}
	}
}

// TestOtherModesRecordsKept: the records state.json holds for the other
// placement mode are saved back exactly as they were found — cgroup
// records in placement "systemd" (even one of a cgroup that is gone, which
// the cgroupfs placement drops at its next start), unit records in
// placement "cgroupfs" (even one the units placement would not save) —
// while the back end's own are its to keep or drop.
func TestOtherModesRecordsKept(t *testing.T) {
	gone := statefile.Record{Path: "/sys/fs/cgroup/cpuset/no-such-parent/w", Inode: 42, Values: statefile.Values{Original: "0-3", Applied: "0"}}
	applied := statefile.UnitRecord{Manager: "system", Unit: "a.service", Values: statefile.Values{Original: "", Applied: "0"}}
	bare := statefile.UnitRecord{Manager: "system", Unit: "b.service", Values: statefile.Values{Original: "1"}}
	st := statefile.State{Cgroups: []statefile.Record{gone}, Units: []statefile.UnitRecord{applied, bare}}

	for _, c := range []struct {
		placement string
		cgroups   []statefile.Record
		units     []statefile.UnitRecord
	}{
		// The cgroupfs placement drops the record of a cgroup that is
		// gone; the unit records are another mode's.
		{PlacementCgroupfs, nil, []statefile.UnitRecord{applied, bare}},
		// The units placement saves the records of values of its own; the
		// cgroup records are another mode's.
		{PlacementSystemd, []statefile.Record{gone}, []statefile.UnitRecord{applied}},
	} {
		d, err := New(Config{SysfsRoot: t.TempDir(), Placement: c.placement, Log: testutil.Logger(t)})
		if err != nil {
			t.Fatal(err)
		}
		d.keepState(st)
		d.place.PutRecords()
		got := d.store.State()
		if !reflect.DeepEqual(got.Cgroups, c.cgroups) || !reflect.DeepEqual(got.Units, c.units) {
			t.Errorf("placement %s: saves cgroups %+v units %+v, want %+v and %+v", c.placement, got.Cgroups, got.Units, c.cgroups, c.units)
		}
	}
}
