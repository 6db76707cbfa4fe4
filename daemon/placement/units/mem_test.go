package units

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/schedpolicyd/schedpolicyd/daemon/placement"
	"github.com/schedpolicyd/schedpolicyd/daemon/statefile"
	"github.com/schedpolicyd/schedpolicyd/internal/testutil"
	"github.com/schedpolicyd/schedpolicyd/policy"
)

// The units back end's own logic against an in-memory manager
// (memmanager_test.go), its methods called on the test's goroutine as the
// loop calls them. Each test runs in a synctest bubble, so that the
// goroutine forwarding the manager's events (forward) is done before the
// test reads them: no waiting on the wall clock.

// memUnits is a units placement of schedpolicyd.slice on an in-memory
// system manager, and what it wrote.
type memUnits struct {
	t *testing.T
	m *memManager
	u *Placement
	// journal is, in order, "save RECORDS" for each state.json save
	// (recs) and the manager's "set NAME=CPUS" and "start NAME".
	journal []string
}

// newMemUnits makes the placement, not opened, with saved as state.json's
// unit records. Cgroup v1 as far as setAllowed is concerned (one write
// per value: no widening step through /sys's possible CPUs); the cgroup
// root, /proc and the runtime drop-ins are below a temporary directory.
// Call it inside a synctest bubble.
func newMemUnits(t *testing.T, saved ...statefile.UnitRecord) *memUnits {
	t.Helper()
	dir := t.TempDir()
	was := runtimeRoot
	runtimeRoot = dir + "/run/"
	t.Cleanup(func() { runtimeRoot = was })
	h := &memUnits{t: t}
	h.m = newMemManager(t, -1, dir, &h.journal)
	cfg := &placement.Config{Manage: []string{"schedpolicyd.slice"}, SampleInterval: time.Second, UtilHalfLife: policy.DefaultHalfLife,
		NoTaskClock: true, ProcRoot: dir + "/proc"}
	u := New(placement.NewEngine(cfg, testutil.Logger(t), &placement.Counters{}, nil))
	u.unified = false
	u.cgroupRoot = dir + "/cgroup"
	u.connect = func(ctx context.Context, uid int) (unitManager, error) {
		if uid != -1 {
			return nil, fmt.Errorf("no manager of user %d here", uid)
		}
		return h.m, nil
	}
	u.e.LoadRecords(statefile.State{Units: saved})
	u.e.Save = func() error {
		h.journal = append(h.journal, "save "+recs(u.records.List()))
		return nil
	}
	h.u = u
	return h
}

// open opens the placement and scans, as the daemon's start does; the
// journal starts after it.
func (h *memUnits) open() {
	h.t.Helper()
	if err := h.u.Open(); err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(h.u.Close)
	h.u.Scan()
	h.journal = nil
}

// follow hands every message the manager sent so far to onEvent, in
// order, as the loop does, and returns what each reported; an apply
// follows each change, as recompute does, when apply is not nil.
func (h *memUnits) follow(apply func()) []bool {
	synctest.Wait()
	var out []bool
	for {
		select {
		case m := <-h.u.EventsC():
			c := h.u.onEvent(m.(unitMsg))
			out = append(out, c)
			if c && apply != nil {
				apply()
			}
		default:
			return out
		}
	}
}

// apply plans pol over CPUs 0 and 1 (one core each) and writes it.
func (h *memUnits) apply(pol policy.Policy) {
	h.u.e.Apply(pol, twoCPUTopology(h.t), twoCPUs, true)
}

// taken returns the journal so far and starts it anew.
func (h *memUnits) taken() string {
	j := strings.Join(h.journal, " | ")
	h.journal = nil
	return j
}

// recs describes unit records, "UNIT orig=O pending=P applied=A", with
// " created" for a created scope, joined by "; ".
func recs(rs []statefile.UnitRecord) string {
	var out []string
	for _, r := range rs {
		s := fmt.Sprintf("%s orig=%s pending=%s applied=%s", r.Unit, r.Original, r.Pending, r.Applied)
		if r.Created {
			s += " created"
		}
		out = append(out, s)
	}
	return strings.Join(out, "; ")
}

