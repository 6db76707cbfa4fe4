package units

import (
	"fmt"
	"strings"
	"testing"
	"testing/synctest"

	"github.com/schedpolicyd/schedpolicyd/daemon/placement"
	"github.com/schedpolicyd/schedpolicyd/internal/names"
	"github.com/schedpolicyd/schedpolicyd/internal/testutil"
	"github.com/schedpolicyd/schedpolicyd/policy"
)

// TestMemUnitsExempt: the engine's exempt list on units of the system
// manager. An exempt unit gets its original AllowedCPUs= back at the
// apply that follows (unset: reset; an administrator's value: that
// value), its record then holding nothing of ours, and is not placed
// while exempt (its status says "exempt", not confined); unexempt, the
// next plan places it again, recorded first. Another unit is placed
// throughout.
func TestMemUnitsExempt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newMemUnits(t)
		h.m.Start("a.service", "schedpolicyd.slice", false)
		h.m.Start("b.service", "schedpolicyd.slice", false)
		h.m.Start("c.service", "schedpolicyd.slice", false)
		h.m.Admin("c.service", true, 0, 1) // an administrator's AllowedCPUs=0-1
		h.open()
		apply := func() { h.apply(policy.Powersaving) }
		apply()
		testutil.WantEq(t, "powersaving", h.taken(),
			"save a.service orig= pending=0 applied=; b.service orig= pending=0 applied=; c.service orig=0-1 pending=0 applied= | "+
				"set a.service=0 | set b.service=0 | set c.service=0 | "+
				"save a.service orig= pending= applied=0; b.service orig= pending= applied=0; c.service orig=0-1 pending= applied=0")
		confined := func() string {
			var out []string
			for _, s := range h.u.Status() {
				switch {
				case s.Override == placement.ExemptOverride:
					out = append(out, s.Name+" exempt")
				case s.Confined:
					out = append(out, s.Name+" confined "+s.CPUs+" by "+string(s.Policy)+" "+s.Manager)
				default:
					out = append(out, s.Name+" free")
				}
			}
			return strings.Join(out, "; ")
		}
		testutil.WantEq(t, "status", confined(), "a.service confined 0 by powersaving system; b.service confined 0 by powersaving system; c.service confined 0 by powersaving system")

		x, _ := names.ParseExempt("system/[ac].service")
		h.u.e.Cfg.Exempt = []names.Exempt{x}
		apply()
		// The originals back, no pending value needed (a crash finds
		// each at its original or at our last value, both known); their
		// records hold nothing of ours, so state.json keeps none.
		testutil.WantEq(t, "exempt a and c", h.taken(),
			"set a.service= | set c.service=0-1 | save b.service orig= pending= applied=0")
		testutil.WantEq(t, "a.service: AllowedCPUs=", h.m.Allowed("a.service"), "")
		testutil.WantEq(t, "c.service: AllowedCPUs=", h.m.Allowed("c.service"), "0-1")
		testutil.WantEq(t, "status while exempt", confined(), "a.service exempt; b.service confined 0 by powersaving system; c.service exempt")
		apply()
		testutil.WantEq(t, "a second plan while exempt", h.taken(), "")

		// Someone sets a's AllowedCPUs= while it is exempt: theirs.
		h.m.Admin("a.service", true, 1)
		h.u.e.Cfg.Exempt = nil
		apply()
		// Recorded before each write; a's value is found to be someone
		// else's before it is overwritten, and becomes its original.
		testutil.WantEq(t, "unexempt: placed again", h.taken(),
			"save a.service orig= pending=0 applied=; b.service orig= pending= applied=0; c.service orig=0-1 pending=0 applied= | set c.service=0 | "+
				"save b.service orig= pending= applied=0; c.service orig=0-1 pending= applied=0")
		testutil.WantEq(t, "a.service: AllowedCPUs=", h.m.Allowed("a.service"), "1")
		testutil.WantEq(t, "a.service: record", h.recOf("a.service"), "a.service orig=1 pending= applied=")
	})
}

