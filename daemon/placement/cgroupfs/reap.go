package cgroupfs

import (
	"errors"

	"github.com/sirupsen/logrus"

	"github.com/schedpolicyd/schedpolicyd/sysfs"
)

// Exit watches: each waits for one task of a daemon-created workload to
// exit (sysfs.ExitWatch, a pidfd), so the workload is removed as soon as
// its last task is gone (schedpolicyctl run) without a periodic timer. One
// task is enough: when it exits the loop re-reads the workload's tasks and
// either removes the cgroup or watches the next task.

// watchExit starts an exit watch on pid for workload name, replacing any
// previous one. A pid that is already gone (or a kernel without pidfd)
// sends the exit at once, so the loop re-checks the workload.
func (p *Placement) watchExit(name string, pid int) {
	p.stopExitWatch(name)
	w, err := sysfs.WatchExit(pid, func(w *sysfs.ExitWatch) { p.sendExit(name, w) })
	if err != nil {
		if !errors.Is(err, sysfs.ErrProcessGone) {
			p.e.Log.WithError(err).WithFields(logrus.Fields{"workload": name, "pid": pid}).Debug("cannot watch the task's exit; the workload is re-checked at the next sample")
			return
		}
		go p.sendExit(name, nil)
		return
	}
	p.exitWatches[name] = w
}

// sendExit hands an exit to the loop unless the daemon stops first.
func (p *Placement) sendExit(name string, w *sysfs.ExitWatch) {
	select {
	case p.exits <- exitEvent{name: name, w: w}:
	case <-p.e.LoopDone:
	}
}

// exitEvent: a watched task of workload name exited (w is its watch, nil
// when the task was gone before the watch started).
type exitEvent struct {
	name string
	w    *sysfs.ExitWatch
}

// stopExitWatch ends workload name's exit watch, if any.
func (p *Placement) stopExitWatch(name string) {
	if w, ok := p.exitWatches[name]; ok {
		w.Close()
		delete(p.exitWatches, name)
	}
}

// onExit handles a watched exit: the workload is removed when its last
// task is gone, else the next task is watched. It reports whether the
// workload set changed.
func (p *Placement) onExit(ev exitEvent) bool {
	if cur, ok := p.exitWatches[ev.name]; ev.w != nil && (!ok || cur != ev.w) {
		return false // a stale watch that was replaced or stopped
	}
	p.stopExitWatch(ev.name)
	w, ok := p.workloads[ev.name]
	if !ok || !w.rec.Created {
		return false
	}
	if p.reapCreated(ev.name) {
		return true
	}
	if procs, err := p.cg.Procs(ev.name); err == nil && len(procs) > 0 {
		p.watchExit(ev.name, procs[0])
	}
	return false
}

func (exitEvent) BackendEvent() {}