// recOf describes unit name's record ("" without one).
func (h *memUnits) recOf(name string) string {
	if r := h.u.records[statefile.UnitRecord{Manager: "system", Unit: name}.Key()]; r != nil {
		return recs([]statefile.UnitRecord{*r})
	}
	return ""
}

// TestMemUnitsApply: apply records each value as pending and saves it
// before the write, and as applied after; the value written is the
// plan's; a unit whose AllowedCPUs= someone else set since the daemon
// last looked is not overwritten, and that value becomes its original.
func TestMemUnitsApply(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newMemUnits(t)
		h.m.Start("a.service", "schedpolicyd.slice", false)
		h.m.Start("b.service", "schedpolicyd.slice", false)
		h.m.Start("other.service", "system.slice", false)
		h.open()
		if got := h.u.Names(); strings.Join(got, " ") != "a.service b.service" {
			t.Fatalf("workloads %v, want a.service and b.service", got)
		}

		h.apply(policy.Powersaving)
		for _, n := range []string{"a.service", "b.service"} {
			testutil.WantEq(t, n+": the plan's CPUs", fmt.Sprint(h.u.e.Plan.CPUs[n]), "[0]")
			testutil.WantEq(t, n+": AllowedCPUs=", h.m.Allowed(n), "0")
		}
		testutil.WantEq(t, "powersaving: saves and writes", h.taken(),
			"save a.service orig= pending=0 applied=; b.service orig= pending=0 applied= | "+
				"set a.service=0 | set b.service=0 | "+
				"save a.service orig= pending= applied=0; b.service orig= pending= applied=0")

		// The administrator moves a to CPU 1; no signal says so. Back to
		// performance, b's original (unset) is written, which needs no
		// pending value: a crash before the save finds b at its original.
		// a's record holds no value of ours, so state.json has none.
		h.m.Admin("a.service", true, 1)
		h.apply(policy.Performance)
		testutil.WantEq(t, "performance after the administrator's a=1: saves and writes", h.taken(),
			"set b.service= | save ")
		testutil.WantEq(t, "a.service: AllowedCPUs=", h.m.Allowed("a.service"), "1")
		testutil.WantEq(t, "a.service: record", h.recOf("a.service"), "a.service orig=1 pending= applied=")
		testutil.WantEq(t, "b.service: AllowedCPUs=", h.m.Allowed("b.service"), "")
		testutil.WantEq(t, "other.service: AllowedCPUs=", h.m.Allowed("other.service"), "")
	})
}

// TestMemUnitsRestore: restore resets exactly the units whose
// AllowedCPUs= still holds the daemon's value, workloads or not (a
// stopped service keeps a runtime value); an administrator's value since
// is kept, also where the record does not know the drop-in the daemon
// wrote (e.service: a stopped unit whose record a version without
// drop-in identities saved), and a transient unit that is gone has
// nothing to reset. Every record is done with: state.json holds none.
func TestMemUnitsRestore(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newMemUnits(t, statefile.UnitRecord{Manager: "system", Unit: "e.service", Values: statefile.Values{Applied: "0"}})
		h.m.Start("e.service", "schedpolicyd.slice", false)
		h.m.Admin("e.service", true, 1)
		h.m.Stop("e.service")
		for _, n := range []string{"a.service", "b.service", "d.service"} {
			h.m.Start(n, "schedpolicyd.slice", false)
		}
		h.m.Start("c.service", "schedpolicyd.slice", true)
		h.open()
		h.apply(policy.Powersaving)
		testutil.WantEq(t, "powersaving", h.taken(),
			"save a.service orig= pending=0 applied=; b.service orig= pending=0 applied=; c.service orig= pending=0 applied=; d.service orig= pending=0 applied=; e.service orig= pending= applied=0 | "+
				"set a.service=0 | set b.service=0 | set c.service=0 | set d.service=0 | "+
				"save a.service orig= pending= applied=0; b.service orig= pending= applied=0; c.service orig= pending= applied=0; d.service orig= pending= applied=0; e.service orig= pending= applied=0")

		h.m.Admin("b.service", true, 1) // the administrator's
		h.m.Stop("d.service")           // stopped, still loaded: keeps its value
		h.follow(nil)
		h.m.Stop("c.service") // transient: gone with its drop-in; not followed yet
		if h.u.workloads["d.service"] != nil || h.recOf("d.service") != "d.service orig= pending= applied=0" {
			t.Fatalf("d.service stopped: a workload %v, record %q; want forgotten, its record kept", h.u.workloads["d.service"] != nil, h.recOf("d.service"))
		}
		h.taken()

		if !h.u.Restore() {
			t.Fatal("restore reported something left")
		}
		testutil.WantEq(t, "restore writes", h.taken(), "set a.service= | set d.service=")
		for n, want := range map[string]string{"a.service": "", "b.service": "1", "c.service": "(not found)", "d.service": "", "e.service": "1"} {
			testutil.WantEq(t, n+": AllowedCPUs=", h.m.Allowed(n), want)
		}
		testutil.WantEq(t, "state.json's records", recs(h.u.records.List()), "")
	})
}

