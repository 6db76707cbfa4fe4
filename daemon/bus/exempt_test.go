package bus

import (
	"errors"
	"testing"

	"github.com/godbus/dbus/v5"

	"github.com/schedpolicyd/schedpolicyd/daemon/snapshot"
	"github.com/schedpolicyd/schedpolicyd/internal/names"
	"github.com/schedpolicyd/schedpolicyd/internal/testutil"
	"github.com/schedpolicyd/schedpolicyd/policy"
)

// exemptWorkloads are the workloads the tests' daemon publishes: a
// system service, user 4242's and user 1000's app of one name, user
// 4242's game, and a cgroup.
var exemptWorkloads = []snapshot.WorkloadStatus{
	{Name: "ssh.service", Manager: "system", Class: "service"},
	{Name: "app-steam-1.scope", Manager: "user:4242", Class: "app"},
	{Name: "app-steam-1.scope", Manager: "user:1000", Class: "app"},
	{Name: "app-game.scope", Manager: "user:4242", Class: "focused"},
	{Name: "build", Class: "workload"},
}

// TestResolveExempt: the entry each caller's name makes (Exempt, and
// Unexempt with user 4242's entry in the list), or the error.
func TestResolveExempt(t *testing.T) {
	snap := snapshot.Snapshot{Workloads: exemptWorkloads, Exempt: []snapshot.ExemptEntry{{Entry: "user:4242/x.scope", From: "state"}}}
	for _, c := range []struct {
		name string
		uid  uint32
		on   bool
		want string // the entry, or "error"
	}{
		{"app-steam-1.scope", 4242, true, "user:4242/app-steam-1.scope"}, // theirs (and user 1000's)
		{"app-*.scope", 4242, true, "user:4242/app-*.scope"},
		{"ssh.service", 4242, true, "ssh.service"},                                 // only others': every manager's, an administrator's
		{"build", 4242, true, "build"},                                             // a cgroup: the same
		{"next-game.scope", 4242, true, "user:4242/next-game.scope"},               // nothing now: theirs to come
		{"steam*", 4242, true, "user:4242/steam*"},                                 // a glob naming nothing now
		{"typo", 4242, true, "error"},                                              // neither a unit nor a glob
		{"system/typo", 0, true, "error"},                                          //
		{"user:1000/app-steam-1.scope", 4242, true, "user:1000/app-steam-1.scope"}, // as written
		{"app-steam-1.scope", 0, true, "app-steam-1.scope"},                        // root: every manager's
		{"typo.service", 0, true, "typo.service"},                                  // a unit to come
		{"x.scope", 4242, false, "user:4242/x.scope"},                              // their own entry first
		{"x.scope", 1000, false, "x.scope"},
		{"typo", 4242, false, "typo"}, // the daemon says it is not exempt
	} {
		e, err := names.ParseExempt(c.name)
		if err != nil {
			t.Fatal(err)
		}
		got, err := resolveExempt(e, c.uid, snap, c.on)
		switch {
		case c.want == "error":
			if !errors.Is(err, policy.ErrInvalid) {
				t.Errorf("%q by uid %d: %v %v, want ErrInvalid", c.name, c.uid, got, err)
			}
		case err != nil || got.String() != c.want:
			t.Errorf("%q by uid %d (on %v): %v %v, want %s", c.name, c.uid, c.on, got, err, c.want)
		}
	}
}