// TestUserUnitExempt: a user's unit, placed through that user's manager
// (a fake one served as uid 4242 on its private socket, the system
// manager a fake on a private bus): an entry naming another user's
// manager leaves it placed; one naming its own gives it its original
// back through the user's link (never waited for on the loop: the
// result comes back as the link's message), the widening step of cgroup
// v2 first, and its record then holds nothing of ours; unexempt, it is
// placed again.
func TestUserUnitExempt(t *testing.T) {
	h := hostileAppA(t)
	apply := func() { h.apply(policy.Powersaving) }
	key := workloadKey(hostile, "app-a.scope")
	written := func(what string, want ...string) {
		t.Helper()
		h.pump(what, policy.Powersaving, func() bool {
			return strings.Join(h.usr.Sets(), " ") == strings.Join(want, " ") && !h.u.people[hostile].writing
		})
	}
	apply()
	written("the unit placed", "app-a.scope=01")
	if r := h.u.workloads[key].rec; r.Applied != "0" {
		t.Fatalf("record after the plan: %+v", r.Values)
	}

	other, _ := names.ParseExempt("user:1000/app-*.scope")
	h.u.e.Cfg.Exempt = []names.Exempt{other}
	apply()
	if h.u.people[hostile].writing || len(h.usr.Sets()) != 1 {
		t.Fatalf("another user's entry wrote %v", h.usr.Sets())
	}

	own, _ := names.ParseExempt("user:4242/app-*.scope")
	h.u.e.Cfg.Exempt = []names.Exempt{other, own}
	apply()
	written("the original back", "app-a.scope=01", "app-a.scope=03", "app-a.scope=")
	if r := h.u.workloads[key].rec; r.Written() {
		t.Errorf("record of the exempt unit still holds a value of ours: %+v", r.Values)
	}
	if s := h.u.Status(); len(s) != 1 || s[0].Override != placement.ExemptOverride || s[0].Manager != "user:4242" || s[0].Confined {
		t.Errorf("status %+v", s)
	}

	h.u.e.Cfg.Exempt = nil
	apply()
	written("placed again", "app-a.scope=01", "app-a.scope=03", "app-a.scope=", "app-a.scope=01")
}

// TestUserUnitExemptRefusedAfterWidening: the user's manager takes the
// widening step of an exempt unit's reset (every CPU) and refuses the
// original after it. The unit then holds the widening value, recorded as
// the daemon's: the next apply (the manager no longer refusing) finds it
// ours and resets it, rather than taking "0-1" for someone else's value
// and keeping it for good, the unit's unset original lost.
func TestUserUnitExemptRefusedAfterWidening(t *testing.T) {
	h := hostileAppA(t)
	apply := func() { h.apply(policy.Powersaving) }
	key := workloadKey(hostile, "app-a.scope")
	settled := func(what string, sets, calls int) {
		t.Helper()
		h.pump(what, policy.Powersaving, func() bool {
			return len(h.usr.Sets()) == sets && h.usr.Calls("SetUnitProperties") == calls && !h.u.people[hostile].writing
		})
	}
	record := func() string {
		r := h.u.workloads[key].rec
		return fmt.Sprintf("orig=%s pending=%s applied=%s", r.Original, r.Pending, r.Applied)
	}
	apply()
	settled("the unit placed", 1, 1)

	h.usr.RefuseSets(func(name string, mask []byte) bool { return len(mask) == 0 })
	own, _ := names.ParseExempt("user:4242/app-*.scope")
	h.u.e.Cfg.Exempt = []names.Exempt{own}
	apply()
	settled("the widening step, then the refused original", 2, 3)
	testutil.WantEq(t, "sets after the refusal", strings.Join(h.usr.Sets(), " "), "app-a.scope=01 app-a.scope=03")
	testutil.WantEq(t, "record after the refusal", record(), "orig= pending= applied=0-1")
	testutil.WantEq(t, "the workload's AllowedCPUs= after the refusal", h.u.workloads[key].cpus.String(), "0-1")

	h.usr.RefuseSets(nil)
	apply()
	settled("the original back", 4, 5)
	testutil.WantEq(t, "sets", strings.Join(h.usr.Sets(), " "), "app-a.scope=01 app-a.scope=03 app-a.scope=03 app-a.scope=")
	testutil.WantEq(t, "record at the end", record(), "orig= pending= applied=")
}