// TestMemUnitsAdoptAdminOriginal: a unit with an AllowedCPUs= of its own
// when adopted (its unit file's, or the administrator's `systemctl
// set-property`) keeps it as its original: it bounds every plan (CPU 0
// for powersaving here is outside it: the original stays), and the
// daemon writes nothing to it, nor at its stop.
func TestMemUnitsAdoptAdminOriginal(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newMemUnits(t)
		h.m.Start("file.service", "schedpolicyd.slice", false, 1)
		h.m.Start("admin.service", "schedpolicyd.slice", false)
		h.m.Admin("admin.service", false, 1)
		h.m.Start("z.service", "schedpolicyd.slice", false)
		h.open()
		for _, n := range []string{"file.service", "admin.service"} {
			testutil.WantEq(t, n+": record", h.recOf(n), n+" orig=1 pending= applied=")
		}
		h.apply(policy.Powersaving)
		for _, n := range []string{"file.service", "admin.service"} {
			testutil.WantEq(t, n+": the plan's CPUs for powersaving", fmt.Sprint(h.u.e.Plan.CPUs[n]), "[0]")
		}
		h.apply(policy.Performance)
		if !h.u.Restore() {
			t.Fatal("restore reported something left")
		}
		testutil.WantEq(t, "writes", h.taken(),
			"save z.service orig= pending=0 applied= | set z.service=0 | save z.service orig= pending= applied=0 | "+
				"set z.service= | save ")
		for _, n := range []string{"file.service", "admin.service"} {
			testutil.WantEq(t, n+": AllowedCPUs=", h.m.Allowed(n), "1")
		}
	})
}

// TestMemUnitsAdoptSaved: the records of state.json after a crash are
// reconciled with what each unit's AllowedCPUs= and drop-ins are now,
// and the stop then resets exactly the units whose value is the
// daemon's.
func TestMemUnitsAdoptSaved(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newMemUnits(t)
		for _, n := range []string{"p.service", "q.service", "r.service", "s.service", "t.service", "v.service"} {
			h.m.Start(n, "schedpolicyd.slice", false)
		}
		// What the crashed daemon had written, and the drop-in's identity
		// right after.
		ours := map[string]string{}
		for _, n := range []string{"p.service", "q.service", "s.service", "v.service"} {
			h.m.Admin(n, true, 0)
			ours[n] = dropIns(h.m.info(n).DropInPaths)
		}
		// While it was down: s set to another value, v to the very same.
		h.m.Admin("s.service", true, 1)
		h.m.Admin("v.service", true, 0)
		// A transient scope the daemon had placed ended: its drop-in went
		// with it.
		h.m.Start("gone.scope", "schedpolicyd.slice", true)
		h.m.Admin("gone.scope", true, 0)
		gone := dropIns(h.m.info("gone.scope").DropInPaths)
		h.m.Stop("gone.scope")

		saved := []statefile.UnitRecord{
			{Manager: "system", Unit: "p.service", Values: statefile.Values{Pending: "0"}},                             // crashed after the write, before "applied" was saved
			{Manager: "system", Unit: "q.service", Values: statefile.Values{Applied: "0"}, DropIns: ours["q.service"]}, // still ours
			{Manager: "system", Unit: "r.service", Values: statefile.Values{Applied: "0"}, DropIns: "/run/gone@1.2"},   // its runtime drop-in gone (a reboot)
			{Manager: "system", Unit: "s.service", Values: statefile.Values{Applied: "0"}, DropIns: ours["s.service"]}, // someone else's value since
			{Manager: "system", Unit: "t.service", Values: statefile.Values{Pending: "0"}},                             // crashed before the write
			{Manager: "system", Unit: "v.service", Values: statefile.Values{Applied: "0"}, DropIns: ours["v.service"]}, // the same value, written anew by someone else
			{Manager: "system", Unit: "gone.scope", Values: statefile.Values{Applied: "0"}, DropIns: gone},             // the unit is gone
		}
		h.u.e.LoadRecords(statefile.State{Units: saved})
		h.open()
		for n, want := range map[string]string{
			"p.service":  "p.service orig= pending= applied=0",
			"q.service":  "q.service orig= pending= applied=0",
			"r.service":  "r.service orig= pending= applied=",
			"s.service":  "s.service orig=1 pending= applied=",
			"t.service":  "t.service orig= pending= applied=",
			"v.service":  "v.service orig=0 pending= applied=",
			"gone.scope": "",
		} {
			testutil.WantEq(t, n+": record after the start", h.recOf(n), want)
		}
		if got := h.u.records[statefile.UnitRecord{Manager: "system", Unit: "p.service"}.Key()].DropIns; got != ours["p.service"] {
			t.Errorf("p.service: drop-ins %q after the start, want the daemon's write's %q", got, ours["p.service"])
		}
		if !h.u.Restore() {
			t.Fatal("restore reported something left")
		}
		testutil.WantEq(t, "restore writes", h.taken(), "set p.service= | set q.service=")
		for n, want := range map[string]string{"p.service": "", "q.service": "", "r.service": "", "s.service": "1", "t.service": "", "v.service": "0"} {
			testutil.WantEq(t, n+": AllowedCPUs= after the stop", h.m.Allowed(n), want)
		}
	})
}

