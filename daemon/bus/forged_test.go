package bus

import (
	"fmt"
	"testing"

	"github.com/godbus/dbus/v5"

	"github.com/schedpolicyd/schedpolicyd/internal/testutil"
)

// forge sends the signal name on path with body from attacker to every
// other connection on the bus but those in except: unicast, which no
// match rule filters, so that each of the service's connections receives
// it.
func forge(t *testing.T, attacker *dbus.Conn, except []string, path dbus.ObjectPath, name string, body ...any) {
	t.Helper()
	for _, dest := range testutil.Peers(t, attacker, except...) {
		testutil.SendSignal(t, attacker, dest, path, name, body...)
	}
}

// TestLpmdOwnerFollowed: intel-lpmd's owner, as the bus daemon says it,
// goes to the daemon when it comes and when it goes; the same news from
// uid 65534, or that a holder left, changes nothing.
func TestLpmdOwnerFollowed(t *testing.T) {
	addr := testutil.StartBus(t, testutil.BusOptions{AnyUser: true}).Addr
	st := startService(t, addr, Config{})
	attacker := testutil.DialAs(t, addr, 65534)
	holder, err := dbus.Connect(addr)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close()
	h := holder.Names()[0]
	if err := holder.Object(Name, ObjectPath).Call(Interface+".HoldPolicy", 0, "powersaving", "stays").Err; err != nil {
		t.Fatal(err)
	}
	except := []string{st.client.Names()[0], h}
	forge(t, attacker, except, "/org/freedesktop/DBus", "org.freedesktop.DBus.NameOwnerChanged", h, h, "")
	forge(t, attacker, except, "/org/freedesktop/DBus", "org.freedesktop.DBus.NameOwnerChanged", LpmdName, "", attacker.Names()[0])

	// A real departure, after the forged ones on every channel: once its
	// hold ended, the forged signals have been judged.
	leaver, err := dbus.Connect(addr)
	if err != nil {
		t.Fatal(err)
	}
	l := leaver.Names()[0]
	if err := leaver.Object(Name, ObjectPath).Call(Interface+".HoldPolicy", 0, "balance", "leaves").Err; err != nil {
		t.Fatal(err)
	}
	leaver.Close()
	held := []string{
		fmt.Sprintf(`AddHold powersaving "stays" %s ""`, h),
		fmt.Sprintf(`AddHold balance "leaves" %s ""`, l),
		fmt.Sprintf("EndHoldsOf %s holder left the bus", l),
	}
	st.f.waitCalls(t, held...)

	lpmd, err := dbus.Connect(addr)
	if err != nil {
		t.Fatal(err)
	}
	defer lpmd.Close()
	if r, err := lpmd.RequestName(LpmdName, dbus.NameFlagDoNotQueue); err != nil || r != dbus.RequestNameReplyPrimaryOwner {
		t.Fatalf("RequestName(%s) = %v, %v", LpmdName, r, err)
	}
	st.f.waitCalls(t, append(held, fmt.Sprintf("SetLpmdOwner %q", lpmd.Names()[0]))...)
	if _, err := lpmd.ReleaseName(LpmdName); err != nil {
		t.Fatal(err)
	}
	st.f.waitCalls(t, append(held, fmt.Sprintf("SetLpmdOwner %q", lpmd.Names()[0]), `SetLpmdOwner ""`)...)
}

// TestForgedOwnerChangeKeepsFollowing: uid 65534 tells the service that
// the followed power-profiles daemon left; it goes on following it, and
// stops only when it really leaves.
func TestForgedOwnerChangeKeepsFollowing(t *testing.T) {
	fl := startFollowing(t)
	st, ppd, o, hadess := fl.started, fl.ppd, fl.o, fl.hadess
	following := fl.follow(o, ProfileBalanced)
	attacker := testutil.DialAs(t, st.addr, 65534)
	forge(t, attacker, []string{st.client.Names()[0], o}, "/org/freedesktop/DBus", "org.freedesktop.DBus.NameOwnerChanged", hadess, o, "")
	// The next profile comes after the forged signal on the follower's
	// channel: once it is followed, the forged one was judged — believed,
	// it would have ended following first.
	emitProfile(t, ppd, fl.p, hadess, ProfilePowerSaver)
	next := fl.follow(o, ProfilePowerSaver)
	st.f.waitCalls(t, following, next)
	ppd.Close()
	st.f.waitCalls(t, following, next, "Unfollow its bus name "+hadess+" changed owner")
}
