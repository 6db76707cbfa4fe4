package bus

import (
	"context"
	"fmt"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/godbus/dbus/v5"

	"github.com/schedpolicyd/schedpolicyd/internal/testutil"
)

// TestPowerProfilesServed: with the API served, ActiveProfile shows the
// knob at both names and writing it is an explicit choice of power_aware;
// HoldProfile holds the daemon's power_aware_policy for power-saver, the
// holds are listed with their application; an unknown profile is Failed
// (after authorisation: root here), a value of another type InvalidArgs.
func TestPowerProfilesServed(t *testing.T) {
	st := startService(t, "", Config{PowerProfilesAPI: PowerProfilesServe})
	me := st.client.Names()[0]
	legacy := st.client.Object(ppNames[1].name, ppNames[1].path)
	profile := func() []string {
		t.Helper()
		var out []string
		for _, n := range ppNames {
			var p string
			if err := st.client.Object(n.name, n.path).StoreProperty(n.name+".ActiveProfile", &p); err != nil {
				t.Fatal(err)
			}
			out = append(out, p)
		}
		return out
	}
	if got := profile(); !reflect.DeepEqual(got, []string{"balanced", "balanced"}) {
		t.Fatalf("ActiveProfile at both names %q, want balanced (power_aware 1)", got)
	}
	for _, n := range ppNames {
		if err := st.client.AddMatchSignal(dbus.WithMatchObjectPath(n.path)); err != nil {
			t.Fatal(err)
		}
	}
	sigs := make(chan *dbus.Signal, 16)
	st.client.Signal(sigs)

	if err := legacy.SetProperty(ppNames[1].name+".ActiveProfile", dbus.MakeVariant(ProfilePowerSaver)); err != nil {
		t.Fatal(err)
	}
	st.f.waitCalls(t, `WriteKnobUnlessHeld power_aware "2" power-profiles`)
	for _, n := range ppNames {
		iface, changed, _ := changedValues(t, nextSignal(t, sigs, propsIface+".PropertiesChanged"))
		if iface != n.name || !reflect.DeepEqual(changed, map[string]any{"ActiveProfile": ProfilePowerSaver}) {
			t.Fatalf("PropertiesChanged(%s, %v), want (%s, ActiveProfile power-saver)", iface, changed, n.name)
		}
	}
	if got := profile(); !reflect.DeepEqual(got, []string{ProfilePowerSaver, ProfilePowerSaver}) {
		t.Fatalf("ActiveProfile %q after setting power-saver", got)
	}

	// Refused without asking the daemon.
	for _, tc := range []struct {
		value     any
		name, msg string
	}{
		{"turbo", "org.freedesktop.DBus.Error.Failed", `invalid profile name "turbo" (want power-saver, balanced or performance)`},
		{uint32(2), errInvalidArgs, "ActiveProfile is of type s, got u"},
	} {
		err := legacy.SetProperty(ppNames[1].name+".ActiveProfile", dbus.MakeVariant(tc.value))
		if dbusErrName(err) != tc.name || err.Error() != tc.msg {
			t.Errorf("Set ActiveProfile %v: %v, want %s %q", tc.value, err, tc.name, tc.msg)
		}
	}
	for _, args := range [][]any{
		{ProfileBalanced, "r", "app"},
		{ProfilePerformance, strings.Repeat("r", 257), "app"},
		{ProfilePerformance, "r", strings.Repeat("a", 257)},
	} {
		if err := legacy.Call(ppNames[1].name+".HoldProfile", 0, args...).Err; dbusErrName(err) != errInvalidArgs {
			t.Errorf("HoldProfile%q: %v, want InvalidArgs", args, err)
		}
	}

	var c1, c2 uint32
	if err := legacy.Call(ppNames[1].name+".HoldProfile", 0, ProfilePerformance, "build", "org.example.Build").Store(&c1); err != nil {
		t.Fatal(err)
	}
	if err := legacy.Call(ppNames[1].name+".HoldProfile", 0, ProfilePowerSaver, "film", "org.example.Film").Store(&c2); err != nil {
		t.Fatal(err)
	}
	st.f.waitCalls(t, `WriteKnobUnlessHeld power_aware "2" power-profiles`,
		fmt.Sprintf(`AddHold performance "build" %s "org.example.Build"`, me),
		// power-saver holds the daemon's power_aware_policy.
		fmt.Sprintf(`AddHold powersaving "film" %s "org.example.Film"`, me))
	var holds []map[string]dbus.Variant
	if err := legacy.StoreProperty(ppNames[1].name+".ActiveProfileHolds", &holds); err != nil {
		t.Fatal(err)
	}
	wantHolds := []map[string]dbus.Variant{
		{"ApplicationId": dbus.MakeVariant("org.example.Build"), "Profile": dbus.MakeVariant(ProfilePerformance), "Reason": dbus.MakeVariant("build")},
		{"ApplicationId": dbus.MakeVariant("org.example.Film"), "Profile": dbus.MakeVariant(ProfilePowerSaver), "Reason": dbus.MakeVariant("film")},
	}
	if !reflect.DeepEqual(holds, wantHolds) {
		t.Errorf("ActiveProfileHolds %v, want %v", holds, wantHolds)
	}

	if err := legacy.Call(ppNames[1].name+".ReleaseProfile", 0, c1).Err; err != nil {
		t.Fatal(err)
	}
	st.f.waitCalls(t, `WriteKnobUnlessHeld power_aware "2" power-profiles`,
		fmt.Sprintf(`AddHold performance "build" %s "org.example.Build"`, me),
		fmt.Sprintf(`AddHold powersaving "film" %s "org.example.Film"`, me),
		fmt.Sprintf("ReleaseHold %d %s true", c1, me))
}

