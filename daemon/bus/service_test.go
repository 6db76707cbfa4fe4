package bus

import (
	"context"
	"encoding/xml"
	"errors"
	"fmt"
	"reflect"
	"sort"
	"strings"
	"syscall"
	"testing"

	"github.com/godbus/dbus/v5"
	"github.com/godbus/dbus/v5/introspect"
	"github.com/sirupsen/logrus"
	logtest "github.com/sirupsen/logrus/hooks/test"

	"github.com/schedpolicyd/schedpolicyd/daemon/snapshot"
	"github.com/schedpolicyd/schedpolicyd/internal/testutil"
	"github.com/schedpolicyd/schedpolicyd/policy"
)

// TestIntrospectionMatchesExports compares the committed XML contract with
// what the daemon really exports: every method with its argument
// signatures and directions (by reflection, as godbus dispatches) and every
// property with its type (from the values the Properties handler serves).
func TestIntrospectionMatchesExports(t *testing.T) {
	var node introspect.Node
	if err := xml.Unmarshal([]byte(IntrospectionXML), &node); err != nil {
		t.Fatalf("committed XML does not parse: %v", err)
	}
	if len(node.Interfaces) != 1 || node.Interfaces[0].Name != Interface {
		t.Fatalf("XML interfaces = %+v, want only %s", node.Interfaces, Interface)
	}
	iface := node.Interfaces[0]

	// Each method as "in signature -> out signature".
	signatures := func(ms []introspect.Method) map[string]string {
		out := map[string]string{}
		for _, m := range ms {
			var in, res string
			for _, a := range m.Args {
				if a.Direction == "out" {
					res += a.Type
				} else {
					in += a.Type
				}
			}
			out[m.Name] = in + " -> " + res
		}
		return out
	}
	fromXML, exported := signatures(iface.Methods), signatures(introspect.Methods(busObject{}))
	if !reflect.DeepEqual(fromXML, exported) {
		t.Errorf("methods differ:\nXML      %v\nexported %v", fromXML, exported)
	}

	vals := propertyValues(snapshot.Snapshot{Holds: []snapshot.Hold{{Cookie: 1}}, Workloads: []snapshot.WorkloadStatus{{Name: "w"}}})
	seen := map[string]bool{}
	for _, p := range iface.Properties {
		seen[p.Name] = true
		v, ok := vals[p.Name]
		if !ok {
			t.Errorf("property %s in the XML is not served", p.Name)
			continue
		}
		if got := dbus.SignatureOf(v).String(); got != p.Type {
			t.Errorf("property %s: XML type %s, served %s", p.Name, p.Type, got)
		}
		wantAccess := "read"
		if p.Name == "PowerAware" || p.Name == "PowerAwarePolicy" {
			wantAccess = "readwrite"
		}
		if p.Access != wantAccess {
			t.Errorf("property %s: XML access %s, Set allows %s", p.Name, p.Access, wantAccess)
		}
	}
	for name := range vals {
		if !seen[name] {
			t.Errorf("served property %s is missing from the XML", name)
		}
	}
	if len(iface.Signals) != 1 || iface.Signals[0].Name != "PolicyChanged" {
		t.Errorf("signals = %+v, want PolicyChanged", iface.Signals)
	}
}

// TestIntrospectServed: Introspect on the bus serves the committed
// contract with the standard interfaces beside it.
func TestIntrospectServed(t *testing.T) {
	st := startService(t, "", Config{})
	var x string
	if err := st.obj().Call("org.freedesktop.DBus.Introspectable.Introspect", 0).Store(&x); err != nil {
		t.Fatal(err)
	}
	var node introspect.Node
	if err := xml.Unmarshal([]byte(x), &node); err != nil {
		t.Fatalf("Introspect output does not parse: %v", err)
	}
	var names []string
	for _, i := range node.Interfaces {
		names = append(names, i.Name)
	}
	sort.Strings(names)
	if want := []string{"org.freedesktop.DBus.Introspectable", "org.freedesktop.DBus.Peer", "org.freedesktop.DBus.Properties", Interface}; !reflect.DeepEqual(names, want) {
		t.Errorf("introspected interfaces %v, want %v", names, want)
	}
}

// TestServiceNil: the daemon's service with bus "none" is a nil *Service,
// on which every call does nothing.
func TestServiceNil(t *testing.T) {
	var s *Service
	if err := s.Connect(t.Context()); err != nil {
		t.Errorf("Connect = %v", err)
	}
	s.Keep(t.Context()) // returns at once
	s.Publish(&snapshot.Snapshot{})
	s.HoldEnded(1, true)
	s.Reconfigure(PowerProfilesServe, nil)
	s.Close()
}

