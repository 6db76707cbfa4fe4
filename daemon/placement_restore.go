package daemon

import (
	"errors"

	"github.com/schedpolicyd/schedpolicyd/sysfs"
	"github.com/sirupsen/logrus"
	"golang.org/x/sys/unix"
)

// restore writes back every workload's original cpuset.cpus where the
// file still holds a value of ours, and sets back the sched_load_balance
// flags it cleared; it drops each record whose contents are restored and
// reports whether everything is back. On cgroup v1 CPUs not online now
// cannot be written: such an original is restored in part (its online
// CPUs, or every CPU the parent has when none is) and stays recorded, to
// be restored in full by a later run. Vanished workloads count as done.
func (p *placement) restore() bool {
	if p.cg == nil {
		return true
	}
	ok := true
	var allowed sysfs.CPUSet
	if p.cg.Version() == sysfs.CgroupV1 {
		allowed, _ = p.cg.Allowed()
	}
	for _, n := range p.sortedNames() {
		w := p.workloads[n]
		r := w.rec
		if !r.Written() || r.Released {
			continue
		}
		cur, err := p.readCPUs(w)
		if err != nil {
			if !sysfs.IsGone(err) {
				ok = false
			}
			continue
		}
		if !p.ours(r, cur) {
			p.log.WithFields(logrus.Fields{"workload": n, "cpus": cur.String(), "original": r.Original}).Warn("cpuset.cpus was changed by someone else; not restored")
			r.Original, r.Applied, r.Pending, r.Unverified = cur.String(), "", "", false
			w.cpus = cur
			continue
		}
		orig, _ := sysfs.ParseCPUList(r.Original)
		target := orig
		if p.cg.Version() == sysfs.CgroupV1 && !orig.IsEmpty() && !allowed.IsEmpty() && !orig.Intersect(allowed).Equal(orig) {
			if target = orig.Intersect(allowed); target.IsEmpty() {
				target = allowed
			}
		}
		if !target.Equal(cur) {
			err := p.writeCPUs(w, target)
			inherit := false
			if err != nil && target.IsEmpty() && p.cg.Version() == sysfs.CgroupV2 && errors.Is(err, unix.ENOSPC) {
				// v2's "inherit", which the kernel will not give a
				// cgroup with tasks: every CPU, intersected with the
				// parent's, is the same (sysfs.Cgroup.WriteAllCPUs).
				if err = p.cg.WriteAllCPUs(n); err == nil {
					inherit = true
				}
			}
			if err != nil {
				if sysfs.IsGone(err) {
					continue
				}
				p.stats.errors.Add(1)
				p.log.WithError(err).WithField("workload", n).Warn("cannot restore original cpuset; it stays in state.json for the next start")
				ok = false
				continue
			}
			p.stats.writes.Add(1)
			w.cpus = target
			if inherit {
				if now, err := p.readCPUs(w); err == nil {
					w.cpus = now
				}
				p.log.WithFields(logrus.Fields{"workload": n, "cpus": w.cpus.String()}).Info("original cpuset is empty (inherit the parent's), which the kernel refuses to a cgroup with tasks: restored as every CPU, the same effective CPUs")
			}
		}
		r.Pending, r.Unverified = "", false
		if target.Equal(orig) {
			r.Applied = ""
		} else {
			r.Applied = target.String()
			p.log.WithFields(logrus.Fields{"workload": n, "original": r.Original, "written": target.String()}).Warn("original cpuset names CPUs that are offline now: restored in part; it stays in state.json and is restored in full once they are back")
			ok = false
		}
	}
	// The flags last: with them set, every cpuset write above would have
	// rebuilt the sched domains.
	for _, n := range p.sortedNames() {
		r := p.workloads[n].rec
		if !r.LoadBalanceCleared {
			continue
		}
		if on, err := p.cg.SchedLoadBalance(n); err == nil && !on {
			if err := p.cg.SetSchedLoadBalance(n, true); err != nil && !sysfs.IsGone(err) {
				p.stats.errors.Add(1)
				p.log.WithError(err).WithField("workload", n).Warn("cannot set cpuset.sched_load_balance back to 1; it stays in state.json for the next start")
				ok = false
				continue
			}
		}
		r.LoadBalanceCleared = false
	}
	// The managed parent: its record is done once it holds its original.
	if p.parent != nil {
		if cur, err := p.cg.OwnCPUs(); err == nil && cur.String() == p.parent.Original {
			p.parent.Parent = false // not needed any more: dropped at the save
		} else if err == nil {
			ok = false // CPUs offline now: given back by a later run
		}
	}
	p.dirty = true
	return ok
}
