package bus

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	logtest "github.com/sirupsen/logrus/hooks/test"

	"github.com/schedpolicyd/schedpolicyd/internal/testutil"
)

// TestBusFailureEachKindLogged: the service starts before its bus (the
// first attempt fails to connect), then the bus comes up without the
// policy that lets us own Name. The refusal is a new kind of failure, so
// it is logged at warning level with its cause when it first happens,
// though an earlier attempt already warned about something else; the
// same refusal again is only a debug line. Once the policy allows the
// name (the bus reloads its configuration), the service owns it.
func TestBusFailureEachKindLogged(t *testing.T) {
	testutil.NeedBusDaemon(t)
	dir := t.TempDir()
	addr := "unix:path=" + testutil.EscapeAddressValue(filepath.Join(dir, "bus"))
	log := testLogger(t)
	hook := logtest.NewLocal(log)
	f := newFake()
	svc := New(Config{Bus: addr, Log: log, PowerProfilesAPI: PowerProfilesOff}, f)
	f.serve(svc)
	t.Cleanup(svc.Close)
	// As the daemon does: the first attempt, then Keep. An attempt woken
	// by the socket's creation waits until the bus listens
	// (reconnect.WaitSocket): connecting between its bind() and listen()
	// was refused (ECONNREFUSED), a third kind of failure.
	if err := svc.Connect(t.Context()); err == nil {
		t.Fatal("Connect to a bus that is not there succeeded")
	}
	keep(t, svc)

	connect := "no D-Bus connection"
	refused := "the bus refused us " + Name
	if got := testutil.EntriesAt(hook, logrus.WarnLevel, "", nil); len(got) != 1 || !strings.Contains(got[0].Message, connect) {
		t.Fatalf("warnings before the bus is there: %s; want one %q", testutil.DescribeEntries(got), connect)
	}

	o := testutil.BusOptions{System: true, Dir: dir, DenyOwn: []string{Name}}
	pbus := testutil.StartBus(t, o)
	testutil.Eventually(t, "the refusal logged at warning level", func() (bool, string) {
		return len(testutil.EntriesAt(hook, logrus.WarnLevel, refused, nil)) > 0, testutil.DescribeEntries(testutil.EntriesAt(hook, logrus.WarnLevel, "", nil))
	})
	w := testutil.EntriesAt(hook, logrus.WarnLevel, refused, nil)[0]
	if err, _ := w.Data["error"].(error); err == nil || !strings.Contains(err.Error(), "org.freedesktop.DBus.Error.AccessDenied") && !strings.Contains(err.Error(), "not allowed to own") {
		t.Errorf("the refusal's warning has error %v; want the bus's AccessDenied", w.Data["error"])
	}
	if !strings.Contains(w.Message, "policy file") {
		t.Errorf("the refusal's warning %q does not point at the policy file", w.Message)
	}
	// The next attempt (backoff 4 s) is refused the same way: debug only.
	testutil.WaitFor(t, "a second refusal, at debug level", 30*time.Second, func() (bool, string) {
		return len(testutil.EntriesAt(hook, logrus.DebugLevel, refused, nil)) > 0, ""
	})

	o.DenyOwn = nil
	if err := os.WriteFile(pbus.Config, []byte(testutil.BusConfig(o, pbus.Socket)), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := pbus.Reload(); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, Name+" owned once the policy allows it", 40*time.Second, func() (bool, string) {
		return testutil.NameOwnedAt(addr, Name)
	})
	if got := testutil.EntriesAt(hook, logrus.WarnLevel, "", nil); len(got) != 2 {
		t.Errorf("warnings: %s; want exactly two, one per kind of failure (%q, %q)", testutil.DescribeEntries(got), connect, refused)
	}
}
