package placement

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/schedpolicyd/schedpolicyd/daemon/statefile"
	"github.com/schedpolicyd/schedpolicyd/internal/testutil"
)

// The protocol of journal.go on its own: records, saves and writes
// logged in order, the back end played by the test.

// journalRig is a journal over cgroup records by name, whose saves and
// writes are logged in order: "save NAME=ORIGINAL/PENDING/APPLIED ..."
// for each save (the records as saved), "write NAME=VALUE" for each
// write.
type journalRig struct {
	j       Journal
	names   []string
	recs    map[string]*statefile.Record
	log     []string
	saveErr error
}

func newJournalRig(recs ...statefile.Record) *journalRig {
	g := &journalRig{recs: map[string]*statefile.Record{}}
	for i := range recs {
		r := recs[i]
		g.names = append(g.names, r.Path)
		g.recs[r.Path] = &r
	}
	g.j.Save = func() error {
		if g.saveErr != nil {
			g.log = append(g.log, "save failed")
			return g.saveErr
		}
		var out []string
		for _, n := range g.names {
			r := g.recs[n]
			out = append(out, fmt.Sprintf("%s=%s/%s/%s", n, r.Original, r.Pending, r.Applied))
		}
		g.log = append(g.log, "save "+strings.Join(out, " "))
		return nil
	}
	return g
}

func (g *journalRig) entry(name string) *statefile.Values { return &g.recs[name].Values }

// taken is the log so far, " | "-separated, and starts it anew.
func (g *journalRig) taken() string {
	s := strings.Join(g.log, " | ")
	g.log = nil
	return s
}

// write is a batch's write function that logs each write and answers
// with outcome[name] (WriteDone when not given).
func (g *journalRig) write(ws []JournalWrite, names []string, outcome map[string]WriteOutcome) func(int) WriteOutcome {
	return func(i int) WriteOutcome {
		g.log = append(g.log, "write "+names[i]+"="+ws[i].Value)
		if o, ok := outcome[names[i]]; ok {
			return o
		}
		return WriteDone
	}
}

// TestJournalWriteAllOrder: every pending value is recorded and saved in
// one save before the first write; the writes follow in order; then one
// save of the outcomes: applied values, pending cleared, an applied
// value that is the original cleared too, and a write the target already
// held left as recorded. A write of the original records no pending
// value.
func TestJournalWriteAllOrder(t *testing.T) {
	g := newJournalRig(
		statefile.Record{Path: "a", Values: statefile.Values{Original: "0-3"}},
		statefile.Record{Path: "b", Values: statefile.Values{Original: "0-3", Applied: "1"}},
		statefile.Record{Path: "c", Values: statefile.Values{Original: "0-3"}},
		statefile.Record{Path: "d", Values: statefile.Values{Original: "0-3", Applied: "2"}},
	)
	ws := []JournalWrite{
		{Values: g.entry("a"), Pending: "0", Value: "0"},
		{Values: g.entry("b"), Pending: "1-2", Value: "1-2"},
		{Values: g.entry("c"), Pending: "3", Value: "3"},
		{Values: g.entry("d"), Value: "0-3"}, // its original: no pending value
	}
	names := []string{"a", "b", "c", "d"}
	if !g.j.WriteAll(ws, g.write(ws, names, map[string]WriteOutcome{"c": WriteSkipped})) {
		t.Fatal("writeAll reported no writes")
	}
	testutil.WantEq(t, "saves and writes", g.taken(),
		"save a=0-3/0/ b=0-3/1-2/1 c=0-3/3/ d=0-3//2 | "+
			"write a=0 | write b=1-2 | write c=3 | write d=0-3 | "+
			"save a=0-3//0 b=0-3//1-2 c=0-3/3/ d=0-3//")
	if g.j.Dirty {
		t.Error("dirty after the last save")
	}
	if g.j.WriteAll(nil, nil) || g.taken() != "" {
		t.Error("an empty batch saved or reported writes")
	}
}

