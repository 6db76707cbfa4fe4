package daemon

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
// shows nothing while sampling was stopped). A packed workload with more
// runnable threads than CPUs at the wake is a candidate, but a snapshot of
// thread states is no evidence: a light workload (a few per cent of a CPU)
// may have two threads runnable at that instant. So the wake starts a
// one-shot confirmation: wakeConfirm later the candidate's threads' run
// and run-queue wait times are read again (sysfs.Cgroup.RunDelay), and
// only a workload whose threads were runnable on average for more than its
// CPU count plus wakeMargin counts as saturated: its utilisation is raised
// to its CPU count, so that the plan widens it in that decision (if the
// burst was brief, the average decays again and the lazy shrink packs it
// back). Runnable time counts waiting too, so a busy workload qualifies
// however much of its CPUs other tasks take, and a light one does not
// however busy the machine is.
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

// confirmC fires when a started confirmation is due; nil when none is
// pending, so nothing wakes the loop while every workload is idle.
func (p *placement) confirmC() <-chan time.Time {
	if p.confirm == nil {
		return nil
	}
	return p.confirm.C
}

// pressureWake samples at once because the CPU pressure trigger fired and
// starts a confirmation (wakeConfirm) for each workload with more runnable
// threads than CPUs, unless one is pending. Which signal woke the loop and
// the candidates are logged at debug level.
func (p *placement) pressureWake() {
	p.idleSamples = 0 // look at once, then every period
	p.sample()
	var crowded []string
	for _, n := range p.sortedNames() {
		w := p.workloads[n]
		if k := w.cpus.Size(); k > 0 && w.threads > k && !w.rec.Released {
			crowded = append(crowded, fmt.Sprintf("%s:%d/%d", n, w.threads, k))
			if p.confirm != nil {
				continue
			}
			if run, wait, err := p.cg.RunDelay(n); err == nil {
				if p.candidates == nil {
					p.candidates = map[string]wakeCandidate{}
				}
				p.candidates[n] = wakeCandidate{runnable: run + wait, at: time.Now()}
			}
		}
	}
	if len(p.candidates) > 0 && p.confirm == nil {
		p.confirm = time.NewTimer(wakeConfirm)
	}
	p.log.WithFields(logrus.Fields{"signal": "cpu pressure", "runnable_over_cpus": strings.Join(crowded, ",")}).Debug("woken")
}

// confirmWake ends the pending confirmation: each candidate still placed
// whose threads were runnable on average for more than its CPU count plus
// wakeMargin since pressureWake gets its utilisation raised to its CPU
// count. It reports whether any did (then the caller plans).
func (p *placement) confirmWake() bool {
	if p.confirm != nil {
		p.confirm.Stop()
		p.confirm = nil
	}
	cands := p.candidates
	p.candidates = nil
	var saturated, light []string
	for _, n := range slices.Sorted(maps.Keys(cands)) {
		c := cands[n]
		w := p.workloads[n]
		if w == nil || w.rec.Released {
			continue
		}
		k := w.cpus.Size()
		run, wait, err := p.cg.RunDelay(n)
		wall := time.Since(c.at)
		if err != nil || k == 0 || wall <= 0 {
			continue
		}
		avg := float64(run+wait-c.runnable) / float64(wall)
		desc := fmt.Sprintf("%s:%.2f/%d", n, avg, k)
		if avg < float64(k)+wakeMargin {
			light = append(light, desc)
			continue
		}
		saturated = append(saturated, desc)
		w.avg.Util = max(w.avg.Util, float64(k))
	}
	if len(light) > 0 {
		p.log.WithField("runnable_avg_over_cpus", strings.Join(light, ",")).Debug("cpu pressure wake not confirmed: not saturated")
	}
	if len(saturated) == 0 {
		return false
	}
	p.log.WithFields(logrus.Fields{"signal": "cpu pressure confirmed", "runnable_avg_over_cpus": strings.Join(saturated, ",")}).Debug("woken")
	return true
}

// stopConfirm drops a pending confirmation (the placement closes).
func (p *placement) stopConfirm() {
	if p.confirm != nil {
		p.confirm.Stop()
		p.confirm = nil
	}
	p.candidates = nil
}