// fakePPD answers Properties.Get for ActiveProfile: as much of another
// power-profiles daemon as following it needs.
type fakePPD struct {
	mu      sync.Mutex
	profile string
}

func (p *fakePPD) Get(iface, prop string) (dbus.Variant, *dbus.Error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return dbus.MakeVariant(p.profile), nil
}

// ownPPD serves a fakePPD with profile at name's path and takes name
// (replacing its owner), on a connection of its own that the test's
// cleanup closes.
func ownPPD(t *testing.T, addr, name, profile string) (*dbus.Conn, *fakePPD) {
	t.Helper()
	c := testutil.Connect(t, addr)
	p := &fakePPD{profile: profile}
	if err := c.Export(p, ppPath(name), propsIface); err != nil {
		t.Fatal(err)
	}
	if r, err := c.RequestName(name, dbus.NameFlagReplaceExisting|dbus.NameFlagDoNotQueue); err != nil || r != dbus.RequestNameReplyPrimaryOwner {
		t.Fatalf("RequestName(%s) = %v, %v", name, r, err)
	}
	return c, p
}

// emitProfile has ppd announce profile, as power-profiles-daemon does.
func emitProfile(t *testing.T, ppd *dbus.Conn, p *fakePPD, name, profile string) {
	t.Helper()
	p.mu.Lock()
	p.profile = profile
	p.mu.Unlock()
	if err := ppd.Emit(ppPath(name), propsIface+".PropertiesChanged", name, map[string]dbus.Variant{"ActiveProfile": dbus.MakeVariant(profile)}, []string{}); err != nil {
		t.Fatal(err)
	}
}

// following is a service in "auto" mode (no systemd on the bus) that
// follows ppd, a fake power-profiles daemon owning net.hadess.PowerProfiles
// (hadess) with balanced, as ppd's owner o.
type following struct {
	started
	ppd    *dbus.Conn
	p      *fakePPD
	o      string
	hadess string
}

func startFollowing(t *testing.T) following {
	t.Helper()
	addr := testutil.StartBus(t, testutil.BusOptions{AnyUser: true}).Addr
	fl := following{hadess: ppNames[1].name}
	fl.ppd, fl.p = ownPPD(t, addr, fl.hadess, ProfileBalanced)
	fl.o = fl.ppd.Names()[0]
	fl.started = startService(t, addr, Config{PowerProfilesAPI: PowerProfilesAuto})
	fl.f.waitCalls(t, fl.follow(fl.o, ProfileBalanced))
	return fl
}

