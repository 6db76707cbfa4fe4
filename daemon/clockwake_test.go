package daemon

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	logtest "github.com/sirupsen/logrus/hooks/test"

	"github.com/schedpolicyd/schedpolicyd/daemon/placement"
	"github.com/schedpolicyd/schedpolicyd/internal/taskclock"
	"github.com/schedpolicyd/schedpolicyd/internal/testutil"
)

// needTaskClock skips where the kernel refuses perf software counters to
// this process (a seccomp filter, perf_event_paranoid without privilege).
func needTaskClock(t *testing.T) {
	t.Helper()
	w := taskclock.New(10*time.Millisecond, 1)
	defer w.Close()
	if _, err := w.SetTasks("self", taskclock.Tasks(1), 0); err != nil {
		t.Skipf("perf_event_open refused here (%v): the task-clock wake cannot run", err)
	}
}

// confirmedBy returns the signals of the confirmations logged as "woken"
// (wake.go's LogConfirmed) so far, in order.
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
// level into a hook, the production sample period, and its task-clock
// counters checked to be armed.
func packedWithLog(t *testing.T) (*Daemon, *logtest.Hook, string, string, threadsProc) {
	t.Helper()
	needTaskClock(t)
	log := logrus.New()
	log.SetLevel(logrus.DebugLevel)
	hook := logtest.NewLocal(log)
	// The production sample period: a sample confirms a crowded workload
	// too, and at the tests' 50 ms it would race the counters.
	d, all, dir, proc := packedThreadsWorkloadWith(t, func(c *Config) { c.Log = log; c.SampleInterval = DefaultSampleInterval })
	if !d.clockArmed("job") {
		t.Fatal("the packed workload has no task-clock counters")
	}
	return d, hook, all, dir, proc
}

func (d *Daemon) clockArmed(key string) (armed bool) {
	d.do(context.Background(), func() error { armed = d.place.Clock.Armed(key); return nil })
	return armed
}

func (d *Daemon) clockSlow(key string) (slow bool) {
	d.do(context.Background(), func() error { slow = d.place.Clock.Slow(key); return nil })
	return slow
}

// widenedByClock waits until the workload directory dir's cpuset is all,
// and fails unless the first confirmation logged was the task clock's (at
// once, or its one retry of a borderline count, which a loaded machine
// makes likely).
//
// Only confirmations after the first before ones count: those are of the
// burst (a calm sample of clockCounting's may have confirmed something
// earlier, the helper process's start on a loaded machine).
func widenedByClock(t *testing.T, hook *logtest.Hook, dir, all string, before int) {
	t.Helper()
	testutil.Eventually(t, "job widened to every CPU", func() (bool, string) {
		s := testutil.ReadTrim(t, filepath.Join(dir, "cpuset.cpus"))
		return s == all, s
	})
	if got := confirmedBy(hook)[before:]; len(got) == 0 || got[0] != "task clock confirmed" && got[0] != "task clock retry confirmed" {
		t.Fatalf("the widening's confirmations: %q; want the first from the task clock", got)
	}
}

// onlyTaskClock leaves the task clock the one wake of d's placement: no
// pressure trigger, and the next sample an hour away. What wakes the loop
// then is the task clock, or nothing, whatever else the machine runs.
func onlyTaskClock(t *testing.T, d *Daemon) {
	t.Helper()
	d.do(context.Background(), func() error {
		d.place.Pressure.Close()
		d.cfg.SampleInterval = time.Hour
		d.syncPlacementConfig()
		return nil
	})
	clockCounting(t, d)
}

// clockCounting returns once job's counters are armed and count at
// clockPeriod. A confirmation pauses or slows them (the start of a helper
// process may have made one), and only a sample that began after that
// and found job calm takes them back: with the next sample an hour away,
// the test takes samples itself, while job is idle.
func clockCounting(t *testing.T, d *Daemon) {
	t.Helper()
	testutil.Eventually(t, "job's counters armed at 10 ms (a calm sample)", func() (bool, string) {
		var ok bool
		var state string
		d.do(context.Background(), func() error {
			d.onSample()
			g := d.place.Clock
			armed, slow, paused, pending := g.Armed("job"), g.Slow("job"), g.Paused("job"), d.place.ConfirmC() != nil
			ok = armed && !slow && !paused && !pending
			state = fmt.Sprintf("armed %v slow %v paused %v, confirmation pending %v", armed, slow, paused, pending)
			return nil
		})
		return ok, state
	})
}

