package acpi

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/schedpolicyd/schedpolicyd/sysfs"
)

// EventSource is the power-event source of MonitorConfig.Events.
type EventSource string

// Event sources.
const (
	EventsNetlink  EventSource = "netlink"  // kernel uevents (the real machine)
	EventsFsnotify EventSource = "fsnotify" // inotify on the files of a mock root
	EventsAuto     EventSource = "auto"     // netlink when FS.Root() is "/sys", else fsnotify
	// EventsNone opens neither: only the optional sources (UPower, acpid,
	// logind), Poke and the timers cause re-reads.
	EventsNone EventSource = "none"
)

// ParseEventSource returns the event source named s (the events key and
// --events), or an error naming the words it accepts.
func ParseEventSource(s string) (EventSource, error) {
	switch e := EventSource(s); e {
	case EventsAuto, EventsNetlink, EventsFsnotify, EventsNone:
		return e, nil
	}
	return "", fmt.Errorf("events %q: want auto, netlink, fsnotify or none", s)
}

// UPowerMode is whether MonitorConfig.UPower follows UPower.
type UPowerMode string

// UPower modes.
const (
	UPowerAuto UPowerMode = "auto" // use UPower when the bus and UPower are there, quietly otherwise
	UPowerOn   UPowerMode = "on"   // use UPower; warn when UPower is missing from the bus
	UPowerOff  UPowerMode = "off"  // never connect to UPower
)

// UPowerModes are the words ParseUPowerMode accepts, in the order its
// error names them.
var UPowerModes = []UPowerMode{UPowerAuto, UPowerOn, UPowerOff}

// ParseUPowerMode returns the UPower mode named s (the upower key and
// --upower), or an error naming the words it accepts.
func ParseUPowerMode(s string) (UPowerMode, error) {
	if m := UPowerMode(s); slices.Contains(UPowerModes, m) {
		return m, nil
	}
	return "", fmt.Errorf("upower %q: want auto, on or off", s)
}

// Defaults applied by NewMonitor to zero MonitorConfig fields.
const (
	DefaultDebounce = 500 * time.Millisecond
	DefaultInterval = 60 * time.Second
	DefaultSettle   = time.Second
)

// Triggers: what caused the re-read that produced a State (State.Trigger).
const (
	TriggerStart     = "start"      // the first read in Run
	TriggerUevent    = "uevent"     // a kernel power_supply uevent, or lost uevents (ENOBUFS)
	TriggerFsnotify  = "fsnotify"   // an inotify event on a supply or boost file
	TriggerUPower    = "upower"     // UPower changed OnBattery or a device's state
	TriggerAcpid     = "acpid"      // an ac_adapter or battery line on the acpid socket
	TriggerResume    = "resume"     // logind PrepareForSleep(false): back from suspend
	TriggerSafetyNet = "safety-net" // the periodic re-check (MonitorConfig.Interval)
	TriggerSettle    = "settle"     // the follow-up re-read after an event (MonitorConfig.Settle)
	TriggerPoke      = "poke"       // Monitor.Poke
)

// MonitorConfig configures a Monitor.
type MonitorConfig struct {
	// FS is the sysfs tree to read; required.
	FS sysfs.FS
	// Events selects the event source: EventsNetlink, EventsFsnotify,
	// EventsNone or EventsAuto; "" means EventsAuto.
	Events EventSource
	// Debounce is how long after the first hint of a burst the state is
	// re-read; a burst within the window gives one re-read. Default
	// DefaultDebounce (500ms) when 0.
	Debounce time.Duration
	// Interval is the safety-net re-read period (some firmware changes a
	// battery's status without a uevent). 0 means automatic: every
	// DefaultInterval (60s), but only while it is needed (see
	// needSafetyNet: no event source is running, or kernel uevents are the
	// only hint about a system battery and UPower is not followed), so an
	// idle daemon on a desktop, on a laptop with UPower or on a mock tree
	// has no periodic timer. Positive: always, at that period. Negative:
	// never. A change found only by this re-read is logged at warning
	// level.
	Interval time.Duration
	// Settle is how long after an event-driven re-read the state is read
	// once more, because values can settle after their last event without
	// a new one (an adapter whose online bounces for ~150 ms, an AC entry
	// that never announces its changes). One follow-up per burst; it does
	// not schedule another. Default DefaultSettle (1s) when 0; negative
	// disables it.
	Settle time.Duration
	// UPower selects UPower's OnBattery on the system bus as an extra
	// source of hints: UPowerAuto, UPowerOn or UPowerOff; "" means
	// UPowerOff. UPower never decides the power source: a change it
	// announces only triggers a re-read of sysfs, and its OnBattery value
	// is recorded in State.UPowerOnBattery for corroboration (see
	// docs/POWER_SOURCE.md).
	UPower UPowerMode
	// Logind subscribes to logind's PrepareForSleep on the system bus and
	// re-reads everything (power state and a CPUHotplug hint) after resume,
	// since events during sleep are lost.
	Logind bool
	// Bus is the D-Bus on which UPower and logind are looked for: "system"
	// (or "": DBUS_SYSTEM_BUS_ADDRESS, else its default path),
	// "session" (DBUS_SESSION_BUS_ADDRESS) or a D-Bus address such as
	// "unix:path=/run/dbus/system_bus_socket" (a private bus standing in
	// for the system bus). It is used only when UPower is not UPowerOff or
	// Logind is set; a caller told to use no bus turns both off.
	Bus string
	// AcpidSocket is the path of acpid's event socket (conventionally
	// /run/acpid.socket); "" disables it. Every ac_adapter or battery line
	// is a hint to re-read.
	AcpidSocket string
	// Log receives fallbacks and read errors; nil discards them.
	Log logrus.FieldLogger
}

