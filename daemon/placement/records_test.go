package placement

import (
	"reflect"
	"testing"

	"github.com/schedpolicyd/schedpolicyd/daemon/statefile"
	"github.com/schedpolicyd/schedpolicyd/internal/testutil"
)

// TestRecordsKeptAndLoaded: the engine's table takes the records of its
// kind from the store (those accept refuses are dropped, and the journal
// is dirty), and puts back those state.json keeps, sorted by key, leaving
// the other kind's as they were loaded.
func TestRecordsKeptAndLoaded(t *testing.T) {
	parent := statefile.Record{Path: "/cg/p", Inode: 1, Parent: true, Values: statefile.Values{Original: "0-3"}}
	written := statefile.Record{Path: "/cg/p/b", Inode: 2, Values: statefile.Values{Original: "0-3", Applied: "0"}}
	bare := statefile.Record{Path: "/cg/p/a", Inode: 3, Values: statefile.Values{Original: "0-3"}}
	refused := statefile.Record{Path: "/cg/p/gone", Inode: 4, Values: statefile.Values{Original: "0-3", Applied: "1"}}
	unit := statefile.UnitRecord{Manager: "system", Unit: "x.service", Values: statefile.Values{Original: "1"}}
	loaded := statefile.State{Cgroups: []statefile.Record{written, refused, bare, parent}, Units: []statefile.UnitRecord{unit}}

	e := NewEngine(&Config{}, testutil.Logger(t), &Counters{}, nil)
	recs := KeepRecords(e, func(r *statefile.Record) bool { return r.Path != refused.Path })
	s := statefile.NewStore(t.TempDir(), loaded, testutil.Logger(t))
	e.Keep(s)
	if !e.Dirty {
		t.Error("a refused record left the journal clean")
	}
	if len(recs) != 3 || recs[refused.Path] != nil || *recs[written.Path] != written {
		t.Errorf("table %v", recs)
	}
	e.PutRecords()
	st := s.State()
	if want := []statefile.Record{parent, written}; !reflect.DeepEqual(st.Cgroups, want) {
		t.Errorf("cgroups put %+v, want %+v", st.Cgroups, want)
	}
	if want := []statefile.UnitRecord{unit}; !reflect.DeepEqual(st.Units, want) {
		t.Errorf("units %+v, want the loaded %+v", st.Units, want)
	}

	u := NewEngine(&Config{}, testutil.Logger(t), &Counters{}, nil)
	urecs := KeepRecords[statefile.UnitRecord](u, nil)
	s = statefile.NewStore(t.TempDir(), loaded, testutil.Logger(t))
	u.Keep(s)
	urecs["system/y.scope"] = &statefile.UnitRecord{Manager: "system", Unit: "y.scope", Created: true}
	u.PutRecords()
	st = s.State()
	if want := []statefile.UnitRecord{unit}; !reflect.DeepEqual(st.Cgroups, loaded.Cgroups) || len(st.Units) != 1 || st.Units[0].Unit != "y.scope" {
		t.Errorf("units driver: cgroups %+v (want as loaded), units %+v (want y.scope alone, not %+v)", st.Cgroups, st.Units, want)
	}
}
