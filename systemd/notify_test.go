package systemd

import (
	"net"
	"path/filepath"
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
	if d := n.WatchdogInterval(); d != 0 {
		t.Errorf("WatchdogInterval = %v, want 0", d)
	}
}

func TestWatchdogInterval(t *testing.T) {
	t.Setenv("WATCHDOG_USEC", "2000000")
	t.Setenv("WATCHDOG_PID", "")
	var n Notifier
	if d := n.WatchdogInterval(); d != time.Second {
		t.Errorf("WatchdogInterval = %v, want 1s (half of 2s)", d)
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
