package cgroupfs

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/schedpolicyd/schedpolicyd/daemon/placement"
	"github.com/schedpolicyd/schedpolicyd/daemon/statefile"
	"github.com/schedpolicyd/schedpolicyd/internal/names"
	"github.com/schedpolicyd/schedpolicyd/internal/testutil"
	"github.com/schedpolicyd/schedpolicyd/policy"
	"github.com/schedpolicyd/schedpolicyd/sysfs"
)

// exemptRig is a cgroupfs placement driven by its engine, keeping
// state.json in a directory of its own, on a managed parent whose
// children the test makes (mkchild); the test scans and plans.
type exemptRig struct {
	t      *testing.T
	p      *Placement
	parent string
	state  string
}

func newExemptRig(t *testing.T, parent string) *exemptRig {
	t.Helper()
	cfg := &placement.Config{CgroupRoot: parent, ProcRoot: t.TempDir(), SampleInterval: time.Second,
		UtilHalfLife: policy.DefaultHalfLife, NoTaskClock: true, PressureFile: filepath.Join(t.TempDir(), "none")}
	r := &exemptRig{t: t, parent: parent, state: t.TempDir()}
	e := placement.NewEngine(cfg, testutil.Logger(t), &placement.Counters{}, nil)
	r.p = New(e)
	r.p.newWatch = func(string) (cgroupSource, error) { return quietWatch{}, nil }
	e.Keep(statefile.NewStore(r.state, statefile.State{Knob: policy.DefaultKnob()}, testutil.Logger(t)))
	if err := r.p.Open(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.p.Close)
	return r
}

func (r *exemptRig) apply() {
	topo, err := policy.BuildTopology([]policy.CPUDesc{{ID: 0, Core: 0, Cluster: 0}, {ID: 1, Core: 1, Cluster: 1}})
	if err != nil {
		r.t.Fatal(err)
	}
	r.p.e.Apply(policy.Powersaving, topo, sysfs.NewCPUSet(0, 1), true)
}

// cpus reads every workload's cpuset.cpus: "NAME=CPUS ..." in name order.
func (r *exemptRig) cpus() string {
	var out []string
	for _, n := range r.p.Names() {
		out = append(out, n+"="+testutil.ReadTrim(r.t, filepath.Join(r.parent, n, "cpuset.cpus")))
	}
	return strings.Join(out, " ")
}

// saved is what state.json holds of the workloads' records: "NAME
// ORIG/PENDING/APPLIED" for each record holding a value of ours.
func (r *exemptRig) saved() string {
	st, err := statefile.LoadState(r.state)
	if err != nil {
		r.t.Fatal(err)
	}
	var out []string
	for _, c := range st.Cgroups {
		if c.Written() {
			out = append(out, filepath.Base(c.Path)+" "+c.Original+"/"+c.Pending+"/"+c.Applied)
		}
	}
	return strings.Join(out, " ")
}

func (r *exemptRig) exempt(entry string) {
	r.t.Helper()
	x, err := names.ParseExempt(entry)
	if err != nil {
		r.t.Fatal(err)
	}
	if _, err := r.p.e.AddExempt(x); err != nil {
		r.t.Fatal(err)
	}
}

func (r *exemptRig) status() string {
	var out []string
	for _, s := range r.p.Status() {
		o := string(s.Override)
		if s.Confined {
			o += "confined"
		}
		out = append(out, s.Name+":"+o)
	}
	return strings.Join(out, " ")
}

