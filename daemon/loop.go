package daemon

import (
	"context"
	"fmt"
	"runtime/debug"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/schedpolicyd/schedpolicyd/acpi"
	"github.com/schedpolicyd/schedpolicyd/daemon/placement"
)

// loopSources are the loop's sources that start opens (Run hands them
// over): the power monitor's states and CPU hotplug hints, the served
// tree's loss, and the watchdog's period. The loop's other sources are
// the daemon's own (d.reqs, d.clockSync, the energy guard) and the back
// end's wakes; its timers (the sample ticker, the lazy wake, the watchdog
// ticker) it makes itself, so that a loop run in a synctest bubble runs
// them on the bubble's clock. A nil channel never fires.
type loopSources struct {
	power    <-chan acpi.State // the power monitor's states (acpi.Monitor.C)
	hotplug  <-chan struct{}   // CPUs may have gone on- or offline (acpi.Monitor.CPUHotplug)
	treeLost <-chan struct{}   // the tree was unmounted from outside (treeGone)
	watchdog time.Duration     // WATCHDOG=1 every this long; 0: none
}

// notifier is what the daemon tells systemd (systemd.Notifier, sd_notify):
// the loop's tests count its watchdog pings.
type notifier interface {
	Ready(status string) error
	Status(status string) error
	Stopping() error
	Watchdog() error
	WatchdogInterval() (time.Duration, error)
}

// watchdogEvery is how often, at most, a turn of the loop pings systemd's
// watchdog (watchdogPinger.turn).
const watchdogEvery = time.Second

// watchdogPinger pings systemd's watchdog for the loop: on its ticker
// while the loop waits, and at the top of each turn once watchdogEvery has
// passed since the last ping. systemd then measures how long one turn took
// (a scan or an apply, each bounded by its timeout however slow the
// manager answers), not that plus the ticker's phase, and a turn that
// hangs is still caught. A zero period pings never.
type watchdogPinger struct {
	n      notifier
	every  time.Duration
	t      *time.Ticker
	pinged time.Time
}

func newWatchdogPinger(n notifier, every time.Duration) *watchdogPinger {
	w := &watchdogPinger{n: n, every: every}
	if every > 0 {
		w.t = time.NewTicker(every)
		w.pinged = time.Now()
	}
	return w
}

// c is the ticker's channel; nil (never ready) without a watchdog.
func (w *watchdogPinger) c() <-chan time.Time {
	if w.t == nil {
		return nil
	}
	return w.t.C
}

// ping sends WATCHDOG=1 (the ticker fired).
func (w *watchdogPinger) ping() {
	w.n.Watchdog()
	w.pinged = time.Now()
}

// turn pings at the top of a turn of the loop when the last ping is
// watchdogEvery old or more, and starts the ticker's period anew (a tick
// that came during the turn is dropped).
func (w *watchdogPinger) turn() {
	if w.t == nil || time.Since(w.pinged) < watchdogEvery {
		return
	}
	w.ping()
	w.t.Reset(w.every)
	select {
	case <-w.t.C:
	default:
	}
}

func (w *watchdogPinger) stop() {
	if w.t != nil {
		w.t.Stop()
	}
}

