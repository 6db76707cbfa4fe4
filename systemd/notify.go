// Package systemd wraps the sd_notify protocol (readiness, status,
// stopping, watchdog) over github.com/coreos/go-systemd/v22, holds the
// unit file schedpolicyd.service, and is a client of the system and user
// managers (Manager: transient scopes, a slice's units, AllowedCPUs=,
// unit signals) over go-systemd's dbus package.
package systemd

import (
	"fmt"
	"time"

	"github.com/coreos/go-systemd/v22/daemon"
)

// Notifier sends sd_notify(3) messages to $NOTIFY_SOCKET. When the daemon
// does not run under systemd (no NOTIFY_SOCKET) every method is a no-op that
// returns nil. NOTIFY_SOCKET is never unset, so watchdog pings keep working.
// Safe for concurrent use.
type Notifier struct{}

// send returns go-systemd's error; (false, nil) — not under systemd — is
// normal and not an error.
func (Notifier) send(state string) error {
	_, err := daemon.SdNotify(false, state)
	return err
}

// Ready sends READY=1 together with STATUS=status: start-up (or a reload)
// is complete.
func (n Notifier) Ready(status string) error {
	return n.send(daemon.SdNotifyReady + "\nSTATUS=" + status)
}

// Status sends STATUS=status, the one-line text `systemctl status` shows.
func (n Notifier) Status(status string) error { return n.send("STATUS=" + status) }

// Reloading sends RELOADING=1 with MONOTONIC_USEC (one datagram, as
// Type=notify-reload requires); follow it with Ready when the reload is
// done, even if it failed.
func (n Notifier) Reloading() error {
	return n.send(daemon.SdNotifyReloading + "\n" + daemon.SdNotifyMonotonicUsec())
}

// Stopping sends STOPPING=1: shutdown has begun.
func (n Notifier) Stopping() error { return n.send(daemon.SdNotifyStopping) }

// Watchdog sends WATCHDOG=1. Call it from the event loop, so a stuck loop
// really does trip the watchdog.
func (n Notifier) Watchdog() error { return n.send(daemon.SdNotifyWatchdog) }

// WatchdogInterval returns how often to ping, from go-systemd's
// SdWatchdogEnabled (systemd.exec(5), WATCHDOG_USEC and WATCHDOG_PID):
//   - (half of WATCHDOG_USEC, nil) when systemd watches this process;
//   - (0, nil) when it does not: no WATCHDOG_USEC, or WATCHDOG_PID names
//     another process;
//   - (0, err) when WATCHDOG_USEC is not a positive integer or WATCHDOG_PID
//     not an integer. No interval can be derived then, and a watchdog that
//     is on will stop the process at its timeout, so the caller must say so
//     rather than fold it into "no watchdog".
func (Notifier) WatchdogInterval() (time.Duration, error) {
	d, err := daemon.SdWatchdogEnabled(false)
	if err != nil {
		return 0, fmt.Errorf("systemd watchdog: %w", err)
	}
	if d <= 0 {
		return 0, nil
	}
	return d / 2, nil
}
