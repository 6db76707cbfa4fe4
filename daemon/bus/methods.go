package bus

// The methods and writable properties of Interface: each validates its
// arguments, authorises the caller and forwards to the daemon
// (Controller); holds end when their holder leaves the bus.

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"syscall"

	"github.com/godbus/dbus/v5"

	"github.com/schedpolicyd/schedpolicyd/cgroup"
	"github.com/schedpolicyd/schedpolicyd/internal/bussender"
	"github.com/schedpolicyd/schedpolicyd/internal/names"
	"github.com/schedpolicyd/schedpolicyd/policy"
)

// The knob files of the daemon's tree that the setters write
// (Controller.WriteKnob): the 2013 patch set's names.
const (
	knobCurrent          = "current_sched_policy"
	knobPowerAware       = "power_aware"
	knobPowerAwarePolicy = "power_aware_policy"
)

// propSetters are the writable properties of Interface, PowerAware (u)
// and PowerAwarePolicy (s), with the same rules and authorisation as the
// methods: a value of the wrong type is InvalidArgs before authorisation.
func (s *session) propSetters() map[string]propSetter {
	return map[string]propSetter{
		"PowerAware": func(msg dbus.Message, sender dbus.Sender, _ string, v dbus.Variant) *dbus.Error {
			u, ok := v.Value().(uint32)
			if !ok {
				return invalidArgs("PowerAware is of type u, got %s", v.Signature())
			}
			return s.authorizedWrite(msg, sender, knobPowerAware, fmt.Sprint(u), "dbus")
		},
		"PowerAwarePolicy": func(msg dbus.Message, sender dbus.Sender, _ string, v dbus.Variant) *dbus.Error {
			p, ok := v.Value().(string)
			if !ok {
				return invalidArgs("PowerAwarePolicy is of type s, got %s", v.Signature())
			}
			return s.authorizedWrite(msg, sender, knobPowerAwarePolicy, p, "dbus")
		},
	}
}

// authorizedWrite writes data to the tree file as via (session.write)
// once the sender is authorised (session.authorize).
func (s *session) authorizedWrite(msg dbus.Message, sender dbus.Sender, file, data, via string) *dbus.Error {
	if e := s.authorize(msg, sender); e != nil {
		return e
	}
	return s.write(file, data, via)
}

// write applies a knob-file write through the daemon's one shared path
// (Controller.WriteKnob) and maps the error to D-Bus.
func (s *session) write(file, data, via string) *dbus.Error {
	return toDBusError(s.ctl.WriteKnob(context.Background(), file, data, via))
}

// toDBusError maps a Controller's error to the D-Bus error its caller
// gets (Controller's doc).
func toDBusError(err error) *dbus.Error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, syscall.EINVAL), errors.Is(err, policy.ErrInvalid), errors.Is(err, cgroup.ErrCgroupName):
		return invalidArgs("%v", err)
	case errors.Is(err, ErrLimitsExceeded):
		return limitsExceeded(err)
	case errors.Is(err, fs.ErrExist):
		return fileExists(err)
	default:
		return dbus.MakeFailedError(err)
	}
}

// checkSig rejects a call whose body signature is not want: godbus would
// otherwise convert a uint32 1 into the string "\x01".
func checkSig(msg dbus.Message, method, want string) *dbus.Error {
	sig, _ := msg.Headers[dbus.FieldSignature].Value().(dbus.Signature)
	if sig.String() != want {
		return invalidArgs("%s takes signature %q, got %q", method, want, sig.String())
	}
	return nil
}

// SetPolicy behaves exactly like writing policy to current_sched_policy
// (the same parser: sscanf("%15s"), case-sensitive names): "performance"
// sets PowerAware to 0; "balance"/"powersaving" set PowerAware to 2 and
// PowerAwarePolicy to it. An explicit choice cancels all holds. Errors,
// checked in this order: InvalidArgs when the argument is not one string;
// AccessDenied unless root or authorised by polkit; InvalidArgs for a bad
// value; Failed if the choice cannot be persisted. On any error nothing
// changes.
func (o busObject) SetPolicy(msg dbus.Message, sender dbus.Sender, p string) *dbus.Error {
	if e := checkSig(msg, "SetPolicy", "s"); e != nil {
		return e
	}
	if e := o.s.authorize(msg, sender); e != nil {
		return e
	}
	return o.s.write(knobCurrent, p, "dbus")
}

