package placement

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/sirupsen/logrus"
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
// wait times are read again (cgroup.DirRunDelay), and only a workload whose
// threads were runnable on average for more than its CPU count plus
// WakeMargin counts as saturated: its utilisation is raised to its CPU
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
	WakeMargin  = 0.5
)

// wakeCandidate is a workload's threads' run + wait time when a
// confirmation started.
type wakeCandidate struct {
	runnable time.Duration
	at       time.Time
}

// runDelayFunc reads a workload's threads' run and run-queue wait time
// (cgroup.DirRunDelay); cpusFunc its CPU count now (0: no longer placed).
type (
	runDelayFunc func(name string) (run, wait time.Duration, err error)
	cpusFunc     func(name string) int
)

// Confirmation is the pending one-shot confirmation of a wake over its
// candidate workloads, by name; the zero value has none pending, and then
// nothing wakes the loop for it.
type Confirmation struct {
	timer *time.Timer
	Cands map[string]wakeCandidate
	// Signal is what started it ("cpu pressure", "sample"), for the log;
	// retried: it is a retry (retry), which is not retried again.
	Signal  string
	Retried bool
}

// C fires when the pending confirmation is due; nil when none is.
func (c *Confirmation) C() <-chan time.Time {
	if c == nil || c.timer == nil {
		return nil
	}
	return c.timer.C
}

// Start begins a confirmation over the names whose run + wait times read
// now, unless one is pending (its candidates are confirmed first). It
// reports whether one started.
func (c *Confirmation) Start(signal string, names []string, read runDelayFunc) bool {
	if c.timer != nil || len(names) == 0 {
		return false
	}
	now := time.Now()
	for _, n := range names {
		if run, wait, err := read(n); err == nil {
			if c.Cands == nil {
				c.Cands = map[string]wakeCandidate{}
			}
			c.Cands[n] = wakeCandidate{runnable: run + wait, at: now}
		}
	}
	if len(c.Cands) == 0 {
		return false
	}
	c.Signal, c.Retried = signal, false
	c.timer = time.NewTimer(wakeConfirm)
	return true
}

// confirmed is what a finished confirmation found, each list in name
// order: saturated and light as NAME:AVG/CPUS for the log; names, the
// saturated ones; borderline, the light ones whose threads were runnable
// within WakeMargin of their CPU count on average (a burst caught while it
// started: in the VM a second process forked by the first began up to
// tens of ms later, and the first confirmation read 0.97 and 1.36 threads
// on one CPU; a lone busy thread reads 1.0 and is retried once for
// nothing).
type confirmed struct {
	Saturated, Light  []string
	Names, Borderline []string
}

// Finish ends the pending confirmation and sorts its candidates by their
// average runnable threads since start (confirmed). Candidates gone or
// unreadable are dropped.
func (c *Confirmation) Finish(cpus cpusFunc, read runDelayFunc) confirmed {
	c.Stop()
	cands := c.Cands
	c.Cands = nil
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
		case avg >= float64(k)+WakeMargin:
			out.Saturated = append(out.Saturated, desc)
			out.Names = append(out.Names, n)
		case avg >= float64(k)-WakeMargin:
			out.Light = append(out.Light, desc)
			out.Borderline = append(out.Borderline, n)
		default:
			out.Light = append(out.Light, desc)
		}
	}
	return out
}

// Retry starts one more confirmation over r's borderline candidates,
// unless the finished one (signal, retried: as finish found them) was
// itself a retry. Its signal is signal + " retry". It reports whether one
// started.
func (c *Confirmation) Retry(signal string, retried bool, r confirmed, read runDelayFunc) bool {
	if retried || !c.Start(signal+" retry", r.Borderline, read) {
		return false
	}
	c.Retried = true
	return true
}

// Stop ends a pending confirmation's timer without reading anything.
func (c *Confirmation) Stop() {
	if c.timer != nil {
		c.timer.Stop()
		c.timer = nil
	}
}

// Drop forgets a pending confirmation and its candidates (the placement
// closes).
func (c *Confirmation) Drop() {
	c.Stop()
	c.Cands = nil
}

// LogConfirmed logs a finished confirmation at debug level: which signal
// started it and each candidate's average runnable threads over its CPUs.
func LogConfirmed(log logrus.FieldLogger, signal string, saturated, light []string) {
	if len(light) > 0 {
		log.WithFields(logrus.Fields{"signal": signal, "runnable_avg_over_cpus": strings.Join(light, ",")}).Debug("wake not confirmed: not saturated")
	}
	if len(saturated) > 0 {
		log.WithFields(logrus.Fields{"signal": signal + " confirmed", "runnable_avg_over_cpus": strings.Join(saturated, ",")}).Debug("woken")
	}
}
