package cgroupfs

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	logtest "github.com/sirupsen/logrus/hooks/test"

	"github.com/schedpolicyd/schedpolicyd/daemon/placement"
	"github.com/schedpolicyd/schedpolicyd/daemon/statefile"
	"github.com/schedpolicyd/schedpolicyd/internal/testutil"
	"github.com/schedpolicyd/schedpolicyd/policy"
	"github.com/schedpolicyd/schedpolicyd/sysfs"
)

// The cgroupfs driver's behaviour tests run it through its engine as the
// daemon does (start, the loop's part of it, stop) on a cgroup tree of
// the test's own: a mock cgroup v2 tree (a temp dir shaped like
// cgroupfs) and a real cgroup v1 cpuset child of /sys/fs/cgroup/cpuset
// (testutil.CpusetV1Parent, removed at cleanup), each with CPUs 0-1.

// cgtree is a managed parent of the test's own with CPUs 0-1: a mock
// cgroup v2 tree (real false) or a real cgroup v1 cpuset.
type cgtree struct {
	t      *testing.T
	real   bool
	parent string
}

// forEachTree runs body as subtests "v2 mock" and "v1 real"; the real one
// skips, saying why, where this machine has no cgroup v1 cpuset hierarchy
// to write or its CPUs are not 0-1 (the plans the tests expect).
func forEachTree(t *testing.T, body func(t *testing.T, c *cgtree)) {
	t.Run("v2 mock", func(t *testing.T) { body(t, mockTree(t)) })
	t.Run("v1 real", func(t *testing.T) { body(t, realTree(t)) })
}

// mockTree is a mock cgroup v2 root with cpuset and cpu enabled and its
// managed parent "schedpolicyd" with CPUs 0-1 effective; no children.
func mockTree(t *testing.T) *cgtree {
	t.Helper()
	root := t.TempDir()
	testutil.Put(t, filepath.Join(root, "cgroup.controllers"), "cpuset cpu")
	testutil.Put(t, filepath.Join(root, "cgroup.subtree_control"), "cpuset cpu")
	c := &cgtree{t: t, parent: filepath.Join(root, "schedpolicyd")}
	c.fillParent()
	return c
}

// fillParent writes the files the kernel makes in a cgroup v2 parent
// (mock only): after a removal, what a mkdir would have given.
func (c *cgtree) fillParent() {
	testutil.Put(c.t, filepath.Join(c.parent, "cgroup.controllers"), "cpuset cpu")
	testutil.Put(c.t, filepath.Join(c.parent, "cgroup.subtree_control"), "cpuset")
	testutil.Put(c.t, filepath.Join(c.parent, "cpuset.cpus.effective"), "0-1")
}

// realTree is a real cgroup v1 cpuset parent of the test's own
// (testutil.CpusetV1Parent); it skips unless its CPUs are 0-1.
func realTree(t *testing.T) *cgtree {
	t.Helper()
	parent := testutil.CpusetV1Parent(t, "schedpolicyd-test")
	if got := testutil.ReadTrim(t, filepath.Join(parent, "cpuset.cpus")); got != "0-1" {
		t.Skipf("needs a v1 cpuset parent with CPUs 0-1 (this machine gives %q)", got)
	}
	return &cgtree{t: t, real: true, parent: parent}
}

// child makes workload name with cpuset.cpus cpus ("" inherits on v2; on
// v1 the kernel makes it empty and cpus "" writes nothing): on v1 a mkdir
// and its mems and cpus written, as a user does; on the mock the files
// the kernel would show.
func (c *cgtree) child(name, cpus string) string {
	c.t.Helper()
	dir := filepath.Join(c.parent, name)
	if c.real {
		if err := os.Mkdir(dir, 0o755); err != nil {
			c.t.Fatal(err)
		}
		testutil.Write(c.t, filepath.Join(dir, "cpuset.mems"), testutil.ReadTrim(c.t, filepath.Join(c.parent, "cpuset.mems")))
		if cpus != "" {
			testutil.Write(c.t, filepath.Join(dir, "cpuset.cpus"), cpus)
		}
		return dir
	}
	testutil.Put(c.t, filepath.Join(dir, "cpuset.cpus"), cpus)
	testutil.Put(c.t, filepath.Join(dir, "cpuset.cpus.effective"), "0-1")
	testutil.Put(c.t, filepath.Join(dir, "cpu.stat"), "usage_usec 0\nuser_usec 0\nsystem_usec 0")
	return dir
}

