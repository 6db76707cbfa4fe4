package daemon

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/sirupsen/logrus"

	"github.com/schedpolicyd/schedpolicyd/internal/testutil"
)

// TestPlacementChangeLogged: each decision that moves workloads logs one
// info line saying how many moved, how many of the managed ones hold CPUs
// the daemon set and which, for which policy and why; a decision that
// moves nothing logs none.
func TestPlacementChangeLogged(t *testing.T) {
	m := newMockLaptop(t)
	hook := new(msgLog)
	d := m.startWith(t, func(c *Config) { c.Log.(*logrus.Logger).AddHook(hook) })
	a, b := filepath.Join(m.managed, "a/cpuset.cpus"), filepath.Join(m.managed, "b/cpuset.cpus")
	placed := func() []string {
		var out []string
		hook.mu.Lock()
		defer hook.mu.Unlock()
		for _, e := range hook.entries {
			if strings.HasPrefix(e, "placement changed ") {
				out = append(out, e)
			}
		}
		return out
	}
	// At start, on AC: both workloads on every CPU (a's original is
	// empty, inherit; b's is 2-3).
	testutil.Eventually(t, "performance placed", func() (bool, string) {
		return testutil.ReadTrim(t, a) == "0-7" && testutil.ReadTrim(t, b) == "0-7", strings.Join(placed(), "\n")
	})
	want := []string{"placement changed managed=2 moved=2 onto=0-7 placed=2 placement=cgroupfs policy=performance why=start"}
	if got := placed(); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("after start:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}

	ps := filepath.Join(m.sys, "class/power_supply")
	testutil.Put(t, ps+"/AC/online", "0")
	testutil.Put(t, ps+"/BAT0/status", "Discharging")
	testutil.Eventually(t, "packed on CPU 0", func() (bool, string) {
		return testutil.ReadTrim(t, a) == "0" && testutil.ReadTrim(t, b) == "0", testutil.ReadTrim(t, a) + " / " + testutil.ReadTrim(t, b)
	})
	want = append(want, "placement changed managed=2 moved=2 onto=0 placed=2 placement=cgroupfs policy=powersaving why=power source")
	// The line is logged before the decision returns; the files were
	// written before it: wait for the line itself.
	testutil.Eventually(t, "the unplug's line", func() (bool, string) { return len(placed()) >= 2, strings.Join(placed(), "\n") })
	if got := placed(); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("after unplug:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}

	// A rebalance that moves nothing logs nothing.
	if err := (controller{d}).Rebalance(t.Context()); err != nil {
		t.Fatal(err)
	}
	if got := placed(); len(got) != len(want) {
		t.Fatalf("a rebalance that moved nothing logged:\n%s", strings.Join(got[len(want):], "\n"))
	}
}