// TestJournalSaveFailsNothingWritten: when the save before the writes
// fails, nothing is written and WriteAll says so; the pending values stay
// recorded, so the next flush saves them.
func TestJournalSaveFailsNothingWritten(t *testing.T) {
	g := newJournalRig(statefile.Record{Path: "a", Values: statefile.Values{Original: "0-3", Applied: "1"}})
	g.saveErr = errors.New("read-only file system")
	ws := []JournalWrite{{Values: g.entry("a"), Pending: "0", Value: "0"}}
	if g.j.WriteAll(ws, g.write(ws, []string{"a"}, nil)) {
		t.Error("writeAll reported writes after a failed save")
	}
	testutil.WantEq(t, "saves and writes", g.taken(), "save failed")
	g.saveErr = nil
	if !g.j.Flush() {
		t.Fatal("flush failed")
	}
	testutil.WantEq(t, "the next flush", g.taken(), "save a=0-3/0/1")
}

// TestJournalWriteFails: a write refused (or not made) clears its
// pending value and leaves the applied one as it was, and that is saved.
func TestJournalWriteFails(t *testing.T) {
	g := newJournalRig(
		statefile.Record{Path: "a", Values: statefile.Values{Original: "0-3", Applied: "1"}},
		statefile.Record{Path: "b", Values: statefile.Values{Original: "0-3"}},
	)
	ws := []JournalWrite{
		{Values: g.entry("a"), Pending: "0", Value: "0"},
		{Values: g.entry("b"), Pending: "2", Value: "2"},
	}
	g.j.WriteAll(ws, g.write(ws, []string{"a", "b"}, map[string]WriteOutcome{"a": WriteFailed, "b": WriteFailed}))
	testutil.WantEq(t, "saves and writes", g.taken(),
		"save a=0-3/0/1 b=0-3/2/ | write a=0 | write b=2 | save a=0-3//1 b=0-3//")
}

// TestJournalWriteHeldPending: a write that passes through its pending
// value (a units' widening step) and is refused after it leaves that
// value applied, the target's value now, not cleared as a failed write's
// (which would make it someone else's at the next look).
func TestJournalWriteHeldPending(t *testing.T) {
	g := newJournalRig(statefile.Record{Path: "a", Values: statefile.Values{Applied: "1"}})
	ws := []JournalWrite{{Values: g.entry("a"), Pending: "0-7", Value: ""}}
	g.j.WriteAll(ws, g.write(ws, []string{"a"}, map[string]WriteOutcome{"a": WriteHeldPending}))
	testutil.WantEq(t, "saves and writes", g.taken(), "save a=/0-7/1 | write a= | save a=//0-7")
}

// TestOurs: a target holds a value of ours when it holds the pending
// value (the identity check aside: a write under way makes it anew), or
// the applied value while the identity check holds; an empty value is
// none, also where the target holds "" (v2's inherit, an unset
// AllowedCPUs=).
func TestOurs(t *testing.T) {
	for _, c := range []struct {
		applied, pending, cur string
		kept, want            bool
	}{
		{"1", "", "1", true, true},
		{"1", "", "1", false, false}, // rewritten by someone else
		{"", "2", "2", false, true},
		{"1", "2", "2", false, true},
		{"1", "2", "3", true, false},
		{"1", "", "", true, false},
		{"", "2", "", true, false},
	} {
		r := statefile.Record{Values: statefile.Values{Original: "0-3", Applied: c.applied, Pending: c.pending}}
		if got := r.Ours(c.cur, c.kept, nil); got != c.want {
			t.Errorf("ours(applied %q, pending %q, cur %q, kept %v) = %v, want %v", c.applied, c.pending, c.cur, c.kept, got, c.want)
		}
	}
}

// fakeRestore is a ValueIO over journalRig's records: cur holds each
// target's value ("gone", "gone with it", "error" for those), kept its
// identity check (true when not given), widen the value a write-back
// passes through, part the value a write-back leaves where not all of
// the original can be written; WriteBack logs.
type fakeRestore struct {
	g     *journalRig
	cur   map[string]string
	lost  map[string]bool
	widen map[string]string
	part  map[string]string
}

