package daemon

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/schedpolicyd/schedpolicyd/acpi"
	"github.com/schedpolicyd/schedpolicyd/daemon/statefile"
	"github.com/schedpolicyd/schedpolicyd/internal/testutil"
	"github.com/schedpolicyd/schedpolicyd/policy"
	"github.com/schedpolicyd/schedpolicyd/sysfs"
	"github.com/schedpolicyd/schedpolicyd/tree"
)

// putAtomic replaces path with v (temp file and rename).
func putAtomic(t *testing.T, path, v string) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(v+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// mockLaptop is a 4-core/8-thread laptop (sysfs/testdata/topology) on AC
// with a cgroup v2 directory tree whose managed parent holds two workloads:
// "a" inheriting (empty cpuset.cpus) and "b" restricted to 2-3.
type mockLaptop struct {
	sys, cgroot, managed, tree, state string
}

func newMockLaptop(t *testing.T) mockLaptop {
	t.Helper()
	dir := t.TempDir()
	m := mockLaptop{
		sys:    filepath.Join(dir, "sys"),
		cgroot: filepath.Join(dir, "cgroup"),
		tree:   filepath.Join(dir, "tree"),
		state:  filepath.Join(dir, "state"),
	}
	m.managed = filepath.Join(m.cgroot, "schedpolicyd")
	testutil.CopyFixture(t, "../sysfs/testdata/topology/laptop-4c8t", m.sys)
	ps := filepath.Join(m.sys, "class/power_supply")
	testutil.Put(t, ps+"/AC/type", "Mains")
	testutil.Put(t, ps+"/AC/online", "1")
	testutil.Put(t, ps+"/BAT0/type", "Battery")
	testutil.Put(t, ps+"/BAT0/present", "1")
	testutil.Put(t, ps+"/BAT0/status", "Charging")
	testutil.Put(t, m.cgroot+"/cgroup.controllers", "cpuset cpu io memory")
	testutil.Put(t, m.cgroot+"/cgroup.subtree_control", "cpuset cpu")
	testutil.Put(t, m.managed+"/cgroup.controllers", "cpuset cpu")
	testutil.Put(t, m.managed+"/cgroup.subtree_control", "cpuset")
	testutil.Put(t, m.managed+"/cpuset.cpus.effective", "0-7")
	for name, cpus := range map[string]string{"a": "", "b": "2-3"} {
		testutil.Put(t, filepath.Join(m.managed, name, "cpuset.cpus"), cpus)
		testutil.Put(t, filepath.Join(m.managed, name, "cpuset.cpus.effective"), "0-7")
		testutil.Put(t, filepath.Join(m.managed, name, "cpu.stat"), "usage_usec 0\nuser_usec 0\nsystem_usec 0")
	}
	return m
}

// plug puts the mock laptop on AC (the adapter online, the battery
// charging) or on battery (offline, discharging).
func (m mockLaptop) plug(t *testing.T, ac bool) {
	t.Helper()
	ps := filepath.Join(m.sys, "class/power_supply")
	if ac {
		testutil.Put(t, ps+"/AC/online", "1")
		testutil.Put(t, ps+"/BAT0/status", "Charging")
	} else {
		testutil.Put(t, ps+"/AC/online", "0")
		testutil.Put(t, ps+"/BAT0/status", "Discharging")
	}
}

// start runs the daemon in-process with the plain tree backend and no bus.
func (m mockLaptop) start(t *testing.T) (*Daemon, context.CancelFunc, <-chan error) {
	return m.startCfg(t, nil)
}

// startWith is start with a config change, for tests that need no handle
// on the stop.
func (m mockLaptop) startWith(t *testing.T, edit func(*Config)) *Daemon {
	d, _, _ := m.startCfg(t, edit)
	return d
}

func (m mockLaptop) startCfg(t *testing.T, edit func(*Config)) (*Daemon, context.CancelFunc, <-chan error) {
	t.Helper()
	log := testutil.Logger(t)
	cfg := Config{
		SysfsRoot: m.sys, CgroupRoot: m.managed, TreeDir: m.tree, TreeBackend: "plain",
		StateDir: m.state, Bus: "none", Events: "fsnotify", Debounce: 20 * time.Millisecond,
		RecheckInterval: -1, SampleInterval: 50 * time.Millisecond, UtilHalfLife: 100 * time.Millisecond,
		Log: log,
	}
	if edit != nil {
		edit(&cfg)
	}
	d, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx); close(done) }() // a second receive sees the close
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Error("daemon did not stop")
		}
	})
	select {
	case <-d.Ready():
	case <-d.Done():
		t.Fatal("daemon stopped during start-up")
	case <-time.After(10 * time.Second):
		t.Fatal("daemon not ready")
	}
	return d, cancel, done
}