// TestDaemonTaskClockWidensSaturated: with sampling stopped, a
// workload packed to one CPU whose two threads turn CPU-bound is widened
// by a confirmation the task-clock wake started. The pressure trigger is
// closed and the next sample an hour away (onlyTaskClock), so nothing else
// can. The loop runs freely: real v1 cpusets, real threads, real perf
// counters.
func TestDaemonTaskClockWidensSaturated(t *testing.T) {
	d, hook, all, dir, proc := packedWithLog(t)
	onlyTaskClock(t, d)
	before := len(confirmedBy(hook))
	proc.run(t, 2, 0)
	widenedByClock(t, hook, dir, all, before)
	if n := d.Stats().ClockWakes; n < 1 {
		t.Fatalf("ClockWakes %d", n)
	}
	// On every CPU: nothing left to widen, no counters (closed by the sync
	// the loop runs after the event that widened it).
	testutil.Eventually(t, "a workload on every CPU has no counters", func() (bool, string) {
		return !d.clockArmed("job"), "still armed"
	})
}

// TestDaemonTaskClockSlowsWhileBusy: a lone busy thread, which cannot use
// more than its one CPU, leaves its workload packed and starts at most one
// confirmation through the counters, which then go slow (at 10 ms they
// would signal 100 times a second); once it is idle, a sample that began
// after that takes them back to 10 ms. Slow, they still catch a second
// thread joining a busy one: the widening comes from the task clock, not
// from a sample.
func TestDaemonTaskClockSlowsWhileBusy(t *testing.T) {
	d, hook, all, dir, proc := packedWithLog(t)
	// At nice -10 the machine's other work hardly delays job's threads:
	// a lone busy thread has its CPU, as on a machine that leaves it one.
	proc.setNice(t, -10)
	packedCPUs := testutil.ReadTrim(t, filepath.Join(dir, "cpuset.cpus"))
	// fast waits until job's counters count at 10 ms (the start of the
	// helper process may have been a burst of its own).
	fast := func() {
		t.Helper()
		testutil.Eventually(t, "counters at 10 ms (a calm sample)", func() (bool, string) {
			return !d.clockSlow("job") && d.clockArmed("job"), fmt.Sprint(d.Stats())
		})
	}
	// crowdedByOthers skips the test when job's lone thread waited for its
	// CPU for more than a third of the time since (run, wait), read once
	// it ran (the times are its threads' own): other processes crowd that
	// CPU even at nice -10 (real-time ones, or many), and then widening it
	// is right.
	runDelay := func() (run, wait time.Duration) {
		d.do(context.Background(), func() error { run, wait, _ = workloadRunDelay(d, "job"); return nil })
		return run, wait
	}
	crowdedByOthers := func(run0, wait0 time.Duration) {
		t.Helper()
		run, wait := runDelay()
		if r, w := run-run0, wait-wait0; r+w > 0 && 3*w > r+w {
			t.Skipf("job's one busy thread at nice -10 waited for its CPU %v of %v: other processes crowd that CPU, so widening it is right; this test needs a machine whose other work leaves it a CPU", w.Round(time.Millisecond), (r + w).Round(time.Millisecond))
		}
	}
	oneThread := func() {
		t.Helper()
		fast()
		before := d.Stats().ClockWakes
		proc.run(t, 1, 0)
		run0, wait0 := runDelay()
		if ok, last := testutil.Poll(testutil.DefaultBound, func() (bool, string) {
			return d.clockSlow("job"), fmt.Sprint(d.Stats())
		}); !ok {
			crowdedByOthers(run0, wait0) // a thread that hardly runs is not busy
			t.Fatalf("timed out after %v waiting for counters slow; last seen: %s", testutil.DefaultBound, last)
		}
		time.Sleep(1500 * time.Millisecond) // sampling runs; the thread spins on
		if got := testutil.ReadTrim(t, filepath.Join(dir, "cpuset.cpus")); got != packedCPUs {
			crowdedByOthers(run0, wait0)
			t.Fatalf("one busy thread: cpuset %s, want it kept packed at %s", got, packedCPUs)
		}
		// At most the one that found it light (a first signal judged by
		// its rate since a mark under a second old goes slow without
		// one); then slow signals never reach 1.5 runnable threads.
		if n := d.Stats().ClockWakes - before; n > 1 {
			crowdedByOthers(run0, wait0)
			for _, e := range hook.AllEntries() {
				if strings.Contains(e.Message, "confirm") || e.Message == "woken" {
					t.Log(e.Time.Format("05.000"), e.Message, e.Data)
				}
			}
			t.Fatalf("one busy thread: %d confirmations through its counters, want at most 1 (slow since)", n)
		}
		if !d.clockSlow("job") {
			t.Fatal("counters of a busy, unsaturated workload not slow")
		}
	}
	oneThread()
	proc.run(t, 0, 0)
	oneThread() // back at 10 ms first
	// Only the slow counters can widen job now: no pressure trigger and
	// the next sample an hour away.
	d.do(context.Background(), func() error {
		d.place.Pressure.Close()
		d.cfg.SampleInterval = time.Hour
		d.syncPlacementConfig()
		return nil
	})
	before := len(confirmedBy(hook))
	proc.run(t, 2, 0) // a second thread beside the busy one
	widenedByClock(t, hook, dir, all, before)
}

