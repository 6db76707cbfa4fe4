package systemd

import (
	"sync"
	"sync/atomic"

	"github.com/godbus/dbus/v5"
)

// dropSignals is the signal handler of a connection to a user's manager:
// each signal goes to every registered channel that has room, and is
// dropped (counted in dropped) for one that has none. godbus's own
// handler starts a goroutine per signal that finds a channel full, each
// holding its signal until delivered: a manager that floods signals while
// the daemon is busy would grow the daemon without bound. A caller that
// may lose signals learns it from Manager.Overflowed and lists again.
type dropSignals struct {
	mu      sync.Mutex
	chans   []chan<- *dbus.Signal
	closed  bool
	dropped *atomic.Bool
}

var (
	_ dbus.SignalHandler   = (*dropSignals)(nil)
	_ dbus.SignalRegistrar = (*dropSignals)(nil)
	_ dbus.Terminator      = (*dropSignals)(nil)
)

func (h *dropSignals) DeliverSignal(iface, name string, s *dbus.Signal) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return
	}
	for _, ch := range h.chans {
		select {
		case ch <- s:
		default:
			h.dropped.Store(true)
		}
	}
}

func (h *dropSignals) AddSignal(ch chan<- *dbus.Signal) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.closed {
		h.chans = append(h.chans, ch)
	}
}

func (h *dropSignals) RemoveSignal(ch chan<- *dbus.Signal) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for i, c := range h.chans {
		if c == ch {
			h.chans = append(h.chans[:i], h.chans[i+1:]...)
			return
		}
	}
}

// Terminate closes every registered channel, once (the connection
// closed).
func (h *dropSignals) Terminate() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return
	}
	h.closed = true
	for _, ch := range h.chans {
		close(ch)
	}
	h.chans = nil
}

// noBusSender is the incoming interceptor of a connection to a user's
// manager: it removes the sender of every message. There is no bus on a
// private socket, so no sender is the bus's; but godbus takes a signal
// "from org.freedesktop.DBus" for the bus daemon's NameLost or
// NameAcquired and reads its body unchecked: one such signal without a
// body, which anyone on the other end of the socket can send, panics the
// reading goroutine (godbus v5.2.4 conn.go handleSignal), and the daemon
// with it.
func noBusSender(msg *dbus.Message) {
	delete(msg.Headers, dbus.FieldSender)
}
