package systemd

import (
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// listen makes a unixgram socket in a temp dir and points NOTIFY_SOCKET at
// it, the way go-systemd's own tests do.
func listen(t *testing.T) *net.UnixConn {
	t.Helper()
	path := filepath.Join(t.TempDir(), "notify.sock")
	c, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	t.Setenv("NOTIFY_SOCKET", path)
	return c
}

func recv(t *testing.T, c *net.UnixConn) string {
	t.Helper()
	buf := make([]byte, 4096)
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	n, err := c.Read(buf)
	if err != nil {
		t.Fatal(err)
	}
	return string(buf[:n])
}

func TestNotifierSendsProtocolLines(t *testing.T) {
	c := listen(t)
	var n Notifier
	steps := []struct {
		send func() error
		want string
	}{
		{func() error { return n.Ready("policy performance, power ac") }, "READY=1\nSTATUS=policy performance, power ac"},
		{func() error { return n.Status("policy powersaving, power battery") }, "STATUS=policy powersaving, power battery"},
		{n.Watchdog, "WATCHDOG=1"},
		{n.Stopping, "STOPPING=1"},
	}
	for _, s := range steps {
		if err := s.send(); err != nil {
			t.Fatal(err)
		}
		if got := recv(t, c); got != s.want {
			t.Errorf("sent %q, want %q", got, s.want)
		}
	}
}

func TestNotifierWithoutSystemd(t *testing.T) {
	t.Setenv("NOTIFY_SOCKET", "")
	var n Notifier
	if err := n.Ready("x"); err != nil {
		t.Errorf("Ready without NOTIFY_SOCKET: %v, want nil", err)
	}
	if d, err := n.WatchdogInterval(); d != 0 || err != nil {
		t.Errorf("WatchdogInterval = %v, %v; want 0, nil", d, err)
	}
}

func TestWatchdogInterval(t *testing.T) {
	t.Setenv("WATCHDOG_USEC", "2000000")
	t.Setenv("WATCHDOG_PID", "")
	var n Notifier
	if d, err := n.WatchdogInterval(); d != time.Second || err != nil {
		t.Errorf("WatchdogInterval = %v, %v; want 1s (half of 2s), nil", d, err)
	}
}

// TestWatchdogIntervalErrors: a WATCHDOG_USEC or WATCHDOG_PID that cannot
// be read is an error, never a quiet 0 (which would mean "no watchdog" and
// stop the pings), and another process's watchdog is no error.
func TestWatchdogIntervalErrors(t *testing.T) {
	pid := strconv.Itoa(os.Getpid())
	for _, c := range []struct {
		usec, pid string
		want      time.Duration
		wantErr   string
	}{
		{"2s", "", 0, "systemd watchdog: error converting WATCHDOG_USEC: strconv.Atoi: parsing \"2s\": invalid syntax"},
		{"0", "", 0, "systemd watchdog: error WATCHDOG_USEC must be a positive number"},
		{"-1000000", pid, 0, "systemd watchdog: error WATCHDOG_USEC must be a positive number"},
		{"2000000", "self", 0, "systemd watchdog: error converting WATCHDOG_PID: strconv.Atoi: parsing \"self\": invalid syntax"},
		{"2000000", "1", 0, ""}, // another process is watched
		{"2000000", pid, time.Second, ""},
	} {
		t.Setenv("WATCHDOG_USEC", c.usec)
		t.Setenv("WATCHDOG_PID", c.pid)
		d, err := Notifier{}.WatchdogInterval()
		gotErr := ""
		if err != nil {
			gotErr = err.Error()
		}
		if d != c.want || gotErr != c.wantErr {
			t.Errorf("WATCHDOG_USEC=%q WATCHDOG_PID=%q: WatchdogInterval = %v, %q; want %v, %q", c.usec, c.pid, d, gotErr, c.want, c.wantErr)
		}
	}
}

func TestUnitFileIsTypeNotify(t *testing.T) {
	b := Unit
	for _, want := range []string{"Type=notify", "ExecStart=/usr/sbin/schedpolicyd", "WatchdogSec=", "BusName=org.schedpolicyd.SchedPolicy1"} {
		if !strings.Contains(b, want) {
			t.Errorf("schedpolicyd.service lacks %q", want)
		}
	}
}
