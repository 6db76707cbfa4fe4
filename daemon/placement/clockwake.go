package placement

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/schedpolicyd/schedpolicyd/internal/taskclock"
	"github.com/schedpolicyd/schedpolicyd/sysfs"
)

// The task-clock wake: the CPU pressure trigger wakes the loop
// within its window (500 ms with CAP_SYS_RESOURCE, else 2 s) and sampling
// once a period (1 s), so a packed workload that turns busy waited about
// half a second or more for its cpuset to widen. Instead, each packed
// workload has perf software counters (package taskclock) that signal
// every clockPeriod of CPU time its tasks run: without a timer, and not
// at all while it is idle. A signal is a candidate for the same 30 ms
// confirmation as a pressure wake (wake.go) when the workload ran at least
// clockBusy of its CPUs on average since its last signal, or has more
// threads runnable at that instant than CPUs (the first signal after a
// quiet spell, whose average spans the quiet). Two threads sharing one CPU
// each run half the time, so a per-thread counter signals about
// 2 × clockPeriod into such a burst, and it widens about wakeConfirm later.
//
// A workload found not saturated (a lone busy thread on its one CPU, which
// cannot use more), or a light one that signals more than once a second,
// would signal every period while it runs: its counters go slow
// (clockSlowPeriod), and a slow signal only counts when, since the last
// one, the workload's threads were runnable for more than its CPUs plus
// WakeMargin on average (as a confirmation judges; a unit: its tasks
// waited for a CPU WakeMargin of the time, from its cpu.pressure "some"
// total), so that a second busy thread joining the first is caught within
// about 2 × clockSlowPeriod. A workload confirmed
// saturated but kept packed (a slice rule, an administrator's bound)
// would be confirmed at every signal: its counters pause. Both end at a
// sample that began after them and finds the workload calm (its CPU time
// over the sample below clockBusy of its CPUs); meanwhile sampling, which
// runs while any workload is busy, covers them as before.
//
// Counters: cgroupfs placement on cgroup v1, one inherited task-clock
// counter per task of the workload, set again when a task is attached
// (threads and processes its tasks create are counted through
// inheritance); on cgroup v2 and for units, one CPU-clock counter per CPU
// of the workload's cpuset, filtered by its cgroup. Only workloads whose
// cpuset is narrower than the CPUs they may get have counters.
const (
	clockPeriod     = 10 * time.Millisecond
	clockSlowPeriod = 50 * time.Millisecond
	clockSlowMax    = 1600 * time.Millisecond
	clockBusy       = 0.25
	clockLight      = time.Second
	// clockMaxCounters bounds the counters (file descriptors) a placement
	// holds; a workload that would exceed it has none (it is woken as
	// before), said once at info level.
	clockMaxCounters = 4096
)

// ClockWatch is what a ClockGate counts through: a *taskclock.Watch (see
// there for each method), or an in-memory one in tests.
type ClockWatch interface {
	C() <-chan struct{}
	Close()
	Open() int
	Has(key string) bool
	Keys() []string
	SetTasks(key string, list func() ([]int, error), period time.Duration) (int, error)
	SetCgroup(key, dir string, cpus []int, period time.Duration) (int, error)
	Pause(key string) error
	Resume(key string) error
	Remove(key string)
	Burst(key string) (ran, wall time.Duration, ok bool)
}

// ClockGate is a placement's task-clock wake; nil-safe: a nil gate
// (turned off) has no channel and arms nothing.
type ClockGate struct {
	w   ClockWatch
	log logrus.FieldLogger
	// Refused holds, by key, what the kernel refused counters for (the
	// cpuset, or "tasks"), so that it is neither retried until that
	// changes nor logged again; said is set once one refusal was logged
	// at info level (the rest go to debug).
	Refused map[string]string
	said    bool
	keys    map[string]*clockKey
	// waited reads a key's cumulative time its tasks were runnable
	// (cgroupfs: its threads' run + run-queue wait, so that a rate is
	// average runnable threads) or waited for a CPU (units: its cgroup's
	// cpu.pressure "some" total, one read where its threads may be
	// thousands); a slow signal counts when that rate since the last one
	// reaches bar(CPUs).
	waited func(key string) (time.Duration, error)
	bar    func(cpus int) float64
}

