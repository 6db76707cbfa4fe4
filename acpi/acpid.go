package acpi

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
)

// AcpidEvent is one line of acpid's event socket: acpid formats each ACPI
// genetlink event as "%s %s %08x %08x" (device class, bus id, type, data),
// e.g. "ac_adapter ACPI0003:00 00000080 00000001" (acpid's netlink.c;
// the class, HID and event 0x80 are drivers/acpi/ac.c's).
// Events acpid takes from input devices have other shapes, e.g.
// "button/lid LID close" or "jack/headphone HEADPHONE plug".
type AcpidEvent struct {
	Class string // device class: "ac_adapter", "battery", "button/power", ...
	BusID string // bus id, e.g. "ACPI0003:00" (AC, HID ACPI0003), "PNP0C0A:00" (battery)
	// Coded is true when the line ends in the two hex fields type and data.
	Coded bool
	Type  uint32   // event type, e.g. 0x80 status change, 0x81 information change; 0 unless Coded
	Data  uint32   // event data; for ac_adapter the new AC state (1 online, 0 offline); 0 unless Coded
	Args  []string // the fields after the bus id when not Coded, e.g. ["close"]
}

// ParseAcpidEvent parses one line from acpid's socket, with or without its
// newline. It fails for a line with fewer than two fields or with control
// characters.
func ParseAcpidEvent(line string) (AcpidEvent, error) {
	line = strings.TrimSuffix(strings.TrimSuffix(line, "\n"), "\r")
	for _, r := range line {
		if r < 0x20 && r != '\t' || r == 0x7f {
			return AcpidEvent{}, fmt.Errorf("parse acpid event %q: control character", line)
		}
	}
	f := strings.Fields(line)
	if len(f) < 2 {
		return AcpidEvent{}, fmt.Errorf("parse acpid event %q: want at least class and bus id", line)
	}
	ev := AcpidEvent{Class: f[0], BusID: f[1]}
	if len(f) == 4 {
		typ, err1 := strconv.ParseUint(f[2], 16, 32)
		data, err2 := strconv.ParseUint(f[3], 16, 32)
		if err1 == nil && err2 == nil {
			ev.Coded, ev.Type, ev.Data = true, uint32(typ), uint32(data)
			return ev, nil
		}
	}
	if len(f) > 2 {
		ev.Args = f[2:]
	}
	return ev, nil
}

// PowerHint reports whether the event concerns power: class ac_adapter or
// battery. Such an event only triggers a re-read of sysfs; its data (the
// AC state) is never taken as the answer.
func (ev AcpidEvent) PowerHint() bool {
	return ev.Class == "ac_adapter" || ev.Class == "battery"
}

// startAcpid reads acpid's socket until ctx is done, turning power lines
// into hints; it reconnects with backoff when acpid is not there or
// restarts. The first failure of each outage is logged once.
func (m *Monitor) startAcpid(ctx context.Context, wg *sync.WaitGroup) {
	m.keepSession(ctx, wg, m.acpidSession, func() string { return m.cfg.AcpidSocket }, func(err error) {
		m.log.WithError(err).WithField("socket", m.cfg.AcpidSocket).Warn("acpid socket unavailable; retrying")
	})
}

// keepSession runs session again and again until ctx is done, waiting with
// reconnectBackoff between attempts and on the session's unix socket file
// (socket(), "" if none) as reconnect.Backoff.Keep does. outage is called
// once per outage, with the first failure, to log it.
func (m *Monitor) keepSession(ctx context.Context, wg *sync.WaitGroup, session func(context.Context) (bool, error), socket func() string, outage func(error)) {
	wg.Add(1)
	go func() {
		defer wg.Done()
		reconnectBackoff.Keep(ctx, socket, session, outage)
	}()
}

// acpidSession connects once and reads lines until EOF, an error or ctx.
func (m *Monitor) acpidSession(ctx context.Context) (connected bool, err error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", m.cfg.AcpidSocket)
	if err != nil {
		return false, fmt.Errorf("connect to acpid: %w", err)
	}
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	defer conn.Close()
	m.events.Add(1)
	defer m.events.Add(-1)
	m.log.WithField("socket", m.cfg.AcpidSocket).Info("acpid connected")
	sc := bufio.NewScanner(conn)
	for sc.Scan() {
		ev, err := ParseAcpidEvent(sc.Text())
		if err != nil || !ev.PowerHint() {
			continue
		}
		m.hint(TriggerAcpid)
	}
	if err := sc.Err(); err != nil {
		return true, fmt.Errorf("read acpid socket: %w", err)
	}
	return true, errors.New("acpid closed its socket")
}
