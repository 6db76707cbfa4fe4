package daemon

import (
	"errors"
	"path/filepath"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/sirupsen/logrus"

	"github.com/schedpolicyd/schedpolicyd/sysfs"
)

// cgroupWatch delivers coalesced hints about the managed parent: events
// when children are created or removed (mkdir/rmdir raise inotify events on
// cgroupfs), and activity when a task is attached to a workload (a write to
// its cgroup.procs or tasks file, which raises IN_MODIFY), so an idle
// daemon that slowed its sampling looks again at once, and the names of
// workloads whose cpuset.cpus was written (by anyone, the daemon too), so
// a value someone else wrote is seen at once (placement.check).
type cgroupWatch struct {
	events   chan struct{}
	activity chan struct{}
	// closes sees each workload's cpuset.cpus written and closed by
	// someone else (the daemon's own writes through held-open files raise
	// no event); nil if it could not be made.
	closes *sysfs.CloseWriteWatch
	w      *fsnotify.Watcher
	stop   func()
	// pressure wakes the loop when tasks wait for a CPU (a PSI trigger on
	// the managed parent's cpu.pressure on cgroup v2, the machine's
	// /proc/pressure/cpu on v1); nil where the kernel has no PSI. With it,
	// sampling stops while every workload is idle (see sampleC).
	pressure *sysfs.PressureTrigger
}

// Pressure trigger parameters: 10 % of a 2 s window spent with a task
// waiting for a CPU. The window is a multiple of 2 s because the unit does
// not grant CAP_SYS_RESOURCE (Documentation/accounting/psi.rst); the kernel
// signals at most once per window.
const (
	pressureStall  = 200 * time.Millisecond
	pressureWindow = 2 * time.Second
)

// pressureC is the PSI trigger's channel, or nil without one.
func (p *placement) pressureC() <-chan struct{} {
	if p.watch == nil || p.watch.pressure == nil {
		return nil
	}
	return p.watch.pressure.C()
}

// pressureDone is closed when the kernel drops the PSI trigger (the
// managed v2 parent was removed), or nil without one.
func (p *placement) pressureDone() <-chan struct{} {
	if p.watch == nil || p.watch.pressure == nil {
		return nil
	}
	return p.watch.pressure.Done()
}

// openPressure arms the PSI trigger for the managed parent; nil (logged)
// where PSI is unavailable: idle sampling then backs off instead of
// stopping.
func (p *placement) openPressure() *sysfs.PressureTrigger {
	path := filepath.Join(p.cfg.ProcRoot, "pressure", "cpu")
	if p.cg.Version() == sysfs.CgroupV2 {
		path = filepath.Join(p.cg.Path(), "cpu.pressure")
	}
	t, err := sysfs.OpenPressureTrigger(path, pressureStall, pressureWindow)
	if err != nil {
		lvl := logrus.WarnLevel
		if errors.Is(err, sysfs.ErrNoPSI) {
			lvl = logrus.InfoLevel
		}
		p.log.WithError(err).Log(lvl, "no CPU pressure trigger; while every workload is idle, sampling slows down instead of stopping")
		return nil
	}
	p.log.WithField("file", path).Debug("CPU pressure trigger armed")
	return t
}

// watchChild also watches a workload's task files for task attachment
// (v1 cgroup.procs and tasks, v2 cgroup.procs and cgroup.threads) and its
// cpuset.cpus for writes by someone else. The files, not the directory: a
// directory watch would also report every other file's change. Failure
// (e.g. the inotify watch limit) only costs the early wake-up, and the
// early sight of a hand edit (every write is still checked first).
func (c *cgroupWatch) watchChild(dir string, v sysfs.CgroupVersion) {
	if c == nil {
		return
	}
	threads := "tasks"
	if v == sysfs.CgroupV2 {
		threads = "cgroup.threads"
	}
	for _, f := range []string{"cgroup.procs", threads} {
		c.w.Add(filepath.Join(dir, f))
	}
	if c.closes != nil {
		c.closes.Add(filepath.Join(dir, "cpuset.cpus"))
	}
}

