package bus

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/godbus/dbus/v5"

	"github.com/schedpolicyd/schedpolicyd/daemon/snapshot"
	"github.com/schedpolicyd/schedpolicyd/internal/testutil"
	"github.com/schedpolicyd/schedpolicyd/policy"
)

// replyCounter counts the replies and errors a client connection receives.
type replyCounter struct {
	mu sync.Mutex
	n  int
}

func (r *replyCounter) intercept(msg *dbus.Message) {
	if msg.Type != dbus.TypeMethodReply && msg.Type != dbus.TypeError {
		return
	}
	r.mu.Lock()
	r.n++
	r.mu.Unlock()
}

func (r *replyCounter) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.n
}

// TestFastPropsOneReply: a Get or GetAll answered on the reader goroutine
// gets exactly one reply (godbus must not dispatch it a second time), with
// the same values and the same errors as before.
func TestFastPropsOneReply(t *testing.T) {
	st := startService(t, "", Config{})
	st.f.set(&snapshot.Snapshot{Policy: "balance", Knob: policy.Knob{PowerAware: 2, PowerAwarePolicy: "balance"}, PowerSource: "battery"})
	rc := new(replyCounter)
	conn, err := dbus.Connect(st.addr, dbus.WithIncomingInterceptor(rc.intercept))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	obj := conn.Object(Name, ObjectPath)
	want := st.svc.values(st.f.Published())

	before := rc.count()
	const n = 50
	for i := 0; i < n; i++ {
		var v dbus.Variant
		if err := obj.Call(propsIface+".Get", 0, Interface, "ActivePolicy").Store(&v); err != nil {
			t.Fatal(err)
		}
		if v.Value() != want["ActivePolicy"] || v.Signature().String() != "s" {
			t.Fatalf("Get ActivePolicy = %v (%s), want %v", v.Value(), v.Signature(), want["ActivePolicy"])
		}
		var all map[string]dbus.Variant
		if err := obj.Call(propsIface+".GetAll", 0, Interface).Store(&all); err != nil {
			t.Fatal(err)
		}
		if len(all) != len(want) || all["PowerAware"].Value() != want["PowerAware"] {
			t.Fatalf("GetAll = %v, want %v", all, want)
		}
	}
	// Error cases keep their names (they take godbus's normal dispatch).
	for _, tc := range []struct {
		method string
		args   []any
		want   string
	}{
		{"Get", []any{Interface, "NoSuchProperty"}, errUnknownProp},
		{"Get", []any{"org.example.NoSuchInterface", "ActivePolicy"}, errUnknownIface},
		{"GetAll", []any{"org.example.NoSuchInterface"}, errUnknownIface},
		// godbus's dispatch stores the u into the string argument: the
		// fast path leaves this (su) call to it, as before.
		{"Get", []any{Interface, uint32(1)}, errUnknownProp},
	} {
		if err := obj.Call(propsIface+"."+tc.method, 0, tc.args...).Err; dbusErrName(err) != tc.want {
			t.Errorf("%s%v: %v, want %s", tc.method, tc.args, err, tc.want)
		}
	}
	// A call through godbus's normal dispatch (a goroutine per call) after
	// them: a second reply to any fast call would have been sent by now.
	if err := obj.Call("org.freedesktop.DBus.Peer.Ping", 0).Err; err != nil {
		t.Fatal(err)
	}
	if err := obj.Call("org.freedesktop.DBus.Introspectable.Introspect", 0).Err; err != nil {
		t.Fatal(err)
	}
	if got, exp := rc.count()-before, 2*n+4+2; got != exp {
		t.Errorf("%d replies to %d calls: a call was answered twice or not at all", got, exp)
	}
}