func (f fakeRestore) ReadValue(i int) (Held, error) {
	n := f.g.names[i]
	switch c := f.cur[n]; c {
	case "gone":
		return Held{}, ErrGone
	case "gone with it":
		return Held{}, ErrGoneWithIt
	case "error":
		return Held{}, errors.New("cannot read")
	default:
		return Held{Value: c, Kept: !f.lost[n], Widen: f.widen[n]}, nil
	}
}

func (f fakeRestore) Theirs(i int, h Held) {
	f.g.log = append(f.g.log, "theirs "+f.g.names[i]+"="+h.Value)
}

func (f fakeRestore) WriteBack(i int, orig string, _ Held) (string, bool, error) {
	n := f.g.names[i]
	if p, ok := f.part[n]; ok {
		f.g.log = append(f.g.log, "write "+n+"="+p)
		return p, false, nil
	}
	f.g.log = append(f.g.log, "write "+n+"="+orig)
	return orig, true, nil
}

// values are the rig's records' values, in name order.
func (g *journalRig) values() []*statefile.Values {
	var vs []*statefile.Values
	for _, n := range g.names {
		vs = append(vs, &g.recs[n].Values)
	}
	return vs
}

// TestRestoreAll: a target that holds a value of ours gets its original
// back; one that holds someone else's value (another value, or ours
// written anew by someone else) keeps it, which becomes the record's
// original with nothing of ours left, and nothing is written to it; a
// target gone is done with, its record untouched; one that cannot be read
// stays for a later restore, and RestoreAll says not everything is back.
func TestRestoreAll(t *testing.T) {
	g := newJournalRig(
		statefile.Record{Path: "ours", Values: statefile.Values{Original: "0-3", Applied: "1"}},
		statefile.Record{Path: "pending", Values: statefile.Values{Original: "0-3", Pending: "2"}},
		statefile.Record{Path: "other", Values: statefile.Values{Original: "0-3", Applied: "1"}},
		statefile.Record{Path: "anew", Values: statefile.Values{Original: "0-3", Applied: "1"}},
		statefile.Record{Path: "gone", Values: statefile.Values{Original: "0-3", Applied: "1"}},
	)
	f := fakeRestore{g: g,
		cur:  map[string]string{"ours": "1", "pending": "2", "other": "3", "anew": "1", "gone": "gone"},
		lost: map[string]bool{"anew": true},
	}
	if !g.j.RestoreAll(g.values(), f) {
		t.Error("restoreAll reported something left")
	}
	testutil.WantEq(t, "restore", g.taken(), "write ours=0-3 | write pending=0-3 | theirs other=3 | theirs anew=1")
	for n, want := range map[string]string{"ours": "0-3//", "pending": "0-3//", "other": "3//", "anew": "1//", "gone": "0-3//1"} {
		r := g.recs[n]
		testutil.WantEq(t, n+": record", r.Original+"/"+r.Pending+"/"+r.Applied, want)
	}
	if !g.j.Dirty {
		t.Error("the records are not to be saved")
	}

	g = newJournalRig(statefile.Record{Path: "a", Values: statefile.Values{Original: "0-3", Applied: "1"}})
	f = fakeRestore{g: g, cur: map[string]string{"a": "error"}}
	if g.j.RestoreAll(g.values(), f) {
		t.Error("restoreAll reported everything back with a target it could not read")
	}
	testutil.WantEq(t, "unreadable: writes", g.taken(), "")
	testutil.WantEq(t, "unreadable: record", g.recs["a"].Applied, "1")
}

