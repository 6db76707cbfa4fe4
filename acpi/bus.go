package acpi

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/godbus/dbus/v5"
	"github.com/sirupsen/logrus"

	"github.com/schedpolicyd/schedpolicyd/internal/bussender"
	"github.com/schedpolicyd/schedpolicyd/internal/reconnect"
)

// Names on the system bus used as hint sources.
const (
	upowerName  = "org.freedesktop.UPower"
	upowerPath  = "/org/freedesktop/UPower"
	upowerIface = "org.freedesktop.UPower"
	upowerDev   = "org.freedesktop.UPower.Device"

	logindName    = "org.freedesktop.login1"
	logindPath    = "/org/freedesktop/login1"
	logindManager = "org.freedesktop.login1.Manager"

	propsChanged    = "org.freedesktop.DBus.Properties.PropertiesChanged"
	prepareForSleep = logindManager + ".PrepareForSleep"
)

// reconnectBackoff is the wait between attempts to reach the system bus
// and the acpid socket.
var reconnectBackoff = reconnect.Backoff{Min: time.Second, Max: time.Minute}

// upowerDeviceProps are the UPower device properties whose change is a
// hint: the adapter's Online, the battery's State and presence.
var upowerDeviceProps = []string{"Online", "State", "IsPresent", "PowerSupply"}

// startBus runs the bus client (UPower and/or logind) until ctx is done,
// reconnecting with backoff when the bus goes away. An outage is logged at
// debug level only: the bus is the daemon's own (MonitorConfig.Bus), whose
// connection already says, once, that it is missing and that the UPower
// and resume hints wait for it.
func (m *Monitor) startBus(ctx context.Context, wg *sync.WaitGroup) {
	m.keepSession(ctx, wg, m.busSession, m.systemBusSocket, func(err error) {
		m.log.WithError(err).WithField("address", m.busAddress()).Debug("bus unavailable; UPower and resume hints wait for it")
	})
}

// busAddress is MonitorConfig.Bus, "system" when empty.
func (m *Monitor) busAddress() string {
	if m.cfg.Bus == "" {
		return "system"
	}
	return m.cfg.Bus
}

// busSession connects, subscribes and turns signals into hints until the
// connection closes or ctx is done. connected says whether the connection
// was established (so the caller resets its backoff).
func (m *Monitor) busSession(ctx context.Context) (connected bool, err error) {
	conn, err := m.connectBus(ctx)
	if err != nil {
		return false, err
	}
	defer conn.Close()
	sigs := make(chan *dbus.Signal, 16)
	conn.Signal(sigs)
	logind, upower, err := m.subscribeBus(ctx, conn)
	if err != nil {
		return true, err
	}
	m.log.WithField("address", m.busAddress()).Info("system bus connected")
	if m.cfg.UPower != UPowerOff {
		m.events.Add(1)
		defer m.events.Add(-1)
		if !m.refreshUPower(ctx, conn) {
			e := m.log.WithField("address", m.busAddress())
			if m.cfg.UPower == UPowerOn {
				e.Warn("UPower is not running; its hints will be used once it starts")
			} else {
				e.Debug("UPower is not running; its hints will be used once it starts")
			}
		}
		defer func() {
			m.upower.Store(nil)
			m.hint(TriggerUPower) // re-read: the safety net may be needed again
		}()
	}
	m.busUp.Add(1) // subscribed, and UPower asked once

	for sig := range sigs {
		m.busSignal(ctx, conn, sig, logind, upower)
	}
	return true, errors.New("system bus connection closed")
}

// connectBus connects to MonitorConfig.Bus: "system", "session" or a
// D-Bus address.
func (m *Monitor) connectBus(ctx context.Context) (*dbus.Conn, error) {
	var conn *dbus.Conn
	var err error
	switch bus := m.busAddress(); bus {
	case "system":
		conn, err = dbus.ConnectSystemBus(dbus.WithContext(ctx))
	case "session":
		conn, err = dbus.ConnectSessionBus(dbus.WithContext(ctx))
	default:
		conn, err = dbus.Connect(bus, dbus.WithContext(ctx))
	}
	if err != nil {
		return nil, fmt.Errorf("connect to the %s bus: %w", m.busAddress(), err)
	}
	return conn, nil
}

// subscribeBus adds the match rules for logind's PrepareForSleep and
// UPower's PropertiesChanged, as configured, and watches who owns those
// names. A signal counts only from the connection that owns the name it
// speaks for: anyone on the bus may send us a PrepareForSleep or a
// PropertiesChanged. A nil owner is a source not followed.
func (m *Monitor) subscribeBus(ctx context.Context, conn *dbus.Conn) (logind, upower *bussender.Owner, err error) {
	useUPower := m.cfg.UPower != UPowerOff
	var matches [][]dbus.MatchOption
	if m.cfg.Logind {
		matches = append(matches, []dbus.MatchOption{
			dbus.WithMatchSender(logindName), dbus.WithMatchObjectPath(logindPath),
			dbus.WithMatchInterface(logindManager), dbus.WithMatchMember("PrepareForSleep"),
		})
	}
	if useUPower {
		matches = append(matches, []dbus.MatchOption{
			dbus.WithMatchSender(upowerName), dbus.WithMatchPathNamespace(upowerPath),
			dbus.WithMatchInterface("org.freedesktop.DBus.Properties"), dbus.WithMatchMember("PropertiesChanged"),
		})
	}
	for _, mo := range matches {
		if err := conn.AddMatchSignalContext(ctx, mo...); err != nil {
			return nil, nil, fmt.Errorf("subscribe on the system bus: %w", err)
		}
	}
	if m.cfg.Logind {
		if logind, err = bussender.WatchOwner(ctx, conn, logindName); err != nil {
			return nil, nil, fmt.Errorf("subscribe on the system bus: %w", err)
		}
	}
	if useUPower {
		if upower, err = bussender.WatchOwner(ctx, conn, upowerName); err != nil {
			return nil, nil, fmt.Errorf("subscribe on the system bus: %w", err)
		}
	}
	return logind, upower, nil
}

