package daemon

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/schedpolicyd/schedpolicyd/daemon/placement"
	"github.com/schedpolicyd/schedpolicyd/daemon/statefile"
	"github.com/schedpolicyd/schedpolicyd/internal/testutil"
	"github.com/schedpolicyd/schedpolicyd/policy"
	"github.com/schedpolicyd/schedpolicyd/sysfs"
)

// thisMachineLaptop is a mock laptop whose topology names this machine's
// online CPUs, so the daemon can write them into real cpusets.
func thisMachineLaptop(t *testing.T) mockLaptop {
	t.Helper()
	m := newMockLaptop(t)
	online := strings.TrimSpace(testutil.Read(t, "/sys/devices/system/cpu/online"))
	os.RemoveAll(filepath.Join(m.sys, "devices"))
	testutil.Put(t, filepath.Join(m.sys, "devices/system/cpu/online"), online)
	return m
}

// realV1Daemon starts the daemon on thisMachineLaptop with a real cgroup v1
// cpuset as the managed parent and the real /proc.
func realV1Daemon(t *testing.T, edit func(*Config)) (*Daemon, string) {
	t.Helper()
	parent := testutil.CpusetV1Parent(t, "schedpolicyd-test")
	m := thisMachineLaptop(t)
	d := m.startWith(t, func(c *Config) {
		c.CgroupRoot = parent
		if edit != nil {
			edit(c)
		}
	})
	return d, parent
}

