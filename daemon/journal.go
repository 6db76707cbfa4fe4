package daemon

import (
	"errors"

	"github.com/schedpolicyd/schedpolicyd/daemon/statefile"
)

// The central promise, kept by both placement back ends through this
// file: a value is recorded in state.json before it is written, and
// restore puts back only what still holds a value of ours.
//
// The steps, for every write (journal.writeAll):
//
//  1. the value is recorded as the record's Pending (begin) and
//     state.json is saved (flush); without a successful save nothing is
//     written;
//  2. the value is written; on success it becomes Applied and Pending is
//     cleared (done: Applied is cleared too when the value is the
//     original, nothing of ours is there), on failure Pending is cleared
//     (failed);
//  3. state.json is saved again.
//
// A target (a cgroup's cpuset.cpus, a unit's AllowedCPUs=) still holds a
// value of ours (ours) when it holds the record's Pending or Applied value
// and, for Applied, it is still the target the daemon wrote (the back
// end's identity check). Restore (restoreAll) takes each written record:
// gone, there is nothing to put back; not ours, the value there is
// someone else's and becomes the original (theirs), nothing is written;
// ours, the original is written back.
//
// What differs between the back ends stays with them: what a value is
// (cpulists both, compared with cgroup v1's hotplug trimming for
// cgroups), their identity (a cgroup's inode, settled when its record is
// matched to a cgroup; a unit's AllowedCPUs= drop-ins, statefile.
// UnitRecord.DropIns), and how an original is put back (cgroup v1's
// partial restore of offline CPUs, v2's "inherit" fallback; units'
// widening step through every possible CPU).

// entry is one record's values as the protocol steps them: pointers to a
// statefile.Record's or statefile.UnitRecord's Original, Applied and
// Pending (cpulists; "" for Applied and Pending is none).
type entry struct{ original, applied, pending *string }

// cgroupEntry is r's entry.
func cgroupEntry(r *statefile.Record) entry {
	return entry{&r.Original, &r.Applied, &r.Pending}
}

// unitEntry is r's entry.
func unitEntry(r *statefile.UnitRecord) entry {
	return entry{&r.Original, &r.Applied, &r.Pending}
}

// journal is a back end's side of state.json: whether its records changed
// since the last save, and the save. Both back ends embed one; all runs
// on the loop.
type journal struct {
	// save persists state.json with the back end's records
	// (Daemon.saveBackground); its error says why it failed.
	save func() error
	// dirty: a record changed since the last successful save (or none
	// succeeded yet, for a back end that starts dirty).
	dirty bool
}

// flush saves state.json if a record changed since the last successful
// save; it reports whether state.json is up to date. Until it is, nothing
// is written.
func (j *journal) flush() bool { return j.flushErr() == nil }

// flushErr is flush with the cause of a failure: the save's error, or
// "no state file" without a save function.
func (j *journal) flushErr() error {
	if !j.dirty {
		return nil
	}
	if j.save == nil {
		return errors.New("no state file")
	}
	if err := j.save(); err != nil {
		return err
	}
	j.dirty = false
	return nil
}

// begin records v as e's Pending value, the value about to be written;
// state.json must be saved (flush) before the write.
func (j *journal) begin(e entry, v string) {
	if *e.pending != v {
		*e.pending = v
		j.dirty = true
	}
}

// done: the write of v succeeded. v is Applied (none when it is the
// original: nothing of ours is there), Pending is cleared.
func (j *journal) done(e entry, v string) {
	*e.applied, *e.pending = v, ""
	if v == *e.original {
		*e.applied = ""
	}
	j.dirty = true
}

// failed: the write recorded as Pending did not happen (refused, or not
// tried); Pending is cleared, Applied stays.
func (j *journal) failed(e entry) {
	*e.pending = ""
	j.dirty = true
}

// theirs: the target holds cur, someone else's value. It becomes the
// original, and nothing of ours is there any more.
func (j *journal) theirs(e entry, cur string) {
	*e.original, *e.applied, *e.pending = cur, "", ""
	j.dirty = true
}

// restored: nothing of ours is left in the target (the original is back,
// or the target is gone with our value).
func (j *journal) restored(e entry) {
	*e.applied, *e.pending = "", ""
	j.dirty = true
}