// TestDaemonNoTaskClock: Config.NoTaskClock leaves the loop without
// counters.
func TestDaemonNoTaskClock(t *testing.T) {
	d, _, _, _ := packedThreadsWorkloadWith(t, func(c *Config) { c.NoTaskClock = true })
	var gate *placement.ClockGate
	d.do(context.Background(), func() error { gate = d.place.Clock; return nil })
	if gate != nil || d.place.WakeC(placement.WakeClock) != nil {
		t.Fatal("NoTaskClock: a gate was made")
	}
}

// TestDaemonTaskClockCountsAttachedTasks: a process attached to a packed
// cgroup v1 workload from outside (no fork of a counted task) gets
// counters of its own — the cgroup watch names the workload — so its burst
// is caught by the task clock. The pressure trigger is off and the next
// sample an hour away (onlyTaskClock), so nothing else can widen it first.
func TestDaemonTaskClockCountsAttachedTasks(t *testing.T) {
	d, hook, all, dir, _ := packedWithLog(t)
	onlyTaskClock(t, d)
	var before int
	d.do(context.Background(), func() error { before = d.place.Clock.Open(); return nil })
	proc := startThreadsProc(t)
	proc.run(t, 0, 0) // started and idle: its start-up burst is over, outside job
	// One write(2): one IN_MODIFY, so one "task attached" hint, which the
	// counters on the process's threads show handled (os.WriteFile's
	// truncation raised a second, which could reach the loop during the
	// burst and start the confirmation that saw it).
	testutil.WriteOnce(t, filepath.Join(dir, "cgroup.procs"), strconv.Itoa(proc.pid))
	// The attach itself starts a confirmation ("task attached"); the burst
	// starts once it has ended, or it could be the one to see the burst.
	testutil.Eventually(t, "counters on the attached process's threads, the attach's confirmation over", func() (bool, string) {
		var n int
		var pending bool
		d.do(context.Background(), func() error {
			n, pending = d.place.Clock.Open(), d.place.ConfirmC() != nil
			return nil
		})
		return n > before && !pending, fmt.Sprintf("%d counters, %d before; confirmation pending %v", n, before, pending)
	})
	clockCounting(t, d) // that confirmation may have paused or slowed them
	confirmed := len(confirmedBy(hook))
	proc.run(t, 2, 0)
	widenedByClock(t, hook, dir, all, confirmed)
}