func needPSI(t *testing.T) {
	t.Helper()
	tr, err := sysfs.OpenPressureTrigger("/proc/pressure/cpu", placement.PressureStallUnpriv, placement.PressureWindowUnpriv)
	if errors.Is(err, sysfs.ErrNoPSI) {
		t.Skipf("this kernel has no PSI (/proc/pressure/cpu): %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	tr.Close()
}

func (d *Daemon) isSampling() bool {
	var on bool
	d.do(context.Background(), func() error { on = d.place.Sampling(); return nil })
	return on
}

// TestDaemonIdleStopsSampling: with every workload idle the
// daemon stops sampling — no periodic timer — and starts again when its
// tasks wait for a CPU, which the kernel's PSI trigger reports. Real cgroup
// v1 cpusets, real /proc/pressure/cpu, real busy processes.
func TestDaemonIdleStopsSampling(t *testing.T) {
	needPSI(t)
	d, parent := realV1Daemon(t, nil) // 50 ms sampling period
	dir := filepath.Join(parent, "job")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "job adopted", func() (bool, string) {
		return len(d.Snapshot().Workloads) == 1, fmt.Sprint(d.Snapshot().Workloads)
	})
	// Tasks that wait first and then spin: more spinners than CPUs, so
	// they wait for CPUs. Attaching them writes cgroup.procs (a wake-up);
	// the spinning later writes nothing anywhere.
	spin := 2*runtime.NumCPU() + 1
	var procs []*exec.Cmd
	var stdins []io.WriteCloser
	t.Cleanup(func() {
		for _, c := range procs {
			c.Process.Kill()
			c.Wait()
		}
		for _, w := range stdins {
			w.Close()
		}
	})
	for i := 0; i < spin; i++ {
		c := exec.Command("sh", "-c", "read x; while :; do :; done")
		w, err := c.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		procs, stdins = append(procs, c), append(stdins, w)
		testutil.Put(t, filepath.Join(dir, "cgroup.procs"), fmt.Sprint(c.Process.Pid))
	}
	testutil.Eventually(t, "sampling stopped while every workload is idle", func() (bool, string) {
		return !d.isSampling(), fmt.Sprint(d.Stats())
	})
	before := d.Stats()
	time.Sleep(500 * time.Millisecond) // ten sampling periods
	after := d.Stats()
	// Only CPU pressure may wake it here, and this machine is shared:
	// other load is real pressure. Each wake samples once, then until
	// IdleSamplesBeforeBackoff quiet samples have passed.
	wakes := after.PressureWakes - before.PressureWakes
	if n, max := after.Samples-before.Samples, wakes*(1+placement.IdleSamplesBeforeBackoff); n > max {
		t.Fatalf("%d samples in 500ms while idle, after %d pressure wake-ups: want at most %d", n, wakes, max)
	}
	for _, w := range stdins {
		w.Write([]byte("go\n"))
	}
	testutil.Eventually(t, "sampling back after CPU pressure, job busy", func() (bool, string) {
		for _, w := range d.Snapshot().Workloads {
			if w.Name == "job" {
				return w.Util > 0.5, fmt.Sprintf("util %.2f, %+v", w.Util, d.Stats())
			}
		}
		return false, "no job"
	})
}

// TestDaemonReapsOnExit: a workload the daemon created is removed when its
// last task exits — seen through pidfd exit watches, not sampling (the
// sampling period here is an hour). The first task leaves a child behind in
// the workload, so the daemon must go on to watch that one.
func TestDaemonReapsOnExit(t *testing.T) {
	d, parent := realV1Daemon(t, func(c *Config) { c.SampleInterval = time.Hour })
	c := exec.Command("sh", "-c", "read x; sleep 1000 </dev/null >/dev/null 2>&1 & echo $!")
	in, out := startPiped(t, c)
	var path string
	if err := d.do(context.Background(), func() (err error) {
		path, err = d.createWorkload("job", c.Process.Pid)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if path != filepath.Join(parent, "job") {
		t.Fatalf("path %q", path)
	}
	// sh forks the sleep inside the workload, prints its pid and exits.
	in.Write([]byte("go\n"))
	b, err := io.ReadAll(out)
	if err != nil {
		t.Fatal(err)
	}
	c.Wait()
	var sleepPid int
	if _, err := fmt.Sscan(string(b), &sleepPid); err != nil {
		t.Fatalf("sleep pid from %q: %v", b, err)
	}
	sleeper, _ := os.FindProcess(sleepPid)
	t.Cleanup(func() { sleeper.Kill() })
	time.Sleep(200 * time.Millisecond) // let the daemon see sh's exit
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("job removed while its sleep still runs: %v", err)
	}
	sleeper.Kill()
	testutil.Eventually(t, "job removed after its last task exited", func() (bool, string) {
		_, err := os.Stat(path)
		return os.IsNotExist(err) && len(d.Snapshot().Workloads) == 0, fmt.Sprint(err, d.Snapshot().Workloads, d.Stats())
	})
	if n := d.Stats().Samples; n > 3 {
		t.Errorf("%d samples with an hour's sampling period: the removal may have come from sampling", n)
	}
}

// TestDaemonQuietsLoadBalance: on cgroup v1 under a load-balanced parent,
// the daemon clears cpuset.sched_load_balance on the workloads it places
// (each cpuset write then skips a machine-wide sched-domain rebuild),
// records that in state.json before the write, leaves a workload whose
// flag was already 0 alone, and sets the flags back on a clean stop — or
// at the next start after a crash.
func TestDaemonQuietsLoadBalance(t *testing.T) {
	parent := testutil.CpusetV1Parent(t, "schedpolicyd-test")
	for _, n := range []string{"a", "b"} {
		if err := os.Mkdir(filepath.Join(parent, n), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	testutil.Put(t, filepath.Join(parent, "b", "cpuset.sched_load_balance"), "0")
	flag := func(n string) string {
		return strings.TrimSpace(testutil.Read(t, filepath.Join(parent, n, "cpuset.sched_load_balance")))
	}
	m := thisMachineLaptop(t)
	start := func() (*Daemon, context.CancelFunc, <-chan error) {
		return m.startCfg(t, func(c *Config) { c.CgroupRoot = parent })
	}
	d, cancel, done := start()
	testutil.Eventually(t, "a's flag cleared", func() (bool, string) { return flag("a") == "0", flag("a") })
	st, err := statefile.LoadState(d.cfg.StateDir)
	if err != nil {
		t.Fatal(err)
	}
	if want := map[string]uint64{filepath.Join(parent, "a"): inode(t, filepath.Join(parent, "a"))}; fmt.Sprint(lbCleared(st)) != fmt.Sprint(want) {
		t.Fatalf("state.json sched_load_balance_cleared = %v, want %v", lbCleared(st), want)
	}
	cancel()
	<-done
	if flag("a") != "1" || flag("b") != "0" {
		t.Fatalf("after a clean stop: a=%s b=%s, want a=1 (set back) b=0 (never touched)", flag("a"), flag("b"))
	}

	// A crash: state.json says the daemon cleared a, and a is still 0. It
	// also names b — but with another inode: b was removed and made again
	// after the crash, and its 0 is the user's own.
	testutil.Put(t, filepath.Join(parent, "a", "cpuset.sched_load_balance"), "0")
	cleared := []statefile.Record{
		{Path: filepath.Join(parent, "a"), Inode: inode(t, filepath.Join(parent, "a")), LoadBalanceCleared: true},
		{Path: filepath.Join(parent, "b"), Inode: inode(t, filepath.Join(parent, "b")) + 1, LoadBalanceCleared: true},
	}
	if err := statefile.SaveState(m.state, statefile.State{Knob: policy.DefaultKnob(), Cgroups: cleared}); err != nil {
		t.Fatal(err)
	}
	_, cancel, done = start()
	cancel()
	<-done
	if flag("a") != "1" || flag("b") != "0" {
		t.Fatalf("after a crash and a clean stop: a=%s b=%s, want a=1 b=0 (b is another cgroup now)", flag("a"), flag("b"))
	}
}

// TestDaemonWorkloadReplaced: a workload removed and made again under the
// same name between two scans (rmdir and mkdir back to back) is a new
// cgroup: it is prepared (cpus and mems filled in, so tasks can be
// attached on v1) and managed, not mistaken for the old one.
func TestDaemonWorkloadReplaced(t *testing.T) {
	d, parent := realV1Daemon(t, nil)
	dir := filepath.Join(parent, "w1")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "w1 adopted", func() (bool, string) {
		return len(d.Snapshot().Workloads) == 1, fmt.Sprint(d.Snapshot().Workloads)
	})
	if err := syscall.Rmdir(dir); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "the new w1 prepared and managed", func() (bool, string) {
		mems := strings.TrimSpace(testutil.Read(t, filepath.Join(dir, "cpuset.mems")))
		return mems != "" && len(d.Snapshot().Workloads) == 1, fmt.Sprintf("mems %q, %v", mems, d.Snapshot().Workloads)
	})
	// A task can be attached, and a policy switch writes the new cgroup.
	sleeper := exec.Command("sleep", "100")
	if err := sleeper.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sleeper.Process.Kill(); sleeper.Wait() })
	testutil.Put(t, filepath.Join(dir, "cgroup.procs"), fmt.Sprint(sleeper.Process.Pid))
	if err := d.do(context.Background(), func() error {
		return d.setKnob(d.dec.knob.WithCurrentPolicy(policy.Powersaving), "test")
	}); err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(testutil.Read(t, filepath.Join(dir, "cpuset.cpus"))); strings.ContainsAny(got, ",-") || got == "" {
		t.Errorf("w1's cpuset after powersaving = %q, want one CPU", got)
	}
	if s := d.Stats(); s.Errors != 0 {
		t.Errorf("%d refused writes", s.Errors)
	}
}

