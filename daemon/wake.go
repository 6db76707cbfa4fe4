package daemon

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/schedpolicyd/schedpolicyd/sysfs"
)

// A CPU pressure wake says that some task waits for a CPU, not which one,
// and a workload's decayed utilisation takes seconds to show a burst (it
// shows nothing while sampling was stopped). A packed workload that looks
// crowded at the wake or at a sample — more runnable threads than CPUs
// (cgroupfs placement) or CPU stall of its own since the last sample
// (units, from their cgroup's cpu.pressure total) — is a candidate, but a
// snapshot is no evidence: a light workload (a few per cent of a CPU) may
// have two threads runnable at that instant. So a one-shot confirmation
// starts: wakeConfirm later the candidate's threads' run and run-queue
// wait times are read again (sysfs.DirRunDelay), and only a workload whose
// threads were runnable on average for more than its CPU count plus
// wakeMargin counts as saturated: its utilisation is raised to its CPU
// count, so that the plan widens it in that decision (if the burst was
// brief, the average decays again and the lazy shrink packs it back).
// Runnable time counts waiting too, so a busy workload qualifies however
// much of its CPUs other tasks take, and a light one does not however busy
// the machine is.
//
// wakeConfirm is short beside the 2 s half-life and long beside the
// scheduler's slices (a few ms).
const (
	wakeConfirm = 30 * time.Millisecond
	wakeMargin  = 0.5
)

// wakeCandidate is a workload's threads' run + wait time when a
// confirmation started.
type wakeCandidate struct {
	runnable time.Duration
	at       time.Time
}

// runDelayFunc reads a workload's threads' run and run-queue wait time
// (sysfs.DirRunDelay); cpusFunc its CPU count now (0: no longer placed).
type (
	runDelayFunc func(name string) (run, wait time.Duration, err error)
	cpusFunc     func(name string) int
)

// confirmation is the pending one-shot confirmation of a wake over its
// candidate workloads, by name; the zero value has none pending, and then
// nothing wakes the loop for it.
type confirmation struct {
	timer *time.Timer
	cands map[string]wakeCandidate
	// signal is what started it ("cpu pressure", "sample"), for the log;
	// retried: it is a retry (retry), which is not retried again.
	signal  string
	retried bool
}

// C fires when the pending confirmation is due; nil when none is.
func (c *confirmation) C() <-chan time.Time {
	if c == nil || c.timer == nil {
		return nil
	}
	return c.timer.C
}

// start begins a confirmation over the names whose run + wait times read
// now, unless one is pending (its candidates are confirmed first). It
// reports whether one started.
func (c *confirmation) start(signal string, names []string, read runDelayFunc) bool {
	if c.timer != nil || len(names) == 0 {
		return false
	}
	now := time.Now()
	for _, n := range names {
		if run, wait, err := read(n); err == nil {
			if c.cands == nil {
				c.cands = map[string]wakeCandidate{}
			}
			c.cands[n] = wakeCandidate{runnable: run + wait, at: now}
		}
	}
	if len(c.cands) == 0 {
		return false
	}
	c.signal, c.retried = signal, false
	c.timer = time.NewTimer(wakeConfirm)
	return true
}

// confirmed is what a finished confirmation found, each list in name
// order: saturated and light as NAME:AVG/CPUS for the log; names, the
// saturated ones; borderline, the light ones whose threads were runnable
// within wakeMargin of their CPU count on average (a burst caught while it
// started: in the VM a second process forked by the first began up to
// tens of ms later, and the first confirmation read 0.97 and 1.36 threads
// on one CPU; a lone busy thread reads 1.0 and is retried once for
// nothing).
type confirmed struct {
	saturated, light  []string
	names, borderline []string
}

