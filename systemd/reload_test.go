package systemd

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/godbus/dbus/v5"

	"github.com/schedpolicyd/schedpolicyd/internal/testutil"
)

// nextEvent reads the next event of ch within a minute.
func nextEvent(t *testing.T, ch <-chan UnitEvent) UnitEvent {
	t.Helper()
	select {
	case ev, ok := <-ch:
		if !ok {
			t.Fatal("events closed")
		}
		return ev
	case <-time.After(time.Minute):
		t.Fatal("no event within a minute")
	}
	return UnitEvent{}
}

// TestManagerReloadingAcrossReexec, on a bus with the system bus's
// policy, plays what systemd 252 does on `systemctl daemon-reexec` (seen
// in the systemd test container): Reloading(true) and UnitRemoved for
// every unit from its connection; a new connection of the re-executed
// manager queued for org.freedesktop.systemd1 takes the name over when
// the old one closes; Reloading(false) and later signals come from the
// new one. Events reports ReloadStarted, the removal, ReloadFinished and
// the new connection's UnitNew, in order, and nothing a forger sends.
func TestManagerReloadingAcrossReexec(t *testing.T) {
	bus, old, m, events, _ := fakeManagerOnSystemBus(t)
	attacker := testutil.DialAs(t, bus.Addr, 65534)
	forge := func() {
		for _, dest := range []string{m.sig.Names()[0], ""} {
			testutil.SendSignal(t, attacker, dest, managerPath, managerInterface+".Reloading", false)
			testutil.SendSignal(t, attacker, dest, managerPath, managerInterface+".Reloading", true)
		}
	}
	emit := func(c *dbus.Conn, member string, body ...any) {
		t.Helper()
		if err := c.Emit(managerPath, managerInterface+"."+member, body...); err != nil {
			t.Fatal(err)
		}
		testutil.Barrier(t, c)
	}
	forge()
	emit(old, "Reloading", true)
	emit(old, "UnitRemoved", "a.service", dbus.ObjectPath("/org/freedesktop/systemd1/unit/a_2eservice"))

	// The re-executed manager connects and queues for the name; the old
	// connection closes and the name passes to the new one.
	reexeced, err := dbus.Connect(bus.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer reexeced.Close()
	if r, err := reexeced.RequestName(managerName, 0); err != nil || r != dbus.RequestNameReplyInQueue {
		t.Fatalf("RequestName = %v, %v; want in queue", r, err)
	}
	old.Close()
	testutil.WaitFor(t, "the name to pass to the new connection", testutil.DefaultBound, func() (bool, string) {
		var owner string
		err := reexeced.BusObject().Call("org.freedesktop.DBus.GetNameOwner", 0, managerName).Store(&owner)
		return err == nil && owner == reexeced.Names()[0], owner
	})
	forge()
	emit(reexeced, "Reloading", false)
	emit(reexeced, "UnitNew", "b.service", dbus.ObjectPath("/org/freedesktop/systemd1/unit/b_2eservice"))
	for _, want := range []UnitEvent{
		{Kind: ReloadStarted, UID: -1},
		{Name: "a.service", Kind: UnitDropped, UID: -1},
		{Kind: ReloadFinished, UID: -1},
		{Name: "b.service", Kind: UnitLoaded, UID: -1},
	} {
		if got := nextEvent(t, events); got != want {
			t.Fatalf("event %+v, want %+v (a forged signal was believed, or the new owner's was not)", got, want)
		}
	}
}

// TestManagerReloadFinishedNotDropped: with the event channel full (a
// reader slower than systemd's UnitNew for every unit), unit events that
// do not fit are dropped (Overflowed), but ReloadFinished waits for room
// and arrives; Close ends such a wait.
//
// The signals are sent so that godbus's own channel (m.sigs) never fills:
// godbus hands a signal that finds it full to a goroutine of its own, and
// those deliver in any order, so a Reloading(false) could overtake the
// UnitNew sent before it (seen on a busy CI machine). The channel's first
// cap(m.events) UnitNew go in batches, each waited for in m.events; then
// the 20 that find it full and Reloading(false) together. A round trip
// of the manager's own signal connection to the bus (Barrier) puts every
// signal routed before it into m.sigs, so m.sigs empty after it means the
// pump has dropped the 20 and holds ReloadFinished.
func TestManagerReloadFinishedNotDropped(t *testing.T) {
	bus := testutil.StartSystemPolicyBus(t)
	t.Setenv("DBUS_SYSTEM_BUS_ADDRESS", bus.Addr)
	sd := testutil.NewFakeManager(t).ServeBus(bus.Addr)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const extra, batch = 20, 64
	unitNew := func() {
		t.Helper()
		if err := sd.Emit(managerPath, managerInterface+".UnitNew", "u.service", dbus.ObjectPath("/org/freedesktop/systemd1/unit/u_2eservice")); err != nil {
			t.Fatal(err)
		}
	}
	for _, closeFirst := range []bool{false, true} {
		m, err := connectBus(ctx)
		if err != nil {
			t.Fatal(err)
		}
		events, err := m.Events(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for sent := 0; sent < cap(m.events); {
			for i := 0; i < batch && sent < cap(m.events); i++ {
				unitNew()
				sent++
			}
			testutil.Barrier(t, sd)
			testutil.Barrier(t, m.sig)
			testutil.Eventually(t, "the batch in the event channel", func() (bool, string) {
				return len(m.events) == sent, fmt.Sprintf("%d of %d", len(m.events), sent)
			})
		}
		if m.overflow.Load() {
			t.Fatal("overflowed before the channel was full")
		}
		for i := 0; i < extra; i++ {
			unitNew()
		}
		if err := sd.Emit(managerPath, managerInterface+".Reloading", false); err != nil {
			t.Fatal(err)
		}
		testutil.Barrier(t, sd)
		testutil.Barrier(t, m.sig)
		testutil.Eventually(t, "the pump to hold ReloadFinished", func() (bool, string) {
			return len(m.sigs) == 0 && m.overflow.Load(), fmt.Sprintf("%d signals unread, overflow %v", len(m.sigs), m.overflow.Load())
		})
		if closeFirst {
			m.Close()
			for range events {
			}
			continue
		}
		loaded, finished := 0, false
		for !finished {
			switch ev := nextEvent(t, events); ev.Kind {
			case UnitLoaded:
				loaded++
			case ReloadFinished:
				finished = true
			default:
				t.Fatalf("event %+v", ev)
			}
		}
		if loaded != cap(m.events) || !m.Overflowed() {
			t.Fatalf("%d UnitLoaded before ReloadFinished, overflowed %v; want the %d that fit, the other %d dropped", loaded, m.overflow.Load(), cap(m.events), extra)
		}
		m.Close()
	}
}
