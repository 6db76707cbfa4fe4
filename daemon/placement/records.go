package placement

import (
	"slices"
	"strings"

	"github.com/schedpolicyd/schedpolicyd/daemon/statefile"
)

// RecordKind is a kind of record state.json holds: a cgroup's
// (statefile.Record, the cgroupfs driver's) or a unit's
// (statefile.UnitRecord, the units driver's).
type RecordKind interface {
	statefile.Record | statefile.UnitRecord
	// Key identifies the record in its table.
	Key() string
	// Kept reports whether state.json keeps the record.
	Kept() bool
}

// Records is the engine's table of its driver's records, by Key: the
// records of state.json the driver's workloads point into, those of
// targets the driver did not find (kept as they are) and those of
// targets it made. The driver changes them through the journal's steps
// (journal.go); the engine loads them from its store (Keep) and puts them
// back at each save.
type Records[R RecordKind] map[string]*R

// List is the records state.json must hold now (Kept), sorted by key;
// nil when there are none.
func (m Records[R]) List() []R {
	var out []R
	for _, r := range m {
		if (*r).Kept() {
			out = append(out, *r)
		}
	}
	slices.SortFunc(out, func(a, b R) int { return strings.Compare(a.Key(), b.Key()) })
	return out
}

// KeepRecords makes the table of e's records of kind R, which its driver
// keeps a handle on: Keep (and LoadRecords) load those of state.json into
// it, each one accept takes (nil: every one; a record refused is dropped
// at the next save), and each save puts it back.
func KeepRecords[R RecordKind](e *Engine, accept func(r *R) bool) Records[R] {
	m := Records[R]{}
	e.records = recordTable[R]{m: m, accept: accept}
	return m
}

// records is a table of records of some kind (recordTable), as the engine
// holds it.
type records interface {
	load(e *Engine, st statefile.State)
	put(s *statefile.Store)
}

type recordTable[R RecordKind] struct {
	m      Records[R]
	accept func(r *R) bool
}

// load takes the records of st of the table's kind, each that accept
// takes; one refused makes the journal dirty (state.json drops it).
func (t recordTable[R]) load(e *Engine, st statefile.State) {
	var saved []R
	switch v := any(&saved).(type) {
	case *[]statefile.Record:
		*v = st.Cgroups
	case *[]statefile.UnitRecord:
		*v = st.Units
	}
	for i := range saved {
		r := saved[i]
		if t.accept != nil && !t.accept(&r) {
			e.Dirty = true
			continue
		}
		t.m[r.Key()] = &r
	}
}

// put sets the store's records of the table's kind to List.
func (t recordTable[R]) put(s *statefile.Store) {
	switch l := any(t.m.List()).(type) {
	case []statefile.Record:
		s.SetCgroups(l)
	case []statefile.UnitRecord:
		s.SetUnits(l)
	}
}