// follow is the request to follow profile of owner.
func (fl following) follow(owner, profile string) string {
	return fmt.Sprintf("FollowProfile %s %s %s", fl.hadess, owner, profile)
}

// ppOwners is the owners of the two power-profiles names.
func ppOwners(t *testing.T, conn *dbus.Conn) []string {
	t.Helper()
	var out []string
	for _, n := range ppNames {
		var o string
		conn.BusObject().Call("org.freedesktop.DBus.GetNameOwner", 0, n.name).Store(&o)
		out = append(out, o)
	}
	return out
}

// TestPowerProfilesFollowed ("auto", no systemd on the bus): the service
// follows the power-profiles daemon that owns a name — its profile when
// found, and each it announces — stops following when it leaves, then
// serves both names itself, and gives them up to a daemon that takes one
// by replacement, which it then follows.
func TestPowerProfilesFollowed(t *testing.T) {
	fl := startFollowing(t)
	st, ppd, o, hadess, follow := fl.started, fl.ppd, fl.o, fl.hadess, fl.follow
	emitProfile(t, ppd, fl.p, hadess, ProfilePowerSaver)
	st.f.waitCalls(t, follow(o, ProfileBalanced), follow(o, ProfilePowerSaver))

	ppd.Close()
	left := "Unfollow its bus name " + hadess + " changed owner"
	st.f.waitCalls(t, follow(o, ProfileBalanced), follow(o, ProfilePowerSaver), left)
	var me string
	if err := st.client.BusObject().Call("org.freedesktop.DBus.GetNameOwner", 0, Name).Store(&me); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "serving both names", func() (bool, string) {
		got := ppOwners(t, st.client)
		return reflect.DeepEqual(got, []string{me, me}), strings.Join(got, " ")
	})

	// A daemon started with --replace takes one name: both are given up,
	// and it is followed.
	ppd2, _ := ownPPD(t, st.addr, hadess, ProfilePerformance)
	o2 := ppd2.Names()[0]
	st.f.waitCalls(t, follow(o, ProfileBalanced), follow(o, ProfilePowerSaver), left, follow(o2, ProfilePerformance))
	testutil.Eventually(t, "both names given up", func() (bool, string) {
		got := ppOwners(t, st.client)
		return reflect.DeepEqual(got, []string{"", o2}), strings.Join(got, " ")
	})
}

// TestFollowerBelievesOnlyOwner drives the follower's signal handling
// directly: a profile counts only from the followed name's owner and for
// a power-profiles interface, and the followed daemon left only when the
// bus daemon says so; anyone else's signals change nothing.
func TestFollowerBelievesOnlyOwner(t *testing.T) {
	f := newFake()
	svc := New(Config{}, f)
	w := &ppWatch{s: &session{svc: svc, ctl: f, log: svc.log}, followed: ppNames[1].name, owner: ":1.5"}
	w.box.wake = make(chan struct{}, 1)
	changed := func(sender, iface, profile string) *dbus.Signal {
		return &dbus.Signal{Sender: sender, Path: ppNames[1].path, Name: propsIface + ".PropertiesChanged",
			Body: []any{iface, map[string]dbus.Variant{"ActiveProfile": dbus.MakeVariant(profile)}, []string{}}}
	}
	ctx := context.Background()
	for _, sig := range []*dbus.Signal{
		changed(":1.6", ppNames[1].name, ProfilePerformance),     // not the owner
		changed(":1.5", "org.example.Other", ProfilePerformance), // not the API
		// The owner leaving, as someone other than the bus daemon says.
		{Sender: ":1.6", Path: "/org/freedesktop/DBus", Name: "org.freedesktop.DBus.NameOwnerChanged", Body: []any{ppNames[1].name, ":1.5", ""}},
	} {
		w.onSignal(ctx, sig)
		if c, ok := w.box.take(); ok {
			t.Errorf("%s from %s%v was believed: %+v", sig.Name, sig.Sender, sig.Body, c)
		}
	}
	if name, owner := w.current(); name != ppNames[1].name || owner != ":1.5" {
		t.Errorf("following %q %q, want %s :1.5", name, owner, ppNames[1].name)
	}
	w.onSignal(ctx, changed(":1.5", ppNames[1].name, ProfilePowerSaver))
	if c, ok := w.box.take(); !ok || c != (ppChange{name: ppNames[1].name, owner: ":1.5", profile: ProfilePowerSaver}) {
		t.Errorf("the owner's profile: %+v %v, want power-saver from :1.5", c, ok)
	}
	if got := f.log(); len(got) != 0 {
		t.Errorf("requests %q, want none", got)
	}
}

