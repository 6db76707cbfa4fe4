package cgroupfs

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sort"

	"github.com/sirupsen/logrus"

	"github.com/schedpolicyd/schedpolicyd/daemon/placement"
	"github.com/schedpolicyd/schedpolicyd/daemon/snapshot"
	"github.com/schedpolicyd/schedpolicyd/policy"
)

// ReleasedOverride is what the Workloads property and schedpolicyctl show
// as the override of a released workload (statefile.Record.Released).
const ReleasedOverride = "user"

// Status is the workloads as published, sorted by name. A workload's name
// is its directory's in its published form (snapshot.Escape), and its
// path is escaped the same way: a directory an administrator called
// "caf\xe9" (Latin-1, not UTF-8) is published as `caf\xe9`, the name
// SetOverride takes.
func (p *Placement) Status() []snapshot.WorkloadStatus {
	var out []snapshot.WorkloadStatus
	escaped := false
	for _, n := range p.Names() {
		w := p.workloads[n]
		o := w.override
		switch {
		case w.rec.Released:
			o = ReleasedOverride
		case w.exempt:
			o = placement.ExemptOverride
		}
		name := snapshot.Escape(n)
		escaped = escaped || name != n
		ws := snapshot.WorkloadStatus{Name: name, Path: snapshot.Escape(w.rec.Path), CPUs: w.cpus.String(), Util: w.avg.Util, Override: o, Class: "workload"}
		if w.placed() && w.override == "" {
			ws.Policy = p.e.Plan.Policies[n]
			// Confined: a value of ours narrower than the CPUs the
			// placement may give.
			ws.Confined = w.rec.Applied != "" && w.cpus.Size() < p.e.Allowed.Size()
		}
		out = append(out, ws)
	}
	if escaped {
		// An escape can move a name: sorted as published.
		sort.SliceStable(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	}
	return out
}

// published returns the workload whose published name (Status) is name,
// nil when there is none.
func (p *Placement) published(name string) *workload {
	n, ok := snapshot.Unescape(name)
	if !ok {
		return nil
	}
	return p.workloads[n]
}

// Create makes a new workload and moves pid into it (CreateWorkload). Its
// record says the daemon created it, saved before pid arrives; if
// attaching fails the new cgroup is removed again.
func (p *Placement) Create(name string, pid int) (string, error) {
	if err := placement.ValidWorkloadName(name); err != nil {
		return "", err
	}
	if p.cg == nil {
		return "", errors.New("workload placement is disabled (no managed parent cgroup)")
	}
	err := p.cg.CreateChild(name)
	if errors.Is(err, fs.ErrExist) && p.reapCreated(name) {
		err = p.cg.CreateChild(name) // a finished run's leftover was in the way
	}
	path, _ := p.cg.ChildPath(name)
	if errors.Is(err, fs.ErrExist) {
		return "", &placement.WorkloadExistsError{Name: name, What: path}
	}
	if err != nil {
		return "", err
	}
	p.Scan()
	w := p.workloads[name]
	if w != nil && w.rec.Inode != 0 {
		w.rec.Created = true
		p.e.Dirty = true
		p.e.Flush()
	}
	if err := p.cg.Attach(name, pid); err != nil {
		os.Remove(path)
		p.Scan()
		return "", fmt.Errorf("move PID %d into %s: %w", pid, path, err)
	}
	if w != nil {
		p.watchExit(name, pid)
	}
	p.e.Log.WithFields(logrus.Fields{"workload": name, "pid": pid}).Info("workload created")
	return path, nil
}

// SetOverride sets or clears the placement override of the workload
// published as name (Status: the directory's name, escaped if it is not
// UTF-8). Either takes back a released workload: its current cpuset
// becomes its original. Errors wrap policy.ErrInvalid: no workload is
// published as name, or pol is neither "" nor performance.
func (p *Placement) SetOverride(name string, pol policy.Policy) error {
	w := p.published(name)
	if w == nil {
		return fmt.Errorf("%w: no workload %q", policy.ErrInvalid, name)
	}
	if pol != "" && pol != policy.Performance {
		return fmt.Errorf("%w: a workload override can only be performance (or empty to clear)", policy.ErrInvalid)
	}
	if w.rec.Released {
		p.check(w)
		w.rec.Released, w.rec.Original = false, w.cpus.String()
		p.e.Dirty = true
		p.e.Log.WithField("workload", name).Info("released workload taken back")
	}
	w.override = pol
	p.e.Log.WithFields(logrus.Fields{"workload": name, "override": pol}).Info("workload override set")
	return nil
}

// reapCreated removes workload name if the daemon created it and no task
// is left in it (the command started by schedpolicyctl run has exited); it
// reports whether the cgroup is gone. Only the cgroup the record names is
// removed: its directory must have the record's inode, never 0.
func (p *Placement) reapCreated(name string) bool {
	w, ok := p.workloads[name]
	if !ok || !w.rec.Created || p.cg == nil {
		return false
	}
	if id := p.childID(name); w.rec.Inode == 0 || id != w.rec.Inode {
		return false
	}
	if procs, err := p.cg.Procs(name); err != nil || len(procs) > 0 {
		return false
	}
	w.cpusFile.Close() // reopened at the next write if the removal fails
	w.cpusFile = nil
	if err := p.cg.RemoveChild(name); err != nil {
		p.e.Log.WithError(err).WithField("workload", name).Debug("cannot remove a finished workload yet")
		return false
	}
	p.forget(name, true)
	p.e.Log.WithField("workload", name).Info("workload finished; its cgroup is removed")
	p.e.Flush()
	return true
}

// reapFinished removes every daemon-created workload whose tasks are all
// gone; it reports whether any was removed.
func (p *Placement) reapFinished() bool {
	removed := false
	for _, n := range p.Names() {
		if w := p.workloads[n]; w != nil && w.rec.Created && p.reapCreated(n) {
			removed = true
		}
	}
	return removed
}
