package cgroupfs

// Record before writing, restore only what is still ours, across crashes
// and restarts (moved from package daemon, where each booted a daemon:
// TestDaemonRecoversOriginalsAfterCrash,
// TestDaemonIgnoresOriginalOfAnotherCgroup, the trial cases N1, N3, N4,
// N2, TestDaemonQuietsLoadBalance, TestRecordWithoutInodeNotUsed).

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/schedpolicyd/schedpolicyd/daemon/statefile"
	"github.com/schedpolicyd/schedpolicyd/internal/testutil"
	"github.com/schedpolicyd/schedpolicyd/policy"
)

// TestRecoversOriginalsAfterCrash: a crashed run left workload a packed
// on CPU 0 and its true original ("1") in state.json. The next run must
// restore 1 on stop, not the packed set it found.
func TestRecoversOriginalsAfterCrash(t *testing.T) {
	forEachTree(t, func(t *testing.T, c *cgtree) {
		a, b := c.child("a", "0"), c.child("b", "1")
		state := t.TempDir()
		if err := statefile.SaveState(state, statefile.State{
			Knob:    policy.DefaultKnob(),
			Cgroups: []statefile.Record{{Path: a, Inode: inode(t, a), Values: statefile.Values{Original: "1", Applied: "0"}}},
		}); err != nil {
			t.Fatal(err)
		}
		r := run(t, c.parent, state, policy.Performance)
		testutil.WantEq(t, "performance: a spread", cpus(t, a), "0-1")
		// While running, state.json holds both workloads' originals.
		testutil.WantEq(t, "running state.json's originals", fmt.Sprint(originals(r.saved())), fmt.Sprint(map[string]string{a: "1", b: "1"}))
		if !r.stop() {
			t.Error("restore incomplete")
		}
		testutil.WantEq(t, "a restored to the saved original", cpus(t, a), "1")
		if st := r.saved(); len(st.Cgroups) != 0 {
			t.Errorf("after a clean stop state.json still holds records %+v", st.Cgroups)
		}
	})
}

// TestIgnoresOriginalOfAnotherCgroup: a saved original whose inode does
// not match the directory now at its path (the cgroup was removed and
// made again while no daemon ran) is not used; a matching one is.
func TestIgnoresOriginalOfAnotherCgroup(t *testing.T) {
	forEachTree(t, func(t *testing.T, c *cgtree) {
		a, b := c.child("a", "0"), c.child("b", "0")
		state := t.TempDir()
		if err := statefile.SaveState(state, statefile.State{
			Knob: policy.DefaultKnob(),
			Cgroups: []statefile.Record{
				{Path: a, Inode: inode(t, a), Values: statefile.Values{Original: "1", Applied: "0"}},
				{Path: b, Inode: inode(t, b) + 1, Values: statefile.Values{Original: "0-1", Applied: "0"}},
			},
		}); err != nil {
			t.Fatal(err)
		}
		run(t, c.parent, state, policy.Performance).stop()
		testutil.WantEq(t, "a restored to its saved original", cpus(t, a), "1")
		testutil.WantEq(t, "b restored as found (the saved 0-1 was another cgroup's)", cpus(t, b), "0")
	})
}

// packed is the trial cases' start: workloads a=0 b=1 c=0-1 packed by a
// powersaving plan; it fails unless b was written (the cases need a
// value of ours in it).
func packed(t *testing.T, c *cgtree, state string) *rig {
	t.Helper()
	for n, v := range trialOriginals {
		c.child(n, v)
	}
	r := run(t, c.parent, state, policy.Performance)
	r.apply(policy.Powersaving)
	if got := cpusOf(t, c.parent, "a", "b", "c"); got != "a=0 b=0 c=0" {
		t.Fatalf("packed: %s, want a=0 b=0 c=0", got)
	}
	return r
}

var trialOriginals = map[string]string{"a": "0", "b": "1", "c": "0-1"}

// wantOriginals checks that a, b and c (named as names says, where
// given) hold their originals and, on v1, sched_load_balance 1 as found.
func wantOriginals(t *testing.T, c *cgtree, names ...string) {
	t.Helper()
	for i, n := range []string{"a", "b", "c"} {
		dir := filepath.Join(c.parent, n)
		if i < len(names) {
			dir = filepath.Join(c.parent, names[i])
		}
		testutil.WantEq(t, dir, cpus(t, dir), trialOriginals[n])
		if c.real {
			testutil.WantEq(t, dir+" sched_load_balance as found", testutil.ReadTrim(t, filepath.Join(dir, "cpuset.sched_load_balance")), "1")
		}
	}
}