// receive collects conn's signals whose interface is a power-profiles
// name, after adding a match for the power-profiles paths (broadcasts;
// a unicast signal arrives without one).
func receive(t *testing.T, conn *dbus.Conn) chan *dbus.Signal {
	t.Helper()
	for _, n := range ppNames {
		if err := conn.AddMatchSignal(dbus.WithMatchObjectPath(n.path)); err != nil {
			t.Fatal(err)
		}
	}
	ch := make(chan *dbus.Signal, 64)
	conn.Signal(ch)
	return ch
}

// untilHolds returns the signals on ch (but PropertiesChanged) up to the
// PropertiesChanged that carries ActiveProfileHolds with the last of
// counts holds, once ones with each count before it came in that order;
// it fails t if they do not come.
func untilHolds(t *testing.T, ch chan *dbus.Signal, counts ...int) []string {
	t.Helper()
	var seen []string
	for len(counts) > 0 {
		s := nextSignal(t, ch, "")
		if s.Name != propsIface+".PropertiesChanged" {
			seen = append(seen, fmt.Sprintf("%s %s%v", s.Path, s.Name, s.Body))
			continue
		}
		if _, changed, _ := changedValues(t, s); changed["ActiveProfileHolds"] != nil {
			if h, _ := changed["ActiveProfileHolds"].([]map[string]dbus.Variant); len(h) == counts[0] {
				counts = counts[1:]
			}
		}
	}
	return seen
}

// TestProfileReleased: ProfileReleased is sent to the holder alone, on the
// interface and path it held the profile through, and only when a user's
// choice cancels its hold — not when it releases the hold itself, not
// when it leaves the bus, never for HoldPolicy's holds, and never to
// anyone else (a client watching both paths sees none). The service's
// signals reach each client in the order sent, and each cancellation's
// PropertiesChanged follows its ProfileReleased, so what a client got
// before that PropertiesChanged is everything it got.
func TestProfileReleased(t *testing.T) {
	st := startService(t, "", Config{PowerProfilesAPI: PowerProfilesServe})
	a, b, gone, watcher := testutil.Connect(t, st.addr), testutil.Connect(t, st.addr), testutil.Connect(t, st.addr), testutil.Connect(t, st.addr)
	aSigs, bSigs, wSigs := receive(t, a), receive(t, b), receive(t, watcher)
	hold := func(c *dbus.Conn, n int, profile string) uint32 {
		t.Helper()
		var cookie uint32
		if err := c.Object(ppNames[n].name, ppNames[n].path).Call(ppNames[n].name+".HoldProfile", 0, profile, "r", "org.example.App").Store(&cookie); err != nil {
			t.Fatal(err)
		}
		return cookie
	}
	a1 := hold(a, 1, ProfilePerformance) // net.hadess
	if err := a.Object(ppNames[1].name, ppNames[1].path).Call(ppNames[1].name+".ReleaseProfile", 0, a1).Err; err != nil {
		t.Fatal(err)
	}
	hold(gone, 0, ProfilePowerSaver)
	gone.Close() // its hold ends: holder left
	st.f.waitCalls(t,
		fmt.Sprintf(`AddHold performance "r" %s "org.example.App"`, a.Names()[0]),
		fmt.Sprintf("ReleaseHold %d %s true", a1, a.Names()[0]),
		fmt.Sprintf(`AddHold powersaving "r" %s "org.example.App"`, gone.Names()[0]),
		fmt.Sprintf("EndHoldsOf %s holder left the bus", gone.Names()[0]))
	a2 := hold(a, 1, ProfilePerformance)
	b1 := hold(b, 0, ProfilePowerSaver) // org.freedesktop.UPower
	var p1 uint32
	if err := watcher.Object(Name, ObjectPath).Call(Interface+".HoldPolicy", 0, "balance", "mine").Store(&p1); err != nil {
		t.Fatal(err)
	}
	// The user's choice, through the other API: it cancels all three.
	if err := st.obj().Call(Interface+".SetPolicy", 0, "balance").Err; err != nil {
		t.Fatal(err)
	}
	want := map[string][]string{
		"a":       {fmt.Sprintf("%s %s.ProfileReleased[%d]", ppNames[1].path, ppNames[1].name, a2)},
		"b":       {fmt.Sprintf("%s %s.ProfileReleased[%d]", ppNames[0].path, ppNames[0].name, b1)},
		"watcher": nil,
	}
	for who, ch := range map[string]chan *dbus.Signal{"a": aSigs, "b": bSigs, "watcher": wSigs} {
		// Holds: a1; none; gone's; none; a2, b1 (PropertiesChanged
		// counts ActiveProfileHolds of the power-profiles API only, at
		// both paths); none.
		got := untilHolds(t, ch, 1, 0, 1, 0, 2, 0)
		if !reflect.DeepEqual(got, want[who]) {
			t.Errorf("%s received %q before the holds were gone, want %q", who, got, want[who])
		}
	}
}