// clockKey is one armed key's state.
type clockKey struct {
	// open (re)opens its counters at a period.
	open func(w ClockWatch, period time.Duration) (int, error)
	// slow: counting at clockSlowPeriod; paused: not counting. since is
	// when either began (a calm sample must begin after it).
	slow, paused bool
	since        time.Time
	// slowPeriod is the slow period: clockSlowPeriod, doubled (up to
	// clockSlowMax) by each confirmation a slow signal started that found
	// the workload not saturated.
	slowPeriod time.Duration
	// what is what its counters were last set for (ClockGate.set).
	what string
	// waited is ClockGate.waited's value for the key at waitedAt, while
	// slow.
	waited   time.Duration
	waitedAt time.Time
}

func (k *clockKey) period() time.Duration {
	if k.slow {
		return max(k.slowPeriod, clockSlowPeriod)
	}
	return clockPeriod
}

func NewClockGate(log logrus.FieldLogger, waited func(key string) (time.Duration, error), bar func(cpus int) float64) *ClockGate {
	return newClockGateOn(taskclock.New(clockPeriod, clockMaxCounters), log, waited, bar)
}

// newClockGateOn is NewClockGate counting through w.
func newClockGateOn(w ClockWatch, log logrus.FieldLogger, waited func(key string) (time.Duration, error), bar func(cpus int) float64) *ClockGate {
	return &ClockGate{w: w, log: log, Refused: map[string]string{}, keys: map[string]*clockKey{}, waited: waited, bar: bar}
}

// C fires when some counter overflowed; nil without a gate.
func (g *ClockGate) C() <-chan struct{} {
	if g == nil {
		return nil
	}
	return g.w.C()
}

func (g *ClockGate) Close() {
	if g != nil {
		g.w.Close()
	}
}

// Armed reports whether key has counters.
func (g *ClockGate) Armed(key string) bool { return g != nil && g.w.Has(key) }

// Slow reports whether key's counters are slow.
func (g *ClockGate) Slow(key string) bool { return g != nil && g.keys[key] != nil && g.keys[key].slow }

// Set gives key counters through open, for what they count, unless the
// kernel refused that already; a key already armed keeps its state (slow
// or paused). The first refusal is logged at info level, the others at
// debug: a refused workload is woken by CPU pressure and sampling, as
// without counters.
func (g *ClockGate) Set(key, what string, open func(w ClockWatch, period time.Duration) (int, error)) {
	if g == nil || g.Refused[key] == what {
		return
	}
	k := g.keys[key]
	if k != nil && k.what == what && g.w.Has(key) {
		return // as they are: every decision syncs, most change nothing
	}
	if k == nil {
		k = &clockKey{}
	}
	k.open, k.what = open, what
	if g.reopen(key, k) {
		delete(g.Refused, key)
		return
	}
	g.Refused[key] = what
}

// reopen opens key's counters at k's period (paused again if k is); on a
// refusal key has none, logged as set says.
func (g *ClockGate) reopen(key string, k *clockKey) bool {
	_, err := k.open(g.w, k.period())
	if err == nil && k.paused {
		err = g.w.Pause(key)
	}
	if err == nil {
		g.keys[key] = k
		return true
	}
	g.w.Remove(key)
	delete(g.keys, key)
	lvl := logrus.DebugLevel
	if !g.said {
		lvl, g.said = logrus.InfoLevel, true
	}
	g.log.WithError(err).WithField("workload", key).Log(lvl, "no task-clock counters for this workload (perf_event_open refused); it is woken by CPU pressure and sampling")
	return false
}

