package daemon

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/schedpolicyd/schedpolicyd/internal/testutil"
	"github.com/schedpolicyd/schedpolicyd/policy"
)

// The daemon's answers to the requests of daemon/bus (bus.Controller),
// through its adapter, without a bus: what each request decides. What the
// service makes of them on the bus (names, signatures, authorisation,
// the D-Bus error each error becomes, signals) is daemon/bus's tests', on
// a fake daemon.

// checkInvalid fails t unless err is one the service answers with
// InvalidArgs (bus.Controller's doc: EINVAL or policy.ErrInvalid) and
// says exactly want.
func checkInvalid(t *testing.T, what string, err error, want string) {
	t.Helper()
	if err == nil || !(errors.Is(err, syscall.EINVAL) || errors.Is(err, policy.ErrInvalid)) || err.Error() != want {
		t.Errorf("%s: %v, want an invalid argument %q", what, err, want)
	}
}

// TestControllerRequests: on the mock laptop on AC, the snapshot the
// service publishes, then the knob's writes (a value the daemon refuses
// changes nothing), holds (the most power-saving wins and is the reason;
// releasing goes back to the rest; an unknown cookie is refused; an
// explicit choice cancels every hold; a holder's leaving ends its holds),
// an existing workload's name refused by CreateWorkload, and a
// workload's override (performance keeps every CPU while the rest is
// packed; balance and an unknown workload are refused).
func TestControllerRequests(t *testing.T) {
	m := newMockLaptop(t)
	d, _, _ := m.start(t)
	c := controller{d}
	ctx := t.Context()

	s := d.Snapshot()
	if s.Policy != policy.Performance || s.PowerSource != "ac" || s.KnobFrom != "default" || !s.KnobChosenAt.IsZero() ||
		!strings.Contains(s.PolicyReason, "power_aware=1") {
		t.Errorf("first snapshot: policy %s, source %s, knob from %q at %v, reason %q", s.Policy, s.PowerSource, s.KnobFrom, s.KnobChosenAt, s.PolicyReason)
	}
	if ws := s.Workloads; len(ws) != 2 || ws[0].Name != "a" {
		t.Errorf("Workloads = %v", ws)
	}
	if c.Published() != d.snap.Load() {
		t.Error("Published is not the daemon's latest snapshot")
	}

	if err := c.WriteKnob(ctx, filePowerAware, "2", "test"); err != nil {
		t.Fatal(err)
	}
	if s := d.Snapshot(); s.Policy != policy.Powersaving || s.Knob.PowerAware != policy.PowerAwareOn {
		t.Errorf("after power_aware 2: %s %+v", s.Policy, s.Knob)
	}
	for _, w := range []struct{ file, value, want string }{
		{filePowerAwarePolicy, "performance", `power_aware_policy: invalid argument: invalid value: power_aware_policy "performance" is not balance or powersaving`},
		{filePowerAware, "3", `power_aware: invalid argument: invalid value: power_aware "3" is not 0, 1 or 2`},
	} {
		checkInvalid(t, w.file+" "+w.value, c.WriteKnob(ctx, w.file, w.value, "test"), w.want)
		if s := d.Snapshot(); s.Policy != policy.Powersaving || s.Knob.PowerAware != policy.PowerAwareOn || s.Knob.PowerAwarePolicy != policy.Powersaving {
			t.Errorf("a refused %s %q changed the knob: %+v", w.file, w.value, s.Knob)
		}
	}
	if err := c.WriteKnob(ctx, filePowerAware, "1", "test"); err != nil {
		t.Fatal(err)
	}

	// Holds.
	policyNow := func() policy.Policy { return d.Snapshot().Policy }
	c1, err := c.AddHold(ctx, policy.Performance, "benchmark", ":1.10", "")
	if err != nil {
		t.Fatal(err)
	}
	if got := policyNow(); got != policy.Performance {
		t.Errorf("with a performance hold: %v", got)
	}
	c2, err := c.AddHold(ctx, policy.Balance, "video", ":1.10", "")
	if err != nil {
		t.Fatal(err)
	}
	if got := policyNow(); got != policy.Balance {
		t.Errorf("performance and balance holds: %v, want balance (the power-saving one wins)", got)
	}
	if r := d.Snapshot().PolicyReason; !strings.Contains(r, "video") {
		t.Errorf("Reason %q does not name the winning hold", r)
	}
	if err := c.ReleaseHold(ctx, c2, ":1.10", false); err != nil {
		t.Fatal(err)
	}
	if got := policyNow(); got != policy.Performance {
		t.Errorf("after releasing balance: %v", got)
	}
	checkInvalid(t, "ReleaseHold(unknown)", c.ReleaseHold(ctx, 9999, ":1.10", true), "invalid value: no hold 9999 of yours")
	if err := c.WriteKnob(ctx, fileCurrent, "powersaving", "test"); err != nil {
		t.Fatal(err)
	}
	if hs := d.Snapshot().Holds; len(hs) != 0 {
		t.Errorf("holds after an explicit choice: %v, want none (cookie %d among them)", hs, c1)
	}
	if _, err := c.AddHold(ctx, policy.Performance, "game", ":1.11", ""); err != nil {
		t.Fatal(err)
	}
	if got := policyNow(); got != policy.Performance {
		t.Errorf("with another client's performance hold: %v", got)
	}
	if err := c.EndHoldsOf(ctx, ":1.11", "holder left the bus"); err != nil {
		t.Fatal(err)
	}
	if got, hs := policyNow(), d.Snapshot().Holds; got != policy.Powersaving || len(hs) != 0 {
		t.Errorf("after its holder left: %v, holds %v; want powersaving, none", got, hs)
	}

	// An existing workload's name: the service answers FileExists.
	_, err = c.CreateWorkload(ctx, "a", 1)
	if want := fmt.Sprintf("workload %q already exists (%s); choose another name", "a", filepath.Join(m.managed, "a")); !errors.Is(err, fs.ErrExist) || err.Error() != want {
		t.Errorf("CreateWorkload(a): %v, want fs.ErrExist %q", err, want)
	}

	// Per-workload override: b keeps every CPU while the rest is packed.
	if err := c.SetWorkloadPolicy(ctx, "b", policy.Performance); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "override applied", func() (bool, string) {
		b, a := testutil.ReadTrim(t, filepath.Join(m.managed, "b/cpuset.cpus")), testutil.ReadTrim(t, filepath.Join(m.managed, "a/cpuset.cpus"))
		return b == "0-7" && a == "0", b + " / " + a
	})
	checkInvalid(t, "override balance", c.SetWorkloadPolicy(ctx, "b", policy.Balance),
		"invalid value: a workload override can only be performance (or empty to clear)")
	checkInvalid(t, "override of an unknown workload", c.SetWorkloadPolicy(ctx, "nosuch", policy.Performance), `invalid value: no workload "nosuch"`)
	if err := c.Rebalance(ctx); err != nil {
		t.Errorf("Rebalance: %v", err)
	}
	if got := policyNow(); got != policy.Powersaving {
		t.Errorf("policy drifted: %v", got)
	}
}