// SetPowerAware is like writing power_aware: 0, 1 or 2.
func (o busObject) SetPowerAware(msg dbus.Message, sender dbus.Sender, mode uint32) *dbus.Error {
	if e := checkSig(msg, "SetPowerAware", "u"); e != nil {
		return e
	}
	if e := o.s.authorize(msg, sender); e != nil {
		return e
	}
	return o.s.write(knobPowerAware, fmt.Sprint(mode), "dbus")
}

// ResetKnob forgets every explicit choice and returns to the
// configuration's knob (Controller.ResetKnob); authorised as the setters.
func (o busObject) ResetKnob(msg dbus.Message, sender dbus.Sender) *dbus.Error {
	if e := checkSig(msg, "ResetKnob", ""); e != nil {
		return e
	}
	if e := o.s.authorize(msg, sender); e != nil {
		return e
	}
	return toDBusError(o.s.ctl.ResetKnob(context.Background()))
}

// Rebalance re-reads the power source and re-plans now.
func (o busObject) Rebalance(msg dbus.Message, sender dbus.Sender) *dbus.Error {
	if e := checkSig(msg, "Rebalance", ""); e != nil {
		return e
	}
	if e := o.s.authorize(msg, sender); e != nil {
		return e
	}
	return toDBusError(o.s.ctl.Rebalance(context.Background()))
}

// HoldPolicy holds policy for the caller until ReleasePolicy, until the
// caller leaves the bus or until an explicit choice (SetPolicy, the tree,
// a knob write) cancels every hold, and returns the hold's cookie (never
// 0). When holds disagree the power-saving one wins. reason is at most 256
// bytes. Errors, checked in this order: InvalidArgs when the arguments are
// not two strings; AccessDenied unless root or authorised by polkit;
// InvalidArgs for a bad policy or a longer reason; LimitsExceeded when the
// caller already has daemon.MaxHoldsPerCaller holds (HoldProfile's count
// too) or the daemon keeps daemon.MaxHolds; Failed when the caller left
// the bus before the hold was in place or the bus could not say whether
// it is still there (session.addHold). On an error no hold is kept.
func (o busObject) HoldPolicy(msg dbus.Message, sender dbus.Sender, p, reason string) (uint32, *dbus.Error) {
	if e := checkSig(msg, "HoldPolicy", "ss"); e != nil {
		return 0, e
	}
	if e := o.s.authorize(msg, sender); e != nil {
		return 0, e
	}
	pol, err := policy.ParsePolicy(p)
	if err != nil {
		return 0, invalidArgs("%v", err)
	}
	if len(reason) > 256 {
		return 0, errReasonTooLong
	}
	return o.s.addHold(pol, reason, sender, "")
}

// addHold adds a hold for the calling bus peer sender (HoldPolicy,
// HoldProfile) and returns its cookie.
//
// A hold must not outlive its holder. watchHolders ends a peer's holds
// when the bus announces that it left (NameOwnerChanged), but a caller
// that leaves while its call is being handled (authorised, the hold not
// yet added) has its NameOwnerChanged handled before the hold exists, and
// nothing would end the hold. So once the hold exists the bus is asked
// whether sender is still connected (NameHasOwner on its unique name,
// which is never reused): if not, its holds end now; if it is, it leaves
// later, the bus sends that NameOwnerChanged after this answer, on this
// connection, and watchHolders (whose match is in place before anything is
// exported) ends the hold. If the bus cannot answer, the hold ends too and
// the call fails: an unverified hold could stay for ever.
func (s *session) addHold(p policy.Policy, reason string, sender dbus.Sender, appID string) (uint32, *dbus.Error) {
	ctx := context.Background()
	cookie, err := s.ctl.AddHold(ctx, p, reason, string(sender), appID)
	if err != nil {
		return 0, toDBusError(err)
	}
	var present bool
	cctx, cancel := context.WithTimeout(ctx, busCallTimeout)
	err = s.conn.BusObject().CallWithContext(cctx, "org.freedesktop.DBus.NameHasOwner", 0, string(sender)).Store(&present)
	cancel()
	if err == nil && present {
		return cookie, nil
	}
	if err != nil {
		s.ctl.EndHold(ctx, cookie, "cannot check that the holder is still on the bus")
	} else {
		s.ctl.EndHoldsOf(ctx, string(sender), holderLeft)
	}
	if err != nil {
		s.log.WithError(err).WithField("owner", sender).Warn("cannot check that a holder is still on the bus; its new hold ended")
		return 0, dbus.MakeFailedError(fmt.Errorf("cannot check that the caller is still on the bus, so the hold was not kept: %w", err))
	}
	return 0, dbus.MakeFailedError(fmt.Errorf("%s left the bus before its hold was in place; its holds ended", sender))
}

