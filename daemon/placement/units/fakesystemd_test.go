package units

import (
	"fmt"
	"testing"
	"time"

	"github.com/schedpolicyd/schedpolicyd/internal/testutil"
)

// fakeSystemd is the tests' one fake manager (testutil.FakeManager, the
// model memManager calls in memory) served as the system manager on a
// private bus with the system bus's policy, for the real D-Bus path
// (systemd.ConnectSystem follows DBUS_SYSTEM_BUS_ADDRESS there). Its
// drop-ins are below a temporary directory that runtimeRoot points into.
type fakeSystemd struct {
	*testutil.FakeManager
}

// newFakeSystemd starts a bus with the system bus's policy, points
// DBUS_SYSTEM_BUS_ADDRESS at it and serves a new FakeManager there as the
// system manager, with systemd's drop-ins.
func newFakeSystemd(t *testing.T) *fakeSystemd {
	t.Helper()
	bus := testutil.StartSystemPolicyBus(t)
	t.Setenv("DBUS_SYSTEM_BUS_ADDRESS", bus.Addr)
	dir := t.TempDir()
	was := runtimeRoot
	runtimeRoot = dir + "/run/"
	t.Cleanup(func() { runtimeRoot = was })
	f := &fakeSystemd{testutil.NewFakeManager(t)}
	f.Version = "252.39-1~deb12u2"
	f.DropInsBelow(dir, -1)
	f.ServeBus(bus.Addr)
	return f
}

// pump hands the unit messages that arrived to onEvent, as the daemon's
// loop does, until the fake manager's UnitNew for a sentinel unit comes
// through (every signal sent before it has then been followed); each
// onEvent that reports a change is followed by apply(), as recompute does.
// each, when not nil, is called after every message.
func pump(t *testing.T, f *fakeSystemd, u *Placement, apply func(), each func()) {
	t.Helper()
	sentinel := fmt.Sprintf("sentinel-%d.service", time.Now().UnixNano())
	f.Emit("UnitNew", sentinel, testutil.FakeUnitPath(sentinel))
	deadline := time.After(time.Minute)
	for {
		select {
		case m := <-u.EventsC():
			msg := m.(unitMsg)
			if u.onEvent(msg) {
				apply()
			}
			if each != nil {
				each()
			}
			if msg.ev.Name == sentinel {
				return
			}
		case <-deadline:
			t.Fatal("the sentinel's UnitNew did not come through within a minute")
		}
	}
}
