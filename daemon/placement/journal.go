package placement

import (
	"errors"

	"github.com/schedpolicyd/schedpolicyd/daemon/statefile"
)

// The central promise, kept by both placement back ends through this
// file: a value is recorded in state.json before it is written, and
// restore puts back only what still holds a value of ours.
//
// The steps, for every write (Journal.WriteAll; each a method of
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
// end's identity check). Restore (Journal.RestoreAll) takes each written
// record: gone, there is nothing to put back; not ours, the value there
// is someone else's and becomes the original (theirs), nothing is
// written; ours, the original is written back, a value the write passes
// through recorded first.
//
// Those decisions (DecideRestore) and the records' steps are the
// journal's, once for both back ends: RestoreAll's where the driver reads
// and writes on the loop; where it does both off the loop in one go (a
// user's units, on its link), BeginRestore records the widening step
// before the work is handed off, the decision there is DecideRestore's,
// and TakeRestore steps each record with its result. What differs between them stays with them, as a ValueIO
// reading and writing one value: what a value is (cpulists both,
// compared with cgroup v1's hotplug trimming for cgroups: Held.Same),
// their identity (a cgroup's inode, settled when its record is matched
// to a cgroup; a unit's AllowedCPUs= drop-ins, statefile.
// UnitRecord.DropIns: Held.Kept), and how an original is put back
// (cgroup v1's partial restore of offline CPUs, v2's "inherit" fallback;
// units' widening step through every possible CPU: Held.Widen).

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
	// WriteHeldPending: the write passes through its Pending value (a
	// units' widening step), which the target now holds, and the rest was
	// refused: that value is ours and applied (journal.done with it), so
	// that the target is not taken later for someone else's value.
	WriteHeldPending
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
		case WriteHeldPending:
			j.Done(w.Values, w.Values.Pending)
		}
	}
	// What was written (Applied) or not (Pending cleared) is saved too: a
	// record left claiming an earlier value as ours would take a user's
	// later write of that value, made while no daemon runs, for ours.
	j.Dirty = true
	j.Flush()
	return true
}

// ErrGone is ValueIO.ReadValue's answer for a target that is gone, the
// driver having done with its record (cgroupfs: it goes with its
// cgroup): nothing is written, the record is left as it is.
var ErrGone = errors.New("gone")

// ErrGoneWithIt is ValueIO.ReadValue's answer for a target that is gone
// and the daemon's value with it (a unit systemd no longer knows):
// nothing of ours is left, the record is restored (Journal.Restored).
var ErrGoneWithIt = errors.New("gone, and the value with it")

// Held is what a target holds now, as a driver reads it for RestoreAll:
// the value (a cpulist) and what the journal needs to tell whether it is
// ours (statefile.Values.Ours) and how to put the original back.
type Held struct {
	// Value is what the target holds.
	Value string
	// Kept: the target is still the one the daemon wrote (the driver's
	// identity check: a unit's AllowedCPUs= drop-ins; true where the
	// record was matched to its target when adopted, as a cgroup by its
	// inode).
	Kept bool
	// Same compares a recorded value with Value (nil: equal strings;
	// cgroupfs on v1: or the recorded value less CPUs the kernel took
	// away on hotplug).
	Same func(val, cur string) bool
	// Any: any value the target holds is ours (a record migrated from a
	// version-1 state file, which did not record the value written).
	Any bool
	// Widen is a value of ours the write-back passes through, recorded as
	// Pending before the write ("" none: units' every possible CPU on the
	// way to an unset AllowedCPUs=).
	Widen string
}

// ValueIO is a driver's side of RestoreAll: how the target of the i-th
// value of a batch is read, written back and told it is someone else's.
// The decisions (ours or theirs, what is recorded before the write, how
// each record steps) are RestoreAll's.
type ValueIO interface {
	// ReadValue reads what target i holds now. ErrGone, ErrGoneWithIt:
	// the target is gone; another error leaves the record for a later
	// restore (the driver logs it).
	ReadValue(i int) (Held, error)
	// WriteBack writes the original orig over h, a value of ours, and
	// reports whether all of it is back (all); where it is not (a v1
	// cpuset's CPUs offline now), written is the value the target holds
	// now, recorded as Applied for a later run. ErrGone: the target went
	// meanwhile (its record is left); another error: counted and logged
	// by the driver, the record stays for the next start.
	WriteBack(i int, orig string, h Held) (written string, all bool, err error)
	// Theirs is told that target i holds someone else's value, h.Value,
	// before the record takes it as its original (Journal.Theirs).
	Theirs(i int, h Held)
}

// RestoreAction is what DecideRestore decides for one value.
type RestoreAction int

const (
	// RestoreSkip: the target is gone and the driver has done with its
	// record (ErrGone): nothing is written, the record is left.
	RestoreSkip RestoreAction = iota
	// RestoreDrop: the target is gone and the daemon's value with it
	// (ErrGoneWithIt): nothing of ours is left (Journal.Restored).
	RestoreDrop
	// RestoreWait: the target could not be read: nothing is written, the
	// record stays for a later restore, and not everything is back.
	RestoreWait
	// RestoreLeaveTheirs: the target holds someone else's value, which
	// it keeps and which becomes the record's original (Journal.Theirs);
	// nothing is written.
	RestoreLeaveTheirs
	// RestoreWriteBack: the target holds a value of ours; the original is
	// written back, the decision's Widen recorded and saved first where
	// it is not "".
	RestoreWriteBack
)