// Stale has the next set for key open its counters again (its tasks
// changed), or try again after a refusal; its state (slow, paused) stays.
func (g *ClockGate) Stale(key string) {
	delete(g.Refused, key)
	if k := g.keys[key]; k != nil {
		k.what = ""
	}
}

// SetCgroup gives key per-CPU counters on the cgroup v2 directory dir and
// cpus (set).
func (g *ClockGate) SetCgroup(key, dir string, cpus sysfs.CPUSet) {
	list := cpus.List()
	g.Set(key, cpus.String(), func(t ClockWatch, period time.Duration) (int, error) {
		return t.SetCgroup(key, dir, list, period)
	})
}

// Remove closes key's counters.
func (g *ClockGate) Remove(key string) {
	if g != nil {
		g.w.Remove(key)
		delete(g.Refused, key)
		delete(g.keys, key)
	}
}

// Keep closes the counters of every key for which keep is false.
func (g *ClockGate) Keep(keep func(key string) bool) {
	if g == nil {
		return
	}
	for _, k := range g.w.Keys() {
		if !keep(k) {
			g.Remove(k)
		}
	}
}

// bursts returns the armed keys among names (in their order) whose
// counters signalled a burst, and each as NAME:UTIL/CPUS for the log. A
// key counting at clockPeriod signalled one when it ran at least clockBusy
// of its CPU count (cpus) on average since its last signal, or — the first
// signal after a quiet spell says nothing of the rate now — when it is
// crowded (crowded: more threads runnable than CPUs right then); one that
// did neither within clockLight of its last signal runs light but often,
// and goes slow. A slow key signalled one only when its waited rate since
// its last slow signal reaches bar (a snapshot of runnable threads is no
// evidence there: a lone busy Go thread's runtime threads are runnable now
// and then).
func (g *ClockGate) bursts(names []string, cpus func(string) int, crowded func(string, int) bool) (hot, desc []string) {
	if g == nil {
		return nil, nil
	}
	var light []string
	for _, n := range names {
		ran, wall, ok := g.w.Burst(n)
		k := cpus(n)
		if !ok || wall <= 0 || k <= 0 {
			continue
		}
		util := float64(ran) / float64(wall)
		if g.Slow(n) {
			if w := g.waitRate(n); w >= g.bar(k) {
				hot = append(hot, n)
				desc = append(desc, fmt.Sprintf("%s:%.2f/%d,slow %.2f", n, util, k, w))
			}
			continue
		}
		switch {
		case util >= clockBusy*float64(k):
			hot = append(hot, n)
			desc = append(desc, fmt.Sprintf("%s:%.2f/%d", n, util, k))
		case crowded(n, k):
			hot = append(hot, n)
			desc = append(desc, fmt.Sprintf("%s:%.2f/%d,runnable>%d", n, util, k, k))
		case wall < clockLight:
			light = append(light, n)
		}
	}
	g.slowDown(light)
	return hot, desc
}

// waitRate is how fast ClockGate.waited grew for key since the last call
// (average runnable threads, or a stall share; 0 at the first, or when it
// cannot be read), and moves the baseline to now. The time is taken just
// after the counter is read, never before: a turn of the loop delayed
// between the two (a busy machine) would otherwise count the delay's
// waiting against time that does not include it, and make one busy
// thread look like more than the CPUs it has.
func (g *ClockGate) waitRate(key string) float64 {
	k := g.keys[key]
	w, err := g.waited(key)
	now := time.Now()
	if k == nil || err != nil {
		return 0
	}
	rate := 0.0
	if !k.waitedAt.IsZero() && now.After(k.waitedAt) && w >= k.waited {
		rate = float64(w-k.waited) / float64(now.Sub(k.waitedAt))
	}
	k.waited, k.waitedAt = w, now
	return rate
}