// removedUnits is a placement of transient t.service and f.service
// (loaded from a unit file), both at the daemon's powersaving value 0.
func removedUnits(t *testing.T) *memUnits {
	h := newMemUnits(t)
	h.m.Start("t.service", "schedpolicyd.slice", true)
	h.m.Start("f.service", "schedpolicyd.slice", false)
	h.open()
	h.apply(policy.Powersaving)
	testutil.WantEq(t, "placed", h.m.Allowed("t.service")+" "+h.m.Allowed("f.service"), "0 0")
	h.taken()
	return h
}

// TestMemUnitsRemovedDropsRecord: a transient unit that stops and is
// removed (JobRemoved, then UnitRemoved) is forgotten and its record
// dropped, the daemon's value having gone with its drop-in; a unit
// loaded from a unit file that is removed keeps its record, since its
// runtime drop-in stays (a unit loaded under that name again starts with
// it).
func TestMemUnitsRemovedDropsRecord(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := removedUnits(t)
		h.m.Stop("t.service")
		h.m.Stop("f.service")
		h.m.Drop("f.service")
		testutil.WantEq(t, "changes reported", fmt.Sprint(h.follow(nil)), "[true false true false]")
		if len(h.u.workloads) != 0 {
			t.Fatalf("workloads %v after both units went", h.u.Names())
		}
		testutil.WantEq(t, "saves", h.taken(),
			"save f.service orig= pending= applied=0; t.service orig= pending= applied=0 | save f.service orig= pending= applied=0 | "+
				"save f.service orig= pending= applied=0")
	})
}

// TestMemUnitsRecreatedNotOurs: a transient unit the daemon placed that
// is removed and made again under the same name with the daemon's very
// value (systemd-run -p AllowedCPUs=0) is not the daemon's: that value is
// its original, and neither a switch to performance nor the stop resets
// it. Whether the loop follows the removal before the new unit comes
// (t1.service) or finds both at once (t2.service: its JobRemoved read
// once the new unit is there).
func TestMemUnitsRecreatedNotOurs(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newMemUnits(t)
		h.m.Start("t1.service", "schedpolicyd.slice", true)
		h.m.Start("t2.service", "schedpolicyd.slice", true)
		h.open()
		place := func() { h.apply(policy.Powersaving) }
		place()
		testutil.WantEq(t, "placed", h.m.Allowed("t1.service")+" "+h.m.Allowed("t2.service"), "0 0")
		h.m.Stop("t1.service")
		h.follow(place)
		h.m.Start("t1.service", "schedpolicyd.slice", true, 0)
		h.follow(place)
		h.m.Stop("t2.service")
		h.m.Start("t2.service", "schedpolicyd.slice", true, 0)
		h.follow(place)
		for _, n := range []string{"t1.service", "t2.service"} {
			testutil.WantEq(t, n+": record", h.recOf(n), n+" orig=0 pending= applied=")
		}
		h.taken()
		h.apply(policy.Performance)
		if !h.u.Restore() {
			t.Fatal("restore reported something left")
		}
		testutil.WantEq(t, "AllowedCPUs=", h.m.Allowed("t1.service")+" "+h.m.Allowed("t2.service"), "0 0")
		testutil.WantEq(t, "writes", h.taken(), "")
	})
}