// ReleasePolicy releases a hold made by the caller (root may release any).
func (o busObject) ReleasePolicy(msg dbus.Message, sender dbus.Sender, cookie uint32) *dbus.Error {
	if e := checkSig(msg, "ReleasePolicy", "u"); e != nil {
		return e
	}
	if e := o.s.authorize(msg, sender); e != nil {
		return e
	}
	uid, _ := o.s.callerUID(sender)
	return toDBusError(o.s.ctl.ReleaseHold(context.Background(), cookie, string(sender), uid == 0))
}

// CreateWorkload creates workload name and moves pid into it; pid must be
// the caller's own process, as the bus credentials say.
func (o busObject) CreateWorkload(msg dbus.Message, sender dbus.Sender, name string, pid uint32) (string, *dbus.Error) {
	if e := checkSig(msg, "CreateWorkload", "su"); e != nil {
		return "", e
	}
	if e := o.s.authorize(msg, sender); e != nil {
		return "", e
	}
	if err := names.Workload(name); err != nil {
		// As daemon.ValidWorkloadName says it.
		return "", invalidArgs("%v: %v", policy.ErrInvalid, err)
	}
	var callerPID uint32
	ctx, cancel := context.WithTimeout(context.Background(), busCallTimeout)
	defer cancel()
	if err := o.s.conn.BusObject().CallWithContext(ctx, "org.freedesktop.DBus.GetConnectionUnixProcessID", 0, string(sender)).Store(&callerPID); err != nil {
		return "", dbus.MakeFailedError(fmt.Errorf("cannot identify the caller's process: %w", err))
	}
	if pid != callerPID {
		return "", accessDenied("PID %d is not the caller's process (%d)", pid, callerPID)
	}
	path, err := o.s.ctl.CreateWorkload(context.Background(), name, int(pid))
	return path, toDBusError(err)
}

// SetWorkloadPolicy sets ("performance") or clears ("") a workload's
// placement override.
func (o busObject) SetWorkloadPolicy(msg dbus.Message, sender dbus.Sender, name, p string) *dbus.Error {
	if e := checkSig(msg, "SetWorkloadPolicy", "ss"); e != nil {
		return e
	}
	if e := o.s.authorize(msg, sender); e != nil {
		return e
	}
	var pol policy.Policy
	if p != "" {
		var err error
		if pol, err = policy.ParsePolicy(p); err != nil {
			return invalidArgs("%v", err)
		}
	}
	return toDBusError(o.s.ctl.SetWorkloadPolicy(context.Background(), name, pol))
}

// watchHolders releases the holds of bus peers that disconnect
// (NameOwnerChanged with an empty new owner for a unique name), as the bus
// daemon announces it: the same signal from anyone else is ignored, since
// any peer may send it to us. The channel is registered before the match
// is added, so that no signal the match lets through is missed. It reads
// the channel in a goroutine of the service's (spawn) until the
// connection closes it or the service is closed.
func (s *session) watchHolders() error {
	ch := make(chan *dbus.Signal, 64)
	s.conn.Signal(ch)
	if err := s.conn.AddMatchSignal(
		dbus.WithMatchSender(bussender.Bus),
		dbus.WithMatchInterface(bussender.Bus),
		dbus.WithMatchMember("NameOwnerChanged"),
	); err != nil {
		s.conn.RemoveSignal(ch)
		return err
	}
	// Not the connection's ctx: a holder that leaves while the service
	// serves has its holds ended, whatever became of connect's ctx.
	watch := func(ctx context.Context) {
		for {
			select {
			case <-ctx.Done():
				return
			case sig, ok := <-ch:
				if !ok {
					return // the connection closed
				}
				name, _, newOwner, ok := bussender.NameOwnerChanged(sig)
				if !ok || !strings.HasPrefix(name, ":") || newOwner != "" {
					continue
				}
				s.ctl.EndHoldsOf(ctx, name, holderLeft)
			}
		}
	}
	if !s.svc.spawn(context.Background(), watch) {
		s.conn.RemoveSignal(ch) // closed: this connection will not serve
	}
	return nil
}