// RestoreDecision is DecideRestore's answer: the action and, for
// RestoreWriteBack, the value to record as Pending (and save) before the
// write ("" none: the widening value is recorded already, or there is
// none).
type RestoreDecision struct {
	Action RestoreAction
	Widen  string
}

// DecideRestore is RestoreAll's decision for one value v whose target
// was read now as h, or failed to be read with readErr (ReadValue's
// answer). It is pure: it changes nothing, so a driver whose target is
// read off the loop (a user's units, on its link) can take the same
// decision there on a copy of v.
func DecideRestore(v statefile.Values, h Held, readErr error) RestoreDecision {
	switch {
	case errors.Is(readErr, ErrGone):
		return RestoreDecision{Action: RestoreSkip}
	case errors.Is(readErr, ErrGoneWithIt):
		return RestoreDecision{Action: RestoreDrop}
	case readErr != nil:
		return RestoreDecision{Action: RestoreWait}
	case !h.Any && !v.Ours(h.Value, h.Kept, h.Same):
		return RestoreDecision{Action: RestoreLeaveTheirs}
	case h.Widen != "" && h.Widen != v.Pending:
		// A value the write-back passes through is a value of ours
		// too: recorded before it is set.
		return RestoreDecision{Action: RestoreWriteBack, Widen: h.Widen}
	}
	return RestoreDecision{Action: RestoreWriteBack}
}

// RestoreAll restores each value of vs (each a record that may hold a
// value of ours), in order, through io: a target gone is done with; a target that holds someone else's value keeps it,
// which becomes the record's original; one that holds ours gets its
// original back, a value it passes through recorded and saved first. It
// reports whether everything is back; the records are to be saved.
// Each decision is DecideRestore's.
func (j *Journal) RestoreAll(vs []*statefile.Values, io ValueIO) bool {
	ok := true
	for i, v := range vs {
		h, err := io.ReadValue(i)
		d := DecideRestore(*v, h, err)
		switch d.Action {
		case RestoreSkip:
			continue
		case RestoreDrop:
			j.Restored(v)
			continue
		case RestoreWait:
			ok = false
			continue
		case RestoreLeaveTheirs:
			io.Theirs(i, h)
			j.Theirs(v, h.Value)
			continue
		}
		if d.Widen != "" {
			j.Begin(v, d.Widen)
			if !j.Flush() {
				ok = false
				continue
			}
		}
		written, all, err := io.WriteBack(i, v.Original, h)
		switch {
		case errors.Is(err, ErrGone):
		case err != nil:
			ok = false
		case all:
			j.Restored(v)
		default:
			v.Applied, v.Pending = written, ""
			ok = false
		}
	}
	j.Dirty = true
	return ok
}

// Restoring is one value's restore whose read and write-back are made
// off the loop, in one go, by a driver's goroutine (a user's units, on
// its link; the decision there is DecideRestore's, on a copy of the
// values as they were before BeginRestore): the widening step is
// recorded before the work is handed off (BeginRestore), since that
// goroutine cannot come back to the loop between its read and its
// write, and what became of it is stepped on the loop (TakeRestore).
type Restoring struct {
	v   *statefile.Values
	was string
	// Widened: the widening value was recorded as Pending; the
	// write-back may pass through it (and only then).
	Widened bool
}

// Was is the record's Pending before BeginRestore.
func (a Restoring) Was() string { return a.was }

// BeginRestore starts the restore of v made off the loop: widen (a value
// the write-back passes through, "" none) is recorded as v's Pending,
// to be saved (Flush) before the work is handed off, unless v holds a
// pending value already: a write of ours whose outcome the loop has not
// heard, which may be in the target and which only that record says is
// ours; such a target is reset without the widening step.
func (j *Journal) BeginRestore(v *statefile.Values, widen string) Restoring {
	a := Restoring{v: v, was: v.Pending}
	if widen != "" && v.Pending == "" {
		j.Begin(v, widen)
		a.Widened = true
	}
	return a
}

// RestoreResult is what became of a restore made off the loop
// (Restoring), as its driver reports it to TakeRestore.
type RestoreResult int

const (
	// RestoredBack: the original is back (RestoreWriteBack, all of it).
	RestoredBack RestoreResult = iota
	// RestoredGone: the target is gone, and the daemon's value with it
	// (RestoreDrop, or gone during the write-back).
	RestoredGone
	// RestoredTheirs: the target holds someone else's value
	// (RestoreLeaveTheirs), which becomes the original.
	RestoredTheirs
	// RestoreNotMade: nothing was written (the target lingers, could not
	// be read, or the write was refused, or the work was never handed
	// off): the widening value recorded for it is taken back, the record
	// waits for a later restore.
	RestoreNotMade
	// RestoreUnknown: whether the write-back was made is not known (the
	// connection failed during it): the record stays as it is, the
	// widening value included, as a crash would leave it.
	RestoreUnknown
)

// TakeRestore steps a's record with what became of its restore (cur: the
// value the target holds, for RestoredTheirs). A driver that logs the
// record as it was before the widening step reads a.Was first.
func (j *Journal) TakeRestore(a Restoring, res RestoreResult, cur string) {
	switch res {
	case RestoredBack, RestoredGone:
		j.Restored(a.v)
	case RestoredTheirs:
		j.Theirs(a.v, cur)
	case RestoreNotMade:
		a.v.Pending = a.was
		j.Dirty = true
	}
}