// unwatchChild ends the cpuset.cpus watch of a forgotten workload (the
// task files' watches end with the files).
func (c *cgroupWatch) unwatchChild(dir string) {
	if c != nil && c.closes != nil {
		c.closes.Remove(filepath.Join(dir, "cpuset.cpus"))
	}
}

// watchDir watches a child's directory until it can be adopted (its files
// appear: a mock tree fills them after mkdir); unwatchDir ends that.
func (c *cgroupWatch) watchDir(dir string) {
	if c != nil {
		c.w.Add(dir)
	}
}

func (c *cgroupWatch) unwatchDir(dir string) {
	if c != nil {
		c.w.Remove(dir)
	}
}

// takeWritten returns and clears the names of workloads whose cpuset.cpus
// was written by someone else since the last call; nil means any may have
// been (events were lost).
func (c *cgroupWatch) takeWritten() map[string]bool {
	paths, all := c.closes.Take()
	if all {
		return nil
	}
	names := make(map[string]bool, len(paths))
	for p := range paths {
		names[filepath.Base(filepath.Dir(p))] = true
	}
	return names
}

// cpusC is the channel of cpuset.cpus writes, or nil without a watch.
func (p *placement) cpusC() <-chan struct{} {
	if p.watch == nil || p.watch.closes == nil {
		return nil
	}
	return p.watch.closes.C()
}

// activityC is the activity channel, or nil without a watch.
func (p *placement) activityC() <-chan struct{} {
	if p.watch == nil {
		return nil
	}
	return p.watch.activity
}

// cgEvents is the current watch's channel, or nil (never ready) without a
// watch.
func (p *placement) cgEvents() <-chan struct{} {
	if p.watch == nil {
		return nil
	}
	return p.watch.events
}

func (p *placement) stopWatch() {
	if p.watch != nil {
		p.watch.stop()
		p.watch = nil
	}
}

// watchCgroup watches the managed parent. It returns nil when watching is
// impossible; the loop then rescans on its sampling ticker instead.
func (p *placement) watchCgroup() *cgroupWatch {
	w, err := fsnotify.NewWatcher()
	if err == nil {
		err = w.Add(p.cg.Path())
	}
	if err != nil {
		p.log.WithError(err).Warn("cannot watch the workload parent; rescanning every sample interval")
		if w != nil {
			w.Close()
		}
		return nil
	}
	out := make(chan struct{}, 1)
	act := make(chan struct{}, 1)
	cw := &cgroupWatch{events: out, activity: act, w: w}
	if cw.closes, err = sysfs.NewCloseWriteWatch(); err != nil {
		p.log.WithError(err).Warn("cannot watch cpuset.cpus for changes by someone else; they are seen at the next write or Rebalance")
	}
	stop := make(chan struct{})
	done := make(chan struct{})
	parent := p.cg.Path()
	poke := func(c chan struct{}) {
		select {
		case c <- struct{}{}:
		default:
		}
	}
	go func() {
		defer close(done)
		for {
			select {
			case ev, ok := <-w.Events:
				if !ok {
					return
				}
				dir := filepath.Dir(ev.Name)
				switch b := filepath.Base(ev.Name); {
				case dir == parent || ev.Name == parent:
					// Remove of the watched directory itself also arrives here.
					if ev.Op&(fsnotify.Create|fsnotify.Remove) != 0 {
						poke(out)
					}
				case ev.Op&fsnotify.Write != 0 && (b == "cgroup.procs" || b == "tasks" || b == "cgroup.threads"):
					poke(act)
				case ev.Op&(fsnotify.Create|fsnotify.Write) != 0 && filepath.Dir(dir) == parent:
					// A file of a child that could not be adopted yet
					// (watchDir).
					poke(out)
				}
			case _, ok := <-w.Errors:
				if !ok {
					return
				}
				// The queue overflowed (events lost): rescan.
				poke(out)
			case <-stop:
				return
			}
		}
	}()
	cw.pressure = p.openPressure()
	cw.stop = func() {
		close(stop)
		w.Close()
		<-done
		if cw.pressure != nil {
			cw.pressure.Close()
		}
		if cw.closes != nil {
			cw.closes.Close()
		}
	}
	return cw
}