// slowDown makes the counters of names count at clockSlowPeriod (they ran
// without being saturated: a confirmation found them light, or they
// signal often); those already slow double their period, up to
// clockSlowMax.
func (g *ClockGate) slowDown(names []string) {
	if g == nil {
		return
	}
	for _, n := range names {
		k := g.keys[n]
		switch {
		case k == nil || k.paused:
			continue
		case k.slow:
			if k.period() >= clockSlowMax {
				continue
			}
			k.slowPeriod = min(2*k.period(), clockSlowMax)
		default:
			k.slow, k.slowPeriod, k.since = true, clockSlowPeriod, time.Now()
		}
		k.waitedAt = time.Time{}
		if g.reopen(n, k) {
			g.waitRate(n) // the baseline
		}
	}
}

// pause pauses the counters of names (confirmed saturated; still packed,
// they would be confirmed again at every signal).
func (g *ClockGate) pause(names []string) {
	if g == nil {
		return
	}
	for _, n := range names {
		k := g.keys[n]
		if k == nil || k.paused {
			continue
		}
		if err := g.w.Pause(n); err != nil {
			g.log.WithError(err).WithField("workload", n).Debug("cannot pause task-clock counters; closing them")
			g.Remove(n)
			continue
		}
		k.paused, k.since = true, time.Now()
	}
}

// Settle records how confirmations over cands ended: the saturated ones
// pause, the others (but those retried) go slow.
func (g *ClockGate) Settle(cands, saturated []string, retried func(string) bool) {
	if g == nil {
		return
	}
	var light []string
	for _, n := range cands {
		if !slices.Contains(saturated, n) && !retried(n) {
			light = append(light, n)
		}
	}
	g.pause(saturated)
	g.slowDown(light)
}

// Calm takes key back to clockPeriod, counting, when a sample from..to
// that began after it went slow or paused found it calm: it ran (CPU
// time) less than clockBusy of its k CPUs over that interval.
func (g *ClockGate) Calm(key string, ran time.Duration, from, to time.Time, k int) {
	if g == nil || k <= 0 || !to.After(from) {
		return
	}
	c := g.keys[key]
	if c == nil || !c.slow && !c.paused || from.Before(c.since) {
		return
	}
	if float64(ran)/float64(to.Sub(from)) >= clockBusy*float64(k) {
		return
	}
	if c.paused {
		c.paused = false
		if err := g.w.Resume(key); err != nil {
			g.Remove(key)
			return
		}
	}
	if c.slow {
		c.slow, c.slowPeriod = false, 0
		g.reopen(key, c)
	}
}

// Packed reports whether a workload on cpus may be widened: it has some,
// and fewer than allowed.
func Packed(cpus, allowed sysfs.CPUSet) bool {
	return !cpus.IsEmpty() && cpus.Size() < allowed.Size()
}

// ClockSyncBatch bounds the workloads SyncClock gives counters in one
// call: listing a v1 cgroup's tasks costs ~25 µs here (its tasks file
// builds a pid list), so arming 1,000 workloads at once took ~35 ms of the
// loop; in batches, events (a D-Bus call) are served in between.
const ClockSyncBatch = 100

// ConfirmBursts starts a confirmation (c, reading read) over the keys
// among names that signalled a burst (bursts), unless one is pending; a
// start is counted (ClockWakes) and logged at debug level. It reports
// whether any key signalled one.
func (g *ClockGate) ConfirmBursts(names []string, cpus func(string) int, crowded func(string, int) bool, c *Confirmation, read runDelayFunc, stats *Counters) bool {
	hot, desc := g.bursts(names, cpus, crowded)
	if len(hot) == 0 {
		return false
	}
	if c.Start("task clock", hot, read) {
		stats.ClockWakes.Add(1)
		g.log.WithFields(logrus.Fields{"signal": "task clock", "util_over_cpus": strings.Join(desc, ",")}).Debug("busy: confirming")
	}
	return true
}

// Paused reports whether key's counter is paused (pause).
func (g *ClockGate) Paused(key string) bool {
	return g != nil && g.keys[key] != nil && g.keys[key].paused
}

// Open is how many counters the gate holds open.
func (g *ClockGate) Open() int {
	if g == nil {
		return 0
	}
	return g.w.Open()
}