// TestTrialRenamedWorkload (N3): a workload renamed while packed keeps
// its record (same inode) and is restored under its new name.
func TestTrialRenamedWorkload(t *testing.T) {
	forEachTree(t, func(t *testing.T, c *cgtree) {
		r := packed(t, c, "")
		if err := os.Rename(c.parent+"/b", c.parent+"/b2"); err != nil {
			t.Skipf("cannot rename a cgroup here: %v", err)
		}
		r.until("b2 adopted, b gone", func() bool { return r.names() == "a b2 c" })
		r.stop()
		wantOriginals(t, c, "a", "b2", "c")
	})
}

// TestTrialSymlinkedRoot (N4): after a crash, a run that names the same
// parent through a symlink restores it: records are keyed by the
// resolved path.
func TestTrialSymlinkedRoot(t *testing.T) {
	forEachTree(t, func(t *testing.T, c *cgtree) {
		state := t.TempDir()
		packed(t, c, state).crash()
		link := filepath.Join(t.TempDir(), "cs")
		if err := os.Symlink(filepath.Dir(c.parent), link); err != nil {
			t.Fatal(err)
		}
		run(t, filepath.Join(link, filepath.Base(c.parent)), state, policy.Performance).stop()
		wantOriginals(t, c)
	})
}

// TestTrialParentRenamedAway (N2), on a real cgroup v1 parent: the
// managed parent renamed away while its children are packed: what is
// ours in them is put back through the files held open before they are
// forgotten.
func TestTrialParentRenamedAway(t *testing.T) {
	c := realTree(t)
	r := packed(t, c, "")
	old := c.parent + "-old"
	if err := os.Rename(c.parent, old); err != nil {
		t.Skipf("cannot rename a cgroup here: %v", err)
	}
	t.Cleanup(func() {
		for _, n := range []string{"a", "b", "c"} {
			os.Remove(filepath.Join(old, n))
		}
		os.Remove(old)
	})
	r.until("parent recreated", func() bool {
		_, err := os.Stat(c.parent + "/cpuset.cpus")
		return err == nil && r.names() == ""
	})
	r.stop()
	for _, n := range []string{"a", "b", "c"} {
		testutil.WantEq(t, filepath.Base(old)+"/"+n, cpus(t, filepath.Join(old, n)), trialOriginals[n])
	}
}

// TestTrialPendingPromoted (N1), on a real cgroup v1 parent: a crash
// after a write recorded only as pending; the next run finds that value
// in the file, so it is the applied one now: a later write that fails
// (EBUSY: a child of the workload uses a CPU the plan takes away) does
// not lose it, and the stop restores the original.
func TestTrialPendingPromoted(t *testing.T) {
	c := realTree(t)
	a := c.child("a", "0-1")
	g := filepath.Join(a, "g")
	if err := os.Mkdir(g, 0o755); err != nil {
		t.Fatal(err)
	}
	testutil.Write(t, filepath.Join(g, "cpuset.mems"), testutil.ReadTrim(t, filepath.Join(a, "cpuset.mems")))
	testutil.Write(t, filepath.Join(g, "cpuset.cpus"), "1")
	state := t.TempDir()
	if err := statefile.SaveState(state, statefile.State{
		Knob: policy.Knob{PowerAware: policy.PowerAwareOn, PowerAwarePolicy: policy.Powersaving}, Chosen: true,
		Cgroups: []statefile.Record{{Path: a, Inode: inode(t, a), Values: statefile.Values{Original: "1", Pending: "0-1"}}},
	}); err != nil {
		t.Fatal(err)
	}
	r := run(t, c.parent, state, policy.Powersaving)
	r.stop()
	testutil.WantEq(t, "a after the stop: its original", cpus(t, a), "1")
	if st := r.saved(); len(originals(st)) != 0 {
		t.Errorf("records left: %+v", st.Cgroups)
	}
}

