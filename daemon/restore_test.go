package daemon

// Restore cases on real cgroup v1 cpusets:
// a machine is never left worse than it was found.

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/schedpolicyd/schedpolicyd/daemon/statefile"
	"github.com/schedpolicyd/schedpolicyd/internal/testutil"
	"github.com/schedpolicyd/schedpolicyd/policy"
)

// v1Workloads makes children of parent with the given cpuset.cpus (mems
// from the parent).
func v1Workloads(t *testing.T, parent string, cpus map[string]string) {
	t.Helper()
	for n, c := range cpus {
		dir := filepath.Join(parent, n)
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		testutil.Put(t, dir+"/cpuset.mems", strings.TrimSpace(testutil.Read(t, parent+"/cpuset.mems")))
		testutil.Put(t, dir+"/cpuset.cpus", c)
	}
}

func cpusOf(t *testing.T, dir string) string {
	return strings.TrimSpace(testutil.Read(t, filepath.Join(dir, "cpuset.cpus")))
}

func flagOf(t *testing.T, dir string) string {
	return strings.TrimSpace(testutil.Read(t, filepath.Join(dir, "cpuset.sched_load_balance")))
}

func needTwoCPUs(t *testing.T, parent string) {
	t.Helper()
	if got := cpusOf(t, parent); got != "0-1" {
		t.Skipf("needs a v1 cpuset parent with CPUs 0-1 (this machine gives %q)", got)
	}
}

func setPolicy(t *testing.T, d *Daemon, p policy.Policy) {
	t.Helper()
	if err := d.do(context.Background(), func() error { return d.setKnob(d.dec.knob.WithCurrentPolicy(p), "test") }); err != nil {
		t.Fatal(err)
	}
}

