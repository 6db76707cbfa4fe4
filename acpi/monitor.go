package acpi

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/schedpolicyd/schedpolicyd/sysfs"
)

// Event source names for MonitorConfig.Events.
const (
	EventsNetlink  = "netlink"  // kernel uevents (the real machine)
	EventsFsnotify = "fsnotify" // inotify on the files of a mock root
	EventsAuto     = "auto"     // netlink when FS.Root() is "/sys", else fsnotify
)

// Defaults applied by NewMonitor to zero MonitorConfig fields.
const (
	DefaultDebounce = 500 * time.Millisecond
	DefaultInterval = 60 * time.Second
)

// MonitorConfig configures a Monitor.
type MonitorConfig struct {
	// FS is the sysfs tree to read; required.
	FS sysfs.FS
	// Events selects the event source: EventsNetlink, EventsFsnotify or
	// EventsAuto; "" means EventsAuto.
	Events string
	// Debounce is how long after the first hint of a burst the state is
	// re-read; a burst within the window gives one re-read. Default
	// DefaultDebounce (500ms) when 0.
	Debounce time.Duration
	// Interval is the safety-net re-read period (some firmware sends no
	// uevent at all). Default DefaultInterval (60s) when 0; negative
	// disables the timer.
	Interval time.Duration
	// Log receives fallbacks and read errors; nil discards them.
	Log logrus.FieldLogger
}

// State is what the Monitor delivers.
type State struct {
	// Power is the power-source decision (see Classify and Read).
	Power Decision
	// Boost is the global cpufreq boost state from sysfs.FS.Boost:
	// "1" (permitted), "0" (forbidden) or "unsupported". On a read error it
	// is "unsupported" and the error is logged.
	Boost string
}

// same reports whether two states are equal for delivery purposes: the
// verdict, its reason and boost. Evidence details (e.g. capacity) do not
// count.
func (s State) same(o State) bool {
	return s.Power.Source == o.Power.Source && s.Power.Reason == o.Power.Reason && s.Boost == o.Boost
}

// Monitor watches the power source and boost state. Every event source is
// only a hint: the state is always re-read from sysfs. Create it with
// NewMonitor, then call Run once. C, Poke and CPUHotplug are safe for
// concurrent use.
type Monitor struct {
	cfg         MonitorConfig
	log         logrus.FieldLogger
	openUevents func() (ueventSource, error)

	c       chan State
	poke    chan struct{} // 1-slot: re-read requested
	hotplug chan struct{} // 1-slot: CPU hotplug seen
	started atomic.Bool
	reads   atomic.Int64 // number of sysfs re-reads, for tests

	errMu   sync.Mutex // guards lastErr
	lastErr string     // last logged read error, to log each one once
}

// NewMonitor returns a Monitor for cfg with defaults applied. It starts
// nothing and opens nothing; see Run.
func NewMonitor(cfg MonitorConfig) *Monitor {
	return newMonitor(cfg, openNetlinkUevents)
}

// newMonitor is NewMonitor with the uevent source injected (tests).
func newMonitor(cfg MonitorConfig, open func() (ueventSource, error)) *Monitor {
	if cfg.Debounce <= 0 {
		cfg.Debounce = DefaultDebounce
	}
	if cfg.Interval == 0 {
		cfg.Interval = DefaultInterval
	}
	if cfg.Events == "" {
		cfg.Events = EventsAuto
	}
	log := cfg.Log
	if log == nil {
		l := logrus.New()
		l.SetOutput(io.Discard)
		log = l
	}
	return &Monitor{
		cfg:         cfg,
		log:         log.WithField("component", "acpi"),
		openUevents: open,
		c:           make(chan State),
		poke:        make(chan struct{}, 1),
		hotplug:     make(chan struct{}, 1),
	}
}

// C returns the channel on which Run delivers states: the first one right
// after start, then one per real change. It is closed when Run returns.
func (m *Monitor) C() <-chan State { return m.c }

// CPUHotplug returns a channel that receives a coalesced hint when a CPU
// went online or offline: a SUBSYSTEM=cpu uevent (netlink), a kernel
// buffer overrun (netlink ENOBUFS: events were lost), or a write to
// <root>/devices/system/cpu/online (fsnotify). Several hints before the
// reader gets to it give one value. It is never closed.
func (m *Monitor) CPUHotplug() <-chan struct{} { return m.hotplug }

// Poke requests a re-read of the state, e.g. after resume from suspend. It
// never blocks; pokes are coalesced with other hints and debounced.
func (m *Monitor) Poke() { signal(m.poke) }

