package cgroupfs

import (
	"path/filepath"
	"time"

	"github.com/schedpolicyd/schedpolicyd/cgroup"
	"github.com/schedpolicyd/schedpolicyd/daemon/placement"
)

// cgroupSource is what placement needs of a watch on the managed parent:
// coalesced hints, never the state itself (cgroup.CgroupWatch has the
// details). Tests may replace it (placement.newWatch) with channels they
// drive.
type cgroupSource interface {
	// Changed: children created or removed, the managed parent itself
	// removed or renamed, or events lost.
	Changed() <-chan struct{}
	// Attached: a task was attached to a child; TakeAttached returns the
	// children's names since the last call.
	Attached() <-chan struct{}
	TakeAttached() map[string]bool
	// Written: a child's cpuset.cpus was written by someone else; nil if
	// that cannot be watched. TakeWritten returns the children's names
	// (all: any of them).
	Written() <-chan struct{}
	TakeWritten() (names map[string]bool, all bool)
	WatchChild(dir string, v cgroup.CgroupVersion)
	UnwatchChild(dir string)
	WatchDir(dir string)
	UnwatchDir(dir string)
	Close()
}

// watchCgroupDir is the default placement.newWatch.
func watchCgroupDir(parent string) (cgroupSource, error) {
	w, err := cgroup.WatchCgroup(parent)
	if err != nil {
		return nil, err
	}
	return w, nil
}

// pressurePath is the PSI file of the managed parent's trigger:
// Config.PressureFile if set, else the parent's cpu.pressure on cgroup v2
// and <ProcRoot>/pressure/cpu (the whole machine) on v1. Where the kernel
// has none, the gate logs it once and idle sampling backs off instead of
// stopping.
func (p *Placement) pressurePath() string {
	switch {
	case p.e.Cfg.PressureFile != "":
		return p.e.Cfg.PressureFile
	case p.cg.Version() == cgroup.CgroupV2:
		return filepath.Join(p.cg.Path(), "cpu.pressure")
	}
	return filepath.Join(p.e.Cfg.ProcRoot, "pressure", "cpu")
}

// Nil-safe uses of the watch: without one the loop rescans on its
// sampling ticker instead.

func (p *Placement) activityC() <-chan struct{} {
	if p.watch == nil {
		return nil
	}
	return p.watch.Attached()
}

// takeAttached returns the workloads a task was attached to since the last
// call (nil without a watch).
func (p *Placement) takeAttached() map[string]bool {
	if p.watch == nil {
		return nil
	}
	return p.watch.TakeAttached()
}

func (p *Placement) cgEvents() <-chan struct{} {
	if p.watch == nil {
		return nil
	}
	return p.watch.Changed()
}

func (p *Placement) cpusC() <-chan struct{} {
	if p.watch == nil {
		return nil
	}
	return p.watch.Written()
}

// takeWritten returns the workloads whose cpuset.cpus was written by
// someone else since the last call; nil means any may have been.
func (p *Placement) takeWritten() map[string]bool {
	if p.watch == nil {
		return nil
	}
	names, all := p.watch.TakeWritten()
	if all {
		return nil
	}
	return names
}

func (p *Placement) watchChild(dir string) {
	if p.watch != nil {
		p.watch.WatchChild(dir, p.cg.Version())
	}
}

func (p *Placement) unwatchChild(dir string) {
	if p.watch != nil {
		p.watch.UnwatchChild(dir)
	}
}

func (p *Placement) watchDir(dir string, on bool) {
	switch {
	case p.watch == nil:
	case on:
		p.watch.WatchDir(dir)
	default:
		p.watch.UnwatchDir(dir)
	}
}

// startWatch watches the managed parent and configures the PSI trigger
// (armed while there are workloads); without a watch the loop rescans on
// its sampling ticker, and no trigger is armed.
func (p *Placement) startWatch() {
	p.stopWatch()
	w, err := p.newWatch(p.cg.Path())
	if err != nil {
		p.e.Log.WithError(err).Warn("cannot watch the workload parent; rescanning every sample interval")
		return
	}
	p.watch = w
	if s, ok := w.(*cgroup.CgroupWatch); ok && !s.ClosesWatched() {
		p.e.Log.Warn("cannot watch cpuset.cpus for changes by someone else; they are seen at the next write or Rebalance")
	}
	p.e.Pressure.Configure(p.e.Log, p.pressurePath(), len(p.workloads))
	if !p.e.Cfg.NoTaskClock {
		p.e.Clock = placement.NewClockGate(p.e.Log, func(n string) (time.Duration, error) {
			run, wait, err := p.cg.RunDelay(n)
			return run + wait, err
		}, func(cpus int) float64 { return float64(cpus) + placement.WakeMargin }) // as a confirmation

	}
}

func (p *Placement) stopWatch() {
	if p.watch != nil {
		p.watch.Close()
		p.watch = nil
	}
	p.e.StopWakes()
}