// loop serves src, the daemon's requests and the back end's wakes until
// ctx ends, then restores every workload (shutdown) and returns nil. A
// panic on the loop is a bug, but it must not leave workloads packed: it
// is logged with its stack, every workload is restored (as at a stop; a
// panic there too is only logged), and loop returns an error, so the
// process exits non-zero and systemd restarts it.
func (d *Daemon) loop(ctx context.Context, src loopSources) (loopErr error) {
	defer func() {
		r := recover()
		if r == nil {
			return
		}
		d.log.WithFields(logrus.Fields{"panic": fmt.Sprint(r), "stack": string(debug.Stack())}).Error("internal error in the event loop: restoring every workload and exiting")
		func() {
			defer func() {
				if r2 := recover(); r2 != nil {
					d.log.WithField("panic", fmt.Sprint(r2)).Error("internal error while restoring; state.json keeps what is left for the next start")
				}
			}()
			d.shutdown()
		}()
		loopErr = fmt.Errorf("internal error in the event loop: %v", r)
	}()
	wd := newWatchdogPinger(d.notify, src.watchdog)
	defer wd.stop()
	sample := newSampleTimer(d.cfg.SampleInterval)
	defer sample.stop()
	var lazy lazyWake
	defer lazy.stop()
	monC, treeLost := src.power, src.treeLost
	b := d.place
	for {
		wd.turn()
		sampling := b.Sampling()
		sampleC, stopped := sample.arm(sampling, b.SampleEvery())
		if stopped {
			// Every workload went idle and sampling stopped: hand the
			// memory freed since start-up or the last busy period back to
			// the kernel, once, so an idle daemon's RSS is what it needs
			// (docs/BENCHMARKS.md). No timer.
			go debug.FreeOSMemory()
		}
		lazyC := lazy.c(d.lazyExpiry(sampling))
		select {
		case <-ctx.Done():
			d.shutdown()
			return nil
		case st, ok := <-monC:
			if !ok {
				monC = nil
				continue
			}
			d.stats.Events.Add(1)
			d.onPowerState(st)
		case <-src.hotplug:
			d.stats.Events.Add(1)
			d.onHotplug()
		case fn := <-d.reqs:
			d.stats.Events.Add(1)
			fn()
		case <-sampleC:
			d.stats.Events.Add(1)
			d.onSample()
		case <-lazyC:
			d.stats.Events.Add(1)
			lazy.fired()
			d.recompute("lazy balance history expired", false)
		// The placement engine's wakes (daemon/placement/engine.go).
		case msg := <-b.EventsC():
			d.stats.Events.Add(1)
			b.OnMsg(msg).Do(d.recompute)
		case <-b.WakeC(placement.WakeChanged):
			d.onWake(placement.WakeChanged)
		case <-b.WakeC(placement.WakeWritten):
			d.onWake(placement.WakeWritten)
		case <-b.WakeC(placement.WakeAttached):
			d.onWake(placement.WakeAttached)
		case <-b.WakeC(placement.WakePressure):
			d.onWake(placement.WakePressure)
		case <-b.WakeC(placement.WakeClock):
			d.onWake(placement.WakeClock)
		case <-b.ConfirmC():
			d.onWake(placement.WakeConfirmDue)
		case <-b.WakeC(placement.WakePressureDone):
			b.OnWake(placement.WakePressureDone).Do(d.recompute) // not an event
		case <-b.WakeC(placement.WakePressureResume):
			b.OnWake(placement.WakePressureResume).Do(d.recompute) // not an event
		case <-d.clockSync:
			if b.SyncClock() {
				d.requestClockSync() // more in the next batch
			}
		case <-treeLost:
			d.stats.Events.Add(1)
			treeLost = d.remountTree(ctx)
		case <-d.energy.guard.C():
			d.stats.Events.Add(1)
			if d.energy.guardRead(d.dec.onBattery()) {
				d.publish()
			}
		case <-wd.c():
			wd.ping()
		}
	}
}

// sampleTimer is the loop's sample ticker. Before each select the loop
// arms it with whether the back end samples and at which period
// (placement.Engine.Sampling and SampleEvery).
type sampleTimer struct {
	t     *time.Ticker
	every time.Duration
	on    bool // sampling at the last arm
}

func newSampleTimer(every time.Duration) *sampleTimer {
	return &sampleTimer{t: time.NewTicker(every), every: every}
}

// arm returns the channel of the next sample, nil while not sampling; a
// new period restarts the ticker at it, so the next sample is a whole new
// period away. stopped reports that sampling stopped since the last arm.
func (s *sampleTimer) arm(sampling bool, every time.Duration) (c <-chan time.Time, stopped bool) {
	stopped, s.on = s.on && !sampling, sampling
	if every != s.every {
		s.every = every
		s.t.Reset(every)
	}
	if sampling {
		c = s.t.C
	}
	return c, stopped
}

func (s *sampleTimer) stop() { s.t.Stop() }

// requestClockSync has the loop sync the placement's counters with the
// plan once the event being handled is done (Daemon.clockSync).
func (d *Daemon) requestClockSync() {
	select {
	case d.clockSync <- struct{}{}:
	default:
	}
}
