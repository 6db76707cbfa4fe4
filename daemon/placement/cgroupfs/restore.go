package cgroupfs

import (
	"errors"

	"github.com/sirupsen/logrus"
	"golang.org/x/sys/unix"

	"github.com/schedpolicyd/schedpolicyd/cgroup"
	"github.com/schedpolicyd/schedpolicyd/daemon/placement"
	"github.com/schedpolicyd/schedpolicyd/daemon/statefile"
	"github.com/schedpolicyd/schedpolicyd/sysfs"
)

// Restore writes back every workload's original cpuset.cpus where the
// file still holds a value of ours (Journal.RestoreAll, with cgroupRestore), and
// sets back the sched_load_balance flags it cleared; it drops each record
// whose contents are restored and reports whether everything is back. On
// cgroup v1 CPUs not online now cannot be written: such an original is
// restored in part (its online CPUs, or every CPU the parent has when
// none is) and stays recorded, to be restored in full by a later run.
// Vanished workloads count as done.
func (p *Placement) Restore() bool {
	if p.cg == nil {
		return true
	}
	var todo []*workload
	for _, n := range p.Names() {
		if w := p.workloads[n]; w.rec.Written() && !w.rec.Released {
			todo = append(todo, w)
		}
	}
	ok := p.restoreAll(todo)
	// The flags last: with them set, every cpuset write above would have
	// rebuilt the sched domains.
	for _, n := range p.Names() {
		r := p.workloads[n].rec
		if !r.LoadBalanceCleared {
			continue
		}
		if on, err := p.cg.SchedLoadBalance(n); err == nil && !on {
			if err := p.cg.SetSchedLoadBalance(n, true); err != nil && !cgroup.IsGone(err) {
				p.e.Stats.Errors.Add(1)
				p.e.Log.WithError(err).WithField("workload", n).Warn("cannot set cpuset.sched_load_balance back to 1; it stays in state.json for the next start")
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
	p.e.Dirty = true
	return ok
}

// restoreAll has the journal restore the cpuset.cpus of todo
// (Journal.RestoreAll, through cgroupRestore) and reports whether
// everything is back.
func (p *Placement) restoreAll(todo []*workload) bool {
	b := cgroupRestore{p: p, ws: todo}
	if p.cg.Version() == cgroup.CgroupV1 {
		b.allowed, _ = p.cg.Allowed()
	}
	vs := make([]*statefile.Values, len(todo))
	for i, w := range todo {
		vs[i] = &w.rec.Values
	}
	return p.e.RestoreAll(vs, b)
}

// cgroupRestore is the driver's side of Journal.RestoreAll: the
// cpuset.cpus of workloads ws, read and written through their held-open
// file when they have one. allowed is the managed parent's CPUs on cgroup
// v1 (empty on v2).
type cgroupRestore struct {
	p       *Placement
	ws      []*workload
	allowed sysfs.CPUSet
}

// ReadValue reads the workload's cpuset.cpus; ErrGone when its cgroup is
// gone (its record goes with it). Its record was matched to the cgroup
// by inode (Kept); a value is ours as Placement.ours says, and any is
// for a record migrated from version 1 (Unverified).
func (b cgroupRestore) ReadValue(i int) (placement.Held, error) {
	w := b.ws[i]
	cur, err := b.p.readCPUs(w)
	if cgroup.IsGone(err) {
		return placement.Held{}, placement.ErrGone // its record is dropped with its cgroup
	}
	if err != nil {
		return placement.Held{}, err
	}
	return placement.Held{Value: cur.String(), Kept: true, Same: b.p.same(cur), Any: w.rec.Unverified}, nil
}

func (b cgroupRestore) Theirs(i int, h placement.Held) {
	w := b.ws[i]
	b.p.e.Log.WithFields(logrus.Fields{"workload": w.name, "cpus": h.Value, "original": w.rec.Original}).Warn("cpuset.cpus was changed by someone else; not restored")
	w.rec.Unverified = false
	w.cpus, _ = sysfs.ParseCPUList(h.Value)
}

// WriteBack writes the original, or on v1 its CPUs online now (every CPU
// the parent has when none is: not all back, the value written stays
// recorded, and a later run writes the rest); an empty original that v2
// refuses to a cgroup with tasks is written as every CPU.
func (b cgroupRestore) WriteBack(i int, origList string, h placement.Held) (string, bool, error) {
	p, w := b.p, b.ws[i]
	r, n := w.rec, w.name
	cur, _ := sysfs.ParseCPUList(h.Value)
	orig, _ := sysfs.ParseCPUList(origList)
	target := orig
	if p.cg.Version() == cgroup.CgroupV1 && !orig.IsEmpty() && !b.allowed.IsEmpty() && !orig.Intersect(b.allowed).Equal(orig) {
		if target = orig.Intersect(b.allowed); target.IsEmpty() {
			target = b.allowed
		}
	}
	if !target.Equal(cur) {
		err := p.writeCPUs(w, target)
		inherit := false
		if err != nil && target.IsEmpty() && p.cg.Version() == cgroup.CgroupV2 && errors.Is(err, unix.ENOSPC) {
			// v2's "inherit", which the kernel will not give a cgroup
			// with tasks: every CPU, intersected with the parent's, is
			// the same (cgroup.Cgroup.WriteAllCPUs).
			if err = p.cg.WriteAllCPUs(n); err == nil {
				inherit = true
			}
		}
		if err != nil {
			if cgroup.IsGone(err) {
				return "", false, placement.ErrGone
			}
			p.e.Stats.Errors.Add(1)
			p.e.Log.WithError(err).WithField("workload", n).Warn("cannot restore original cpuset; it stays in state.json for the next start")
			return "", false, err
		}
		p.e.Stats.Writes.Add(1)
		w.cpus = target
		if inherit {
			if now, err := p.readCPUs(w); err == nil {
				w.cpus = now
			}
			p.e.Log.WithFields(logrus.Fields{"workload": n, "cpus": w.cpus.String()}).Info("original cpuset is empty (inherit the parent's), which the kernel refuses to a cgroup with tasks: restored as every CPU, the same effective CPUs")
		}
	}
	r.Unverified = false
	if target.Equal(orig) {
		return origList, true, nil
	}
	p.e.Log.WithFields(logrus.Fields{"workload": n, "original": r.Original, "written": target.String()}).Warn("original cpuset names CPUs that are offline now: restored in part; it stays in state.json and is restored in full once they are back")
	return target.String(), false, nil
}
