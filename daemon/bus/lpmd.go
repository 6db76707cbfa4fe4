package bus

// intel-lpmd's bus name, followed on the daemon's connection (what the
// daemon leaves to it is the daemon's: daemon/lpmd.go).

import (
	"context"
	"time"

	"github.com/godbus/dbus/v5"

	"github.com/schedpolicyd/schedpolicyd/internal/bussender"
)

// LpmdName is the name intel-lpmd owns on the system bus.
const LpmdName = "org.freedesktop.intel_lpmd"

// lpmdCallTimeout bounds the GetNameOwner call to the bus daemon.
const lpmdCallTimeout = time.Second

// LpmdOwnerAt returns the unique name owning LpmdName on bus ("system",
// "session" or an address), "" when nobody does or the bus cannot say
// (lpmdOwner). The error says why the bus could not be reached, within
// busDialTimeout.
func LpmdOwnerAt(bus string) (string, error) {
	conn, err := dialBus(context.Background(), bus, busDialTimeout)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	return lpmdOwner(conn), nil
}

// lpmdOwner returns the unique name owning LpmdName on conn, "" when
// nobody does or the bus cannot say. It never starts the service: the
// call carries NO_AUTO_START and goes to the bus daemon only.
func lpmdOwner(conn *dbus.Conn) string {
	if conn == nil {
		return ""
	}
	ctx, cancel := context.WithTimeout(context.Background(), lpmdCallTimeout)
	defer cancel()
	var owner string
	if err := conn.BusObject().CallWithContext(ctx, "org.freedesktop.DBus.GetNameOwner", dbus.FlagNoAutoStart, LpmdName).Store(&owner); err != nil {
		return ""
	}
	return owner
}

// watchLpmd follows who owns LpmdName on the daemon's bus, as the bus
// daemon says (GetNameOwner, then its NameOwnerChanged), in a goroutine
// of the service's (spawn) that hands each change to the loop
// (Controller.SetLpmdOwner) until the connection, ctx or the service
// ends; a change that waited while the connection was replaced is
// dropped there (isCurrent). Errors: the match rule was refused, or the
// bus did not answer.
func (s *session) watchLpmd(ctx context.Context) error {
	ch := make(chan *dbus.Signal, 16)
	s.conn.Signal(ch)
	cctx, cancel := context.WithTimeout(ctx, busCallTimeout)
	o, err := bussender.WatchOwner(cctx, s.conn, LpmdName)
	cancel()
	if err != nil {
		s.conn.RemoveSignal(ch)
		return err
	}
	watch := func(ctx context.Context) {
		defer s.conn.RemoveSignal(ch)
		set := func(owner string) {
			s.ctl.SetLpmdOwner(ctx, owner, s.isCurrent)
		}
		set(o.Unique())
		for {
			select {
			case <-ctx.Done():
				return
			case <-s.conn.Context().Done():
				return
			case sig, ok := <-ch:
				if !ok {
					return // the connection closed
				}
				if o.Observe(sig) {
					set(o.Unique())
				}
			}
		}
	}
	if !s.svc.spawn(ctx, watch) {
		s.conn.RemoveSignal(ch) // closed: this connection will not serve
	}
	return nil
}