// remove removes workload name: rmdir on v1 (a cgroup without tasks),
// the whole directory on the mock.
func (c *cgtree) remove(name string) {
	c.t.Helper()
	dir := filepath.Join(c.parent, name)
	var err error
	if c.real {
		err = syscall.Rmdir(dir)
	} else {
		err = os.RemoveAll(dir)
	}
	if err != nil {
		c.t.Fatal(err)
	}
}

// cpus is dir's cpuset.cpus ("" for an inheriting v2 one).
func cpus(t *testing.T, dir string) string {
	t.Helper()
	return testutil.ReadTrim(t, filepath.Join(dir, "cpuset.cpus"))
}

// cpusOf is "NAME=CPUS ..." of the children names of parent, in order.
func cpusOf(t *testing.T, parent string, names ...string) string {
	t.Helper()
	var out []string
	for _, n := range names {
		out = append(out, n+"="+cpus(t, filepath.Join(parent, n)))
	}
	return strings.Join(out, " ")
}

// inode is path's inode number.
func inode(t *testing.T, path string) uint64 {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	return st.Ino
}

// rig is one run of the cgroupfs placement through its engine as the
// daemon makes it: state.json loaded from state into a store the engine
// keeps (Engine.Keep), the driver opened and its parent scanned, and the
// first plan applied (start); the loop's part as calls (apply, wake,
// until, sample); and the stop: every workload restored and state.json
// saved (stop). The plans are for two CPUs 0 and 1 of their own cores
// and clusters.
type rig struct {
	t      *testing.T
	parent string
	state  string
	cfg    placement.Config
	stats  placement.Counters
	log    *logrus.Logger
	hook   *logtest.Hook
	e      *placement.Engine
	p      *Placement
	store  *statefile.Store
	pol    policy.Policy
	online sysfs.CPUSet
	opened error
	closed bool
	done   chan struct{} // closed at the stop: the loop's end (Engine.LoopDone)
	events int           // the driver's messages handled (step)
	last   string        // what until's last step handled
}

// newRig makes a run on managed parent parent keeping state.json in
// state (a directory of the test's own: t.TempDir() when ""); edit
// changes its placement.Config before the start. Sampling is an hour
// apart (the test samples), there is no CPU pressure file and no task
// clock; /proc is the real one on a real parent. It is not started.
func newRig(t *testing.T, parent, state string, edit func(*placement.Config)) *rig {
	t.Helper()
	if state == "" {
		state = t.TempDir()
	}
	log := testutil.Logger(t)
	r := &rig{t: t, parent: parent, state: state, log: log, hook: logtest.NewLocal(log), online: sysfs.NewCPUSet(0, 1)}
	r.cfg = placement.Config{CgroupRoot: parent, ProcRoot: "/proc", SampleInterval: time.Hour,
		UtilHalfLife: policy.DefaultHalfLife, NoTaskClock: true, PressureFile: filepath.Join(t.TempDir(), "none")}
	if edit != nil {
		edit(&r.cfg)
	}
	return r
}

// start is the daemon's start for the placement: state.json loaded (an
// unusable one is ignored, as the daemon does), the engine keeping it,
// Open, the first scan, and the first plan for pol. The run is stopped
// at cleanup if the test did not.
func (r *rig) start(pol policy.Policy) *rig {
	r.t.Helper()
	st, err := statefile.LoadState(r.state)
	if err != nil {
		r.t.Logf("ignoring saved state: %v", err)
	}
	r.done = make(chan struct{})
	r.e = placement.NewEngine(&r.cfg, r.log, &r.stats, r.done)
	r.p = New(r.e)
	r.store = statefile.NewStore(r.state, st, r.log)
	r.e.Keep(r.store)
	if r.opened = r.e.Open(); r.opened != nil {
		r.t.Logf("open: %v", r.opened)
	}
	r.t.Cleanup(func() {
		if !r.closed {
			r.stop()
		}
	})
	r.e.Scan()
	r.apply(pol)
	return r
}

// run is newRig and start for policy pol.
func run(t *testing.T, parent, state string, pol policy.Policy) *rig {
	t.Helper()
	return newRig(t, parent, state, nil).start(pol)
}

// runAB is run on a mock tree with workloads a (cpuset.cpus empty) and b
// (1), for performance; it checks that both were adopted.
func runAB(t *testing.T) (*cgtree, *rig) {
	t.Helper()
	c := mockTree(t)
	c.child("a", "")
	c.child("b", "1")
	r := run(t, c.parent, "", policy.Performance)
	testutil.WantEq(t, "workloads", r.names(), "a b")
	return c, r
}