// stopRun cancels a run startCfg started (cancel, done) and waits for Run
// to return: t fails on Run's error, or when it has not returned within
// 10 s (a hang guard).
func stopRun(t *testing.T, cancel context.CancelFunc, done <-chan error) {
	t.Helper()
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return")
	}
}

// TestDaemonCgroupV2Tree drives placement on a cgroup v2 directory tree:
// adoption, packing on battery, growth with measured utilisation, only
// changed cpusets written, and the originals restored on stop.
func TestDaemonCgroupV2Tree(t *testing.T) {
	m := newMockLaptop(t)
	d, cancel, done := m.start(t)
	a, b := filepath.Join(m.managed, "a/cpuset.cpus"), filepath.Join(m.managed, "b/cpuset.cpus")
	cpus := func() (bool, string) { return false, testutil.ReadTrim(t, a) + " / " + testutil.ReadTrim(t, b) }

	testutil.Eventually(t, "performance: all CPUs", func() (bool, string) {
		_, s := cpus()
		return testutil.ReadTrim(t, a) == "0-7" && testutil.ReadTrim(t, b) == "0-7", s
	})
	if s := d.Snapshot(); s.Policy != policy.Performance || s.PowerSource != "ac" {
		t.Fatalf("snapshot %+v, want performance on ac", s)
	}

	// Nothing changes → nothing is written, across many sample periods.
	stA, _ := os.Stat(a)
	time.Sleep(400 * time.Millisecond)
	if st, _ := os.Stat(a); !st.ModTime().Equal(stA.ModTime()) {
		t.Errorf("a/cpuset.cpus rewritten although the plan did not change")
	}

	// Unplug → powersaving; idle workloads pack onto one thread.
	ps := filepath.Join(m.sys, "class/power_supply")
	testutil.Put(t, ps+"/AC/online", "0")
	testutil.Put(t, ps+"/BAT0/status", "Discharging")
	testutil.Eventually(t, "packed on CPU 0", func() (bool, string) {
		_, s := cpus()
		return testutil.ReadTrim(t, a) == "0" && testutil.ReadTrim(t, b) == "0" && d.Snapshot().Policy == policy.Powersaving, s
	})
	// The plain tree is rewritten just after the snapshot is published.
	testutil.Eventually(t, "tree current_sched_policy powersaving", func() (bool, string) {
		got := testutil.ReadTrim(t, filepath.Join(m.tree, TreePrefix, "current_sched_policy"))
		return got == "powersaving", got
	})

	// Workload a becomes busy: 1.5 CPUs of cpu.stat usage. Confined to one
	// CPU it is saturated, so the set grows at once, SMT sibling first.
	var wg sync.WaitGroup
	stop := make(chan struct{})
	wg.Add(1)
	go func() {
		defer wg.Done()
		start := time.Now()
		for {
			select {
			case <-stop:
				return
			case <-time.After(10 * time.Millisecond):
			}
			usec := int64(1.5 * float64(time.Since(start).Microseconds()))
			tmp := filepath.Join(m.managed, "a/.cpu.stat")
			os.WriteFile(tmp, []byte(fmt.Sprintf("usage_usec %d\nuser_usec 0\nsystem_usec 0\n", usec)), 0o644)
			os.Rename(tmp, filepath.Join(m.managed, "a/cpu.stat"))
		}
	}()
	// Each workload gets its own cpuset: the busy one grows onto the
	// core's two threads, the idle one stays where it was.
	testutil.Eventually(t, "a grown to the core's two threads", func() (bool, string) {
		_, s := cpus()
		return testutil.ReadTrim(t, a) == "0,4" && testutil.ReadTrim(t, b) == "0", s
	})
	close(stop)
	wg.Wait()

	// A new workload created while running is adopted.
	testutil.Put(t, filepath.Join(m.managed, "c/cpuset.cpus"), "")
	testutil.Put(t, filepath.Join(m.managed, "c/cpu.stat"), "usage_usec 0")
	testutil.Eventually(t, "c adopted", func() (bool, string) {
		n := len(d.Snapshot().Workloads)
		return n == 3, fmt.Sprint(n, " workloads")
	})

	// Plain tree: a valid write applies and persists, a bogus one is
	// reverted and changes nothing.
	testutil.Put(t, filepath.Join(m.tree, TreePrefix, "power_aware"), "0")
	testutil.Eventually(t, "power_aware 0 → performance", func() (bool, string) {
		s := d.Snapshot()
		return s.Policy == policy.Performance && testutil.ReadTrim(t, a) == "0-7", string(s.Policy)
	})
	if st, err := statefile.LoadState(m.state); err != nil || st.Knob.PowerAware != 0 {
		t.Errorf("persisted knob = %+v, %v", st.Knob, err)
	}
	testutil.Put(t, filepath.Join(m.tree, TreePrefix, "power_aware"), "7")
	testutil.Eventually(t, "bogus write reverted", func() (bool, string) {
		got := testutil.ReadTrim(t, filepath.Join(m.tree, TreePrefix, "power_aware"))
		return got == "0", got
	})
	if s := d.Snapshot(); s.Knob.PowerAware != 0 {
		t.Errorf("bogus write changed the knob: %+v", s.Knob)
	}

	// Stop: originals come back — "" (inherit) for a, 2-3 for b.
	stopRun(t, cancel, done)
	if got := testutil.ReadTrim(t, a); got != "" {
		t.Errorf("a restored to %q, want empty (inherit)", got)
	}
	if got := testutil.ReadTrim(t, b); got != "2-3" {
		t.Errorf("b restored to %q, want 2-3", got)
	}
	if _, err := os.Stat(filepath.Join(m.tree, TreePrefix, "power_aware")); !os.IsNotExist(err) {
		t.Errorf("plain tree files left behind: %v", err)
	}
}

