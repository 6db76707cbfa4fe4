package daemon

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	logtest "github.com/sirupsen/logrus/hooks/test"

	"github.com/schedpolicyd/schedpolicyd/internal/testutil"
)

// busEntries returns the dbus component's log entries at lvl whose
// message contains msg.
func busEntries(h *logtest.Hook, lvl logrus.Level, msg string) []logrus.Entry {
	var out []logrus.Entry
	for _, e := range h.AllEntries() {
		if e.Level == lvl && e.Data["component"] == "dbus" && strings.Contains(e.Message, msg) {
			out = append(out, *e)
		}
	}
	return out
}

func describe(es []logrus.Entry) string {
	var b []string
	for _, e := range es {
		b = append(b, fmt.Sprintf("%s %q %v", e.Level, e.Message, e.Data["error"]))
	}
	return strings.Join(b, "; ")
}

// TestBusFailureEachKindLogged is issue 13's trap: the daemon starts
// before its bus (the first attempt fails to connect), then the bus comes
// up without the policy that lets us own BusName. The refusal is a new
// kind of failure, so it is logged at warning level with its cause when
// it first happens, though an earlier attempt already warned about
// something else; the same refusal again is only a debug line. Once the
// policy allows the name (the bus reloads its configuration), the daemon
// owns it.
func TestBusFailureEachKindLogged(t *testing.T) {
	testutil.NeedBusDaemon(t)
	m := newMockLaptop(t)
	dir := t.TempDir()
	addr := "unix:path=" + testutil.EscapeAddressValue(filepath.Join(dir, "bus"))
	log := testutil.Logger(t)
	hook := logtest.NewLocal(log)
	m.startWith(t, func(c *Config) { c.Bus = addr; c.Log = log })

	connect := "no D-Bus connection"
	refused := "the bus refused us " + BusName
	if got := busEntries(hook, logrus.WarnLevel, ""); len(got) != 1 || !strings.Contains(got[0].Message, connect) {
		t.Fatalf("warnings before the bus is there: %s; want one %q", describe(got), connect)
	}

	o := testutil.BusOptions{System: true, Dir: dir, DenyOwn: []string{BusName}}
	bus := testutil.StartBus(t, o)
	testutil.Eventually(t, "the refusal logged at warning level", func() (bool, string) {
		return len(busEntries(hook, logrus.WarnLevel, refused)) > 0, describe(busEntries(hook, logrus.WarnLevel, ""))
	})
	w := busEntries(hook, logrus.WarnLevel, refused)[0]
	if err, _ := w.Data["error"].(error); err == nil || !strings.Contains(err.Error(), "org.freedesktop.DBus.Error.AccessDenied") && !strings.Contains(err.Error(), "not allowed to own") {
		t.Errorf("the refusal's warning has error %v; want the bus's AccessDenied", w.Data["error"])
	}
	if !strings.Contains(w.Message, "policy file") {
		t.Errorf("the refusal's warning %q does not point at the policy file", w.Message)
	}
	// The next attempt (backoff 4 s) is refused the same way: debug only.
	testutil.WaitFor(t, "a second refusal, at debug level", 30*time.Second, func() (bool, string) {
		return len(busEntries(hook, logrus.DebugLevel, refused)) > 0, ""
	})

	o.DenyOwn = nil
	if err := os.WriteFile(bus.Config, []byte(testutil.BusConfig(o, bus.Socket)), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := bus.Reload(); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, BusName+" owned once the policy allows it", 40*time.Second, func() (bool, string) {
		return testutil.NameOwnedAt(addr, BusName)
	})
	if got := busEntries(hook, logrus.WarnLevel, ""); len(got) != 2 {
		t.Errorf("warnings: %s; want exactly two, one per kind of failure (%q, %q)", describe(got), connect, refused)
	}
}