// topo is the plans' topology: CPUs 0 and 1, each its own core and
// cluster.
func (r *rig) topo() policy.Topology {
	topo, err := policy.BuildTopology([]policy.CPUDesc{{ID: 0, Core: 0, Cluster: 0}, {ID: 1, Core: 1, Cluster: 1}})
	if err != nil {
		r.t.Fatal(err)
	}
	return topo
}

// apply is a decision for pol, forced, as a policy change makes it.
func (r *rig) apply(pol policy.Policy) {
	r.pol = pol
	r.decide("test", true)
}

// decide is the daemon's recompute for the placement: a plan for the
// policy in force.
func (r *rig) decide(why string, force bool) {
	if force {
		r.e.Freshen()
	}
	r.e.Apply(r.pol, r.topo(), r.online, force)
}

// sample is the loop's periodic sample and the decision after it.
func (r *rig) sample() {
	changed := r.e.OnSample()
	r.decide("sample", changed)
}

// hotplug is the daemon's handling of a change of the online CPUs to
// online (Daemon.onHotplug): the driver follows it (Engine.Hotplug) and
// a forced decision plans on them. The plans' topology stays CPUs 0 and
// 1, as the daemon's does where only the online list changed.
func (r *rig) hotplug(online sysfs.CPUSet) {
	before := r.online
	r.online = online
	r.e.Hotplug(before, online)
	r.decide("cpu hotplug", true)
}

// step waits for the driver's next wake or message (the managed
// parent's watch: a child made or removed, a cpuset written, a task
// attached; a watched task's exit) and handles it as the loop does,
// making the decisions it asks for; where nothing watches the parent it
// is the periodic sample instead. It says which it was.
func (r *rig) step() string {
	r.t.Helper()
	if r.p.Polls() {
		// Nothing watches the managed parent (it could not be opened):
		// the loop samples, and each sample scans.
		r.sample()
		return "sample"
	}
	select {
	case <-r.e.WakeC(placement.WakeChanged):
		r.e.OnWake(placement.WakeChanged).Do(r.decide)
		return "changed"
	case <-r.e.WakeC(placement.WakeWritten):
		r.e.OnWake(placement.WakeWritten).Do(r.decide)
		return "written"
	case <-r.e.WakeC(placement.WakeAttached):
		r.e.OnWake(placement.WakeAttached).Do(r.decide)
		return "attached"
	case m := <-r.e.EventsC():
		r.events++
		r.e.OnMsg(m).Do(r.decide)
		return fmt.Sprintf("event %T", m)
	}
}

// until handles the driver's wakes (step) until cond holds; cond is
// checked first. No time bound: each step waits for an event the test
// caused, and a missing one is the test binary's -timeout to catch (the
// log then shows the steps taken).
func (r *rig) until(what string, cond func() bool) {
	r.t.Helper()
	for !cond() {
		r.last = r.step()
		r.t.Logf("%s: %s", what, r.last)
	}
}

// stop is the daemon's stop for the placement: every workload restored,
// state.json saved with what is left, the driver closed. It reports
// whether everything was restored.
func (r *rig) stop() bool {
	r.t.Helper()
	r.closed = true
	close(r.done)
	ok := r.e.Restore()
	r.e.PutRecords()
	if err := r.store.Save(); err != nil {
		r.t.Errorf("saving state.json at the stop: %v", err)
	}
	r.e.Close()
	return ok
}

// crash ends the run as kill -9 does: nothing restored, state.json as
// the last save left it; the driver's files, watches and lock let go as
// a process's exit lets them go.
func (r *rig) crash() {
	r.closed = true
	close(r.done)
	r.e.Close()
}

// saved is state.json as the last save left it.
func (r *rig) saved() statefile.State {
	r.t.Helper()
	st, err := statefile.LoadState(r.state)
	if err != nil {
		r.t.Fatal(err)
	}
	return st
}

// names are the workloads the driver manages, "a b ..." in name order.
func (r *rig) names() string { return strings.Join(r.p.Names(), " ") }

// logged are the messages logged so far that contain s, each with its
// fields "k=v" in key order.
func (r *rig) logged(s string) []string {
	var out []string
	for _, e := range r.hook.AllEntries() {
		if !strings.Contains(e.Message, s) {
			continue
		}
		line := e.Message
		for _, k := range slices.Sorted(maps.Keys(e.Data)) {
			line += fmt.Sprintf(" %s=%v", k, e.Data[k])
		}
		out = append(out, line)
	}
	return out
}

// originals is path → original of st's workload records holding a value
// of ours (what a restore would write back).
func originals(st statefile.State) map[string]string {
	m := map[string]string{}
	for _, r := range st.Cgroups {
		if !r.Parent && r.Written() {
			m[r.Path] = r.Original
		}
	}
	return m
}
