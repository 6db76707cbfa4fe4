package cgroupfs

import (
	"github.com/sirupsen/logrus"

	"github.com/schedpolicyd/schedpolicyd/cgroup"
	"github.com/schedpolicyd/schedpolicyd/daemon/placement"
	"github.com/schedpolicyd/schedpolicyd/policy"
	"github.com/schedpolicyd/schedpolicyd/sysfs"
)

// PlanInput gives the engine's plan (Engine.Apply) the CPUs the managed
// parent allows within online, the placed workloads' loads (an override
// of performance is Fixed: every allowed CPU) and their names; nothing
// to place while the parent is not open or has no workloads.
func (p *Placement) PlanInput(online sysfs.CPUSet) (placement.PlanInput, bool) {
	if p.cg == nil || len(p.workloads) == 0 {
		return placement.PlanInput{}, false
	}
	in := placement.PlanInput{Allowed: online, Names: p.Names()}
	if a, err := p.cg.Allowed(); err == nil && !a.IsEmpty() {
		in.Allowed = in.Allowed.Intersect(a)
	}
	for _, n := range in.Names {
		w := p.workloads[n]
		if !w.placed() {
			continue // not placed at all
		}
		if w.override == policy.Performance {
			in.Fixed = append(in.Fixed, n) // every allowed CPU
			continue
		}
		in.Loads = append(in.Loads, policy.Load{Name: n, Util: w.avg.Util, Current: w.cpus.List(), Threads: w.threads, Pressure: w.pressure})
	}
	return in, true
}

// Write writes the cpusets the plan wants that differ from what the files
// hold, to placed workloads, through the journal's steps
// (Journal.WriteAll): each value recorded as pending and saved before it
// is written, nothing written without a successful save, the outcomes
// saved after. A workload the plan gives no CPU keeps what it has. The
// sched_load_balance flags are cleared first (quietLoadBalance).
func (p *Placement) Write(plan policy.Plan, want []placement.Want) {
	p.quietLoadBalance()
	type write struct {
		w    *workload
		want sysfs.CPUSet
	}
	var writes []write
	var batch []placement.JournalWrite
	for _, x := range want {
		w := p.workloads[x.Name]
		if w == nil || !w.placed() || x.CPUs.IsEmpty() || x.CPUs.Equal(w.cpus) {
			continue
		}
		// Original is kept as it is even when nothing of ours is there
		// yet: w.cpus may be it less CPUs the kernel took away on hotplug
		// (check).
		s := x.CPUs.String()
		batch = append(batch, placement.JournalWrite{Values: &w.rec.Values, Pending: s, Value: s})
		writes = append(writes, write{w, x.CPUs})
	}
	// The write log costs an entry and two cpulists per write; skipped
	// unless debug is on (1,000 workloads: ~1.5 ms of a ~65 ms switch).
	logWrites := enabled(p.e.Log, logrus.DebugLevel)
	p.e.WriteAll(batch, func(i int) placement.WriteOutcome {
		return p.writeOne(writes[i].w, writes[i].want, plan.Policy, logWrites)
	})
}

// writeOne writes want to w's cpuset.cpus for WriteAll, unless someone
// else changed it since it was last seen (theirs: failed) or it holds
// want already (skipped). A workload gone is forgotten; a refusal is
// counted and warned about once per workload, cpuset and error.
func (p *Placement) writeOne(w *workload, want sysfs.CPUSet, pol policy.Policy, logWrites bool) placement.WriteOutcome {
	// A value someone else wrote since we last looked is theirs.
	if !p.check(w) {
		return placement.WriteFailed
	}
	if want.Equal(w.cpus) {
		return placement.WriteSkipped
	}
	err := p.writeCPUs(w, want)
	if err == nil {
		p.e.Stats.Writes.Add(1)
		p.e.Written++
		w.refused = ""
		if logWrites {
			p.e.Log.WithFields(logrus.Fields{"workload": w.name, "from": w.cpus.String(), "to": want.String(), "policy": pol}).Debug("cpuset written")
		}
		w.cpus = want
		return placement.WriteDone
	}
	if cgroup.IsGone(err) {
		// Removed after the last scan: forget it and its record.
		p.forget(w.name, true)
		p.e.Log.WithField("workload", w.name).Info("workload gone")
		return placement.WriteFailed
	}
	p.e.Stats.Errors.Add(1)
	// The same refusal repeats on every sample: warn once per
	// (workload, cpuset, error), then only at debug level.
	lvl := logrus.WarnLevel
	if key := want.String() + " " + err.Error(); key == w.refused {
		lvl = logrus.DebugLevel
	} else {
		w.refused = key
	}
	p.e.Log.WithError(err).WithField("workload", w.name).Log(lvl, "cpuset write refused")
	return placement.WriteFailed
}