// TestServiceClosed: Close is idempotent and may come before Connect; a
// closed service keeps no connection.
func TestServiceClosed(t *testing.T) {
	addr := testutil.StartBus(t, testutil.BusOptions{AnyUser: true}).Addr
	svc := New(Config{Bus: addr, PowerProfilesAPI: PowerProfilesOff, Log: testLogger(t)}, newFake())
	svc.Close()
	svc.Close()
	if err := svc.Connect(t.Context()); !errors.Is(err, errClosed) {
		t.Fatalf("Connect after Close = %v, want %v", err, errClosed)
	}
	if owned, seen := testutil.NameOwnedAt(addr, Name); owned {
		t.Fatalf("%s owned after Connect on a closed service: %s", Name, seen)
	}

	st := startService(t, addr, Config{})
	if owned, seen := testutil.NameOwned(st.client, Name); !owned {
		t.Fatalf("%s not owned after Connect: %s", Name, seen)
	}
	st.svc.Close()
	st.svc.Close()
	testutil.Eventually(t, Name+" released", func() (bool, string) {
		owned, seen := testutil.NameOwned(st.client, Name)
		return !owned, seen
	})
}

// TestConnectNameTaken: while another connection owns Name, Connect
// fails with the step and says so once, at warning level.
func TestConnectNameTaken(t *testing.T) {
	addr := testutil.StartBus(t, testutil.BusOptions{AnyUser: true}).Addr
	other, err := dbus.Connect(addr)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if r, err := other.RequestName(Name, dbus.NameFlagDoNotQueue); err != nil || r != dbus.RequestNameReplyPrimaryOwner {
		t.Fatalf("RequestName = %v, %v", r, err)
	}
	log := testLogger(t)
	hook := logtest.NewLocal(log)
	svc := New(Config{Bus: addr, PowerProfilesAPI: PowerProfilesOff, Log: log}, newFake())
	defer svc.Close()
	err = svc.Connect(t.Context())
	var f *busFailure
	if !errors.As(err, &f) || f.step != busNameTaken || f.kind() != busNameTaken {
		t.Fatalf("Connect = %v, want the failure %q", err, busNameTaken)
	}
	var warned []string
	for _, e := range hook.AllEntries() {
		if e.Level <= logrus.WarnLevel {
			warned = append(warned, e.Message)
		}
	}
	if want := []string{"cannot own " + Name + ": another process owns it; retrying in the background"}; !reflect.DeepEqual(warned, want) {
		t.Errorf("warnings %q, want %q", warned, want)
	}
}

// TestReporterSaysEachKindOnce: each new kind of failure is a warning,
// the same kind again a debug line; a success makes the next one news.
func TestReporterSaysEachKindOnce(t *testing.T) {
	log, hook := logtest.NewNullLogger()
	log.SetLevel(logrus.DebugLevel)
	r := &busReporter{log: log, bus: "unix:path=/run/test-bus"}
	missing := &busFailure{step: busConnect, err: fmt.Errorf("dial: %w", syscall.ENOENT)}
	refused := &busFailure{step: busNameRefused, err: dbus.Error{Name: "org.freedesktop.DBus.Error.AccessDenied", Body: []any{"not allowed"}}}
	exported := &busFailure{step: busExport, err: errors.New("exporting: no")}
	for _, f := range []*busFailure{missing, missing, refused, refused, missing} {
		r.failed(f)
	}
	r.connected()
	r.failed(missing)
	r.failed(exported)
	type line struct {
		lvl logrus.Level
		msg string
	}
	var got []line
	for _, e := range hook.AllEntries() {
		if e.Data["bus"] != r.bus {
			t.Errorf("entry %q without bus=%s", e.Message, r.bus)
		}
		got = append(got, line{e.Level, e.Message})
	}
	const (
		noConn  = "no D-Bus connection; running without D-Bus (no bus name, no UPower or resume hints) and connecting when the bus is there"
		noName  = "the bus refused us org.schedpolicyd.SchedPolicy1; retrying in the background (on the system bus, is the policy file org.schedpolicyd.SchedPolicy1.conf installed in /usr/share/dbus-1/system.d? the package installs it; from a checkout see docs/USAGE.md, \"D-Bus from a checkout\")"
		noServe = "cannot serve on D-Bus; retrying in the background"
	)
	want := []line{
		{logrus.WarnLevel, noConn}, {logrus.DebugLevel, noConn},
		{logrus.WarnLevel, noName}, {logrus.DebugLevel, noName},
		{logrus.WarnLevel, noConn},
		{logrus.WarnLevel, noConn}, // after a success
		{logrus.WarnLevel, noServe},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("logged %v, want %v", got, want)
	}
	if k := missing.kind(); k != "connect: ENOENT" {
		t.Errorf("kind %q, want connect: ENOENT", k)
	}
	if k := refused.kind(); k != "name refused: org.freedesktop.DBus.Error.AccessDenied" {
		t.Errorf("kind %q, want the D-Bus error's name", k)
	}
}

// keep runs svc.Keep until the test ends.
func keep(t *testing.T, svc *Service) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); svc.Keep(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
}

