package daemon

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	logtest "github.com/sirupsen/logrus/hooks/test"

	"github.com/schedpolicyd/schedpolicyd/internal/taskclock"
	"github.com/schedpolicyd/schedpolicyd/internal/testutil"
)

// needTaskClock skips where the kernel refuses perf software counters to
// this process (a seccomp filter, perf_event_paranoid without privilege).
func needTaskClock(t *testing.T) {
	t.Helper()
	w := taskclock.New(clockPeriod, 1)
	defer w.Close()
	if _, err := w.SetTasks("self", []int{1}); err != nil {
		t.Skipf("perf_event_open refused here (%v): the task-clock wake cannot run", err)
	}
}

// confirmedBy returns the signals of the confirmations logged as "woken"
// (wake.go's logConfirmed) so far, in order.
func confirmedBy(hook *logtest.Hook) []string {
	var out []string
	for _, e := range hook.AllEntries() {
		if e.Message == "woken" {
			if s, _ := e.Data["signal"].(string); strings.HasSuffix(s, " confirmed") {
				out = append(out, s)
			}
		}
	}
	return out
}

// packedWithLog is packedThreadsWorkload with the daemon's log at debug
// level into a hook, and its task-clock counters checked to be armed.
func packedWithLog(t *testing.T) (*Daemon, *logtest.Hook, string, string, threadsProc) {
	t.Helper()
	needTaskClock(t)
	log := logrus.New()
	log.SetLevel(logrus.DebugLevel)
	hook := logtest.NewLocal(log)
	d, all, dir, proc := packedThreadsWorkloadWith(t, func(c *Config) { c.Log = log })
	if !d.clockArmed("job") {
		t.Fatal("the packed workload has no task-clock counters")
	}
	return d, hook, all, dir, proc
}

func (d *Daemon) clockArmed(key string) (armed bool) {
	d.do(context.Background(), func() error { armed = d.pl.clock.armed(key); return nil })
	return armed
}

func (d *Daemon) clockPaused(key string) (paused bool) {
	d.do(context.Background(), func() error { paused = d.pl.clock.w.Paused(key); return nil })
	return paused
}

// TestDaemonTaskClockWidensSaturated (issue 15): with sampling stopped, a
// workload packed to one CPU whose two threads turn CPU-bound is widened
// by a confirmation the task-clock wake started — not by the CPU pressure
// trigger (2 s window here) or a sample, which come later. The loop runs
// freely: real v1 cpusets, real threads, real perf counters.
func TestDaemonTaskClockWidensSaturated(t *testing.T) {
	d, hook, all, dir, proc := packedWithLog(t)
	proc.run(t, 2, 0)
	testutil.Eventually(t, "job widened to every CPU", func() (bool, string) {
		s := testutil.ReadTrim(t, filepath.Join(dir, "cpuset.cpus"))
		return s == all, s
	})
	if got := confirmedBy(hook); len(got) == 0 || got[0] != "task clock confirmed" {
		t.Fatalf("the widening's confirmations: %q; want the first from the task clock", got)
	}
	if n := d.Stats().ClockWakes; n < 1 {
		t.Fatalf("ClockWakes %d", n)
	}
	// On every CPU: nothing left to widen, no counters.
	if d.clockArmed("job") {
		t.Fatal("a workload on every CPU kept its counters")
	}
}

// TestDaemonTaskClockPausesWhileBusy: a lone busy thread, which cannot use
// more than its one CPU, leaves its workload packed and starts one
// confirmation through the counters, which then pause while it stays busy
// (they would signal every 20 ms); once it is idle, a sample that began
// after the pause resumes them.
func TestDaemonTaskClockPausesWhileBusy(t *testing.T) {
	d, _, _, dir, proc := packedWithLog(t)
	packedCPUs := testutil.ReadTrim(t, filepath.Join(dir, "cpuset.cpus"))
	proc.run(t, 1, 0)
	testutil.Eventually(t, "a task-clock wake", func() (bool, string) {
		return d.Stats().ClockWakes >= 1, fmt.Sprint(d.Stats())
	})
	time.Sleep(1500 * time.Millisecond) // sampling runs; the thread spins on
	if got := testutil.ReadTrim(t, filepath.Join(dir, "cpuset.cpus")); got != packedCPUs {
		t.Fatalf("one busy thread: cpuset %s, want it kept packed at %s", got, packedCPUs)
	}
	if n := d.Stats().ClockWakes; n != 1 {
		t.Fatalf("one busy thread for 1.5 s started %d confirmations through its counters, want 1 (paused since)", n)
	}
	if !d.clockPaused("job") {
		t.Fatal("counters of a busy, unsaturated workload not paused")
	}
	proc.run(t, 0, 0)
	testutil.Eventually(t, "counters resumed at a calm sample", func() (bool, string) {
		return !d.clockPaused("job"), fmt.Sprint(d.Stats())
	})
	if !d.clockArmed("job") {
		t.Fatal("counters closed instead of resumed")
	}
}

// TestDaemonNoTaskClock: Config.NoTaskClock leaves the loop without
// counters.
func TestDaemonNoTaskClock(t *testing.T) {
	d, _, _, _ := packedThreadsWorkloadWith(t, func(c *Config) { c.NoTaskClock = true })
	var gate *clockGate
	d.do(context.Background(), func() error { gate = d.pl.clock; return nil })
	if gate != nil || d.pl.clockC() != nil {
		t.Fatal("NoTaskClock: a gate was made")
	}
}