// TestDaemonRestartKeepsChoice: a choice made through the tree survives a
// restart; a corrupt state file falls back to defaults without failing.
func TestDaemonRestartKeepsChoice(t *testing.T) {
	m := newMockLaptop(t)
	d, cancel, done := m.start(t)
	testutil.Put(t, filepath.Join(m.tree, TreePrefix, "current_sched_policy"), "balance")
	testutil.Eventually(t, "balance", func() (bool, string) {
		s := d.Snapshot()
		return s.Policy == policy.Balance, string(s.Policy)
	})
	cancel()
	<-done
	// A configured default must not replace the choice after a clean stop.
	def := policy.DefaultKnob()
	d2, _, _ := m.startCfg(t, func(c *Config) { c.DefaultKnob = &def })
	if s := d2.Snapshot(); s.Policy != policy.Balance || s.Knob.PowerAware != 2 {
		t.Errorf("after restart: %+v, want balance with power_aware 2", s)
	}
}

func TestNewRejectsBadConfig(t *testing.T) {
	dir := t.TempDir()
	for name, cfg := range map[string]Config{
		"tree backend":            {SysfsRoot: dir, TreeBackend: "nfs"},
		"events":                  {SysfsRoot: dir, Events: "poll"},
		"sysfs root":              {SysfsRoot: filepath.Join(dir, "missing")},
		"upower on without a bus": {SysfsRoot: dir, Bus: "none", UPower: "on"},
	} {
		if _, err := New(cfg); err == nil {
			t.Errorf("%s: New accepted %+v", name, cfg)
		}
	}
}