// TestDaemonSwitchSamplesWhenStopped: a policy change while sampling is
// stopped plans on a fresh sample and resumes sampling — a workload may
// have become busy without making tasks wait for a CPU.
func TestDaemonSwitchSamplesWhenStopped(t *testing.T) {
	needPSI(t)
	d, parent := realV1Daemon(t, nil)
	if err := os.Mkdir(filepath.Join(parent, "job"), 0o755); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "sampling stopped", func() (bool, string) {
		return len(d.Snapshot().Workloads) == 1 && !d.isSampling(), fmt.Sprint(d.Stats())
	})
	var before, after int64
	var resumed bool
	if err := d.do(context.Background(), func() error {
		before = d.stats.Samples.Load()
		err := d.setKnob(d.dec.knob.WithCurrentPolicy(policy.Powersaving), "test")
		after, resumed = d.stats.Samples.Load(), d.place.Sampling()
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if after <= before {
		t.Errorf("no sample taken for the policy change (samples %d → %d)", before, after)
	}
	if !resumed {
		t.Error("sampling not resumed after the policy change")
	}
}

func inode(t *testing.T, path string) uint64 {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	return st.Ino
}

// TestDaemonReapsAfterRestart: a workload the daemon created is still
// removed when its last task exits after the daemon was restarted — and
// one whose task exited while no daemon ran is removed at the start —
// but a cgroup made again under a created one's name is not.
func TestDaemonReapsAfterRestart(t *testing.T) {
	parent := testutil.CpusetV1Parent(t, "schedpolicyd-test")
	m := thisMachineLaptop(t)
	start := func() (*Daemon, context.CancelFunc, <-chan error) {
		return m.startCfg(t, func(c *Config) { c.CgroupRoot = parent; c.SampleInterval = time.Hour })
	}
	sleeper := func() *exec.Cmd {
		c := exec.Command("sleep", "1000")
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Process.Kill(); c.Wait() })
		return c
	}
	d, cancel, done := start()
	var jobs [3]*exec.Cmd
	for i, name := range []string{"live", "ended", "renewed"} {
		jobs[i] = sleeper()
		if err := d.do(context.Background(), func() error {
			_, err := d.createWorkload(name, jobs[i].Process.Pid)
			return err
		}); err != nil {
			t.Fatal(err)
		}
	}
	cancel()
	<-done
	// While no daemon runs: "ended" loses its task; "renewed" is removed
	// and made again by someone else (and holds a task of theirs).
	jobs[1].Process.Kill()
	jobs[1].Wait()
	renewed := filepath.Join(parent, "renewed")
	testutil.Put(t, "/sys/fs/cgroup/cpuset/cgroup.procs", fmt.Sprint(jobs[2].Process.Pid))
	if err := syscall.Rmdir(renewed); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(renewed, 0o755); err != nil {
		t.Fatal(err)
	}
	d, _, _ = start()
	testutil.Eventually(t, "ended removed at start", func() (bool, string) {
		_, err := os.Stat(filepath.Join(parent, "ended"))
		return os.IsNotExist(err), fmt.Sprint(err)
	})
	jobs[0].Process.Kill()
	jobs[0].Wait()
	testutil.Eventually(t, "live removed when its task exited", func() (bool, string) {
		_, err := os.Stat(filepath.Join(parent, "live"))
		return os.IsNotExist(err), fmt.Sprint(err, d.Snapshot().Workloads)
	})
	if _, err := os.Stat(renewed); err != nil {
		t.Fatalf("the daemon removed a cgroup made again under a created one's name: %v", err)
	}
}

