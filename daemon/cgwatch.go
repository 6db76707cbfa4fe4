package daemon

import (
	"errors"
	"path/filepath"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/schedpolicyd/schedpolicyd/sysfs"
)

// cgroupSource is what placement needs of a watch on the managed parent:
// coalesced hints, never the state itself (sysfs.CgroupWatch has the
// details). Tests may replace it (placement.newWatch) with channels they
// drive.
type cgroupSource interface {
	// Changed: children created or removed, or events lost.
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
	WatchChild(dir string, v sysfs.CgroupVersion)
	UnwatchChild(dir string)
	WatchDir(dir string)
	UnwatchDir(dir string)
	Close()
}

// watchCgroupDir is the default placement.newWatch.
func watchCgroupDir(parent string) (cgroupSource, error) {
	w, err := sysfs.WatchCgroup(parent)
	if err != nil {
		return nil, err
	}
	return w, nil
}

// Pressure trigger parameters. The window bounds how soon a packed
// workload that turned busy is noticed, and the kernel signals at most
// once per window. The narrow window's stall, 20 ms (4 %), is reached 20
// ms after two threads start to share one CPU, and the kernel checks every
// window/10 = 50 ms: 20–70 ms to the wake. The 2 s window's is 10 %. What the kernel
// grants (kernel/sched/psi.c psi_trigger_create, kernel/cgroup/cgroup.c):
//   - up to 6.4: windows of 500 ms–10 s, evaluated every window/10 by the
//     psimon RT thread; /proc/pressure/* needs CAP_SYS_RESOURCE to be
//     opened for writing at all, a cgroup v2 cpu.pressure does not;
//   - 6.5 on: any window up to 10 s with CAP_SYS_RESOURCE (RT-polled);
//     without it only multiples of 2 s, evaluated every 2 s by the
//     averaging worker (early 6.5 and 6.6 releases also refused to open
//     a cgroup file for writing without it).
//
// The narrow window is tried first; where it is refused, the 2 s one.
const (
	pressureStall        = 20 * time.Millisecond
	pressureWindow       = 500 * time.Millisecond
	pressureStallUnpriv  = 200 * time.Millisecond
	pressureWindowUnpriv = 2 * time.Second
)

// pressureC is the PSI trigger's channel, or nil without one.
func (p *placement) pressureC() <-chan struct{} {
	if p.pressure == nil {
		return nil
	}
	return p.pressure.C()
}

// pressureDone is closed when the kernel drops the PSI trigger (the
// managed v2 parent was removed), or nil without one.
func (p *placement) pressureDone() <-chan struct{} {
	if p.pressure == nil {
		return nil
	}
	return p.pressure.Done()
}

// openPressure arms the PSI trigger for the managed parent; nil (logged)
// where PSI is unavailable: idle sampling then backs off instead of
// stopping.
func (p *placement) openPressure() *sysfs.PressureTrigger {
	path := filepath.Join(p.cfg.ProcRoot, "pressure", "cpu")
	switch {
	case p.cfg.pressureFile != "":
		path = p.cfg.pressureFile
	case p.cg.Version() == sysfs.CgroupV2:
		path = filepath.Join(p.cg.Path(), "cpu.pressure")
	}
	return armPressure(p.log, path)
}

// armPressure opens a CPU pressure trigger on the PSI file path with the
// narrow window, else the 2 s one (see pressureWindow); nil (logged: info
// where the kernel has no PSI, else a warning) when neither is granted.
func armPressure(log logrus.FieldLogger, path string) *sysfs.PressureTrigger {
	window := pressureWindow
	t, err := sysfs.OpenPressureTrigger(path, pressureStall, pressureWindow)
	if err != nil && !errors.Is(err, sysfs.ErrNoPSI) {
		log.WithError(err).Debug("narrow CPU pressure window refused; trying a 2 s one")
		window = pressureWindowUnpriv
		t, err = sysfs.OpenPressureTrigger(path, pressureStallUnpriv, pressureWindowUnpriv)
	}
	if err != nil {
		lvl := logrus.WarnLevel
		if errors.Is(err, sysfs.ErrNoPSI) {
			lvl = logrus.InfoLevel
		}
		log.WithError(err).Log(lvl, "no CPU pressure trigger; while every workload is idle, sampling slows down instead of stopping")
		return nil
	}
	l := log.WithFields(logrus.Fields{"file": path, "window": window})
	if window != pressureWindow {
		l = l.WithField("note", "the 500 ms window was refused (Linux ≥ 6.5 grants it only with CAP_SYS_RESOURCE); a packed workload turning busy waits up to 2 s for the wake")
	}
	l.Info("CPU pressure trigger armed")
	return t
}

// Nil-safe uses of the watch: without one the loop rescans on its
// sampling ticker instead.

func (p *placement) activityC() <-chan struct{} {
	if p.watch == nil {
		return nil
	}
	return p.watch.Attached()
}

// takeAttached returns the workloads a task was attached to since the last
// call (nil without a watch).
func (p *placement) takeAttached() map[string]bool {
	if p.watch == nil {
		return nil
	}
	return p.watch.TakeAttached()
}

func (p *placement) cgEvents() <-chan struct{} {
	if p.watch == nil {
		return nil
	}
	return p.watch.Changed()
}

func (p *placement) cpusC() <-chan struct{} {
	if p.watch == nil {
		return nil
	}
	return p.watch.Written()
}

// takeWritten returns the workloads whose cpuset.cpus was written by
// someone else since the last call; nil means any may have been.
func (p *placement) takeWritten() map[string]bool {
	if p.watch == nil {
		return nil
	}
	names, all := p.watch.TakeWritten()
	if all {
		return nil
	}
	return names
}

func (p *placement) watchChild(dir string) {
	if p.watch != nil {
		p.watch.WatchChild(dir, p.cg.Version())
	}
}

func (p *placement) unwatchChild(dir string) {
	if p.watch != nil {
		p.watch.UnwatchChild(dir)
	}
}

func (p *placement) watchDir(dir string, on bool) {
	switch {
	case p.watch == nil:
	case on:
		p.watch.WatchDir(dir)
	default:
		p.watch.UnwatchDir(dir)
	}
}

// startWatch watches the managed parent and arms the PSI trigger; without
// a watch the loop rescans on its sampling ticker.
func (p *placement) startWatch() {
	p.stopWatch()
	w, err := p.newWatch(p.cg.Path())
	if err != nil {
		p.log.WithError(err).Warn("cannot watch the workload parent; rescanning every sample interval")
		return
	}
	p.watch = w
	if s, ok := w.(*sysfs.CgroupWatch); ok && !s.ClosesWatched() {
		p.log.Warn("cannot watch cpuset.cpus for changes by someone else; they are seen at the next write or Rebalance")
	}
	p.pressure = p.openPressure()
	if !p.cfg.NoTaskClock {
		p.clock = newClockGate(p.log, func(n string) (time.Duration, error) {
			run, wait, err := p.cg.RunDelay(n)
			return run + wait, err
		}, func(cpus int) float64 { return float64(cpus) + wakeMargin }) // as a confirmation

	}
}

func (p *placement) stopWatch() {
	p.confirm.drop()
	if p.watch != nil {
		p.watch.Close()
		p.watch = nil
	}
	if p.pressure != nil {
		p.pressure.Close()
		p.pressure = nil
	}
	p.clock.close()
	p.clock = nil
}