// TestSettingWords: each setting's words parse to its typed value, and any
// other word is refused with the message New gives for it; the zero
// Config takes the same defaults as the command line and the file.
func TestSettingWords(t *testing.T) {
	for _, tc := range []struct {
		parse func(string) (string, error)
		words []string
		bad   string
		want  string
	}{
		{func(s string) (string, error) { v, err := tree.ParseBackend(s); return string(v), err },
			[]string{"auto", "fuse", "plain"}, "nfs", `tree backend "nfs": want auto, fuse or plain`},
		{func(s string) (string, error) { v, err := acpi.ParseEventSource(s); return string(v), err },
			[]string{"auto", "netlink", "fsnotify", "none"}, "poll", `events "poll": want auto, netlink, fsnotify or none`},
		{func(s string) (string, error) { v, err := ParseBoostMode(s); return string(v), err },
			[]string{"keep", "off", "on"}, "", `boost_on_battery "": want keep, off or on`},
		{func(s string) (string, error) { v, err := acpi.ParseUPowerMode(s); return string(v), err },
			[]string{"auto", "on", "off"}, "On", `upower "On": want auto, on or off`},
	} {
		for _, w := range tc.words {
			if got, err := tc.parse(w); err != nil || got != w {
				t.Errorf("parse %q = %q, %v; want %q", w, got, err, w)
			}
		}
		if got, err := tc.parse(tc.bad); err == nil || err.Error() != tc.want || got != "" {
			t.Errorf("parse %q = %q, %v; want the error %q", tc.bad, got, err, tc.want)
		}
	}
	dir := t.TempDir()
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{SysfsRoot: dir, TreeBackend: "nfs"}, `tree backend "nfs": want auto, fuse or plain`},
		{Config{SysfsRoot: dir, Events: "poll"}, `events "poll": want auto, netlink, fsnotify or none`},
		{Config{SysfsRoot: dir, BoostOnBattery: "maybe"}, `boost_on_battery "maybe": want keep, off or on`},
		{Config{SysfsRoot: dir, UPower: "yes"}, `upower "yes": want auto, on or off`},
	} {
		if _, err := New(tc.cfg); err == nil || err.Error() != tc.want {
			t.Errorf("New(%+v) = %v, want %q", tc.cfg, err, tc.want)
		}
	}
	cfg, _, err := resolveConfig(Config{SysfsRoot: dir})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.TreeBackend != tree.BackendAuto || cfg.Events != acpi.EventsAuto || cfg.BoostOnBattery != BoostKeep || cfg.UPower != acpi.UPowerAuto {
		t.Errorf("defaults: tree %q, events %q, boost %q, upower %q; want auto, auto, keep, auto (the command line's)",
			cfg.TreeBackend, cfg.Events, cfg.BoostOnBattery, cfg.UPower)
	}
}

// TestDaemonSingleInstance: a second daemon on the same state or tree
// directory refuses to start and leaves the first one serving.
func TestDaemonSingleInstance(t *testing.T) {
	m := newMockLaptop(t)
	d, _, _ := m.start(t)
	for name, cfg := range map[string]Config{
		"same state dir": {SysfsRoot: m.sys, TreeDir: filepath.Join(t.TempDir(), "t"), StateDir: m.state, Bus: "none", TreeBackend: "plain"},
		"same tree dir":  {SysfsRoot: m.sys, TreeDir: m.tree, StateDir: t.TempDir(), Bus: "none", TreeBackend: "plain"},
	} {
		d2, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if err := d2.Run(context.Background()); !errors.Is(err, ErrAlreadyRunning) {
			t.Errorf("%s: Run = %v, want ErrAlreadyRunning", name, err)
		}
	}
	if got := testutil.ReadTrim(t, filepath.Join(m.tree, TreePrefix, "current_sched_policy")); got != "performance" {
		t.Errorf("first daemon's tree reads %q after the refused starts", got)
	}
	if d.Snapshot().Policy != policy.Performance {
		t.Error("first daemon disturbed")
	}
}

// TestDaemonBoostOnBattery: boost_on_battery=off switches boost off on
// battery, brings the start-up value back on AC and on exit, and the value
// is in state.json while it is changed.
func TestDaemonBoostOnBattery(t *testing.T) {
	m := newMockLaptop(t)
	boost := filepath.Join(m.sys, "devices/system/cpu/cpufreq/boost")
	testutil.Put(t, boost, "1")
	d, cancel, done := m.startCfg(t, func(c *Config) { c.BoostOnBattery = "off" })
	if got := testutil.ReadTrim(t, boost); got != "1" {
		t.Fatalf("boost on AC = %q, want untouched 1", got)
	}
	ps := filepath.Join(m.sys, "class/power_supply")
	testutil.Put(t, ps+"/AC/online", "0")
	testutil.Put(t, ps+"/BAT0/status", "Discharging")
	testutil.Eventually(t, "boost off on battery", func() (bool, string) {
		got := testutil.ReadTrim(t, boost)
		return got == "0" && d.Snapshot().Boost == "0", got
	})
	st, err := statefile.LoadState(m.state)
	if err != nil || len(st.Boost) != 1 || st.Boost[0].Value != "1" {
		t.Errorf("state while on battery: %+v, %v; want the start-up boost saved", st.Boost, err)
	}
	testutil.Put(t, ps+"/AC/online", "1")
	testutil.Eventually(t, "boost back on AC", func() (bool, string) {
		got := testutil.ReadTrim(t, boost)
		return got == "1", got
	})
	testutil.Put(t, ps+"/AC/online", "0")
	testutil.Eventually(t, "boost off again", func() (bool, string) {
		got := testutil.ReadTrim(t, boost)
		return got == "0", got
	})
	cancel()
	<-done
	if got := testutil.ReadTrim(t, boost); got != "1" {
		t.Errorf("boost after stop = %q, want the start-up 1", got)
	}
	if st, _ := statefile.LoadState(m.state); len(st.Boost) != 0 {
		t.Errorf("state.json still holds a boost setting after a clean stop: %+v", st.Boost)
	}
}

