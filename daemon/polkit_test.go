package daemon

import (
	"os/exec"
	"strings"
	"sync"
	"testing"

	"github.com/schedpolicyd/schedpolicyd/daemon/bus"
	"github.com/schedpolicyd/schedpolicyd/internal/testutil"
	"github.com/schedpolicyd/schedpolicyd/policy"
)

const polkitd = testutil.PolkitdBinary

// TestPolkitAuthorisation runs the real polkitd from Debian on a private
// bus (testutil.StartPolkitd: it knows only the package's action and the
// test's rules; nothing of the machine's is read or changed) and a caller
// that is not root (busctl as nobody via setpriv): without a rule polkit
// refuses (the action's defaults ask for an administrator and nobody has
// an agent), with a rule that grants org.schedpolicyd.set-policy to that
// user the same call succeeds.
func TestPolkitAuthorisation(t *testing.T) {
	for _, tool := range []string{"setpriv", "busctl"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("needs %s", tool)
		}
	}
	addr := testutil.StartBus(t, testutil.BusOptions{System: true, AnyUser: true}).Addr
	pk := testutil.StartPolkitd(t, addr, "", "../packaging/polkit/org.schedpolicyd.policy")

	m := newMockLaptop(t)
	d := m.startWith(t, func(c *Config) { c.Bus = addr })
	call := func() (string, error) {
		out, err := exec.Command("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
			"busctl", "--address="+addr, "call", bus.Name, string(bus.ObjectPath), bus.Interface, "SetPolicy", "s", "powersaving").CombinedOutput()
		return string(out), err
	}
	testutil.Eventually(t, "our name on the bus", func() (bool, string) { return testutil.NameOwnedAt(addr, bus.Name) })

	// No rule: refused by polkit, nothing changes.
	out, err := call()
	if err == nil || !strings.Contains(out, "Access denied") {
		t.Fatalf("without a rule: err=%v out=%q, want Access denied", err, out)
	}
	if s := d.Snapshot(); s.Knob.PowerAware != policy.PowerAwareAuto || s.Policy != policy.Performance {
		t.Fatalf("a refused call changed the state: %+v", s.Knob)
	}

	// A rule granting the action to nobody: the same call now succeeds.
	pk.Restart(t, `polkit.addRule(function(action, subject) {
    if (action.id == "`+bus.PolkitAction+`" && subject.user == "nobody") {
        return polkit.Result.YES;
    }
});
`)
	if out, err := call(); err != nil {
		t.Fatalf("with the rule: %v %s", err, out)
	}
	if s := d.Snapshot(); s.Policy != policy.Powersaving || s.Knob.PowerAware != policy.PowerAwareOn {
		t.Errorf("after an authorised SetPolicy: %+v policy %s", s.Knob, s.Policy)
	}
}

// lockedLog collects a child's output for the failure message.
type lockedLog struct {
	mu sync.Mutex
	b  []byte
}

func (l *lockedLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.b = append(l.b, p...)
	return len(p), nil
}

func (l *lockedLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return string(l.b)
}
