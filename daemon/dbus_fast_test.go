package daemon

import (
	"sync"
	"testing"
	"time"

	"github.com/godbus/dbus/v5"

	"github.com/schedpolicyd/schedpolicyd/internal/testutil"
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
	d, _, _, addr := busDaemon(t, false)
	rc := new(replyCounter)
	conn, err := dbus.Connect(addr, dbus.WithIncomingInterceptor(rc.intercept))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	obj := conn.Object(BusName, ObjectPath)
	want := d.Snapshot().values()

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
	d := new(Daemon)
	d.snap.Store(&Snapshot{Policy: "balance", PowerSource: "battery"})
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
	f.s.Store(&busService{d: d, conn: server})

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
		len(all) != len(propertyValues(Snapshot{})) || all["ActivePolicy"].Value() != "balance" {
		t.Errorf("GetAll \"\" = %v, %v", all, err)
	}
	typeOf()

	// A new snapshot is served at once.
	d.snap.Store(&Snapshot{Policy: "powersaving"})
	if err := obj.Call(propsIface+".Get", 0, Interface, "ActivePolicy").Store(&v); err != nil || v.Value() != "powersaving" {
		t.Errorf("after a new snapshot: Get ActivePolicy = %v, %v", v, err)
	}
	typeOf()
}