// TestQuietsLoadBalance, on a real cgroup v1 parent (load-balanced): the
// placement clears cpuset.sched_load_balance on the workloads it places
// (each cpuset write then skips a machine-wide sched-domain rebuild),
// records that in state.json before the write, leaves a workload whose
// flag was already 0 alone, and sets the flags back on a clean stop — or
// at the next start after a crash.
func TestQuietsLoadBalance(t *testing.T) {
	c := realTree(t)
	a, b := c.child("a", ""), c.child("b", "")
	testutil.Write(t, filepath.Join(b, "cpuset.sched_load_balance"), "0")
	flags := func() string {
		return "a=" + testutil.ReadTrim(t, filepath.Join(a, "cpuset.sched_load_balance")) +
			" b=" + testutil.ReadTrim(t, filepath.Join(b, "cpuset.sched_load_balance"))
	}
	state := t.TempDir()
	r := run(t, c.parent, state, policy.Performance)
	testutil.WantEq(t, "flags while placed", flags(), "a=0 b=0")
	cleared := map[string]uint64{}
	for _, rec := range r.saved().Cgroups {
		if rec.LoadBalanceCleared {
			cleared[rec.Path] = rec.Inode
		}
	}
	testutil.WantEq(t, "state.json sched_load_balance_cleared", fmt.Sprint(cleared), fmt.Sprint(map[string]uint64{a: inode(t, a)}))
	r.stop()
	testutil.WantEq(t, "after a clean stop: a set back, b never touched", flags(), "a=1 b=0")

	// A crash: state.json says the run cleared a, and a is still 0. It
	// also names b — but with another inode: b was removed and made again
	// after the crash, and its 0 is the user's own.
	testutil.Write(t, filepath.Join(a, "cpuset.sched_load_balance"), "0")
	if err := statefile.SaveState(state, statefile.State{Knob: policy.DefaultKnob(), Cgroups: []statefile.Record{
		{Path: a, Inode: inode(t, a), LoadBalanceCleared: true},
		{Path: b, Inode: inode(t, b) + 1, LoadBalanceCleared: true},
	}}); err != nil {
		t.Fatal(err)
	}
	run(t, c.parent, state, policy.Performance).stop()
	testutil.WantEq(t, "after a crash and a clean stop (b is another cgroup now)", flags(), "a=1 b=0")
}

// TestRecordWithoutInodeNotUsed is the trust issue's fifth case, on a
// real cgroup v1 parent: state.json says an earlier run created
// workload "admin" and packed it (original 1), but its record has no
// inode, and an administrator's empty cgroup "admin" (cpus 0) is there
// now. The same with a version-1 file, whose created map may hold inode
// 0 and whose originals may have no original_inodes. The record is not
// used, and the placement says so: the empty cgroup is never removed,
// and a stop leaves it as it was found (0), not at the record's
// original.
func TestRecordWithoutInodeNotUsed(t *testing.T) {
	for name, file := range map[string]func(admin string) string{
		"version 2 record": func(admin string) string {
			return `{"version": 2, "power_aware": 1, "power_aware_policy": "powersaving",
  "cgroups": [{"path": "` + admin + `", "original_cpus": "1", "applied_cpus": "0", "created": true}]}`
		},
		"version 1 file": func(admin string) string {
			return `{"version": 1, "power_aware": 1, "power_aware_policy": "powersaving",
  "originals": {"` + admin + `": "1"}, "created": {"` + admin + `": 0}}`
		},
	} {
		t.Run(name, func(t *testing.T) {
			c := realTree(t)
			admin := c.child("admin", "0")
			state := t.TempDir()
			testutil.WriteFile(t, filepath.Join(state, statefile.StateFile), file(admin))
			if st, err := statefile.LoadState(state); err != nil || len(st.Cgroups) != 1 || st.Cgroups[0].Inode != 0 || !st.Cgroups[0].Created {
				t.Fatalf("the file's record: %+v %v, want one created record without inode", st.Cgroups, err)
			}
			r := run(t, c.parent, state, policy.Performance)
			testutil.WantEq(t, "admin adopted and spread (performance)", cpus(t, admin), "0-1")
			// A created workload without tasks is reaped at the next
			// event: give it one (the periodic sample's).
			r.sample()
			if _, err := os.Stat(admin); err != nil {
				t.Fatalf("the administrator's cgroup was removed: %v", err)
			}
			if got := r.logged("cannot be shown to be this cgroup's"); len(got) != 1 || !strings.Contains(got[0], admin) {
				t.Fatalf("warnings about the record without inode: %q, want one naming %s", got, admin)
			}
			if got := r.logged("its cgroup is removed"); len(got) != 0 {
				t.Fatalf("the placement says %q", got)
			}
			r.stop()
			testutil.WantEq(t, "admin after the stop: as found, not the record's original 1", cpus(t, admin), "0")
		})
	}
}