// ours reports whether cur, what e's target holds now, is a value of
// ours: e's Pending value (a write under way, which may have made the
// target's identity anew: not asked), or its Applied value while kept,
// the back end's identity check, says the target is the one the daemon
// wrote. An empty value is none. same compares a recorded value v with
// cur, with the back end's equivalences.
func ours(e entry, cur string, kept bool, same func(v, cur string) bool) bool {
	if *e.pending != "" && same(*e.pending, cur) {
		return true
	}
	return kept && *e.applied != "" && same(*e.applied, cur)
}

// sameValue is ours' comparison of values that are compared as they are
// (canonical cpulists).
func sameValue(v, cur string) bool { return v == cur }

// journalWrite is one write of a batch (journal.writeAll): e's record, the
// value recorded as Pending before the write ("" records none: the value
// is the original, which a crash may leave there safely) and the value
// the target holds once written (Applied).
type journalWrite struct {
	e       entry
	pending string
	value   string
}

// writeOutcome is what became of one write of a batch.
type writeOutcome int

const (
	// writeDone: the target holds the value now (journal.done).
	writeDone writeOutcome = iota
	// writeFailed: the write was refused, or not made (the target is no
	// longer ours, or a save it needed failed): journal.failed.
	writeFailed
	// writeSkipped: the target held the value already; the record is left
	// as it is.
	writeSkipped
)

// writeAll makes a batch of writes, in the protocol's order: each value
// recorded as Pending (begin), one save, then write(i) for each write i
// in order, each outcome stepped (done, failed, or nothing), and a save
// of the outcomes. It reports whether the writes were made: false when
// there were none, or the first save failed (nothing is written; the
// Pending values stay recorded in memory, saved with the next save).
// write may save again itself (flush) before its own write.
func (j *journal) writeAll(ws []journalWrite, write func(i int) writeOutcome) bool {
	for _, w := range ws {
		if w.pending != "" {
			j.begin(w.e, w.pending)
		}
	}
	if len(ws) == 0 || !j.flush() {
		return false
	}
	for i, w := range ws {
		switch write(i) {
		case writeDone:
			j.done(w.e, w.value)
		case writeFailed:
			j.failed(w.e)
		}
	}
	// What was written (Applied) or not (Pending cleared) is saved too: a
	// record left claiming an earlier value as ours would take a user's
	// later write of that value, made while no daemon runs, for ours.
	j.dirty = true
	j.flush()
	return true
}

// errGone is restorer.current's answer for a target that is gone: there
// is nothing left to restore.
var errGone = errors.New("gone")

// restorer is a back end's side of restoreAll, for its records of type R
// (each one that may hold a value of ours).
type restorer[R any] interface {
	// entry is r's record's entry.
	entry(r R) entry
	// current reads the value r's target holds now (a cpulist); errGone
	// when the target is gone, the back end having done with the record;
	// another error leaves r for a later restore (the back end logs it).
	current(r R) (string, error)
	// ours reports whether cur is a value of ours (the function ours, with
	// the back end's comparison and identity check).
	ours(r R, cur string) bool
	// theirs is told that r's target holds someone else's value, cur,
	// before the record takes it as its original (journal.theirs).
	theirs(r R, cur string)
	// putBack writes r's original back over cur, a value of ours, and
	// steps the record; it reports whether all of it is back (false: what
	// is not stays recorded for a later run).
	putBack(r R, cur string) bool
}

// restoreAll restores each record of recs, in order (those that may hold
// a value of ours): a target gone is done with; a target that holds
// someone else's value keeps it, which becomes the record's original;
// one that holds ours gets its original back. It reports whether
// everything is back; the records are to be saved.
func restoreAll[R any](j *journal, b restorer[R], recs []R) bool {
	ok := true
	for _, r := range recs {
		cur, err := b.current(r)
		if errors.Is(err, errGone) {
			continue
		}
		if err != nil {
			ok = false
			continue
		}
		if !b.ours(r, cur) {
			b.theirs(r, cur)
			j.theirs(b.entry(r), cur)
			continue
		}
		if !b.putBack(r, cur) {
			ok = false
		}
	}
	j.dirty = true
	return ok
}
