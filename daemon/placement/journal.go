package placement

import (
	"errors"

	"github.com/schedpolicyd/schedpolicyd/daemon/statefile"
)

// The central promise, kept by both placement back ends through this
// file: a value is recorded in state.json before it is written, and
// restore puts back only what still holds a value of ours.
//
// The steps, for every write (journal.WriteAll; each a method of
// statefile.Values, the values both record kinds embed):
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
// end's identity check). Restore (RestoreAll) takes each written record:
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

// Journal is a back end's side of state.json: whether its records changed
// since the last save, and the save. Both back ends embed one; all runs
// on the loop.
type Journal struct {
	// Save persists state.json with the back end's records (the
	// engine's store: Engine.Keep); its error says why it failed.
	Save func() error
	// Dirty: a record changed since the last successful save (or none
	// succeeded yet, for a back end that starts dirty).
	Dirty bool
}

// Flush saves state.json if a record changed since the last successful
// save; it reports whether state.json is up to date. Until it is, nothing
// is written.
func (j *Journal) Flush() bool { return j.FlushErr() == nil }

// FlushErr is flush with the cause of a failure: the save's error, or
// "no state file" without a save function.
func (j *Journal) FlushErr() error {
	if !j.Dirty {
		return nil
	}
	if j.Save == nil {
		return errors.New("no state file")
	}
	if err := j.Save(); err != nil {
		return err
	}
	j.Dirty = false
	return nil
}

// Begin records val as v's Pending value, the value about to be written
// (statefile.Values.Begin); state.json must be saved (flush) before the
// write.
func (j *Journal) Begin(v *statefile.Values, val string) {
	if v.Begin(val) {
		j.Dirty = true
	}
}

// Done: the write of val succeeded (statefile.Values.Done).
func (j *Journal) Done(v *statefile.Values, val string) {
	v.Done(val)
	j.Dirty = true
}

// Failed: the write recorded as Pending did not happen
// (statefile.Values.Failed).
func (j *Journal) Failed(v *statefile.Values) {
	v.Failed()
	j.Dirty = true
}

// Theirs: the target holds cur, someone else's value, which becomes the
// original (statefile.Values.Theirs).
func (j *Journal) Theirs(v *statefile.Values, cur string) {
	v.Theirs(cur)
	j.Dirty = true
}

// Restored: nothing of ours is left in the target
// (statefile.Values.Restored).
func (j *Journal) Restored(v *statefile.Values) {
	v.Restored()
	j.Dirty = true
}

// JournalWrite is one write of a batch (journal.WriteAll): the record's
// Values, the value recorded as Pending before the write ("" records none: the value
// is the original, which a crash may leave there safely) and the value
// the target holds once written (Applied).
type JournalWrite struct {
	Values  *statefile.Values
	Pending string
	Value   string
}

// WriteOutcome is what became of one write of a batch.
type WriteOutcome int

const (
	// WriteDone: the target holds the value now (journal.done).
	WriteDone WriteOutcome = iota
	// WriteFailed: the write was refused, or not made (the target is no
	// longer ours, or a save it needed failed): journal.failed.
	WriteFailed
	// WriteSkipped: the target held the value already; the record is left
	// as it is.
	WriteSkipped
)

// WriteAll makes a batch of writes, in the protocol's order: each value
// recorded as Pending (begin), one save, then write(i) for each write i
// in order, each outcome stepped (done, failed, or nothing), and a save
// of the outcomes. It reports whether the writes were made: false when
// there were none, or the first save failed (nothing is written; the
// Pending values stay recorded in memory, saved with the next save).
// write may save again itself (flush) before its own write.
func (j *Journal) WriteAll(ws []JournalWrite, write func(i int) WriteOutcome) bool {
	for _, w := range ws {
		if w.Pending != "" {
			j.Begin(w.Values, w.Pending)
		}
	}
	if len(ws) == 0 || !j.Flush() {
		return false
	}
	for i, w := range ws {
		switch write(i) {
		case WriteDone:
			j.Done(w.Values, w.Value)
		case WriteFailed:
			j.Failed(w.Values)
		}
	}
	// What was written (Applied) or not (Pending cleared) is saved too: a
	// record left claiming an earlier value as ours would take a user's
	// later write of that value, made while no daemon runs, for ours.
	j.Dirty = true
	j.Flush()
	return true
}

// ErrGone is restorer.current's answer for a target that is gone: there
// is nothing left to restore.
var ErrGone = errors.New("gone")

// Restorer is a back end's side of RestoreAll, for its records of type R
// (each one that may hold a value of ours).
type Restorer[R any] interface {
	// Values are r's record's.
	Values(r R) *statefile.Values
	// Current reads the value r's target holds now (a cpulist); ErrGone
	// when the target is gone, the back end having done with the record;
	// another error leaves r for a later restore (the back end logs it).
	Current(r R) (string, error)
	// Ours reports whether cur is a value of ours (statefile.Values.Ours,
	// with the back end's comparison and identity check).
	Ours(r R, cur string) bool
	// Theirs is told that r's target holds someone else's value, cur,
	// before the record takes it as its original (journal.theirs).
	Theirs(r R, cur string)
	// PutBack writes r's original back over cur, a value of ours, and
	// steps the record; it reports whether all of it is back (false: what
	// is not stays recorded for a later run).
	PutBack(r R, cur string) bool
}

// RestoreAll restores each record of recs, in order (those that may hold
// a value of ours): a target gone is done with; a target that holds
// someone else's value keeps it, which becomes the record's original;
// one that holds ours gets its original back. It reports whether
// everything is back; the records are to be saved.
func RestoreAll[R any](j *Journal, b Restorer[R], recs []R) bool {
	ok := true
	for _, r := range recs {
		cur, err := b.Current(r)
		if errors.Is(err, ErrGone) {
			continue
		}
		if err != nil {
			ok = false
			continue
		}
		if !b.Ours(r, cur) {
			b.Theirs(r, cur)
			j.Theirs(b.Values(r), cur)
			continue
		}
		if !b.PutBack(r, cur) {
			ok = false
		}
	}
	j.Dirty = true
	return ok
}
