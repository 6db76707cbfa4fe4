package bus

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/godbus/dbus/v5"
	logtest "github.com/sirupsen/logrus/hooks/test"

	"github.com/schedpolicyd/schedpolicyd/internal/testutil"
	"github.com/schedpolicyd/schedpolicyd/policy"
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

// logLines are the service's log entries, each "message k=v ..." with
// its fields sorted.
func logLines(h *logtest.Hook) []string {
	var out []string
	for _, e := range h.AllEntries() {
		out = append(out, testutil.EntryLine(e))
	}
	return out
}

// TestForgedOwnerChangeTakesNoPowerProfilesNames is the trust issue's
// first case on a bus with the system bus's policy: uid 65534, refused by
// SetPowerAware, sends the service NameOwnerChanged(net.hadess.PowerProfiles,
// "", itself) and its own PropertiesChanged(ActiveProfile performance).
// Root's connection then takes a name by replacement, as
// power-profiles-daemon --replace does, and serves power-saver. The
// service follows it, which it does after handling the forged signals,
// routed first; it released the names once, for that owner, and never
// acted on anything from the attacker (believed, the forged change makes
// it release the names a first time and follow the attacker).
func TestForgedOwnerChangeTakesNoPowerProfilesNames(t *testing.T) {
	pbus := testutil.StartSystemPolicyBus(t, "../../packaging/dbus/org.schedpolicyd.SchedPolicy1.conf")
	st := startService(t, pbus.Addr, Config{PowerProfilesAPI: PowerProfilesAuto})
	for _, n := range ppNames {
		testutil.Eventually(t, "serving "+n.name, func() (bool, string) { return testutil.NameOwned(st.client, n.name) })
	}
	attacker := testutil.DialAs(t, pbus.Addr, 65534)
	err := attacker.Object(Name, ObjectPath).Call(Interface+".SetPowerAware", 0, uint32(0)).Err
	if dbusErrName(err) != errAccessDenied {
		t.Fatalf("SetPowerAware as uid 65534: %v, want AccessDenied", err)
	}
	me := attacker.Names()[0]
	except := []string{st.client.Names()[0]}
	forge(t, attacker, except, "/org/freedesktop/DBus", "org.freedesktop.DBus.NameOwnerChanged", ppNames[1].name, "", me)
	forge(t, attacker, except, ppNames[1].path, propsIface+".PropertiesChanged",
		ppNames[1].name, map[string]dbus.Variant{"ActiveProfile": dbus.MakeVariant(ProfilePerformance)}, []string{})

	ppd, _ := ownPPD(t, pbus.Addr, ppNames[0].name, ProfilePowerSaver)
	st.f.waitCalls(t, fmt.Sprintf("FollowProfile %s %s %s", ppNames[0].name, ppd.Names()[0], ProfilePowerSaver))
	re := regexp.MustCompile(regexp.QuoteMeta(me) + `([^0-9]|$)`)
	released := 0
	for _, l := range logLines(st.log) {
		if re.MatchString(l) {
			t.Errorf("the service acted on the forged signals: %q", l)
		}
		if strings.HasPrefix(l, "released the power-profiles names") {
			released++
		}
	}
	if released != 1 {
		t.Fatalf("released the names %d times, want once (for %s)", released, ppd.Names()[0])
	}
}

// TestForgedOwnerChangeEndsNoHold is the trust issue's second case: root
// holds powersaving with HoldPolicy and power-saver with HoldProfile, from
// two connections that stay; uid 65534 sends the service
// NameOwnerChanged(holder, holder, "") for each. A third holder then
// really leaves: its hold ends, which the service asks after handling the
// forged signals (routed first), and the two holds are still there.
func TestForgedOwnerChangeEndsNoHold(t *testing.T) {
	pbus := testutil.StartSystemPolicyBus(t, "../../packaging/dbus/org.schedpolicyd.SchedPolicy1.conf")
	st := startService(t, pbus.Addr, Config{PowerProfilesAPI: PowerProfilesServe})
	attacker := testutil.DialAs(t, pbus.Addr, 65534)
	h, p, q := testutil.Connect(t, pbus.Addr), testutil.Connect(t, pbus.Addr), testutil.Connect(t, pbus.Addr)
	if err := h.Object(Name, ObjectPath).Call(Interface+".HoldPolicy", 0, "powersaving", "test").Err; err != nil {
		t.Fatal(err)
	}
	if err := p.Object(ppNames[1].name, ppNames[1].path).Call(ppNames[1].name+".HoldProfile", 0, ProfilePowerSaver, "test", "app").Err; err != nil {
		t.Fatal(err)
	}
	if err := q.Object(Name, ObjectPath).Call(Interface+".HoldPolicy", 0, "powersaving", "leaves").Err; err != nil {
		t.Fatal(err)
	}
	except := []string{st.client.Names()[0], h.Names()[0], p.Names()[0], q.Names()[0]}
	for _, c := range []*dbus.Conn{h, p} {
		forge(t, attacker, except, "/org/freedesktop/DBus", "org.freedesktop.DBus.NameOwnerChanged", c.Names()[0], c.Names()[0], "")
	}
	q.Close()
	st.f.waitCalls(t,
		fmt.Sprintf(`AddHold powersaving "test" %s ""`, h.Names()[0]),
		fmt.Sprintf(`AddHold powersaving "test" %s "app"`, p.Names()[0]),
		fmt.Sprintf(`AddHold powersaving "leaves" %s ""`, q.Names()[0]),
		fmt.Sprintf("EndHoldsOf %s holder left the bus", q.Names()[0]))
	var owners []string
	for _, hd := range st.f.Published().Holds {
		owners = append(owners, hd.Owner)
	}
	if want := []string{h.Names()[0], p.Names()[0]}; !slices.Equal(owners, want) {
		t.Fatalf("holders %v, want %v: a forged NameOwnerChanged ended a hold", owners, want)
	}
	if pol := st.f.Published().Policy; pol != policy.Powersaving {
		t.Fatalf("policy %s, want powersaving (held)", pol)
	}
}