// TestKeepReconnects: when the bus goes away every hold ends and nothing
// is followed (the unique names died with it); when it comes back the
// service owns Name on it again and serves the daemon's latest snapshot.
func TestKeepReconnects(t *testing.T) {
	dir := t.TempDir()
	pbus := testutil.StartBus(t, testutil.BusOptions{Dir: dir})
	st := startService(t, pbus.Addr, Config{})
	keep(t, st.svc)
	if err := st.obj().Call(Interface+".HoldPolicy", 0, "balance", "r").Err; err != nil {
		t.Fatal(err)
	}
	me := st.client.Names()[0]
	pbus.Stop()
	lost := []string{
		fmt.Sprintf(`AddHold balance "r" %s ""`, me),
		"EndAllHolds the bus connection was lost",
		"Unfollow the bus connection was lost",
	}
	st.f.waitCalls(t, lost...)
	if n := len(entries(st.log, logrus.WarnLevel, "lost the D-Bus connection; reconnecting")); n != 1 {
		t.Errorf("%d warnings that the connection was lost, want 1", n)
	}

	testutil.StartBus(t, testutil.BusOptions{Dir: dir})
	client, err := dbus.Connect(pbus.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	testutil.Eventually(t, Name+" owned on the new bus", func() (bool, string) { return testutil.NameOwned(client, Name) })
	s := *st.f.Published()
	s.Policy = policy.Powersaving
	st.f.set(&s)
	var p string
	if err := client.Object(Name, ObjectPath).StoreProperty(Interface+".ActivePolicy", &p); err != nil || p != "powersaving" {
		t.Errorf("ActivePolicy on the new connection %q, %v; want the latest snapshot's powersaving", p, err)
	}
	if got := st.f.log(); !reflect.DeepEqual(got, lost) {
		t.Errorf("requests %q, want %q", got, lost)
	}
}

// TestReconfigureReconnects: new power-profiles settings take a new
// connection, on which they apply.
func TestReconfigureReconnects(t *testing.T) {
	st := startService(t, "", Config{})
	keep(t, st.svc)
	var first string
	if err := st.client.BusObject().Call("org.freedesktop.DBus.GetNameOwner", 0, Name).Store(&first); err != nil {
		t.Fatal(err)
	}
	if got := ppOwners(t, st.client); !reflect.DeepEqual(got, []string{"", ""}) {
		t.Fatalf("power-profiles names owned by %q with the API off", got)
	}
	st.svc.Reconfigure(PowerProfilesServe, nil)
	testutil.Eventually(t, "the API served on a new connection", func() (bool, string) {
		var o string
		st.client.BusObject().Call("org.freedesktop.DBus.GetNameOwner", 0, Name).Store(&o)
		got := ppOwners(t, st.client)
		return o != "" && o != first && reflect.DeepEqual(got, []string{o, o}), fmt.Sprint(o, got)
	})
	st.f.waitCalls(t, "EndAllHolds the bus connection was lost", "Unfollow the bus connection was lost")
}

// TestIsCurrent: a connection's watchers count while it serves or while
// none does, not once another serves.
func TestIsCurrent(t *testing.T) {
	svc := New(Config{}, newFake())
	a, b := &session{svc: svc}, &session{svc: svc}
	if !a.isCurrent() || !b.isCurrent() {
		t.Error("with no connection serving, every connection's news counts")
	}
	svc.cur = b
	if a.isCurrent() || !b.isCurrent() {
		t.Error("once b serves, only b's news counts")
	}
}

// entries are hook's entries at lvl with message msg.
func entries(hook *logtest.Hook, lvl logrus.Level, msg string) []*logrus.Entry {
	var out []*logrus.Entry
	for _, e := range hook.AllEntries() {
		if e.Level == lvl && e.Message == msg {
			out = append(out, e)
		}
	}
	return out
}

// TestNameRefusedSaidOnce: on a bus with the system bus's own policy and
// without our policy file, the bus refuses Name and the power-profiles
// names alike. Keep retries; the refusal is said once at warning level
// and again only at debug level, and the power-profiles names add no
// warning of their own (the cause is the same, and no power-profiles
// daemon runs).
func TestNameRefusedSaidOnce(t *testing.T) {
	pbus := testutil.StartSystemPolicyBus(t)
	log := testLogger(t)
	hook := logtest.NewLocal(log)
	f := newFake()
	svc := New(Config{Bus: pbus.Addr, Log: log, PowerProfilesAPI: PowerProfilesServe}, f)
	f.serve(svc)
	t.Cleanup(svc.Close)
	keep(t, svc)
	refused := func(lvl logrus.Level) int {
		n := 0
		for _, e := range hook.AllEntries() {
			if e.Level == lvl && strings.HasPrefix(e.Message, "the bus refused us "+Name+";") {
				n++
			}
		}
		return n
	}
	testutil.Eventually(t, "a second refusal, at debug level", func() (bool, string) {
		return refused(logrus.DebugLevel) >= 1, fmt.Sprintf("%d at warning, %d at debug", refused(logrus.WarnLevel), refused(logrus.DebugLevel))
	})
	if n := refused(logrus.WarnLevel); n != 1 {
		t.Errorf("the refusal said %d times at warning level, want 1", n)
	}
	for _, e := range hook.AllEntries() {
		if e.Level <= logrus.WarnLevel && strings.Contains(e.Message, "power-profiles") {
			t.Errorf("a warning about the power-profiles names: %s (%v)", e.Message, e.Data)
		}
	}
}