// pressureHeld counts this process's open files on /proc/pressure/cpu
// and its goroutines waiting on a PSI trigger (sysfs.PressureTrigger).
func pressureHeld(t *testing.T) (fds, goroutines int) {
	t.Helper()
	links, err := filepath.Glob("/proc/self/fd/*")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range links {
		if to, err := os.Readlink(l); err == nil && to == "/proc/pressure/cpu" {
			fds++
		}
	}
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	return fds, strings.Count(string(buf), "sysfs.(*PressureTrigger).wait")
}

// TestDaemonPressureTriggerFollowsWorkloads: with no workload the daemon
// holds no CPU pressure trigger — no file open on /proc/pressure/cpu, no
// goroutine polling one —, the first workload arms one, and it is closed
// again (file and goroutine gone) after the last is removed. Real cgroup
// v1 cpusets, the real /proc/pressure/cpu.
func TestDaemonPressureTriggerFollowsWorkloads(t *testing.T) {
	needPSI(t)
	d, parent := realV1Daemon(t, nil)
	held := func() string {
		fds, gs := pressureHeld(t)
		var armed bool
		d.do(context.Background(), func() error { armed = d.place.Pressure.Armed(); return nil })
		return fmt.Sprintf("%d files, %d goroutines, armed %v", fds, gs, armed)
	}
	if got := held(); got != "0 files, 0 goroutines, armed false" {
		t.Fatalf("0 workloads: %s; want no trigger", got)
	}
	dir := filepath.Join(parent, "job")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "a trigger armed for the first workload", func() (bool, string) {
		got := held()
		return len(d.Snapshot().Workloads) == 1 && got == "1 files, 1 goroutines, armed true", got
	})
	if err := syscall.Rmdir(dir); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "the trigger closed after the last workload", func() (bool, string) {
		got := held()
		return len(d.Snapshot().Workloads) == 0 && got == "0 files, 0 goroutines, armed false", got
	})
}
