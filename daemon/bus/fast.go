package bus

import (
	"sync/atomic"

	"github.com/godbus/dbus/v5"

	"github.com/schedpolicyd/schedpolicyd/daemon/snapshot"
)

// The fast path for org.freedesktop.DBus.Properties.Get and GetAll of
// Interface, the calls clients poll.
//
// godbus dispatches every incoming method call with `go conn.handleCall`:
// a new goroutine per call, which on this 2-CPU machine means waking a
// second OS thread (futex wake, scheduler spinning, work stealing) while
// the reader goroutine parks, then a reflection-based argument decode and
// method call. perf on the bench's Get phase put under a fifth of the
// daemon's CPU in handleCall (most of it the write syscall) and the rest in
// the Go scheduler and thread hand-offs. The incoming interceptor
// (dbus.WithIncomingInterceptor) runs synchronously on the reader goroutine
// before that dispatch, so a plain Get/GetAll of Interface is answered
// there: the reply comes from the per-snapshot cache below, is sent with
// conn.Send (the same serial and send-error handling as godbus's own
// replies), and the call message is then marked answered (markAnswered,
// the one place that relies on how godbus dispatches), so godbus does not
// answer it a second time.
//
// Anything else, including every error case (unknown interface or
// property, a wrong signature, NO_REPLY_EXPECTED, no sender) and Set, is
// left alone and goes through godbus's normal dispatch to propsHandler, so
// clients see exactly the replies and errors they saw before.

const propsIface = "org.freedesktop.DBus.Properties"

var (
	sigGet    = dbus.MakeVariant(dbus.SignatureOf(dbus.Variant{}))
	sigGetAll = dbus.MakeVariant(dbus.SignatureOf(map[string]dbus.Variant{}))
	sigSerial = dbus.SignatureOf(uint32(0))
)

// propCache is the D-Bus form of one published snapshot, built once
// instead of on every call: each property's Variant, and the reply bodies
// of Get (one per property) and GetAll, every string in them valid for
// the bus (cleanAny). Nothing in it is modified after it is built; godbus
// only reads reply bodies to encode them.
type propCache struct {
	snap   *snapshot.Snapshot
	vars   map[string]dbus.Variant
	get    map[string][]any
	getAll []any
}

// propCache returns the cache of the daemon's latest snapshot, rebuilding
// it when a new snapshot has been published.
func (s *session) propCache() *propCache {
	p := s.ctl.Published()
	if c := s.props.Load(); c != nil && c.snap == p && p != nil {
		return c
	}
	vals := s.svc.values(p)
	c := &propCache{
		snap: p,
		vars: make(map[string]dbus.Variant, len(vals)),
		get:  make(map[string][]any, len(vals)),
	}
	for k, v := range vals {
		// Cleaned once here, for every reply made from the cache
		// (fastProps.outgoing does not walk them again).
		v, _ = cleanAny(v, 0)
		c.vars[k] = dbus.MakeVariant(v)
		c.get[k] = []any{c.vars[k]}
	}
	c.getAll = []any{c.vars}
	if p != nil {
		s.props.Store(c)
	}
	return c
}

// propVariants returns the property Variants of the current snapshot.
func (s *session) propVariants() map[string]dbus.Variant { return s.propCache().vars }

// fastProps is the incoming interceptor, and the outgoing one
// (outgoing). Its session is set once the connection is exported; until
// then every message takes the normal path.
type fastProps struct {
	s atomic.Pointer[session]
	// answer is the reply intercept is sending, nil while it sends none:
	// made from the cache, whose strings are valid already.
	answer atomic.Pointer[dbus.Message]
}

// outgoing is the connection's outgoing interceptor: every message goes
// through cleanOutgoing but the reply intercept sends from the cache,
// which was cleaned when it was built (walking a GetAll of 1,000
// workloads again on every call would add some 7 % to its encoding:
// BenchmarkCleanWorkloads, BenchmarkEncodeWorkloads).
func (f *fastProps) outgoing(msg *dbus.Message) {
	if msg == f.answer.Load() {
		return
	}
	cleanOutgoing(msg)
}

func (f *fastProps) intercept(msg *dbus.Message) {
	if msg.Type != dbus.TypeMethodCall || msg.Flags&dbus.FlagNoReplyExpected != 0 {
		return
	}
	s := f.s.Load()
	if s == nil {
		return
	}
	if iface, _ := msg.Headers[dbus.FieldInterface].Value().(string); iface != propsIface {
		return
	}
	if path, _ := msg.Headers[dbus.FieldPath].Value().(dbus.ObjectPath); path != ObjectPath {
		return
	}
	sender, ok := msg.Headers[dbus.FieldSender]
	if !ok {
		return
	}
	if _, ok := sender.Value().(string); !ok {
		return
	}
	sig, _ := msg.Headers[dbus.FieldSignature].Value().(dbus.Signature)
	member, _ := msg.Headers[dbus.FieldMember].Value().(string)
	var body []any
	var bodySig dbus.Variant
	switch {
	case member == "Get" && sig.String() == "ss" && len(msg.Body) == 2:
		if iface, _ := msg.Body[0].(string); iface != Interface {
			return
		}
		name, _ := msg.Body[1].(string)
		b, ok := s.propCache().get[name]
		if !ok {
			return
		}
		body, bodySig = b, sigGet
	case member == "GetAll" && sig.String() == "s" && len(msg.Body) == 1:
		if iface, _ := msg.Body[0].(string); iface != Interface && iface != "" {
			return
		}
		body, bodySig = s.propCache().getAll, sigGetAll
	default:
		return
	}
	reply := &dbus.Message{
		Type: dbus.TypeMethodReply,
		Headers: map[dbus.HeaderField]dbus.Variant{
			dbus.FieldDestination: sender,
			dbus.FieldReplySerial: dbus.MakeVariantWithSignature(msg.Serial(), sigSerial),
			dbus.FieldSignature:   bodySig,
		},
		Body: body,
	}
	// Send runs the outgoing interceptor before it returns, on this
	// goroutine, the only one that calls intercept.
	f.answer.Store(reply)
	s.conn.Send(reply, nil)
	f.answer.Store(nil)
	markAnswered(msg)
}

// markAnswered keeps godbus from dispatching msg, a method call that an
// incoming interceptor has answered itself. It sets the type to 0
// (TypeInvalid), which Conn's reader ignores: the reader runs the
// interceptor on the message it then dispatches, synchronously and
// before its switch on msg.Type, and that switch has no case for 0. godbus
// documents neither (it offers no supported way to consume a message in an
// interceptor, and every call it dispatches gets a goroutine of its own),
// so this is the one place that relies on it, and
// TestGodbusSkipsAnsweredCall checks it against the godbus in go.mod: an
// upgrade that changes it fails that test rather than answering calls
// twice.
func markAnswered(msg *dbus.Message) {
	msg.Type = 0
}
