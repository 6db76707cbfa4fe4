package systemd

import (
	"context"
	"testing"
	"time"

	"github.com/godbus/dbus/v5"

	"github.com/schedpolicyd/schedpolicyd/internal/testutil"
)

// ownName connects to addr as root and owns name, failing t otherwise.
func ownName(t *testing.T, addr, name string) *dbus.Conn {
	t.Helper()
	c := testutil.Connect(t, addr)
	if r, err := c.RequestName(name, dbus.NameFlagDoNotQueue); err != nil || r != dbus.RequestNameReplyPrimaryOwner {
		t.Fatalf("RequestName(%s) = %v, %v", name, r, err)
	}
	return c
}

// TestLogindForgedSignals, on a bus with the system bus's policy: uid
// 65534 sends the logind client's connection UserRemoved and UserNew
// (unicast and broadcast); the client reports only what logind's own
// connection sends afterwards, also after logind restarted with another
// unique name, and nothing its former connection sends.
func TestLogindForgedSignals(t *testing.T) {
	bus := testutil.StartSystemPolicyBus(t)
	t.Setenv("DBUS_SYSTEM_BUS_ADDRESS", bus.Addr)
	logind := ownName(t, bus.Addr, logindName)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	l, err := ConnectLogind(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	next := func(want UserEvent) {
		t.Helper()
		select {
		case got := <-l.Events():
			if got != want {
				t.Fatalf("event %+v, want %+v (a forged signal was believed)", got, want)
			}
		case <-ctx.Done():
			t.Fatalf("no %+v", want)
		}
	}
	attacker := testutil.DialAs(t, bus.Addr, 65534)
	forge := func() {
		for _, dest := range []string{l.conn.Names()[0], ""} {
			testutil.SendSignal(t, attacker, dest, logindPath, logindInterface+".UserRemoved", uint32(1000), dbus.ObjectPath("/org/freedesktop/login1/user/_1000"))
			testutil.SendSignal(t, attacker, dest, logindPath, logindInterface+".UserNew", uint32(0), dbus.ObjectPath("/org/freedesktop/login1/user/_0"))
		}
	}
	forge()
	if err := logind.Emit(logindPath, logindInterface+".UserNew", uint32(1001), dbus.ObjectPath("/org/freedesktop/login1/user/_1001")); err != nil {
		t.Fatal(err)
	}
	next(UserEvent{UID: 1001, New: true})

	// logind restarts: its new connection speaks for it, the old one (still
	// connected, no longer the owner) does not.
	if _, err := logind.ReleaseName(logindName); err != nil {
		t.Fatal(err)
	}
	logind2 := ownName(t, bus.Addr, logindName)
	testutil.Barrier(t, logind2)
	if err := logind.Emit(logindPath, logindInterface+".UserRemoved", uint32(1001), dbus.ObjectPath("/org/freedesktop/login1/user/_1001")); err != nil {
		t.Fatal(err)
	}
	testutil.Barrier(t, logind)
	forge()
	if err := logind2.Emit(logindPath, logindInterface+".UserRemoved", uint32(1002), dbus.ObjectPath("/org/freedesktop/login1/user/_1002")); err != nil {
		t.Fatal(err)
	}
	next(UserEvent{UID: 1002, New: false})
}

// TestManagerForgedSignals, on a bus with the system bus's policy: uid
// 65534 sends the manager client's signal connection UnitRemoved,
// UnitNew and JobRemoved (unicast and broadcast); Events reports only what
// the connection owning org.freedesktop.systemd1 sends.
func TestManagerForgedSignals(t *testing.T) {
	bus, systemd, m, events, ctx := fakeManagerOnSystemBus(t)
	attacker := testutil.DialAs(t, bus.Addr, 65534)
	for _, dest := range []string{m.sig.Names()[0], ""} {
		testutil.SendSignal(t, attacker, dest, managerPath, managerInterface+".UnitRemoved", "ssh.service", dbus.ObjectPath("/org/freedesktop/systemd1/unit/ssh_2eservice"))
		testutil.SendSignal(t, attacker, dest, managerPath, managerInterface+".UnitNew", "evil.service", dbus.ObjectPath("/org/freedesktop/systemd1/unit/evil_2eservice"))
		testutil.SendSignal(t, attacker, dest, managerPath, managerInterface+".JobRemoved", uint32(7), dbus.ObjectPath("/org/freedesktop/systemd1/job/7"), "ssh.service", "done")
	}
	if err := systemd.Emit(managerPath, managerInterface+".UnitNew", "cron.service", dbus.ObjectPath("/org/freedesktop/systemd1/unit/cron_2eservice")); err != nil {
		t.Fatal(err)
	}
	select {
	case ev := <-events:
		if want := (UnitEvent{Name: "cron.service", Kind: UnitLoaded, UID: -1}); ev != want {
			t.Fatalf("event %+v, want %+v (a forged signal was believed)", ev, want)
		}
	case <-ctx.Done():
		t.Fatal("no event for systemd's own UnitNew")
	}
}

// fakeManagerOnSystemBus starts a bus with the system bus's policy (as
// DBUS_SYSTEM_BUS_ADDRESS for t), a testutil.FakeManager serving as the
// system manager (its connection returned, to send signals on), and a
// Manager connected through the bus with its events subscribed;
// everything ends with t (a minute's context).
func fakeManagerOnSystemBus(t *testing.T) (*testutil.Bus, *dbus.Conn, *Manager, <-chan UnitEvent, context.Context) {
	t.Helper()
	bus := testutil.StartSystemPolicyBus(t)
	t.Setenv("DBUS_SYSTEM_BUS_ADDRESS", bus.Addr)
	owner := testutil.NewFakeManager(t).ServeBus(bus.Addr)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	m, err := connectBus(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	events, err := m.Events(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return bus, owner, m, events, ctx
}