// busSignal turns one signal into hints: a change of logind's or UPower's
// owner, a resume from suspend, a relevant UPower property change. Signals
// from anyone but the name's owner are ignored.
func (m *Monitor) busSignal(ctx context.Context, conn *dbus.Conn, sig *dbus.Signal, logind, upower *bussender.Owner) {
	switch {
	case logind != nil && logind.Observe(sig):
	case upower != nil && upower.Observe(sig):
		if m.refreshUPower(ctx, conn) {
			m.log.Info("UPower appeared on the system bus")
		} else {
			m.log.Info("UPower left the system bus")
		}
		m.hint(TriggerUPower) // also re-decides whether the safety net is needed
	case sig.Name == prepareForSleep && logind != nil && logind.Sent(sig) && sig.Path == logindPath:
		var sleeping bool
		if len(sig.Body) != 1 || dbus.Store(sig.Body, &sleeping) != nil {
			return
		}
		if sleeping {
			m.log.Debug("suspending")
			return
		}
		// Events during sleep are lost: re-read everything.
		m.log.Info("resumed from suspend; re-reading power state and CPUs")
		m.hint(TriggerResume)
		signal(m.hotplug)
	case sig.Name == propsChanged && upower != nil && upower.Sent(sig) && strings.HasPrefix(string(sig.Path), upowerPath):
		if upowerRelevant(sig.Body) {
			m.refreshUPower(ctx, conn)
			m.hint(TriggerUPower)
		}
	}
}

// upowerRelevant reports whether a PropertiesChanged body (interface,
// changed, invalidated) touches OnBattery or a device's power state.
// Percentage, energy and time estimates are not hints.
func upowerRelevant(body []any) bool {
	var (
		iface       string
		changed     map[string]dbus.Variant
		invalidated []string
	)
	if dbus.Store(body, &iface, &changed, &invalidated) != nil {
		return false
	}
	var props []string
	switch iface {
	case upowerIface:
		props = []string{"OnBattery"}
	case upowerDev:
		props = upowerDeviceProps
	default:
		return false
	}
	for _, p := range props {
		if _, ok := changed[p]; ok {
			return true
		}
		for _, q := range invalidated {
			if q == p {
				return true
			}
		}
	}
	return false
}

// refreshUPower reads OnBattery from the current owner of UPower's name
// (never from a signal's payload) into m.upower; false (and nil stored)
// when UPower does not answer. The call carries NO_AUTO_START: "auto"
// means UPower when it is on the bus, so asking must never make the bus
// start upowerd by D-Bus activation (when it is not running the bus
// answers ServiceUnknown at once).
func (m *Monitor) refreshUPower(ctx context.Context, conn *dbus.Conn) bool {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var v dbus.Variant
	err := conn.Object(upowerName, upowerPath).CallWithContext(ctx, "org.freedesktop.DBus.Properties.Get", dbus.FlagNoAutoStart, upowerIface, "OnBattery").Store(&v)
	b, ok := v.Value().(bool)
	if err != nil || !ok {
		m.upower.Store(nil)
		return false
	}
	m.upower.Store(&b)
	return true
}

// checkUPower logs, once per change, when UPower's OnBattery disagrees with
// the sysfs verdict. The verdict stands: UPower guesses "on battery" for a
// battery whose status is Unknown (its test_unknown_battery_status_with_ac
// in src/linux/integration-test.py, the corpus's
// ac-offline-battery-unknown), and it is corroboration only.
func (m *Monitor) checkUPower(st State) {
	disagree := ""
	if ob := st.UPowerOnBattery; ob != nil {
		switch {
		case *ob && st.Power.Source != Battery:
			disagree = "UPower says on battery"
		case !*ob && st.Power.Source == Battery:
			disagree = "UPower says not on battery"
		}
	}
	m.mu.Lock()
	changed := disagree != m.upowerDisagree
	m.upowerDisagree = disagree
	m.mu.Unlock()
	if !changed || disagree == "" {
		return
	}
	m.log.WithFields(logrus.Fields{"upower": disagree, "source": st.Power.Source, "reason": st.Power.Reason}).
		Info("UPower disagrees with sysfs; keeping the sysfs verdict (UPower is corroboration only)")
}

// systemBusSocket is the socket the bus client (UPower, logind) connects
// to.
func (m *Monitor) systemBusSocket() string {
	return reconnect.BusSocket(m.busAddress())
}