// State is what the Monitor delivers.
type State struct {
	// Power is the power-source decision (see Classify and Read).
	Power Decision
	// Boost is the machine's boost state from sysfs.FS.Boost:
	// "1" (permitted), "0" (forbidden) or "unsupported". On a read error it
	// is "unsupported" and the error is logged.
	Boost string
	// Trigger says what caused the re-read that produced this state: one
	// of the Trigger* constants ("start", "uevent", "fsnotify", "upower",
	// "acpid", "resume", "safety-net", "settle", "poke"). When several
	// hints fall into one debounce window it is the first one's.
	Trigger string
	// UPowerOnBattery is UPower's OnBattery as last seen, for
	// corroboration only (it never decides Power): nil when UPower is not
	// used or not reachable.
	UPowerOnBattery *bool
	// BatteryPercent is the charge of the system batteries
	// (SystemBatteries) in percent, 0–100 (BatteryPercent); -1 when
	// there is none or it cannot be read.
	BatteryPercent int

	// systemBattery: the read found a battery that rule 1 does not set
	// aside (see needSafetyNet).
	systemBattery bool
}

// same reports whether two states are equal for delivery purposes: the
// verdict, its reason, boost and the batteries' percent. Other evidence
// details, the trigger and UPower's opinion do not count.
func (s State) same(o State) bool {
	return s.Power.Source == o.Power.Source && s.Power.Reason == o.Power.Reason && s.Boost == o.Boost &&
		s.BatteryPercent == o.BatteryPercent
}

