package cgroupfs

import (
	"github.com/sirupsen/logrus"

	"github.com/schedpolicyd/schedpolicyd/daemon/placement"
	"github.com/schedpolicyd/schedpolicyd/daemon/snapshot"
)

// IDs lists the workloads as the engine's exempt list names them: by
// their published name (Status), with no manager.
func (p *Placement) IDs() []placement.WorkloadID {
	out := make([]placement.WorkloadID, 0, len(p.workloads))
	for n := range p.workloads {
		out = append(out, placement.WorkloadID{Key: n, Name: snapshot.Escape(n)})
	}
	return out
}

// SetExempt marks the workloads of keys exempt and every other one not.
// An exempt workload that holds a value of ours gets its original
// cpuset.cpus back now, as the stop restores it (Journal.RestoreAll with
// cgroupRestore: a value someone else wrote is theirs and stays; on
// cgroup v1 an original naming offline CPUs is restored in part and stays
// recorded), and is then left out of every plan (placed) until it is no
// longer exempt. A released workload stays released.
func (p *Placement) SetExempt(keys map[string]bool) {
	var todo []*workload
	for _, n := range p.Names() {
		w := p.workloads[n]
		w.exempt = keys[n]
		if w.exempt && w.rec.Written() && !w.rec.Released {
			todo = append(todo, w)
		}
	}
	if len(todo) == 0 || p.cg == nil {
		return
	}
	// Nothing new is recorded before these writes: each puts back the
	// original state.json holds already.
	p.restoreAll(todo)
	for _, w := range todo {
		if !w.rec.Written() {
			p.e.Clock.Remove(w.name) // not packed any more
			p.e.Log.WithFields(logrus.Fields{"workload": w.name, "cpus": w.cpus.String()}).Info("exempt workload: nothing of ours left in its cpuset.cpus")
		}
	}
	p.e.Flush()
}
