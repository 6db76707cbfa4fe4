package daemon

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/schedpolicyd/schedpolicyd/internal/testutil"
	"github.com/schedpolicyd/schedpolicyd/sysfs"
)

// TestDaemonPressureWakeWidensCrowded (issue 15): a workload packed to one
// CPU on battery whose two threads turn busy has more runnable threads
// than CPUs; a CPU pressure wake widens it in the same decision, without
// waiting for its decayed utilisation. A task-attached wake alone does not.
// Real cgroup v1 cpusets and real /proc; the wakes are driven on the
// daemon's loop (d.do) so that no periodic sample comes in between.
func TestDaemonPressureWakeWidensCrowded(t *testing.T) {
	if runtime.NumCPU() < 2 {
		t.Skip("needs two CPUs")
	}
	parent := testutil.CpusetV1Parent(t, "schedpolicyd-react")
	m := thisMachineLaptop(t)
	ps := filepath.Join(m.sys, "class/power_supply")
	testutil.Put(t, ps+"/AC/online", "0")
	testutil.Put(t, ps+"/BAT0/status", "Discharging")
	d := m.startWith(t, func(c *Config) { c.CgroupRoot = parent })
	all := testutil.ReadTrim(t, filepath.Join(parent, "cpuset.cpus"))
	dir := filepath.Join(parent, "job")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	var stdins []io.WriteCloser
	for i := 0; i < 2; i++ {
		c := exec.Command("sh", "-c", "read x; while :; do :; done")
		w, err := c.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Process.Kill(); c.Wait() })
		stdins = append(stdins, w)
		testutil.Eventually(t, "job adopted", func() (bool, string) {
			return len(d.Snapshot().Workloads) == 1, fmt.Sprint(d.Snapshot().Workloads)
		})
		testutil.Put(t, filepath.Join(dir, "cgroup.procs"), fmt.Sprint(c.Process.Pid))
	}
	testutil.Eventually(t, "job packed to one CPU", func() (bool, string) {
		s := testutil.ReadTrim(t, filepath.Join(dir, "cpuset.cpus"))
		c, err := sysfs.ParseCPUList(s)
		return err == nil && c.Size() == 1, s
	})
	var packed, attached, pressured, after string
	var threads [2]int
	var util [2]float64
	err := d.do(context.Background(), func() error {
		packed = testutil.ReadTrim(t, filepath.Join(dir, "cpuset.cpus"))
		for _, w := range stdins {
			w.Write([]byte("go\n"))
		}
		w := d.pl.workloads["job"]
		time.Sleep(100 * time.Millisecond) // both spin, one waits
		for i := 0; i < 500; i++ {
			if u, err := d.pl.cg.Usage("job"); err == nil && u != w.avg.Usage {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		d.pl.wake("task attached", false)
		threads[0], util[0] = w.threads, w.avg.Util
		d.recompute("task attached", false)
		attached = testutil.ReadTrim(t, filepath.Join(dir, "cpuset.cpus"))
		// The threads' CPU time moves again (this shared machine may
		// keep them waiting for a while; correctness, not speed).
		for i := 0; i < 500; i++ {
			if u, err := d.pl.cg.Usage("job"); err == nil && u != w.avg.Usage {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		d.pl.wake("cpu pressure", true)
		threads[1], util[1] = w.threads, w.avg.Util
		pressured = w.cpus.String()
		d.recompute("cpu pressure", false)
		after = testutil.ReadTrim(t, filepath.Join(dir, "cpuset.cpus"))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if threads != [2]int{2, 2} {
		t.Fatalf("runnable threads at the wakes: %v, want [2 2]", threads)
	}
	if attached != packed || !(util[0] < 1) {
		t.Fatalf("after the attach wake: cpuset %s (packed %s), util %.3f; want it still packed, util below 1", attached, packed, util[0])
	}
	if util[1] != 1 || pressured != packed {
		t.Fatalf("after the pressure wake: util %v on %s, want exactly 1 (its one CPU) on %s", util[1], pressured, packed)
	}
	if after != all {
		t.Fatalf("after the pressure decision job holds %s, want every CPU, %s", after, all)
	}
}