// finish ends the pending confirmation and sorts its candidates by their
// average runnable threads since start (confirmed). Candidates gone or
// unreadable are dropped.
func (c *confirmation) finish(cpus cpusFunc, read runDelayFunc) confirmed {
	c.stop()
	cands := c.cands
	c.cands = nil
	var out confirmed
	for _, n := range slices.Sorted(maps.Keys(cands)) {
		k := cpus(n)
		run, wait, err := read(n)
		wall := time.Since(cands[n].at)
		if err != nil || k <= 0 || wall <= 0 {
			continue
		}
		avg := float64(run+wait-cands[n].runnable) / float64(wall)
		desc := fmt.Sprintf("%s:%.2f/%d", n, avg, k)
		switch {
		case avg >= float64(k)+wakeMargin:
			out.saturated = append(out.saturated, desc)
			out.names = append(out.names, n)
		case avg >= float64(k)-wakeMargin:
			out.light = append(out.light, desc)
			out.borderline = append(out.borderline, n)
		default:
			out.light = append(out.light, desc)
		}
	}
	return out
}

// retry starts one more confirmation over r's borderline candidates,
// unless the finished one (signal, retried: as finish found them) was
// itself a retry. Its signal is signal + " retry". It reports whether one
// started.
func (c *confirmation) retry(signal string, retried bool, r confirmed, read runDelayFunc) bool {
	if retried || !c.start(signal+" retry", r.borderline, read) {
		return false
	}
	c.retried = true
	return true
}

// stop ends a pending confirmation's timer without reading anything.
func (c *confirmation) stop() {
	if c.timer != nil {
		c.timer.Stop()
		c.timer = nil
	}
}

// drop forgets a pending confirmation and its candidates (the placement
// closes).
func (c *confirmation) drop() {
	c.stop()
	c.cands = nil
}

// logConfirmed logs a finished confirmation at debug level: which signal
// started it and each candidate's average runnable threads over its CPUs.
func logConfirmed(log logrus.FieldLogger, signal string, saturated, light []string) {
	if len(light) > 0 {
		log.WithFields(logrus.Fields{"signal": signal, "runnable_avg_over_cpus": strings.Join(light, ",")}).Debug("wake not confirmed: not saturated")
	}
	if len(saturated) > 0 {
		log.WithFields(logrus.Fields{"signal": signal + " confirmed", "runnable_avg_over_cpus": strings.Join(saturated, ",")}).Debug("woken")
	}
}

// confirmC fires when the cgroupfs placement's confirmation is due.
func (p *placement) confirmC() <-chan time.Time { return p.confirm.C() }

// crowded returns the placed workloads with more runnable threads at the
// last sample than CPUs, in name order, and each as NAME:THREADS/CPUS.
func (p *placement) crowded() (names, desc []string) {
	for _, n := range p.sortedNames() {
		w := p.workloads[n]
		if k := w.cpus.Size(); k > 0 && w.threads > k && !w.rec.Released {
			names = append(names, n)
			desc = append(desc, fmt.Sprintf("%s:%d/%d", n, w.threads, k))
		}
	}
	return names, desc
}

// startConfirm starts a confirmation (signal names what woke the loop)
// over the crowded workloads of the last sample, unless one is pending. It
// returns them as NAME:THREADS/CPUS.
func (p *placement) startConfirm(signal string) (crowded []string) {
	names, desc := p.crowded()
	if p.confirm.start(signal, names, p.cg.RunDelay) {
		p.log.WithFields(logrus.Fields{"signal": signal, "runnable_over_cpus": strings.Join(desc, ",")}).Debug("crowded: confirming")
	}
	return desc
}

// pressureWake samples at once because the CPU pressure trigger fired and
// starts a confirmation for the crowded workloads. Which signal woke the
// loop and the crowded workloads are logged at debug level.
func (p *placement) pressureWake() {
	p.backoff.reset() // look at once, then every period
	p.sample()
	crowded := p.startConfirm("cpu pressure")
	p.log.WithFields(logrus.Fields{"signal": "cpu pressure", "runnable_over_cpus": strings.Join(crowded, ",")}).Debug("woken")
}

