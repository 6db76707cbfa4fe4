package daemon

// intel-lpmd's bus name, followed on the daemon's connection
// (lpmd.go: what the daemon leaves to it).

import (
	"context"
	"time"

	"github.com/godbus/dbus/v5"

	"github.com/schedpolicyd/schedpolicyd/internal/bussender"
)

// LpmdBusName is the name intel-lpmd owns on the system bus.
const LpmdBusName = "org.freedesktop.intel_lpmd"

// lpmdCallTimeout bounds the GetNameOwner call to the bus daemon.
const lpmdCallTimeout = time.Second

// LpmdOwner returns the unique name owning LpmdBusName on conn, "" when
// nobody does or the bus cannot say. It never starts the service: the
// call carries NO_AUTO_START and goes to the bus daemon only.
func LpmdOwner(conn *dbus.Conn) string {
	if conn == nil {
		return ""
	}
	ctx, cancel := context.WithTimeout(context.Background(), lpmdCallTimeout)
	defer cancel()
	var owner string
	if err := conn.BusObject().CallWithContext(ctx, "org.freedesktop.DBus.GetNameOwner", dbus.FlagNoAutoStart, LpmdBusName).Store(&owner); err != nil {
		return ""
	}
	return owner
}

// watchLpmd follows who owns LpmdBusName on the daemon's bus, as the bus
// daemon says (GetNameOwner, then its NameOwnerChanged), in a goroutine
// that hands each change to the loop (setLpmd) until the connection or
// ctx ends. Errors: the match rule was refused, or the bus did not answer.
func (s *busService) watchLpmd(ctx context.Context) error {
	ch := make(chan *dbus.Signal, 16)
	s.conn.Signal(ch)
	cctx, cancel := context.WithTimeout(ctx, busCallTimeout)
	o, err := bussender.WatchOwner(cctx, s.conn, LpmdBusName)
	cancel()
	if err != nil {
		s.conn.RemoveSignal(ch)
		return err
	}
	set := func(owner string) {
		s.d.do(ctx, func() error {
			if s.d.bus == s || s.d.bus == nil {
				s.d.setLpmd(owner)
			}
			return nil
		})
	}
	go func() {
		defer s.conn.RemoveSignal(ch)
		set(o.Unique())
		for {
			select {
			case <-ctx.Done():
				return
			case <-s.conn.Context().Done():
				return
			case sig := <-ch:
				if o.Observe(sig) {
					set(o.Unique())
				}
			}
		}
	}()
	return nil
}