// TestDaemonBoostRecoveredAfterCrash: a crashed run left boost off and its
// start-up value in state.json; the next start puts it back even with
// boost_on_battery=keep.
func TestDaemonBoostRecoveredAfterCrash(t *testing.T) {
	m := newMockLaptop(t)
	boost := filepath.Join(m.sys, "devices/system/cpu/intel_pstate/no_turbo")
	testutil.Put(t, boost, "1") // turbo forbidden by the crashed run
	if err := statefile.SaveState(m.state, statefile.State{Knob: policy.DefaultKnob(), Boost: []sysfs.BoostSetting{{File: "devices/system/cpu/intel_pstate/no_turbo", Value: "0"}}}); err != nil {
		t.Fatal(err)
	}
	m.start(t)
	if got := testutil.ReadTrim(t, boost); got != "0" {
		t.Errorf("no_turbo = %q after restart, want the saved 0 (turbo allowed)", got)
	}
}

// TestDaemonCPUHotplug: when a CPU goes offline (the mock's online list
// changes and its topology directory goes away) no cpuset names it; when
// it comes back it is handed out again.
func TestDaemonCPUHotplug(t *testing.T) {
	m := newMockLaptop(t)
	d, _, _ := m.start(t)
	a := filepath.Join(m.managed, "a/cpuset.cpus")
	testutil.Eventually(t, "all CPUs", func() (bool, string) { g := testutil.ReadTrim(t, a); return g == "0-7", g })
	cpu4 := filepath.Join(m.sys, "devices/system/cpu/cpu4")
	saved := filepath.Join(t.TempDir(), "cpu4")
	if err := os.Rename(cpu4, saved); err != nil {
		t.Fatal(err)
	}
	// Real sysfs files never read empty; a plain write here could be seen
	// truncated, so the mock file is replaced atomically.
	putAtomic(t, filepath.Join(m.sys, "devices/system/cpu/online"), "0-3,5-7")
	testutil.Eventually(t, "CPU 4 gone from every cpuset", func() (bool, string) {
		ga, gb := testutil.ReadTrim(t, a), testutil.ReadTrim(t, filepath.Join(m.managed, "b/cpuset.cpus"))
		return ga == "0-3,5-7" && gb == "0-3,5-7", ga + " / " + gb
	})
	// Packing on battery must not pick CPU 4 either.
	ps := filepath.Join(m.sys, "class/power_supply")
	testutil.Put(t, ps+"/AC/online", "0")
	testutil.Put(t, ps+"/BAT0/status", "Discharging")
	testutil.Eventually(t, "packed", func() (bool, string) {
		return d.Snapshot().Policy == policy.Powersaving, string(d.Snapshot().Policy)
	})
	for _, w := range d.Snapshot().Workloads {
		if sysfs.MustParseCPUList(w.CPUs).Contains(4) {
			t.Errorf("%s on %s names offline CPU 4", w.Name, w.CPUs)
		}
	}
	testutil.Put(t, ps+"/AC/online", "1")
	os.Rename(saved, cpu4)
	putAtomic(t, filepath.Join(m.sys, "devices/system/cpu/online"), "0-7")
	testutil.Eventually(t, "CPU 4 back", func() (bool, string) { g := testutil.ReadTrim(t, a); return g == "0-7", g })
}