// confirmWake ends the pending confirmation: each candidate still placed
// whose threads were runnable on average for more than its CPU count plus
// wakeMargin gets its utilisation raised to its CPU count, and the
// borderline ones get one more confirmation at once. It reports whether
// any was raised (then the caller plans).
func (p *placement) confirmWake() bool {
	signal, retried := p.confirm.signal, p.confirm.retried
	cpus := func(n string) int {
		if w := p.workloads[n]; w != nil && !w.rec.Released {
			return w.cpus.Size()
		}
		return 0
	}
	cands := slices.Collect(maps.Keys(p.confirm.cands))
	r := p.confirm.finish(cpus, p.cg.RunDelay)
	logConfirmed(p.log, signal, r.saturated, r.light)
	for _, n := range r.names {
		w := p.workloads[n]
		w.avg.Util = max(w.avg.Util, float64(w.cpus.Size()))
	}
	p.confirm.retry(signal, retried, r, p.cg.RunDelay)
	// Confirmed either way: their counters would signal every period while
	// they stay busy (clockwake.go); a retry keeps its candidates'.
	p.clock.settle(cands, r.names, func(n string) bool { _, again := p.confirm.cands[n]; return again })
	return len(r.names) > 0
}

// unitStallCandidate: a packed unit whose tasks waited for a CPU this long
// since the last sample (its cgroup's cpu.pressure "some" total) is a
// candidate for a confirmation at a periodic sample; at a pressure wake,
// which says that tasks wait now, any stall at all makes one
// (unitWakeStall: in the VM a wake 12 ms into a burst found the unit's
// stall under 10 ms, and the next sample widened it 0.5 s later). A unit's thread count is not read at each
// sample: a user manager placed whole may hold thousands of threads, and
// its cgroup's own stall costs one read.
const (
	unitStallCandidate = 10 * time.Millisecond
	unitWakeStall      = time.Millisecond
)

// confirmC fires when the units' confirmation is due.
func (u *unitPlacement) confirmC() <-chan time.Time { return u.confirm.C() }

// runDelay is sysfs.DirRunDelay for the unit of key.
func (u *unitPlacement) runDelay(key string) (run, wait time.Duration, err error) {
	w := u.workloads[key]
	if w == nil {
		return 0, 0, fmt.Errorf("unit %s gone", key)
	}
	return sysfs.DirRunDelay(w.cgroup, u.procRoot)
}

// startConfirm starts a confirmation (signal names what woke the loop)
// over the units with AllowedCPUs= set that stalled for at least minStall
// since the sample before the last, unless one is pending.
func (u *unitPlacement) startConfirm(signal string, minStall time.Duration) {
	var names, desc []string
	for _, n := range u.sortedNames() {
		w := u.workloads[n]
		if k := w.cpus.Size(); k > 0 && w.stalled >= minStall {
			names = append(names, n)
			desc = append(desc, fmt.Sprintf("%s:%s/%d", n, w.stalled.Round(time.Millisecond), k))
		}
	}
	if u.confirm.start(signal, names, u.runDelay) {
		u.log.WithFields(logrus.Fields{"signal": signal, "stalled_over_cpus": strings.Join(desc, ",")}).Debug("crowded: confirming")
	}
}

// confirmWake ends the units' pending confirmation as placement.confirmWake
// does: a saturated unit's utilisation is raised to its CPU count. It
// reports whether any was (then the caller plans).
func (u *unitPlacement) confirmWake() bool {
	signal, retried := u.confirm.signal, u.confirm.retried
	cpus := func(n string) int {
		if w := u.workloads[n]; w != nil {
			return w.cpus.Size()
		}
		return 0
	}
	cands := slices.Collect(maps.Keys(u.confirm.cands))
	r := u.confirm.finish(cpus, u.runDelay)
	logConfirmed(u.log, signal, r.saturated, r.light)
	for _, n := range r.names {
		w := u.workloads[n]
		w.avg.Util = max(w.avg.Util, float64(w.cpus.Size()))
	}
	u.confirm.retry(signal, retried, r, u.runDelay)
	u.clock.settle(cands, r.names, func(n string) bool { _, again := u.confirm.cands[n]; return again })
	return len(r.names) > 0
}