// TestFastPropsIntercept drives the interceptor on a connection with
// nothing exported: what it answers is answered from the snapshot and
// marked so godbus ignores it; everything else is left to godbus (which
// here can only answer with an error).
func TestFastPropsIntercept(t *testing.T) {
	addr := testutil.StartBus(t, testutil.BusOptions{AnyUser: true}).Addr
	fake := newFake()
	fake.set(&snapshot.Snapshot{Policy: "balance", PowerSource: "battery"})
	f := new(fastProps)
	seen := make(chan dbus.Type, 10) // each call's type after the interceptor
	server, err := dbus.Connect(addr, dbus.WithIncomingInterceptor(func(m *dbus.Message) {
		if m.Type != dbus.TypeMethodCall {
			return
		}
		f.intercept(m)
		seen <- m.Type
	}))
	if err != nil {
		t.Fatal(err)
	}
	defer server.Close()
	client, err := dbus.Connect(addr)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	obj := client.Object(server.Names()[0], ObjectPath)
	typeOf := func() dbus.Type {
		t.Helper()
		select {
		case ty := <-seen:
			return ty
		case <-time.After(10 * time.Second):
			t.Fatal("the call never reached the server")
			return 0
		}
	}

	// Before the service is set, nothing is answered.
	if err := obj.Call(propsIface+".Get", 0, Interface, "ActivePolicy").Err; err == nil || typeOf() != dbus.TypeMethodCall {
		t.Fatalf("answered before the service was set: %v", err)
	}
	f.s.Store(&session{svc: New(Config{}, fake), ctl: fake, conn: server})

	other := client.Object(server.Names()[0], "/org/example")
	for _, tc := range []struct {
		name string
		call *dbus.Call
	}{
		{"unknown property", obj.Call(propsIface+".Get", 0, Interface, "Nope")},
		{"other interface", obj.Call(propsIface+".Get", 0, "org.example.X", "ActivePolicy")},
		{"GetAll other interface", obj.Call(propsIface+".GetAll", 0, "org.example.X")},
		{"wrong signature", obj.Call(propsIface+".Get", 0, Interface, uint32(1))},
		{"other path", other.Call(propsIface+".Get", 0, Interface, "ActivePolicy")},
		{"Set", obj.Call(propsIface+".Set", 0, Interface, "PowerAware", dbus.MakeVariant(uint32(1)))},
		{"no reply expected", obj.Go(propsIface+".Get", dbus.FlagNoReplyExpected, nil, Interface, "ActivePolicy")},
	} {
		if ty := typeOf(); ty != dbus.TypeMethodCall {
			t.Errorf("%s: answered by the fast path (%v)", tc.name, tc.call.Err)
		}
	}

	var v dbus.Variant
	if err := obj.Call(propsIface+".Get", 0, Interface, "OnBattery").Store(&v); err != nil || v.Value() != true {
		t.Errorf("Get OnBattery = %v, %v; want true", v, err)
	}
	if ty := typeOf(); ty != 0 {
		t.Errorf("Get answered but left type %v", ty)
	}
	var all map[string]dbus.Variant
	if err := obj.Call(propsIface+".GetAll", 0, "").Store(&all); err != nil ||
		len(all) != len(propertyValues(snapshot.Snapshot{})) || all["ActivePolicy"].Value() != "balance" {
		t.Errorf("GetAll \"\" = %v, %v", all, err)
	}
	typeOf()

	// A new snapshot is served at once.
	fake.set(&snapshot.Snapshot{Policy: "powersaving"})
	if err := obj.Call(propsIface+".Get", 0, Interface, "ActivePolicy").Store(&v); err != nil || v.Value() != "powersaving" {
		t.Errorf("after a new snapshot: Get ActivePolicy = %v, %v", v, err)
	}
	typeOf()
}

// echoObject counts the calls godbus's own dispatch makes to it.
type echoObject struct{ calls atomic.Int32 }

func (o *echoObject) Echo(s string) (string, *dbus.Error) {
	o.calls.Add(1)
	return "dispatched " + s, nil
}

// TestGodbusSkipsAnsweredCall checks, against the godbus in go.mod, the
// behaviour markAnswered relies on: a method call that the incoming
// interceptor answers and marks is not dispatched (the exported method is
// never called, no second reply is sent), and an unmarked one still is.
// If this fails after a godbus upgrade, the fast path of dbus_fast.go
// must go or change with it.
func TestGodbusSkipsAnsweredCall(t *testing.T) {
	addr := testutil.StartBus(t, testutil.BusOptions{AnyUser: true}).Addr
	var server *dbus.Conn
	ready := make(chan struct{})
	server, err := dbus.Connect(addr, dbus.WithIncomingInterceptor(func(m *dbus.Message) {
		if m.Type != dbus.TypeMethodCall {
			return // Connect's own Hello reply among them
		}
		<-ready // server is set
		if member, _ := m.Headers[dbus.FieldMember].Value().(string); member != "Echo" {
			return
		}
		if arg, _ := m.Body[0].(string); arg != "fast" {
			return
		}
		server.Send(&dbus.Message{
			Type: dbus.TypeMethodReply,
			Headers: map[dbus.HeaderField]dbus.Variant{
				dbus.FieldDestination: m.Headers[dbus.FieldSender],
				dbus.FieldReplySerial: dbus.MakeVariant(m.Serial()),
				dbus.FieldSignature:   dbus.MakeVariant(dbus.SignatureOf("")),
			},
			Body: []any{"answered fast"},
		}, nil)
		markAnswered(m)
	}))
	if err != nil {
		t.Fatal(err)
	}
	defer server.Close()
	close(ready)
	obj := new(echoObject)
	if err := server.Export(obj, "/test", "org.example.Echo"); err != nil {
		t.Fatal(err)
	}
	rc := new(replyCounter)
	client, err := dbus.Connect(addr, dbus.WithIncomingInterceptor(rc.intercept))
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	o := client.Object(server.Names()[0], "/test")
	before := rc.count() // Connect's Hello

	const n = 20
	for i := 0; i < n; i++ {
		var got string
		if err := o.Call("org.example.Echo.Echo", 0, "fast").Store(&got); err != nil {
			t.Fatal(err)
		}
		if got != "answered fast" {
			t.Fatalf("a marked call was answered %q, want the interceptor's %q", got, "answered fast")
		}
	}
	var got string
	if err := o.Call("org.example.Echo.Echo", 0, "slow").Store(&got); err != nil || got != "dispatched slow" {
		t.Fatalf("an unmarked call: %q, %v; want godbus's dispatch to answer %q", got, err, "dispatched slow")
	}
	// The unmarked call went through a dispatch goroutine after every
	// marked one: a dispatch of a marked call would have been counted and
	// its reply received by now.
	if c := obj.calls.Load(); c != 1 {
		t.Errorf("godbus dispatched %d calls, want 1 (the unmarked one): markAnswered no longer keeps godbus from dispatching a call (godbus upgrade?)", c)
	}
	if r := rc.count() - before; r != n+1 {
		t.Errorf("%d replies to %d calls: a marked call was answered twice or not at all (godbus upgrade?)", r, n+1)
	}
}