// crashState simulates kill -9 of a daemon that packed the workloads: it
// returns the cpusets, flags and state.json as the running daemon left
// them; PutBack writes them back after a clean stop restored everything,
// so the next run finds exactly what a crash leaves.
func crashState(t *testing.T, state string, dirs []string) (putBack func()) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(state, statefile.StateFile))
	if err != nil {
		t.Fatal(err)
	}
	cpus, flags := map[string]string{}, map[string]string{}
	for _, d := range dirs {
		cpus[d], flags[d] = cpusOf(t, d), flagOf(t, d)
	}
	return func() {
		for _, d := range dirs {
			testutil.Put(t, d+"/cpuset.cpus", cpus[d])
			testutil.Put(t, d+"/cpuset.sched_load_balance", flags[d])
		}
		if err := os.WriteFile(filepath.Join(state, statefile.StateFile), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// TestRestoreKeepsRecordsNoRunMatched: after a crash of
// a run that packed a=0 b=1 c=0-1, runs that cannot manage the parent
// (--cgroup-root none) or manage another one keep its records as they
// are; the next run on the parent restores every original and flag and
// then drops the records.
func TestRestoreKeepsRecordsNoRunMatched(t *testing.T) {
	parent := testutil.CpusetV1Parent(t, "schedpolicyd-test")
	needTwoCPUs(t, parent)
	orig := map[string]string{"a": "0", "b": "1", "c": "0-1"}
	v1Workloads(t, parent, orig)
	var dirs []string
	for _, n := range []string{"a", "b", "c"} {
		dirs = append(dirs, filepath.Join(parent, n))
	}
	m := thisMachineLaptop(t)
	run := func(root string) (*Daemon, context.CancelFunc, <-chan error) {
		return m.startCfg(t, func(c *Config) { c.CgroupRoot = root })
	}
	d, cancel, done := run(parent)
	setPolicy(t, d, policy.Powersaving)
	packed := cpusOf(t, dirs[0]) + " " + cpusOf(t, dirs[1]) + " " + cpusOf(t, dirs[2])
	if packed == "0 1 0-1" {
		t.Fatalf("powersaving packed nothing (%s); the test needs packed workloads", packed)
	}
	putBack := crashState(t, m.state, dirs)
	saved, _ := statefile.LoadState(m.state)
	cancel()
	<-done
	putBack() // as kill -9 leaves it

	other := testutil.CpusetV1Parent(t, "schedpolicyd-test")
	for _, root := range []string{"", other} {
		_, cancel, done := run(root)
		cancel()
		<-done
		st, err := statefile.LoadState(m.state)
		if err != nil {
			t.Fatal(err)
		}
		want, got := saved.Cgroups, []statefile.Record(nil)
		for _, r := range st.Cgroups {
			if !strings.HasPrefix(r.Path, other) {
				got = append(got, r)
			}
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("after a run with cgroup root %q, records\n%+v\nwant them kept\n%+v", root, got, want)
		}
		for i, d := range dirs {
			if c := cpusOf(t, d); c != strings.Fields(packed)[i] {
				t.Fatalf("a run with cgroup root %q changed %s to %s", root, d, c)
			}
		}
	}

	_, cancel, done = run(parent)
	cancel()
	<-done
	for i, n := range []string{"a", "b", "c"} {
		if got := cpusOf(t, dirs[i]); got != orig[n] {
			t.Errorf("%s = %s after the matching run, want its original %s", n, got, orig[n])
		}
		if got := flagOf(t, dirs[i]); got != "1" {
			t.Errorf("%s sched_load_balance = %s, want 1 as found", n, got)
		}
	}
	st, _ := statefile.LoadState(m.state)
	for _, r := range st.Cgroups {
		if strings.HasPrefix(r.Path, parent+"/") {
			t.Errorf("record %+v left after its workload was restored", r)
		}
	}
}

// cpuOnline sets the real CPU 1 online or offline, skipping where that is
// impossible, and puts it back online at cleanup.
func cpuOnline(t *testing.T, on bool) {
	t.Helper()
	testutil.NeedRealHotplug(t)
	const f = "/sys/devices/system/cpu/cpu1/online"
	v := "0"
	if on {
		v = "1"
	}
	if err := os.WriteFile(f, []byte(v), 0o644); err != nil {
		t.Skipf("cannot set %s to %s here: %v", f, v, err)
	}
	t.Cleanup(func() { os.WriteFile(f, []byte("1"), 0o644) })
}

// hotplug tells the daemon that the online CPUs are now online (its mock
// sysfs view follows the real machine, which the test changed).
func hotplug(t *testing.T, d *Daemon, m mockLaptop, online string) {
	t.Helper()
	testutil.Put(t, filepath.Join(m.sys, "devices/system/cpu/online"), online)
	d.do(context.Background(), func() error { d.onHotplug(); return nil })
}

// TestRestoreRealHotplug (real CPU hotplug of CPU 1): (a) a
// daemon started with CPU 1 offline gives it to the parent and the
// workloads once it is back; (b) a stop while CPU 1 is offline restores
// originals in part and keeps them recorded, with the parent's; the next
// run, with CPU 1 back, restores them in full and drops the records.
func TestRestoreRealHotplug(t *testing.T) {
	testutil.NeedRealHotplug(t)
	parent := testutil.CpusetV1Parent(t, "schedpolicyd-test")
	needTwoCPUs(t, parent)
	v1Workloads(t, parent, map[string]string{"a": "0", "b": "1", "c": "0-1"})
	m := thisMachineLaptop(t)
	run := func() (*Daemon, context.CancelFunc, <-chan error) {
		return m.startCfg(t, func(c *Config) { c.CgroupRoot = parent })
	}

	// (b) first: packed, then CPU 1 goes offline, then a stop.
	d, cancel, done := run()
	setPolicy(t, d, policy.Powersaving)
	cpuOnline(t, false)
	hotplug(t, d, m, "0")
	cancel()
	<-done
	st, _ := statefile.LoadState(m.state)
	recs := map[string]statefile.Record{}
	for _, r := range st.Cgroups {
		recs[filepath.Base(r.Path)] = r
	}
	if r := recs["c"]; r.Original != "0-1" || !r.Written() {
		t.Errorf("c's record after a stop with CPU 1 offline = %+v, want original 0-1 kept", r)
	}
	if r := recs[filepath.Base(parent)]; !r.Parent || r.Original != "0-1" {
		t.Errorf("parent's record = %+v, want original 0-1 kept", r)
	}
	if got := cpusOf(t, parent+"/c"); got != "0" {
		t.Errorf("c = %s with CPU 1 offline, want 0 (its original's online part)", got)
	}

	// (a): a daemon started with CPU 1 offline; then it comes back.
	d, cancel, done = run()
	setPolicy(t, d, policy.Performance)
	cpuOnline(t, true)
	hotplug(t, d, m, "0-1")
	testutil.Eventually(t, "CPU 1 back in the parent and the workloads", func() (bool, string) {
		s := cpusOf(t, parent) + " " + cpusOf(t, parent+"/a") + " " + cpusOf(t, parent+"/b") + " " + cpusOf(t, parent+"/c")
		return s == "0-1 0-1 0-1 0-1", s
	})
	cancel()
	<-done
	for n, want := range map[string]string{"a": "0", "b": "1", "c": "0-1"} {
		if got := cpusOf(t, parent+"/"+n); got != want {
			t.Errorf("after the stop with CPU 1 back %s = %s, want its original %s", n, got, want)
		}
	}
	if st, _ := statefile.LoadState(m.state); len(st.Cgroups) != 0 {
		t.Errorf("records left after everything was restored: %+v", st.Cgroups)
	}
}