// TestMemUnitsReloadHeld: between Reloading(true) and Reloading(false)
// the units' UnitRemoved and UnitNew are not followed (the workloads stay
// as they were) and a plan's writes are held; Reloading(false) lists the
// units once, which takes in what the reload changed (a's runtime value
// lost under the persistent drop-in of the same name: back at its
// original), and the held plan is written then.
func TestMemUnitsReloadHeld(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newMemUnits(t)
		h.m.Start("a.service", "schedpolicyd.slice", false)
		h.m.Admin("a.service", false, 0, 1)
		h.m.Start("b.service", "schedpolicyd.slice", false)
		h.open()
		h.apply(policy.Powersaving)
		testutil.WantEq(t, "placed", h.m.Allowed("a.service")+" "+h.m.Allowed("b.service"), "0 0")
		h.taken()
		lists := h.m.calls["Units"]

		h.m.ReloadBegin()
		perf := func() { h.apply(policy.Performance) }
		testutil.WantEq(t, "changes reported as the reload starts", fmt.Sprint(h.follow(perf)), "[false false false]")
		testutil.WantEq(t, "workloads while reloading", strings.Join(h.u.Names(), " "), "a.service b.service")
		perf()
		testutil.WantEq(t, "writes while reloading", h.taken(), "")

		h.m.ReloadEnd()
		testutil.WantEq(t, "changes reported as the reload ends", fmt.Sprint(h.follow(perf)), "[false false true]")
		if n := h.m.calls["Units"] - lists; n != 1 {
			t.Errorf("the units were listed %d times for the reload, want once", n)
		}
		testutil.WantEq(t, "after the reload", h.taken(),
			"save b.service orig= pending= applied=0 | set b.service= | save ")
		testutil.WantEq(t, "a.service: record", h.recOf("a.service"), "a.service orig=0-1 pending= applied=")
		testutil.WantEq(t, "AllowedCPUs=", h.m.Allowed("a.service")+" "+h.m.Allowed("b.service"), "0-1 ")
	})
}

// TestMemUnitsCreateExists: CreateWorkload's scope is recorded as
// created and saved before it is started; a name already taken — by a
// workload, or by a scope systemd has whose signals the daemon has not
// followed yet (UnitExists) — is fs.ErrExist, with nothing started or
// recorded for it.
func TestMemUnitsCreateExists(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newMemUnits(t)
		h.open()
		dir, err := h.u.Create("job", 4242)
		if err != nil {
			t.Fatal(err)
		}
		testutil.WantEq(t, "cgroup", dir, h.u.cgroupRoot+"/schedpolicyd.slice/job.scope")
		testutil.WantEq(t, "create", h.taken(),
			"save job.scope orig= pending= applied= created | start job.scope | save job.scope orig= pending= applied= created")
		h.follow(nil)

		if _, err := h.u.Create("job", 4243); !errors.Is(err, fs.ErrExist) {
			t.Fatalf("create of a workload's name: %v, want fs.ErrExist", err)
		}
		testutil.WantEq(t, "create of a workload's name", h.taken(), "")

		h.m.Start("taken.scope", "schedpolicyd.slice", true)
		if _, err := h.u.Create("taken", 4244); !errors.Is(err, fs.ErrExist) {
			t.Fatalf("create of a scope systemd has: %v, want fs.ErrExist", err)
		}
		testutil.WantEq(t, "create of a scope systemd has", h.taken(),
			"save job.scope orig= pending= applied= created; taken.scope orig= pending= applied= created | start taken.scope | "+
				"save job.scope orig= pending= applied= created")
		h.follow(nil)
		testutil.WantEq(t, "taken.scope: record", h.recOf("taken.scope"), "taken.scope orig= pending= applied=")
	})
}