// TestRestoreAllSteps: a target gone with the daemon's value has nothing
// of ours left (its record restored, nothing written); a value the
// write-back passes through is recorded as Pending and saved before the
// write (not again when it is Pending already), and a failed save writes
// nothing; a write-back that puts back only part of the original leaves
// that part recorded as Applied, and RestoreAll says not everything is
// back.
func TestRestoreAllSteps(t *testing.T) {
	g := newJournalRig(
		statefile.Record{Path: "a", Values: statefile.Values{Original: "", Applied: "1"}},
		statefile.Record{Path: "b", Values: statefile.Values{Original: "0-3", Applied: "1"}},
		statefile.Record{Path: "c", Values: statefile.Values{Original: "0-7", Applied: "1"}},
	)
	f := fakeRestore{g: g,
		cur:   map[string]string{"a": "1", "b": "gone with it", "c": "1"},
		widen: map[string]string{"a": "0-7"},
		part:  map[string]string{"c": "0-3"},
	}
	g.j.Dirty = false
	if g.j.RestoreAll(g.values(), f) {
		t.Error("restoreAll reported everything back with an original restored in part")
	}
	testutil.WantEq(t, "restore", g.taken(), "save a=/0-7/1 b=0-3//1 c=0-7//1 | write a= | write c=0-3")
	for n, want := range map[string]string{"a": "//", "b": "0-3//", "c": "0-7//0-3"} {
		r := g.recs[n]
		testutil.WantEq(t, n+": record", r.Original+"/"+r.Pending+"/"+r.Applied, want)
	}

	g = newJournalRig(statefile.Record{Path: "a", Values: statefile.Values{Original: "", Applied: "1"}})
	g.saveErr = errors.New("disk full")
	f = fakeRestore{g: g, cur: map[string]string{"a": "1"}, widen: map[string]string{"a": "0-7"}}
	if g.j.RestoreAll(g.values(), f) {
		t.Error("restoreAll reported everything back without the save the write needed")
	}
	testutil.WantEq(t, "failed save: writes", g.taken(), "save failed")
	testutil.WantEq(t, "failed save: record", g.recs["a"].Pending+"/"+g.recs["a"].Applied, "0-7/1")
}

// TestDecideRestore: RestoreAll's decision for one value, case by case:
// the read's error first (gone, gone with the value, unreadable), then
// ours or theirs (the Pending value is ours whatever the identity says;
// the Applied one only while kept; any value with Any; Same's
// equivalences), then the widening value, recorded unless it is the
// Pending value already.
func TestDecideRestore(t *testing.T) {
	v := statefile.Values{Original: "0-3", Applied: "1"}
	pend := statefile.Values{Original: "", Applied: "1", Pending: "0-7"}
	trim := func(val, cur string) bool { return val == cur || val == "1-2" && cur == "1" }
	for _, c := range []struct {
		name string
		v    statefile.Values
		h    Held
		err  error
		want RestoreDecision
	}{
		{"gone", v, Held{}, ErrGone, RestoreDecision{Action: RestoreSkip}},
		{"gone, wrapped", v, Held{}, fmt.Errorf("unit: %w", ErrGone), RestoreDecision{Action: RestoreSkip}},
		{"gone with it", v, Held{}, ErrGoneWithIt, RestoreDecision{Action: RestoreDrop}},
		{"unreadable", v, Held{Value: "1", Kept: true}, errors.New("cannot read"), RestoreDecision{Action: RestoreWait}},
		{"applied, kept", v, Held{Value: "1", Kept: true}, nil, RestoreDecision{Action: RestoreWriteBack}},
		{"applied, not kept", v, Held{Value: "1"}, nil, RestoreDecision{Action: RestoreLeaveTheirs}},
		{"another value", v, Held{Value: "2", Kept: true}, nil, RestoreDecision{Action: RestoreLeaveTheirs}},
		{"the original", v, Held{Value: "0-3", Kept: true}, nil, RestoreDecision{Action: RestoreLeaveTheirs}},
		{"any", v, Held{Value: "2", Any: true}, nil, RestoreDecision{Action: RestoreWriteBack}},
		{"same, trimmed", statefile.Values{Original: "0-3", Applied: "1-2"}, Held{Value: "1", Kept: true, Same: trim}, nil, RestoreDecision{Action: RestoreWriteBack}},
		{"not same", statefile.Values{Original: "0-3", Applied: "1-2"}, Held{Value: "1", Kept: true}, nil, RestoreDecision{Action: RestoreLeaveTheirs}},
		{"pending, not kept", pend, Held{Value: "0-7"}, nil, RestoreDecision{Action: RestoreWriteBack}},
		{"widen", statefile.Values{Applied: "1"}, Held{Value: "1", Kept: true, Widen: "0-7"}, nil, RestoreDecision{Action: RestoreWriteBack, Widen: "0-7"}},
		{"widen, pending already", pend, Held{Value: "1", Kept: true, Widen: "0-7"}, nil, RestoreDecision{Action: RestoreWriteBack}},
		{"widen over another pending", statefile.Values{Applied: "1", Pending: "2"}, Held{Value: "2", Widen: "0-7"}, nil, RestoreDecision{Action: RestoreWriteBack, Widen: "0-7"}},
		{"theirs, widen", statefile.Values{Applied: "1"}, Held{Value: "3", Kept: true, Widen: "0-7"}, nil, RestoreDecision{Action: RestoreLeaveTheirs}},
	} {
		got := DecideRestore(c.v, c.h, c.err)
		testutil.WantEq(t, c.name, fmt.Sprintf("%d %q", got.Action, got.Widen), fmt.Sprintf("%d %q", c.want.Action, c.want.Widen))
	}
	// Pure: the values handed in are a copy, and nothing else changes.
	testutil.WantEq(t, "values after", v.Original+"/"+v.Pending+"/"+v.Applied, "0-3//1")
}

