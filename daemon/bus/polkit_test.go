package bus

import (
	"strings"
	"sync/atomic"
	"testing"

	"github.com/godbus/dbus/v5"

	"github.com/schedpolicyd/schedpolicyd/internal/testutil"
	"github.com/schedpolicyd/schedpolicyd/policy"
)

// TestPolkitAuthorisation runs the real polkitd from Debian on a private
// bus with the system bus's policy and the package's
// (testutil.StartPolkitd: it knows only the package's action and the
// test's rules; nothing of the machine's is read or changed) and a caller
// that is not root (uid 65534, testutil.DialAs): without a rule polkit
// refuses (the action's defaults ask for an administrator and nobody has
// an agent) and the daemon is not asked; with a rule that grants
// org.schedpolicyd.set-policy to that user the same call reaches it.
func TestPolkitAuthorisation(t *testing.T) {
	pbus := testutil.StartSystemPolicyBus(t, "../../packaging/dbus/org.schedpolicyd.SchedPolicy1.conf")
	pk := testutil.StartPolkitd(t, pbus.Addr, "", "../../packaging/polkit/org.schedpolicyd.policy")
	st := startService(t, pbus.Addr, Config{})
	nobody := testutil.DialAs(t, pbus.Addr, 65534).Object(Name, ObjectPath)
	call := func() error { return nobody.Call(Interface+".SetPolicy", 0, "powersaving").Err }

	// No rule: refused by polkit, nothing asked, nothing changes.
	err := call()
	if want := "not authorised: polkit refused " + PolkitAction + " for uid 65534"; dbusErrName(err) != errAccessDenied || err.Error() != want {
		t.Fatalf("without a rule: %v, want AccessDenied %q", err, want)
	}
	if got := st.f.log(); len(got) != 0 {
		t.Fatalf("a refused call reached the daemon: %q", got)
	}
	if s := st.f.Published(); s.Knob.PowerAware != policy.PowerAwareAuto || s.Policy != policy.Performance {
		t.Fatalf("a refused call changed the state: %+v", s.Knob)
	}

	// A rule granting the action to nobody: the same call now succeeds.
	pk.Restart(t, `polkit.addRule(function(action, subject) {
    if (action.id == "`+PolkitAction+`" && subject.user == "nobody") {
        return polkit.Result.YES;
    }
});
`)
	if err := call(); err != nil {
		t.Fatalf("with the rule: %v", err)
	}
	st.f.waitCalls(t, `WriteKnob current_sched_policy "powersaving" dbus`)
	if s := st.f.Published(); s.Policy != policy.Powersaving || s.Knob.PowerAware != policy.PowerAwareOn {
		t.Errorf("after an authorised SetPolicy: %+v policy %s", s.Knob, s.Policy)
	}
}

// yesPolkit authorises everything it is asked about.
type yesPolkit struct{ asked *atomic.Int64 }

func (p yesPolkit) CheckAuthorization(subject struct {
	Kind    string
	Details map[string]dbus.Variant
}, action string, details map[string]string, flags uint32, cancel string) (struct {
	IsAuthorized, IsChallenge bool
	Details                   map[string]string
}, *dbus.Error) {
	p.asked.Add(1)
	return struct {
		IsAuthorized, IsChallenge bool
		Details                   map[string]string
	}{true, false, map[string]string{}}, nil
}

// TestPolkitFromNonRootOwnerRefused: on a bus where anyone may own any
// name (a session-like bus, --bus ADDRESS), uid 65534 owns
// org.freedesktop.PolicyKit1 and would authorise anything; another
// connection of that uid calling SetPolicy is refused (AccessDenied,
// saying why) without the impostor being asked, and nothing reaches the
// daemon. The same authority owned by root is believed.
func TestPolkitFromNonRootOwnerRefused(t *testing.T) {
	addr := testutil.StartBus(t, testutil.BusOptions{System: true, AnyUser: true}).Addr
	st := startService(t, addr, Config{})
	root := st.client
	asked := new(atomic.Int64)
	own := func(c *dbus.Conn) {
		t.Helper()
		if err := c.Export(yesPolkit{asked}, polkitPath, "org.freedesktop.PolicyKit1.Authority"); err != nil {
			t.Fatal(err)
		}
		if r, err := c.RequestName(polkitName, dbus.NameFlagDoNotQueue); err != nil || r != dbus.RequestNameReplyPrimaryOwner {
			t.Fatalf("RequestName(%s) = %v, %v", polkitName, r, err)
		}
	}
	impostor := testutil.DialAs(t, addr, 65534)
	own(impostor)
	caller := testutil.DialAs(t, addr, 65534)
	err := caller.Object(Name, ObjectPath).Call(Interface+".SetPolicy", 0, "performance").Err
	if dbusErrName(err) != errAccessDenied || !strings.Contains(err.Error(), "neither root nor the polkitd system user") {
		t.Fatalf("SetPolicy with a non-root polkit: %v, want AccessDenied naming the owner's uid", err)
	}
	if asked.Load() != 0 || len(st.f.log()) != 0 || st.f.Published().Knob.PowerAware != policy.PowerAwareAuto {
		t.Fatalf("the impostor was asked %d times; requests %q; knob %+v", asked.Load(), st.f.log(), st.f.Published().Knob)
	}
	impostor.Close()
	testutil.Eventually(t, "the impostor gone", func() (bool, string) {
		ok, why := testutil.NameOwned(root, polkitName)
		return !ok, why
	})
	own(root)
	if err := caller.Object(Name, ObjectPath).Call(Interface+".SetPolicy", 0, "performance").Err; err != nil {
		t.Fatalf("SetPolicy authorised by root's polkit: %v", err)
	}
	st.f.waitCalls(t, `WriteKnob current_sched_policy "performance" dbus`)
	if asked.Load() != 1 || st.f.Published().Knob.PowerAware != policy.PowerAwareOff {
		t.Fatalf("root's polkit asked %d times; knob %+v", asked.Load(), st.f.Published().Knob)
	}
}