// TestMemUnitsRestoreKeepsReset: a unit whose AllowedCPUs= someone reset
// (unset) after the daemon set it holds no value of ours — an empty
// AllowedCPUs= is not the record's empty Pending — and keeps the reset at
// the stop, where the original (the administrator's 0-1 here) would have
// overwritten it.
func TestMemUnitsRestoreKeepsReset(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newMemUnits(t)
		h.m.Start("a.service", "schedpolicyd.slice", false)
		h.m.Admin("a.service", false, 0, 1)
		h.open()
		h.apply(policy.Powersaving)
		testutil.WantEq(t, "powersaving", h.taken(),
			"save a.service orig=0-1 pending=0 applied= | set a.service=0 | save a.service orig=0-1 pending= applied=0")
		h.m.Admin("a.service", true) // reset at runtime; no signal follows
		if !h.u.Restore() {
			t.Fatal("restore reported something left")
		}
		testutil.WantEq(t, "restore writes", h.taken(), "")
		testutil.WantEq(t, "a.service: AllowedCPUs=", h.m.Allowed("a.service"), "")
		testutil.WantEq(t, "state.json's records", recs(h.u.records.List()), "")
	})
}

// TestMemUnitsScanCutShort: a scan whose listing runs out of time (a
// busy machine during a burst of units) takes in the units it read,
// forgets no workload it did not get to, and keeps the loop sampling
// until a later sample's scan lists every unit; that one adopts the rest
// and forgets what is gone.
func TestMemUnitsScanCutShort(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newMemUnits(t)
		h.m.Start("z.service", "schedpolicyd.slice", false)
		h.m.unitsRead = 0 // the start's scan reads nothing in time
		h.open()
		testutil.WantEq(t, "workloads after the start's scan that read nothing", strings.Join(h.u.Names(), " "), "")
		if !h.u.rescan || !h.u.e.Sampling() {
			t.Fatalf("no workloads and a scan cut short: rescan %v, sampling %v; want both (the next sample scans)", h.u.rescan, h.u.e.Sampling())
		}
		h.m.unitsRead = -1
		if !h.u.e.OnSample() {
			t.Fatal("the sample's full scan reported no change; it adopted z.service")
		}
		testutil.WantEq(t, "workloads after the sample's scan", strings.Join(h.u.Names(), " "), "z.service")
		if h.u.rescan {
			t.Fatal("rescan still set after a full scan")
		}

		for _, n := range []string{"a.service", "b.service", "c.service"} {
			h.m.Start(n, "schedpolicyd.slice", false)
		}
		h.m.unitsRead = 1
		if !h.u.Scan() {
			t.Fatal("the cut-short scan reported no change; it adopted a.service")
		}
		testutil.WantEq(t, "workloads after a scan cut short after one unit", strings.Join(h.u.Names(), " "), "a.service z.service")
		if !h.u.rescan {
			t.Fatal("rescan not set after a scan cut short")
		}

		// Nothing read at all: still nothing forgotten, still due.
		h.m.unitsRead = 0
		if h.u.e.OnSample() {
			t.Fatal("a sample whose scan read nothing reported a change")
		}
		testutil.WantEq(t, "workloads after a scan that read nothing", strings.Join(h.u.Names(), " "), "a.service z.service")

		h.m.unitsRead = -1
		h.m.Stop("z.service")
		if !h.u.e.OnSample() {
			t.Fatal("the sample's full scan reported no change")
		}
		testutil.WantEq(t, "workloads after the full scan", strings.Join(h.u.Names(), " "), "a.service b.service c.service")
		if h.u.rescan {
			t.Fatal("rescan still set after a full scan")
		}
		calls := h.m.calls["Units"]
		h.u.e.OnSample()
		if h.m.calls["Units"] != calls {
			t.Fatalf("a sample after a full scan listed the units again (%d → %d calls)", calls, h.m.calls["Units"])
		}
	})
}