// TestRestoreOffLoop: a restore made off the loop records its widening
// value before the work is handed off, unless a pending value is
// recorded already; each result steps the record: back or gone, nothing
// of ours left; theirs, the value becomes the original; not made, the
// widening value is taken back; unknown, the record stays as it is.
func TestRestoreOffLoop(t *testing.T) {
	for _, c := range []struct {
		name       string
		v          statefile.Values
		widen      string
		widened    bool
		begun      string
		res        RestoreResult
		cur, after string
	}{
		{"back", statefile.Values{Applied: "1"}, "0-7", true, "/0-7/1", RestoredBack, "", "//"},
		{"gone", statefile.Values{Applied: "1"}, "0-7", true, "/0-7/1", RestoredGone, "", "//"},
		{"theirs", statefile.Values{Applied: "1"}, "0-7", true, "/0-7/1", RestoredTheirs, "3", "3//"},
		{"not made", statefile.Values{Applied: "1"}, "0-7", true, "/0-7/1", RestoreNotMade, "", "//1"},
		{"unknown", statefile.Values{Applied: "1"}, "0-7", true, "/0-7/1", RestoreUnknown, "", "/0-7/1"},
		{"over a pending value", statefile.Values{Applied: "1", Pending: "2"}, "0-7", false, "/2/1", RestoreNotMade, "", "/2/1"},
		{"no widening", statefile.Values{Original: "0-3", Applied: "1"}, "", false, "0-3//1", RestoreUnknown, "", "0-3//1"},
		{"no widening, not made", statefile.Values{Original: "0-3", Applied: "1", Pending: "2"}, "", false, "0-3/2/1", RestoreNotMade, "", "0-3/2/1"},
	} {
		var j Journal
		v := c.v
		a := j.BeginRestore(&v, c.widen)
		testutil.WantEq(t, c.name+": widened", fmt.Sprint(a.Widened), fmt.Sprint(c.widened))
		testutil.WantEq(t, c.name+": begun", v.Original+"/"+v.Pending+"/"+v.Applied, c.begun)
		testutil.WantEq(t, c.name+": was", a.Was(), c.v.Pending)
		testutil.WantEq(t, c.name+": dirty", fmt.Sprint(j.Dirty), fmt.Sprint(c.widened))
		j.TakeRestore(a, c.res, c.cur)
		testutil.WantEq(t, c.name+": after", v.Original+"/"+v.Pending+"/"+v.Applied, c.after)
	}
}