// TestCgroupfsExempt on a mock cgroup v2 tree and on a real cgroup v1
// cpuset parent of the test's own: an exempt workload gets its original
// cpuset.cpus back at once through the restore path, its record holding
// nothing of ours in state.json, and is not placed while exempt; a value
// written by hand meanwhile is the workload's, not a release; unexempt,
// the next plan places it again, and the stop restores every original
// (the exempt one's the value written meanwhile).
func TestCgroupfsExempt(t *testing.T) {
	for _, kind := range []string{"v2 mock", "v1 real"} {
		t.Run(kind, func(t *testing.T) {
			var parent, all string
			mkchild := func(name, cpus string) {
				dir := filepath.Join(parent, name)
				if kind == "v1 real" {
					if err := os.Mkdir(dir, 0o755); err != nil {
						t.Fatal(err)
					}
					testutil.Write(t, filepath.Join(dir, "cpuset.mems"), testutil.ReadTrim(t, filepath.Join(parent, "cpuset.mems")))
					testutil.Write(t, filepath.Join(dir, "cpuset.cpus"), cpus)
					return
				}
				testutil.Put(t, filepath.Join(dir, "cpuset.cpus"), cpus)
				testutil.Put(t, filepath.Join(dir, "cpuset.cpus.effective"), "0-1")
				testutil.Put(t, filepath.Join(dir, "cpu.stat"), "usage_usec 0\nuser_usec 0\nsystem_usec 0")
			}
			if kind == "v1 real" {
				parent = testutil.CpusetV1Parent(t, "exempt")
				all = testutil.ReadTrim(t, filepath.Join(parent, "cpuset.cpus"))
				if all != "0-1" {
					t.Skipf("the test's plan is for CPUs 0-1; this machine's cpuset has %s", all)
				}
			} else {
				root := t.TempDir()
				testutil.Put(t, filepath.Join(root, "cgroup.controllers"), "cpuset cpu")
				testutil.Put(t, filepath.Join(root, "cgroup.subtree_control"), "cpuset cpu")
				parent = filepath.Join(root, "schedpolicyd")
				testutil.Put(t, filepath.Join(parent, "cgroup.controllers"), "cpuset cpu")
				testutil.Put(t, filepath.Join(parent, "cgroup.subtree_control"), "cpuset")
				testutil.Put(t, filepath.Join(parent, "cpuset.cpus.effective"), "0-1")
				all = "0-1"
			}
			mkchild("a", all)
			mkchild("b", all)
			mkchild("c", "1")
			r := newExemptRig(t, parent)
			r.p.Scan()
			r.apply()
			testutil.WantEq(t, "packed", r.cpus(), "a=0 b=0 c=0")
			testutil.WantEq(t, "state.json", r.saved(), "a "+all+"//0 b "+all+"//0 c 1//0")
			testutil.WantEq(t, "status", r.status(), "a:confined b:confined c:confined")

			r.exempt("[ac]")
			r.apply()
			testutil.WantEq(t, "a and c exempt: their originals back", r.cpus(), "a="+all+" b=0 c=1")
			testutil.WantEq(t, "state.json: nothing of ours in a and c", r.saved(), "b "+all+"//0")
			testutil.WantEq(t, "status", r.status(), "a:exempt b:confined c:exempt")
			writes := r.p.e.Stats.Writes.Load()
			r.apply()
			if w := r.p.e.Stats.Writes.Load(); w != writes {
				t.Errorf("a plan while exempt wrote %d cpusets", w-writes)
			}

			// Written by hand while exempt: a's own, not a release.
			testutil.Write(t, filepath.Join(parent, "a", "cpuset.cpus"), "1")
			r.p.Recheck()
			testutil.WantEq(t, "status after a's hand edit", r.status(), "a:exempt b:confined c:exempt")

			x, _ := names.ParseExempt("[ac]")
			if err := r.p.e.RemoveExempt(x); err != nil {
				t.Fatal(err)
			}
			r.apply()
			testutil.WantEq(t, "unexempt: placed again", r.cpus(), "a=0 b=0 c=0")
			testutil.WantEq(t, "state.json", r.saved(), "a 1//0 b "+all+"//0 c 1//0")

			if !r.p.e.Restore() {
				t.Fatal("restore incomplete")
			}
			testutil.WantEq(t, "stopped: every original back", r.cpus(), "a=1 b="+all+" c=1")
		})
	}
}