// TestSetHeldProfile: setting ActiveProfile to the profile a hold made
// active keeps the holds and saves no choice (the daemon is asked with
// WriteKnobUnlessHeld, and keeps them); another profile cancels them.
func TestSetHeldProfile(t *testing.T) {
	st := startService(t, "", Config{PowerProfilesAPI: PowerProfilesServe})
	hadess := st.client.Object(ppNames[1].name, ppNames[1].path)
	sigs := receive(t, st.client)
	var c uint32
	if err := hadess.Call(ppNames[1].name+".HoldProfile", 0, ProfilePerformance, "build", "org.example.Build").Store(&c); err != nil {
		t.Fatal(err)
	}
	if err := hadess.SetProperty(ppNames[1].name+".ActiveProfile", dbus.MakeVariant(ProfilePerformance)); err != nil {
		t.Fatal(err)
	}
	if err := hadess.SetProperty(ppNames[1].name+".ActiveProfile", dbus.MakeVariant(ProfilePowerSaver)); err != nil {
		t.Fatal(err)
	}
	me := st.client.Names()[0]
	st.f.waitCalls(t, fmt.Sprintf(`AddHold performance "build" %s "org.example.Build"`, me),
		`WriteKnobUnlessHeld power_aware "0" power-profiles: kept`,
		`WriteKnobUnlessHeld power_aware "2" power-profiles`)
	if got := untilHolds(t, sigs, 1, 0); !reflect.DeepEqual(got, []string{fmt.Sprintf("%s %s.ProfileReleased[%d]", ppNames[1].path, ppNames[1].name, c)}) {
		t.Errorf("before the holds were gone: %q, want one ProfileReleased(%d)", got, c)
	}
}

