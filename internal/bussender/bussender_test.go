package bussender

import (
	"context"
	"testing"
	"time"

	"github.com/godbus/dbus/v5"

	"github.com/schedpolicyd/schedpolicyd/internal/testutil"
)

func noc(sender string, path dbus.ObjectPath, body ...any) *dbus.Signal {
	return &dbus.Signal{Sender: sender, Path: path, Name: nocName, Body: body}
}

func TestNameOwnerChanged(t *testing.T) {
	for _, tc := range []struct {
		name string
		sig  *dbus.Signal
		ok   bool
	}{
		{"from the bus", noc(Bus, BusPath, "a.b", "", ":1.2"), true},
		{"from a peer", noc(":1.7", BusPath, "a.b", "", ":1.2"), false},
		{"from the bus on another path", noc(Bus, "/x", "a.b", "", ":1.2"), false},
		{"no sender (peer-to-peer)", noc("", BusPath, "a.b", "", ":1.2"), false},
		{"two strings", noc(Bus, BusPath, "a.b", ""), false},
		{"not strings", noc(Bus, BusPath, "a.b", "", uint32(1)), false},
		{"another member", &dbus.Signal{Sender: Bus, Path: BusPath, Name: Bus + ".NameLost", Body: []any{"a.b", "", ":1.2"}}, false},
		{"nil", nil, false},
	} {
		name, old, owner, ok := NameOwnerChanged(tc.sig)
		if ok != tc.ok || ok && (name != "a.b" || old != "" || owner != ":1.2") {
			t.Errorf("%s: %q %q %q %v, want ok=%v", tc.name, name, old, owner, ok, tc.ok)
		}
	}
}

// TestOwnerObserve: the owner follows the bus daemon's changes for its
// name only, skips changes already reflected in the first answer (their
// old owner is not the one known), and Sent believes only the owner.
func TestOwnerObserve(t *testing.T) {
	o := &Owner{Name: "org.example.S", unique: ":1.5"}
	from := func(s string) *dbus.Signal {
		return &dbus.Signal{Sender: s, Path: "/org/example/S", Name: "org.example.S.Ping"}
	}
	steps := []struct {
		sig      *dbus.Signal
		observed bool
		owner    string
	}{
		// Queued before the answer that said :1.5: skipped.
		{noc(Bus, BusPath, "org.example.S", "", ":1.4"), true, ":1.5"},
		{noc(Bus, BusPath, "org.example.S", ":1.4", ":1.5"), true, ":1.5"},
		// A forged change and another name's change: not taken.
		{noc(":1.9", BusPath, "org.example.S", ":1.5", ":1.9"), false, ":1.5"},
		{noc(Bus, BusPath, "org.example.T", ":1.5", ":1.9"), false, ":1.5"},
		// The owner leaves, another comes.
		{noc(Bus, BusPath, "org.example.S", ":1.5", ""), true, ""},
		{noc(Bus, BusPath, "org.example.S", "", ":1.8"), true, ":1.8"},
	}
	for i, s := range steps {
		if got := o.Observe(s.sig); got != s.observed || o.Unique() != s.owner {
			t.Fatalf("step %d: Observe %v owner %q, want %v %q", i, got, o.Unique(), s.observed, s.owner)
		}
	}
	if !o.Sent(from(":1.8")) || o.Sent(from(":1.5")) || o.Sent(from("")) || o.Sent(nil) {
		t.Fatal("Sent believes someone other than the owner :1.8")
	}
	o.Observe(noc(Bus, BusPath, "org.example.S", ":1.8", ""))
	if o.Sent(from("")) || o.Sent(from(":1.8")) {
		t.Fatal("Sent believes a signal while the name has no owner")
	}
}

// TestWatchOwner on a private bus: the first owner comes from the bus
// daemon's answer, later ones from its signals, in order; a forged
// NameOwnerChanged from a peer changes nothing.
func TestWatchOwner(t *testing.T) {
	b := testutil.StartBus(t, testutil.BusOptions{})
	watcher, first, second, peer := testutil.Connect(t, b.Addr), testutil.Connect(t, b.Addr), testutil.Connect(t, b.Addr), testutil.Connect(t, b.Addr)
	if _, err := first.RequestName("org.example.S", dbus.NameFlagDoNotQueue); err != nil {
		t.Fatal(err)
	}
	sigs := make(chan *dbus.Signal, 16)
	watcher.Signal(sigs)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	o, err := WatchOwner(ctx, watcher, "org.example.S")
	if err != nil {
		t.Fatal(err)
	}
	if o.Unique() != first.Names()[0] {
		t.Fatalf("owner %q, want %q", o.Unique(), first.Names()[0])
	}
	testutil.SendSignal(t, peer, watcher.Names()[0], BusPath, nocName, "org.example.S", first.Names()[0], peer.Names()[0])
	first.ReleaseName("org.example.S")
	if _, err := second.RequestName("org.example.S", dbus.NameFlagDoNotQueue); err != nil {
		t.Fatal(err)
	}
	for o.Unique() != second.Names()[0] {
		select {
		case s := <-sigs:
			o.Observe(s)
			if o.Unique() == peer.Names()[0] {
				t.Fatal("a peer's NameOwnerChanged made it the owner")
			}
		case <-ctx.Done():
			t.Fatalf("owner %q, want %q", o.Unique(), second.Names()[0])
		}
	}
	if u, err := GetNameOwner(ctx, watcher, "org.example.None"); u != "" || err != nil {
		t.Fatalf("GetNameOwner of a name without owner: %q %v", u, err)
	}
}
