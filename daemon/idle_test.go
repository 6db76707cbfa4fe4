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
