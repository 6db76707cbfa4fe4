package daemon

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/schedpolicyd/schedpolicyd/daemon/bus"
	"github.com/schedpolicyd/schedpolicyd/internal/testutil"
	"github.com/schedpolicyd/schedpolicyd/policy"
)

const polkitd = "/usr/lib/polkit-1/polkitd"

// TestPolkitAuthorisation runs the real polkitd from Debian on a private bus
// and a caller that is not root (busctl as nobody via setpriv): without a
// rule polkit refuses (the action's defaults ask for an administrator and
// nobody has an agent), with a rule that grants org.schedpolicyd.set-policy
// to that user the same call succeeds. The action file and the rule are
// installed where polkitd reads them and removed afterwards.
func TestPolkitAuthorisation(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: polkitd switches to its own user, and the test installs a polkit rule")
	}
	if _, err := os.Stat(polkitd); err != nil {
		t.Skipf("needs polkitd (Debian package polkitd): %v", err)
	}
	for _, tool := range []string{"setpriv", "busctl"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("needs %s", tool)
		}
	}
	addr := testutil.StartBus(t, testutil.BusOptions{AnyUser: true}).Addr

	// Our action, where polkitd looks for actions.
	action := "/usr/share/polkit-1/actions/org.schedpolicyd.policy"
	if _, err := os.Stat(action); os.IsNotExist(err) {
		b, err := os.ReadFile("../packaging/polkit/org.schedpolicyd.policy")
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(action, b, 0o644); err != nil {
			t.Skipf("cannot install the polkit action: %v", err)
		}
		t.Cleanup(func() { os.Remove(action) })
	}

	pk := exec.Command(polkitd, "--no-debug")
	pk.Env = append(os.Environ(), "DBUS_SYSTEM_BUS_ADDRESS="+addr)
	var pkLog testutil.LockedBuffer
	pk.Stdout, pk.Stderr = &pkLog, &pkLog
	if err := pk.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		pk.Process.Kill()
		pk.Wait()
		if t.Failed() {
			t.Logf("polkitd:\n%s", pkLog.String())
		}
	})

	m := newMockLaptop(t)
	d := m.startWith(t, func(c *Config) { c.Bus = addr })
	call := func() (string, error) {
		out, err := exec.Command("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
			"busctl", "--address="+addr, "call", bus.Name, string(bus.ObjectPath), bus.Interface, "SetPolicy", "s", "powersaving").CombinedOutput()
		return string(out), err
	}
	testutil.Eventually(t, "polkitd and our name on the bus", func() (bool, string) {
		out, err := exec.Command("busctl", "--address="+addr, "list", "--acquired").CombinedOutput()
		return err == nil && strings.Contains(string(out), "org.freedesktop.PolicyKit1") && strings.Contains(string(out), bus.Name), string(out)
	})

	// No rule: refused by polkit, nothing changes.
	out, err := call()
	if err == nil || !strings.Contains(out, "Access denied") {
		t.Fatalf("without a rule: err=%v out=%q, want Access denied", err, out)
	}
	if s := d.Snapshot(); s.Knob.PowerAware != policy.PowerAwareAuto || s.Policy != policy.Performance {
		t.Fatalf("a refused call changed the state: %+v", s.Knob)
	}

	// A rule granting the action to nobody: the same call now succeeds.
	rule := filepath.Join("/etc/polkit-1/rules.d", fmt.Sprintf("49-schedpolicyd-test-%d.rules", time.Now().UnixNano()))
	if err := os.MkdirAll(filepath.Dir(rule), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(rule, []byte(`polkit.addRule(function(action, subject) {
    if (action.id == "`+bus.PolkitAction+`" && subject.user == "nobody") {
        return polkit.Result.YES;
    }
});
`), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(rule) })
	testutil.Eventually(t, "polkit allows nobody after the rule", func() (bool, string) {
		out, err := call()
		return err == nil, out
	})
	if s := d.Snapshot(); s.Policy != policy.Powersaving || s.Knob.PowerAware != policy.PowerAwareOn {
		t.Errorf("after an authorised SetPolicy: %+v policy %s", s.Knob, s.Policy)
	}
}