func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// Run opens the event sources, reads the state once and delivers it on
// C, then re-reads after each debounced hint (and every Interval) and
// delivers the new State only when it differs from the last delivered one
// (Source, Reason or Boost). Failing to open an event source is logged once
// and the monitor continues on the safety-net interval; it never gives up.
// Run returns nil when ctx is cancelled, after all its goroutines have
// stopped and C is closed. It returns an error (and closes C) for an
// invalid configuration (FS without root, unknown Events) or when called a
// second time.
func (m *Monitor) Run(ctx context.Context) error {
	if !m.started.CompareAndSwap(false, true) {
		return errors.New("acpi monitor: Run called twice")
	}
	defer close(m.c)
	if m.cfg.FS.Root() == "" {
		return errors.New("acpi monitor: no sysfs root")
	}
	mode := m.cfg.Events
	if mode == EventsAuto {
		mode = EventsFsnotify
		if m.cfg.FS.Root() == sysfs.DefaultRoot {
			mode = EventsNetlink
		}
	}
	if mode != EventsNetlink && mode != EventsFsnotify {
		return fmt.Errorf("acpi monitor: unknown event source %q (want %s, %s or %s)", m.cfg.Events, EventsNetlink, EventsFsnotify, EventsAuto)
	}

	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()

	switch mode {
	case EventsNetlink:
		m.startUevents(ctx, &wg)
		// Real sysfs raises inotify only for user-space writes, which is
		// how boost changes made by others show up.
		m.startWatcher(ctx, &wg, false)
	case EventsFsnotify:
		m.startWatcher(ctx, &wg, true)
	}

	last := m.read()
	if !m.deliver(ctx, last) {
		return nil
	}

	var tick <-chan time.Time
	if m.cfg.Interval > 0 {
		t := time.NewTicker(m.cfg.Interval)
		defer t.Stop()
		tick = t.C
	}
	var debounce *time.Timer
	var debounceC <-chan time.Time
	defer func() {
		if debounce != nil {
			debounce.Stop()
		}
	}()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-m.poke:
			if debounceC == nil {
				debounce = time.NewTimer(m.cfg.Debounce)
				debounceC = debounce.C
			}
			continue
		case <-debounceC:
			debounceC = nil
		case <-tick:
		}
		st := m.read()
		if st.same(last) {
			continue
		}
		m.log.WithFields(logrus.Fields{"from": last.Power.Source, "to": st.Power.Source, "boost": st.Boost, "reason": st.Power.Reason}).Info("power state changed")
		if !m.deliver(ctx, st) {
			return nil
		}
		last = st
	}
}

// deliver sends st on C; false when ctx was cancelled first.
func (m *Monitor) deliver(ctx context.Context, st State) bool {
	select {
	case m.c <- st:
		return true
	case <-ctx.Done():
		return false
	}
}

// read re-reads power supplies and boost. Errors are logged once per
// distinct error and leave Unknown / "unsupported" in the state.
func (m *Monitor) read() State {
	m.reads.Add(1)
	d, perr := Read(m.cfg.FS)
	b, berr := m.cfg.FS.Boost()
	if berr != nil {
		b = sysfs.BoostUnsupported
	}
	m.logReadErr(errors.Join(perr, berr))
	return State{Power: d, Boost: b}
}

func (m *Monitor) logReadErr(err error) {
	m.errMu.Lock()
	defer m.errMu.Unlock()
	msg := ""
	if err != nil {
		msg = err.Error()
	}
	if msg == m.lastErr {
		return
	}
	m.lastErr = msg
	if err != nil {
		m.log.WithError(err).Warn("reading power state failed; using unknown/unsupported")
	} else {
		m.log.Info("reading power state works again")
	}
}

// startUevents opens the uevent source and runs its reader until ctx is
// done. A failure to open is logged once; the interval remains.
func (m *Monitor) startUevents(ctx context.Context, wg *sync.WaitGroup) {
	src, err := m.openUevents()
	if err != nil {
		m.log.WithError(err).Warn("kernel uevents unavailable; falling back to periodic re-reads")
		return
	}
	wg.Add(2)
	go func() {
		defer wg.Done()
		<-ctx.Done()
		src.Close() // unblocks Receive
	}()
	go func() {
		defer wg.Done()
		m.readUevents(ctx, src)
	}()
}

// readUevents turns uevents into hints: SUBSYSTEM=power_supply pokes the
// re-read, SUBSYSTEM=cpu signals CPUHotplug, and an overrun (ENOBUFS) does
// both since events were lost. Unparseable datagrams are ignored. Any other
// receive error stops the reader (logged once), leaving the interval.
func (m *Monitor) readUevents(ctx context.Context, src ueventSource) {
	for {
		b, err := src.Receive()
		if ctx.Err() != nil {
			return
		}
		if errors.Is(err, syscall.ENOBUFS) {
			m.Poke()
			signal(m.hotplug)
			continue
		}
		if err != nil {
			m.log.WithError(err).Warn("kernel uevents stopped; falling back to periodic re-reads")
			return
		}
		ev, err := ParseUevent(b)
		if err != nil {
			continue
		}
		switch ev.Subsystem {
		case "power_supply":
			m.Poke()
		case "cpu":
			signal(m.hotplug)
		}
	}
}