// Monitor watches the power source and boost state. Every event source is
// only a hint: the state is always re-read from sysfs. Create it with
// NewMonitor, then call Run once. C, Poke and CPUHotplug are safe for
// concurrent use.
type Monitor struct {
	cfg         MonitorConfig
	autoNet     bool        // Interval was 0: run the safety net only when needSafetyNet says so
	mode        EventSource // the event source in use (EventsNetlink, EventsFsnotify, EventsNone), set by Run
	log         logrus.FieldLogger
	openUevents func() (ueventSource, error)

	c       chan State
	poke    chan struct{} // 1-slot: re-read requested (the trigger is in pending)
	hotplug chan struct{} // 1-slot: CPU hotplug seen
	started atomic.Bool
	reads   atomic.Int64 // number of sysfs re-reads, for tests
	events  atomic.Int32 // event sources for power supplies running (uevents, fsnotify, UPower, acpid)
	busUp   atomic.Int32 // system-bus sessions subscribed (and UPower asked once) so far, for tests

	upower atomic.Pointer[bool] // UPower's OnBattery as last read; nil = unknown

	mu      sync.Mutex // guards all following fields
	pending string     // trigger of the first hint since the last debounced re-read
	lastErr string     // last logged read error, to log each one once

	upowerDisagree string // last logged UPower disagreement ("" = none)
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
	auto := cfg.Interval == 0
	if auto {
		cfg.Interval = DefaultInterval
	}
	if cfg.Settle == 0 {
		cfg.Settle = DefaultSettle
	}
	if cfg.Events == "" {
		cfg.Events = EventsAuto
	}
	if cfg.UPower == "" {
		cfg.UPower = UPowerOff
	}
	log := cfg.Log
	if log == nil {
		l := logrus.New()
		l.SetOutput(io.Discard)
		log = l
	}
	return &Monitor{
		cfg:         cfg,
		autoNet:     auto,
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

// CPUHotplug returns a channel that receives a coalesced hint when CPUs may
// have gone online or offline: a SUBSYSTEM=cpu uevent (netlink), a kernel
// buffer overrun (netlink ENOBUFS: events were lost), a write to
// <root>/devices/system/cpu/online (fsnotify), or resume from suspend
// (logind). Several hints before the reader gets to it give one value. It
// is never closed.
func (m *Monitor) CPUHotplug() <-chan struct{} { return m.hotplug }

// Poke requests a re-read of the state (trigger "poke"). It never blocks;
// pokes are coalesced with other hints and debounced.
func (m *Monitor) Poke() { m.hint(TriggerPoke) }

// hint requests a debounced re-read; trigger names the cause and is kept
// if it is the first one since the last re-read. It never blocks.
func (m *Monitor) hint(trigger string) {
	m.mu.Lock()
	if m.pending == "" {
		m.pending = trigger
	}
	m.mu.Unlock()
	signal(m.poke)
}

// takePending returns and clears the pending trigger ("poke" if none).
func (m *Monitor) takePending() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	t := m.pending
	m.pending = ""
	if t == "" {
		t = TriggerPoke
	}
	return t
}

func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// Run opens the event sources, reads the state once and delivers it on C
// (trigger "start"), then re-reads:
//   - Debounce after the first hint of a burst (uevent, fsnotify, UPower,
//     acpid, resume, Poke): hints within the window give one re-read;
//   - Settle after each such re-read, once, to catch values that settle
//     after their last event without a new one;
//   - every Interval (the safety net).
//
// It delivers the new State only when it differs from the last delivered
// one (Source, Reason, Boost or BatteryPercent). Failing to open an event
// source is logged once and the monitor continues on the others and the
// safety net; it never gives up. Run returns nil when ctx is cancelled,
// after all its goroutines have stopped and C is closed. It returns an
// error (and closes C) for an invalid configuration (FS without root,
// unknown Events or UPower) or when called a second time.
func (m *Monitor) Run(ctx context.Context) error {
	if !m.started.CompareAndSwap(false, true) {
		return errors.New("acpi monitor: Run called twice")
	}
	defer close(m.c)
	if err := m.configure(); err != nil {
		return err
	}

	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	m.startSources(ctx, &wg)

	last := m.read(TriggerStart)
	m.checkUPower(last)
	if !m.deliver(ctx, last) {
		return nil
	}

	var tm runTimers
	defer tm.stop()
	m.armSafetyNet(&tm, last)
	for {
		var trigger string
		select {
		case <-ctx.Done():
			return nil
		case <-m.poke:
			if tm.debounceC == nil {
				tm.debounce = time.NewTimer(m.cfg.Debounce)
				tm.debounceC = tm.debounce.C
			}
			continue
		case <-tm.debounceC:
			tm.debounceC = nil
			trigger = m.takePending()
			if m.cfg.Settle > 0 {
				if tm.settle != nil {
					tm.settle.Stop()
				}
				tm.settle = time.NewTimer(m.cfg.Settle)
				tm.settleC = tm.settle.C
			}
		case <-tm.settleC:
			tm.settleC = nil
			trigger = TriggerSettle
		case <-tm.tick:
			trigger = TriggerSafetyNet
		}
		st := m.read(trigger)
		m.checkUPower(st)
		m.armSafetyNet(&tm, st)
		if st.same(last) {
			continue
		}
		m.logChange(last, st, trigger)
		if !m.deliver(ctx, st) {
			return nil
		}
		last = st
	}
}

// configure resolves MonitorConfig.Events to the source in use (m.mode)
// and checks the configuration; the error says what is invalid.
func (m *Monitor) configure() error {
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
	if mode != EventsNetlink && mode != EventsFsnotify && mode != EventsNone {
		return fmt.Errorf("acpi monitor: unknown event source %q (want %s, %s, %s or %s)", m.cfg.Events, EventsNetlink, EventsFsnotify, EventsNone, EventsAuto)
	}
	m.mode = mode
	switch m.cfg.UPower {
	case UPowerAuto, UPowerOn, UPowerOff:
	default:
		return fmt.Errorf("acpi monitor: unknown upower setting %q (want %s, %s or %s)", m.cfg.UPower, UPowerAuto, UPowerOn, UPowerOff)
	}
	return nil
}

// startSources starts the configured event sources (m.mode, the bus,
// acpid), each running until ctx is done and counted in wg.
func (m *Monitor) startSources(ctx context.Context, wg *sync.WaitGroup) {
	switch m.mode {
	case EventsNetlink:
		m.startUevents(ctx, wg)
		// Real sysfs raises inotify only for user-space writes, which is
		// how boost changes made by others show up.
		m.startWatcher(ctx, wg, false)
	case EventsFsnotify:
		m.startWatcher(ctx, wg, true)
	}
	if m.cfg.UPower != UPowerOff || m.cfg.Logind {
		m.startBus(ctx, wg)
	}
	if m.cfg.AcpidSocket != "" {
		m.startAcpid(ctx, wg)
	}
}

// runTimers are Run's timers. A nil channel is a timer not armed.
type runTimers struct {
	// debounce fires Debounce after the first hint of a burst.
	debounce  *time.Timer
	debounceC <-chan time.Time
	// settle fires Settle after a debounced re-read.
	settle  *time.Timer
	settleC <-chan time.Time
	// ticker is the safety net, running only while needed (armSafetyNet).
	ticker *time.Ticker
	tick   <-chan time.Time
}

// stop stops every timer that was started.
func (t *runTimers) stop() {
	if t.debounce != nil {
		t.debounce.Stop()
	}
	if t.settle != nil {
		t.settle.Stop()
	}
	if t.ticker != nil {
		t.ticker.Stop()
	}
}

// armSafetyNet starts or stops the safety-net ticker as needSafetyNet
// says after the read that gave st: an idle daemon that has working event
// sources has no periodic timer.
func (m *Monitor) armSafetyNet(t *runTimers, st State) {
	switch need := m.needSafetyNet(st); {
	case need && t.ticker == nil:
		t.ticker = time.NewTicker(m.cfg.Interval)
		t.tick = t.ticker.C
		m.log.WithField("interval", m.cfg.Interval).Debug("safety-net re-reads on")
	case !need && t.ticker != nil:
		t.ticker.Stop()
		t.ticker, t.tick = nil, nil
		m.log.Debug("safety-net re-reads off: the event sources cover this machine")
	}
}

// logChange logs the change from last to st found by the re-read of
// trigger, at a level that says how it was found.
func (m *Monitor) logChange(last, st State, trigger string) {
	fields := logrus.Fields{"from": last.Power.Source, "to": st.Power.Source, "boost": st.Boost, "reason": st.Power.Reason, "trigger": trigger}
	powerChanged := st.Power.Source != last.Power.Source || st.Power.Reason != last.Power.Reason
	switch {
	case trigger == TriggerSafetyNet && powerChanged && m.events.Load() > 0:
		m.log.WithFields(fields).Warn("power state change found only by the periodic re-check; the firmware sent no event")
	case trigger == TriggerSettle && powerChanged:
		m.log.WithFields(fields).Info("power state changed after its last event without a new one (found by the settle re-read)")
	case !powerChanged && st.Boost == last.Boost:
		m.log.WithFields(fields).WithField("battery_percent", st.BatteryPercent).Debug("battery level changed")
	default:
		m.log.WithFields(fields).Info("power state changed")
	}
}

// needSafetyNet reports whether periodic re-reads are needed after the
// read that gave st. With an explicit Interval: always (> 0) or never (< 0).
// Automatic (Interval 0): when no event source is running (uevents could not
// be opened or stopped, fsnotify failed, EventsNone), or when kernel uevents
// are the only hint about a system battery and UPower is not followed —
// firmware may change a battery's status without a uevent, and UPower, when
// it runs, polls batteries itself and announces what it finds. Mains and
// USB supplies announce every change (power_supply_changed sends a uevent);
// in a mock tree every change is a file write that fsnotify reports.
func (m *Monitor) needSafetyNet(st State) bool {
	if !m.autoNet {
		return m.cfg.Interval > 0
	}
	if m.events.Load() == 0 {
		return true
	}
	return m.mode == EventsNetlink && st.systemBattery && st.UPowerOnBattery == nil
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
func (m *Monitor) read(trigger string) State {
	m.reads.Add(1)
	d, supplies, perr := read(m.cfg.FS)
	b, berr := m.cfg.FS.Boost()
	if berr != nil {
		b = sysfs.BoostUnsupported
	}
	m.logReadErr(errors.Join(perr, berr))
	return State{Power: d, Boost: b, Trigger: trigger, UPowerOnBattery: m.upower.Load(), systemBattery: hasSystemBattery(supplies),
		BatteryPercent: BatteryPercent(m.cfg.FS, supplies)}
}

func (m *Monitor) logReadErr(err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
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
	m.events.Add(1)
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
			m.hint(TriggerUevent)
			signal(m.hotplug)
			continue
		}
		if err != nil {
			m.events.Add(-1)
			m.log.WithError(err).Warn("kernel uevents stopped; falling back to periodic re-reads")
			return
		}
		ev, err := ParseUevent(b)
		if err != nil {
			continue
		}
		switch ev.Subsystem {
		case "power_supply", "cpu":
			m.log.WithFields(logrus.Fields{"action": ev.Action, "subsystem": ev.Subsystem, "devpath": ev.DevPath}).Debug("kernel uevent")
		}
		switch ev.Subsystem {
		case "power_supply":
			// Any supply's event re-reads every supply: some entries (an
			// ACPI AC adapter on the ThinkPad T490) change without an
			// event of their own.
			m.hint(TriggerUevent)
		case "cpu":
			signal(m.hotplug)
		}
	}
}
