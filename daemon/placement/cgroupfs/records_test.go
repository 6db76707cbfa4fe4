package cgroupfs

// What state.json keeps of the workloads' records (moved from package
// daemon, where each booted a daemon: TestRestoreKeepsRecordsNoRunMatched,
// TestDaemonSavesWhatItWrote).

import (
	"reflect"
	"strings"
	"testing"

	"github.com/schedpolicyd/schedpolicyd/daemon/statefile"
	"github.com/schedpolicyd/schedpolicyd/internal/testutil"
	"github.com/schedpolicyd/schedpolicyd/policy"
)

// TestRestoreKeepsRecordsNoRunMatched, on a real cgroup v1 parent: after
// a crash of a run that packed a=0 b=1 c=0-1, runs that cannot manage
// the parent (no managed parent: --cgroup-root none) or manage another
// one keep its records as they are; the next run on the parent restores
// every original and flag and then drops the records.
func TestRestoreKeepsRecordsNoRunMatched(t *testing.T) {
	c := realTree(t)
	state := t.TempDir()
	r := packed(t, c, state)
	saved := r.saved()
	r.crash()

	other := testutil.CpusetV1Parent(t, "schedpolicyd-test")
	for _, root := range []string{"", other} {
		run(t, root, state, policy.Performance).stop()
		var got []statefile.Record
		for _, rec := range r.saved().Cgroups {
			if !strings.HasPrefix(rec.Path, other) {
				got = append(got, rec)
			}
		}
		if !reflect.DeepEqual(got, saved.Cgroups) {
			t.Fatalf("after a run with cgroup root %q, records\n%+v\nwant them kept\n%+v", root, got, saved.Cgroups)
		}
		testutil.WantEq(t, "cpusets after a run with cgroup root "+root, cpusOf(t, c.parent, "a", "b", "c"), "a=0 b=0 c=0")
	}

	run(t, c.parent, state, policy.Performance).stop()
	wantOriginals(t, c)
	for _, rec := range r.saved().Cgroups {
		if strings.HasPrefix(rec.Path, c.parent+"/") {
			t.Errorf("record %+v left after its workload was restored", rec)
		}
	}
}

// TestSavesWhatItWrote: after a write that no knob change follows (here
// a power change: performance again after powersaving packed b), state.json
// says what the file holds now, not the value written before as applied
// and the new one as pending: a user's write of that earlier value while
// no daemon ran would then be taken for the daemon's at the next start
// and overwritten by the original at its stop. The only saves here are
// the journal's (the rig saves no knob).
func TestSavesWhatItWrote(t *testing.T) {
	forEachTree(t, func(t *testing.T, c *cgtree) {
		c.child("a", "")
		b := c.child("b", "1")
		r := run(t, c.parent, "", policy.Performance)
		r.apply(policy.Powersaving)
		testutil.WantEq(t, "b packed", cpus(t, b), "0")
		r.apply(policy.Performance)
		testutil.WantEq(t, "b spread", cpus(t, b), "0-1")
		var vals []statefile.Values
		for _, rec := range r.saved().Cgroups {
			if rec.Path == b {
				vals = append(vals, rec.Values)
			}
		}
		want := []statefile.Values{{Original: "1", Applied: "0-1"}}
		if !reflect.DeepEqual(vals, want) {
			t.Errorf("state.json's values of b %+v, want what b holds as applied, nothing pending: %+v", vals, want)
		}
	})
}