// TestExemptAuthorisation on a private bus with the system bus's policy
// and the real polkitd (testutil.StartPolkitd: the package's actions and
// the test's rules only), callers authenticated as uid 65534 (nobody)
// and uid 1 (daemon) (testutil.DialAs; dbus-daemon refuses a uid
// without a passwd entry): a user exempts and unexempts their own units
// with no polkit to grant it (polkitd refuses everything to them); what is
// not theirs — a system service, another user's unit, a cgroup — is
// refused (AccessDenied naming org.schedpolicyd.exempt) and reaches
// nothing; once a rule grants the action to user daemon, it may exempt
// a system service; root needs no polkit. An entry that names nothing and
// is no unit or glob is InvalidArgs before polkit is asked.
func TestExemptAuthorisation(t *testing.T) {
	pbus := testutil.StartSystemPolicyBus(t, "../../packaging/dbus/org.schedpolicyd.SchedPolicy1.conf")
	pk := testutil.StartPolkitd(t, pbus.Addr, "", "../../packaging/polkit/org.schedpolicyd.policy")
	st := startService(t, pbus.Addr, Config{})
	st.f.change(func() {
		for _, w := range exemptWorkloads {
			if w.Manager == "user:4242" {
				w.Manager = "user:65534"
			}
			st.f.workloads = append(st.f.workloads, w)
		}
		st.f.publishLocked()
	})
	user := testutil.DialAs(t, pbus.Addr, 65534).Object(Name, ObjectPath)
	admin := testutil.DialAs(t, pbus.Addr, 1).Object(Name, ObjectPath)
	call := func(obj interface {
		Call(string, dbus.Flags, ...any) *dbus.Call
	}, method, name string) (string, error) {
		var entry string
		err := obj.Call(Interface+"."+method, 0, name).Store(&entry)
		return entry, err
	}

	for _, c := range []struct{ name, want string }{
		{"app-steam-1.scope", "user:65534/app-steam-1.scope"},
		{"app-steam-1.scope", "user:65534/app-steam-1.scope"}, // again: no change, no error
		{"next-game.scope", "user:65534/next-game.scope"},
		{"user:65534/app-*.scope", "user:65534/app-*.scope"},
	} {
		if got, err := call(user, "Exempt", c.name); err != nil || got != c.want {
			t.Errorf("uid 65534 Exempt(%q) = %q, %v; want %q (its own: no polkit)", c.name, got, err, c.want)
		}
	}
	if got, err := call(user, "Unexempt", "next-game.scope"); err != nil || got != "user:65534/next-game.scope" {
		t.Errorf("uid 65534 Unexempt(next-game.scope) = %q, %v", got, err)
	}
	for _, name := range []string{"ssh.service", "build", "user:1000/app-steam-1.scope", "system/app-steam-1.scope", "user:1000/*"} {
		_, err := call(user, "Exempt", name)
		if dbusErrName(err) != errAccessDenied || err.Error() != "not authorised: polkit refused org.schedpolicyd.exempt for uid 65534" {
			t.Errorf("uid 65534 Exempt(%q): %v, want AccessDenied by polkit", name, err)
		}
	}
	if _, err := call(user, "Exempt", "typo"); dbusErrName(err) != errInvalidArgs {
		t.Errorf("Exempt(typo): %v, want InvalidArgs", err)
	}
	if _, err := call(user, "Exempt", "home/x"); dbusErrName(err) != errInvalidArgs {
		t.Errorf("Exempt(home/x): %v, want InvalidArgs", err)
	}
	st.f.waitCalls(t,
		"SetExempt user:65534/app-steam-1.scope true", "SetExempt user:65534/app-steam-1.scope true",
		"SetExempt user:65534/next-game.scope true", "SetExempt user:65534/app-*.scope true",
		"SetExempt user:65534/next-game.scope false")

	// An administrator's rule: user daemon may exempt anything.
	if _, err := call(admin, "Exempt", "ssh.service"); dbusErrName(err) != errAccessDenied {
		t.Errorf("uid 1 before the rule: %v, want AccessDenied", err)
	}
	pk.Restart(t, `polkit.addRule(function(action, subject) {
    if (action.id == "`+ExemptAction+`" && subject.user == "daemon") {
        return polkit.Result.YES;
    }
});
`)
	if got, err := call(admin, "Exempt", "ssh.service"); err != nil || got != "ssh.service" {
		t.Errorf("uid 1, granted org.schedpolicyd.exempt: Exempt(ssh.service) = %q, %v", got, err)
	}
	if _, err := call(user, "Exempt", "ssh.service"); dbusErrName(err) != errAccessDenied {
		t.Errorf("uid 65534 still refused: %v", err)
	}
	// Root: no polkit, and an unqualified name names every manager.
	if got, err := call(st.obj(), "Exempt", "app-steam-1.scope"); err != nil || got != "app-steam-1.scope" {
		t.Errorf("root Exempt(app-steam-1.scope) = %q, %v", got, err)
	}
	if got, err := call(st.obj(), "Unexempt", "ssh.service"); err != nil || got != "ssh.service" {
		t.Errorf("root Unexempt(ssh.service) = %q, %v", got, err)
	}
	st.f.waitCalls(t,
		"SetExempt user:65534/app-steam-1.scope true", "SetExempt user:65534/app-steam-1.scope true",
		"SetExempt user:65534/next-game.scope true", "SetExempt user:65534/app-*.scope true",
		"SetExempt user:65534/next-game.scope false",
		"SetExempt ssh.service true", "SetExempt app-steam-1.scope true", "SetExempt ssh.service false")
	var list [][]any
	if err := st.obj().StoreProperty(Interface+".Exemptions", &list); err != nil {
		t.Fatal(err)
	}
	if len(list) != 3 || list[0][0] != "user:65534/app-steam-1.scope" || list[2][0] != "app-steam-1.scope" || list[2][1] != "state" {
		t.Errorf("Exemptions = %v", list)
	}
}