// TestMemUnitsRefusedAfterWidening: on cgroup v2 an unset AllowedCPUs= is
// reached through every possible CPU (setAllowed). A system manager that
// takes that step and refuses the reset after it leaves the unit on
// every possible CPU: that value is recorded as the daemon's (applied),
// so that the next apply resets it, rather than taking it for someone
// else's value and keeping it for good. At stop the same refusal leaves
// the widening value pending, which the next restore finds ours.
func TestMemUnitsRefusedAfterWidening(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newMemUnits(t)
		root := t.TempDir()
		testutil.WriteFile(t, root+"/devices/system/cpu/possible", "0-1\n")
		h.u.e.Cfg.SysfsRoot = root
		h.u.unified = true
		h.m.Start("a.service", "schedpolicyd.slice", false)
		h.open()
		apply := func() { h.apply(policy.Powersaving) }
		apply()
		testutil.WantEq(t, "placed", h.taken(),
			"save a.service orig= pending=0 applied= | set a.service=0 | save a.service orig= pending= applied=0")

		h.m.RefuseSets(func(name string, mask []byte) bool { return len(mask) == 0 })
		x, _ := names.ParseExempt("system/a.service")
		h.u.e.Cfg.Exempt = []names.Exempt{x}
		apply()
		testutil.WantEq(t, "exempt, the reset refused after the widening step", h.taken(),
			"save a.service orig= pending=0-1 applied=0 | set a.service=0-1 | save a.service orig= pending= applied=0-1")
		testutil.WantEq(t, "a.service: AllowedCPUs=", h.m.Allowed("a.service"), "0-1")

		h.m.RefuseSets(nil)
		apply()
		testutil.WantEq(t, "exempt, reset", h.taken(),
			"save a.service orig= pending=0-1 applied=0-1 | set a.service=0-1 | set a.service= | save ")
		testutil.WantEq(t, "a.service: AllowedCPUs= at the end", h.m.Allowed("a.service"), "")

		// Placed again, then the restore at stop refused after its
		// widening step: the widening value stays pending.
		h.u.e.Cfg.Exempt = nil
		apply()
		h.taken()
		h.m.RefuseSets(func(name string, mask []byte) bool { return len(mask) == 0 })
		if h.u.Restore() {
			t.Error("Restore reported everything back after a refusal")
		}
		testutil.WantEq(t, "restore refused after the widening step", h.taken(),
			"save a.service orig= pending=0-1 applied=0 | set a.service=0-1")
		testutil.WantEq(t, "record", recs(h.u.records.List()), "a.service orig= pending=0-1 applied=0")
		h.m.RefuseSets(nil)
		if !h.u.Restore() {
			t.Error("Restore reported something left")
		}
		testutil.WantEq(t, "restored", h.taken(), "set a.service=0-1 | set a.service=")
		testutil.WantEq(t, "records at the end", recs(h.u.records.List()), "")
	})
}

// TestUserRestoreRefusedAfterWidening: the reset at stop of a user's unit
// whose original is unset takes the widening step, and the user's manager
// refuses the reset after it: the record keeps the widening value as
// pending (the unit holds it), not taken back, so the next reset finds
// it ours and writes the original back.
func TestUserRestoreRefusedAfterWidening(t *testing.T) {
	h := hostileAppA(t)
	h.apply(policy.Powersaving)
	key := workloadKey(hostile, "app-a.scope")
	h.pump("its value applied", policy.Powersaving, func() bool {
		r := h.u.records[key]
		return r != nil && r.Applied == "0" && r.Pending == "" && !h.u.people[hostile].writing
	})
	h.usr.RefuseSets(func(name string, mask []byte) bool { return len(mask) == 0 })
	if h.u.Restore() {
		t.Fatal("restore reported everything back after a refusal")
	}
	testutil.WantEq(t, "sets after the refused reset", strings.Join(h.usr.Sets(), " "), "app-a.scope=01 app-a.scope=03")
	r := h.u.records[key]
	testutil.WantEq(t, "record after the refused reset", fmt.Sprintf("orig=%s pending=%s applied=%s", r.Original, r.Pending, r.Applied), "orig= pending=0-1 applied=0")
	h.usr.RefuseSets(nil)
	if !h.u.Restore() {
		t.Fatal("restore failed with the manager no longer refusing")
	}
	testutil.WantEq(t, "sets", strings.Join(h.usr.Sets(), " "), "app-a.scope=01 app-a.scope=03 app-a.scope=")
	if r := h.u.records[key]; r != nil && r.Written() {
		t.Fatalf("record %+v after the reset", r.Values)
	}
}

// hostileAppA is the user's unit app-a.scope (background.slice, no
// AllowedCPUs= of its own) on a served hostile rig, adopted under
// performance.
func hostileAppA(t *testing.T) *hostileUnits {
	h := newHostile(t)
	h.unit("app-a.scope", "background.slice", testutil.FakeUnit{})
	h.serve()
	h.pump("the unit", policy.Performance, func() bool { return h.workloads() == "app-a.scope" })
	return h
}