// TestProfileHoldEndedEarly drives ppHolders directly: a hold that ends
// on the daemon's loop before HoldProfile has recorded it is announced
// when it is recorded if a choice cancelled it, is never recorded, and
// nothing of it stays once no HoldProfile call is pending.
func TestProfileHoldEndedEarly(t *testing.T) {
	st := startService(t, "", Config{PowerProfilesAPI: PowerProfilesServe})
	pp := st.svc.current().pp
	holder := testutil.Connect(t, st.addr)
	sigs := make(chan *dbus.Signal, 8)
	holder.Signal(sigs) // unicast: no match needed
	h := ppHolder{owner: holder.Names()[0], iface: ppNames[0].name}

	pp.holdStarting()
	pp.holdStarting()
	pp.ended(7, true)  // cancelled before its HoldProfile recorded it
	pp.ended(8, false) // its holder left meanwhile
	pp.holdMade(7, h)
	if s := nextSignal(t, sigs, ppNames[0].name+".ProfileReleased"); s.Path != ppNames[0].path || !reflect.DeepEqual(s.Body, []any{uint32(7)}) {
		t.Errorf("ProfileReleased at %s%v, want %s(7)", s.Path, s.Body, ppNames[0].path)
	}
	pp.holdMade(8, h)
	pp.hmu.Lock()
	left := fmt.Sprint(pp.holders)
	pp.hmu.Unlock()
	if left != "{map[] 0 map[]}" {
		t.Errorf("ppHolders after both calls: %s, want nothing kept", left)
	}
	// An end outside any call, of a hold not recorded (HoldPolicy's),
	// keeps nothing either.
	pp.ended(9, true)
	pp.hmu.Lock()
	left = fmt.Sprint(pp.holders)
	pp.hmu.Unlock()
	if left != "{map[] 0 map[]}" {
		t.Errorf("ppHolders after an unknown end: %s, want nothing kept", left)
	}
}

// TestFollowedDaemonFlaps is the trust issue's fourth case: a followed
// power-profiles daemon sets ActiveProfile 3,000 times at 1,000 a second,
// alternating performance and power-saver, ends on power-saver and leaves
// the bus. The service asks the daemon to follow at most one profile per
// FollowMinInterval (the count is bounded by the flood's length), its
// goroutines do not pile up (godbus parks one per signal a full channel
// cannot take), the last profile wins, and once the service has stopped
// following, nothing of the departed daemon is asked.
func TestFollowedDaemonFlaps(t *testing.T) {
	fl := startFollowing(t)
	st, ppd, o, hadess := fl.started, fl.ppd, fl.o, fl.hadess
	count := func() int {
		n := 0
		for _, l := range st.f.log() {
			if strings.HasPrefix(l, "FollowProfile ") {
				n++
			}
		}
		return n
	}
	before := count()
	peak := runtime.NumGoroutine()
	const flaps = 3000
	start := time.Now()
	tick := time.NewTicker(time.Millisecond)
	for i := 0; i < flaps; i++ {
		p := ProfilePerformance
		if i%2 == 1 || i == flaps-1 {
			p = ProfilePowerSaver
		}
		if err := ppd.Emit(ppPath(hadess), propsIface+".PropertiesChanged",
			hadess, map[string]dbus.Variant{"ActiveProfile": dbus.MakeVariant(p)}, []string{}); err != nil {
			t.Fatal(err)
		}
		if i%50 == 0 {
			peak = max(peak, runtime.NumGoroutine())
		}
		<-tick.C
	}
	tick.Stop()
	last := fl.follow(o, ProfilePowerSaver)
	testutil.Eventually(t, "the last profile, power-saver", func() (bool, string) {
		l := st.f.log()
		peak = max(peak, runtime.NumGoroutine())
		return l[len(l)-1] == last, l[len(l)-1]
	})
	elapsed := time.Since(start)
	applied := count() - before
	if limit := 2 + int(elapsed/FollowMinInterval); applied > limit {
		t.Errorf("%d profiles asked in %v, want at most %d (one per %v)", applied, elapsed, limit, FollowMinInterval)
	}
	if peak > 500 {
		t.Errorf("%d goroutines at the peak of the flood: signals pile up", peak)
	}
	t.Logf("%d flaps in %v: %d asked, at most %d goroutines", flaps, elapsed, applied, peak)

	ppd.Close()
	unfollow := "Unfollow its bus name " + hadess + " changed owner"
	testutil.Eventually(t, "no longer following", func() (bool, string) {
		return slices.Contains(st.f.log(), unfollow), strings.Join(st.f.log()[max(0, len(st.f.log())-3):], "; ")
	})
	l := st.f.log()
	for _, e := range l[slices.Index(l, unfollow):] {
		if strings.HasPrefix(e, "FollowProfile ") {
			t.Errorf("asked after the followed daemon left: %q", e)
		}
	}
}