// Hotplug follows a change of the online CPUs (before → after): on cgroup
// v1 the managed parent gets back the CPUs that came online (fitParent),
// and every workload's cpuset is re-read (v1 silently drops an offlined CPU
// from every cpuset, for good). The caller re-plans.
func (p *Placement) Hotplug(before, after sysfs.CPUSet) {
	if p.cg == nil {
		return
	}
	p.fitParent(after.Difference(before))
	for _, w := range p.workloads {
		p.check(w)
	}
	p.e.Flush()
}

// writeCPUs writes workload w's cpuset.cpus, through its held-open file
// on the kernel's cgroupfs (cgroup.Cgroup.OpenCPUs: no path lookup and open
// per write), else with one open/write/close. After an error the file is
// closed, and the next write opens it again.
func (p *Placement) writeCPUs(w *workload, cpus sysfs.CPUSet) error {
	if w.cpusFile == nil {
		f, err := p.cg.OpenCPUs(w.name)
		if err != nil {
			return p.cg.WriteCPUs(w.name, cpus)
		}
		w.cpusFile = f
	}
	err := w.cpusFile.Write(cpus)
	if err != nil {
		w.cpusFile.Close()
		w.cpusFile = nil
	}
	return err
}

// quietLoadBalance clears cgroup v1 cpuset.sched_load_balance (1 → 0) on
// workloads, when the managed parent has it set. There the children's flag
// does not shape sched domains — the kernel makes one domain of each
// topmost load-balanced cpuset and skips its descendants — but with it set
// every cpuset.cpus write rebuilds the machine's sched domains
// (cgroup.Cgroup.SchedLoadBalance), which made a policy switch over many
// workloads twice as slow (docs/BENCHMARKS.md). A workload whose flag is
// already 0 is left alone, and nothing is changed under a parent without
// the flag (children's flags matter there). What is cleared is recorded
// (statefile.Record.LoadBalanceCleared) and saved before the write, and
// set back on exit (restore), or by the next start after a crash.
func (p *Placement) quietLoadBalance() {
	if p.cg.Version() != cgroup.CgroupV1 {
		return
	}
	var todo []*workload // on every plan: no sorting, order does not matter
	for _, w := range p.workloads {
		if !w.lbChecked {
			todo = append(todo, w)
		}
	}
	if len(todo) == 0 {
		return
	}
	if on, err := p.cg.SchedLoadBalance(""); err != nil || !on {
		for _, w := range todo {
			w.lbChecked = true
		}
		return
	}
	var toClear []*workload
	for _, w := range todo {
		w.lbChecked = true
		if on, err := p.cg.SchedLoadBalance(w.name); err == nil && on {
			w.rec.LoadBalanceCleared = true
			p.e.Dirty = true
			toClear = append(toClear, w)
		}
	}
	if len(toClear) == 0 {
		return
	}
	if !p.e.Flush() {
		for _, w := range toClear {
			w.lbChecked, w.rec.LoadBalanceCleared = false, false
		}
		return
	}
	for _, w := range toClear {
		if err := p.cg.SetSchedLoadBalance(w.name, false); err != nil {
			// Still recorded: setting 1 back on exit is harmless.
			p.e.Log.WithError(err).WithField("workload", w.name).Debug("cannot clear cpuset.sched_load_balance")
		}
	}
}

// enabled reports whether log would emit at lvl: a *logrus.Logger's or
// *logrus.Entry's level; true for any other FieldLogger (it decides).
func enabled(log logrus.FieldLogger, lvl logrus.Level) bool {
	switch l := log.(type) {
	case *logrus.Logger:
		return l.IsLevelEnabled(lvl)
	case *logrus.Entry:
		return l.Logger.IsLevelEnabled(lvl)
	}
	return true
}
