package units

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/schedpolicyd/schedpolicyd/daemon/placement"
	"github.com/schedpolicyd/schedpolicyd/daemon/statefile"
	"github.com/schedpolicyd/schedpolicyd/internal/testutil"
	"github.com/schedpolicyd/schedpolicyd/policy"
	"github.com/schedpolicyd/schedpolicyd/sysfs"
)

// The administrator's day against a fake manager on a private bus
// (fakesystemd_test.go); packaging/systemd-test/surface.sh does the same
// under the real systemd 252 of the container and the VM.

var twoCPUs = sysfs.NewCPUSet(0, 1)

func twoCPUTopology(t *testing.T) policy.Topology {
	t.Helper()
	topo, err := policy.BuildTopology([]policy.CPUDesc{{ID: 0, Core: 0, Cluster: 0}, {ID: 1, Core: 1, Cluster: 1}})
	if err != nil {
		t.Fatal(err)
	}
	return topo
}

// surfaceUnits opens unit placement of schedpolicyd.slice on the fake
// manager, with saved records (a restarted daemon) and every state.json
// save kept in *saved.
func surfaceUnits(t *testing.T, saved []statefile.UnitRecord, out *[]statefile.UnitRecord) *Placement {
	t.Helper()
	u := New(placement.NewEngine(&placement.Config{Manage: []string{"schedpolicyd.slice"}, SampleInterval: time.Second, UtilHalfLife: policy.DefaultHalfLife, NoTaskClock: true}, testutil.Logger(t), &placement.Counters{}, nil))
	u.unified = false // one write per value (no widening step)
	u.e.LoadRecords(statefile.State{Units: saved})
	u.e.Save = func() error {
		if out != nil {
			*out = u.records.List()
		}
		return nil
	}
	if err := u.Open(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(u.Close)
	u.Scan()
	return u
}

func placer(t *testing.T, u *Placement, pol *policy.Policy) func() {
	topo := twoCPUTopology(t)
	return func() { u.e.Apply(*pol, topo, twoCPUs, true) }
}

// TestUnitsDaemonReloadHeld: on `systemctl daemon-reload`
// systemd 252 drops every unit and loads it again (UnitRemoved for each,
// then UnitNew for each) between Reloading(true) and Reloading(false).
// Following each signal forgot every unit and adopted them one by one,
// planning over each partial set. Held, the units stay workloads
// throughout, and one scan after the reload finds nothing changed: no
// AllowedCPUs= write, the administrator's value as it was.
func TestUnitsDaemonReloadHeld(t *testing.T) {
	f := newFakeSystemd(t)
	for _, n := range []string{"a.service", "b.service", "c.scope"} {
		f.Start(n, "schedpolicyd.slice", true)
	}
	f.Start("d.service", "schedpolicyd.slice", true, 1)
	f.Start("other.service", "system.slice", true)
	u := surfaceUnits(t, nil, nil)
	pol := policy.Powersaving
	apply := placer(t, u, &pol)
	apply()
	before := f.Writes()
	if len(before) != 3 || f.Allowed("d.service") != "1" {
		t.Fatalf("placing: writes %v, d.service %s; want a, b, c packed and d at its administrator's 1", before, f.Allowed("d.service"))
	}
	f.Reload()
	held := true
	pump(t, f, u, apply, func() {
		if len(u.workloads) != 4 {
			held = false
		}
	})
	if got := f.Writes(); !held || len(got) != len(before) || len(u.workloads) != 4 || len(u.reloading) != 0 {
		t.Fatalf("a reload: workloads kept throughout %v, %d now, writes %v after %v, still held %v", held, len(u.workloads), got[len(before):], before, u.reloading)
	}
	for _, n := range []string{"a.service", "b.service", "c.scope"} {
		if u.workloads[n].cpus.String() != f.Allowed(n) {
			t.Fatalf("%s: the daemon says %s, the manager %s", n, u.workloads[n].cpus, f.Allowed(n))
		}
	}
}

// TestUnitsDaemonReexecKept: on `systemctl daemon-reexec` systemd 252
// sends UnitRemoved for every unit from its old connection and, from the
// new one that took the name over, Reloading(false) and no UnitNew at
// all. The units stay workloads (following the removals forgot them for
// good), a switch still places them, and a unit started afterwards is
// adopted from the new connection's signals.
func TestUnitsDaemonReexecKept(t *testing.T) {
	f := newFakeSystemd(t)
	f.Start("a.service", "schedpolicyd.slice", true)
	f.Start("b.service", "schedpolicyd.slice", true)
	u := surfaceUnits(t, nil, nil)
	pol := policy.Powersaving
	apply := placer(t, u, &pol)
	apply()
	f.Reexec()
	pump(t, f, u, apply, nil)
	if len(u.workloads) != 2 || len(f.Writes()) != 2 {
		t.Fatalf("after the re-execution: workloads %d, writes %v; want both kept, nothing written again", len(u.workloads), f.Writes())
	}
	f.Start("c.service", "schedpolicyd.slice", true)
	pump(t, f, u, apply, nil)
	if u.workloads["c.service"] == nil || f.Allowed("c.service") == "" {
		t.Fatalf("a unit started after the re-execution: workload %v, AllowedCPUs=%s", u.workloads["c.service"] != nil, f.Allowed("c.service"))
	}
	pol = policy.Performance
	apply()
	for _, n := range []string{"a.service", "b.service", "c.service"} {
		if f.Allowed(n) != "" {
			t.Fatalf("performance after the re-execution: %s AllowedCPUs=%s, want unset", n, f.Allowed(n))
		}
	}
}

// TestUnitsAdminSameValue: `systemctl set-property --runtime` of the very
// value the daemon had set is the administrator's: a switch does not
// reset it, and neither does the stop. The manager rewrites the drop-in
// for each call; the daemon tells the administrator's file from its own
// by the file's identity (dropIns). Also while the daemon is stopped
// (kill -9): the next start finds the file replaced.
func TestUnitsAdminSameValue(t *testing.T) {
	f := newFakeSystemd(t)
	f.Start("a.service", "schedpolicyd.slice", true)
	f.Start("b.service", "schedpolicyd.slice", true)
	f.Start("c.service", "schedpolicyd.slice", true)
	var saved []statefile.UnitRecord
	u := surfaceUnits(t, nil, &saved)
	pol := policy.Powersaving
	apply := placer(t, u, &pol)
	apply()
	p := f.Allowed("a.service")
	if p == "" || f.Allowed("b.service") != p {
		t.Fatalf("not packed: a %s b %s", p, f.Allowed("b.service"))
	}
	cpu := u.workloads["a.service"].cpus.List()
	f.Admin("a.service", true, cpu...) // the daemon's own value, by the administrator
	pol = policy.Performance
	apply()
	if f.Allowed("a.service") != p || u.workloads["a.service"].rec.Original != p || f.Allowed("b.service") != "" {
		t.Fatalf("performance: a %q (original %q), b %q; want a kept at the administrator's %s, b unset", f.Allowed("a.service"), u.workloads["a.service"].rec.Original, f.Allowed("b.service"), p)
	}
	pol = policy.Powersaving
	apply()
	// A kill -9: no restore; the administrator sets c to the daemon's
	// value meanwhile; the next start takes it as theirs.
	records := saved
	u.Close()
	f.Admin("c.service", true, u.workloads["c.service"].cpus.List()...)
	u2 := surfaceUnits(t, records, nil)
	pol = policy.Performance
	placer(t, u2, &pol)()
	if f.Allowed("c.service") != p || f.Allowed("b.service") != "" {
		t.Fatalf("after a restart: c %q, b %q; want c at the administrator's %s, b unset", f.Allowed("c.service"), f.Allowed("b.service"), p)
	}
	pol = policy.Powersaving
	placer(t, u2, &pol)()
	if !u2.Restore() {
		t.Fatal("restore reported something left")
	}
	if a, b, c := f.Allowed("a.service"), f.Allowed("b.service"), f.Allowed("c.service"); a != p || b != "" || c != p {
		t.Fatalf("after the stop: a %q b %q c %q; want %s, unset, %s", a, b, c, p, p)
	}
}

// TestUnitsRecreatedUnitKeepsRecord: a unit loaded from a unit file keeps
// the daemon's runtime drop-in when the file is removed (the manager
// forgets the unit, not the drop-in) and starts with it when a unit file
// of the same name comes back. Its record is kept meanwhile — across a
// restart of the daemon and its stop, which cannot reset a unit that is
// not found — so the value is known as the daemon's and reset. A
// transient unit's drop-ins go with it: its record goes at once.
func TestUnitsRecreatedUnitKeepsRecord(t *testing.T) {
	f := newFakeSystemd(t)
	f.Start("r.service", "schedpolicyd.slice", false)
	f.Start("t.service", "schedpolicyd.slice", true)
	var saved []statefile.UnitRecord
	u := surfaceUnits(t, nil, &saved)
	pol := policy.Powersaving
	apply := placer(t, u, &pol)
	apply()
	p := f.Allowed("r.service")
	f.Drop("r.service")
	f.Drop("t.service")
	pump(t, f, u, apply, nil)
	keys := func(rs []statefile.UnitRecord) string {
		var out []string
		for _, r := range rs {
			out = append(out, r.Unit)
		}
		return strings.Join(out, " ")
	}
	if got := keys(saved); got != "r.service" {
		t.Fatalf("records after both units went: %q; want r.service's alone (its drop-in stays)", got)
	}
	if u.Restore() {
		t.Fatal("restore reported everything back although r.service's value lingers")
	}
	u.Close()
	records := saved
	if keys(records) != "r.service" {
		t.Fatalf("records after the stop: %q", keys(records))
	}
	// The next start keeps it (the scan's dropGone), and the unit file
	// comes back.
	var saved2 []statefile.UnitRecord
	u2 := surfaceUnits(t, records, &saved2)
	apply2 := placer(t, u2, &pol)
	u2.e.Flush()
	if keys(u2.records.List()) != "r.service" {
		t.Fatalf("records after the next start: %q", keys(u2.records.List()))
	}
	f.Start("r.service", "schedpolicyd.slice", false)
	f.Start("t.service", "schedpolicyd.slice", true)
	pump(t, f, u2, apply2, nil)
	if f.Allowed("t.service") == "" || u2.workloads["r.service"] == nil {
		t.Fatalf("units back: t %q, r a workload %v", f.Allowed("t.service"), u2.workloads["r.service"] != nil)
	}
	if got := u2.workloads["r.service"].rec; got.Original != "" || got.Applied != p {
		t.Fatalf("r.service back with %s: record %+v; want the daemon's %s over an unset original", f.Allowed("r.service"), *got, p)
	}
	if !u2.Restore() || f.Allowed("r.service") != "" || f.Allowed("t.service") != "" {
		t.Fatalf("after the stop: r %q t %q; want both unset", f.Allowed("r.service"), f.Allowed("t.service"))
	}
}

// TestDropInIdentity: dropIns identifies the AllowedCPUs= drop-ins by
// inode and modification time; a file written anew (even with the same
// content) or another one added counts as rewritten; lingering follows
// the daemon's file below /run only.
func TestDropInIdentity(t *testing.T) {
	dir := t.TempDir()
	was := runtimeRoot
	runtimeRoot = dir + "/run/"
	t.Cleanup(func() { runtimeRoot = was })
	run := dir + "/run/systemd/system.control/a.service.d/" + allowedDropIn
	etc := dir + "/etc/systemd/system.control/a.service.d/" + allowedDropIn
	other := dir + "/run/systemd/system.control/a.service.d/10-other.conf"
	testutil.WriteFile(t, run, "[Service]\nAllowedCPUs=0\n")
	testutil.WriteFile(t, other, "[Service]\nCPUWeight=50\n")
	r := &statefile.UnitRecord{Unit: "a.service", Values: statefile.Values{Applied: "0"}, DropIns: dropIns([]string{run, other})}
	if strings.Contains(r.DropIns, "10-other") || !strings.HasPrefix(r.DropIns, run+"@") {
		t.Fatalf("dropIns %q: want the AllowedCPUs= drop-in alone", r.DropIns)
	}
	if rewritten(r, dropIns([]string{other, run})) {
		t.Fatal("the same files read as rewritten")
	}
	if rewritten(&statefile.UnitRecord{}, dropIns([]string{run})) {
		t.Fatal("an unknown identity reads as rewritten")
	}
	time.Sleep(10 * time.Millisecond)
	testutil.WriteFile(t, run+".new", "[Service]\nAllowedCPUs=0\n")
	if err := os.Rename(run+".new", run); err != nil {
		t.Fatal(err)
	}
	if !rewritten(r, dropIns([]string{run})) {
		t.Fatal("the file written anew with the same value does not read as rewritten")
	}
	r.DropIns = dropIns([]string{run})
	testutil.WriteFile(t, etc, "[Service]\nAllowedCPUs=0\n")
	if !rewritten(r, dropIns([]string{run, etc})) {
		t.Fatal("a persistent drop-in added does not read as rewritten")
	}
	if p, known, lingers := lingering(r); p != run || !known || !lingers {
		t.Fatalf("lingering = %q %v %v; want %s, known, lingering", p, known, lingers, run)
	}
	r.DropIns = dropIns([]string{etc})
	if _, known, _ := lingering(r); known {
		t.Fatal("a drop-in outside /run counts for lingering")
	}
	r.DropIns = strings.Replace(dropIns([]string{run}), dir, "", 1)
	if _, known, lingers := lingering(r); known && lingers {
		t.Fatal("lingering found a file that is not there")
	}
	r.DropIns = fmt.Sprintf("%s/run/x/%s@1.2", dir, allowedDropIn)
	if _, known, lingers := lingering(r); !known || lingers {
		t.Fatalf("a missing file: known %v lingers %v; want known, not lingering", known, lingers)
	}
}
