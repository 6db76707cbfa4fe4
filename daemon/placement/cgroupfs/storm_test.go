package cgroupfs

// A thousand workloads coming and going (moved from package daemon,
// where it booted a daemon: TestStormWorkloadsComeAndGo). The default
// size keeps `go test -race` short; SCHEDPOLICYD_STORM=1 runs the long
// version.

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/sirupsen/logrus"
	"go.uber.org/goleak"

	"github.com/schedpolicyd/schedpolicyd/internal/testutil"
	"github.com/schedpolicyd/schedpolicyd/policy"
)

// TestStormWorkloadsComeAndGo: 1,000 workloads appear in the cgroup v2
// mock, are all adopted with their originals saved, then all disappear and
// are forgotten (state.json holds no original), with no cpuset write
// refused and no goroutine left behind. With SCHEDPOLICYD_STORM=1 the
// cycle runs three times.
func TestStormWorkloadsComeAndGo(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	const n = 1000
	rounds := 1
	if os.Getenv("SCHEDPOLICYD_STORM") == "1" {
		rounds = 3
	}
	c := mockTree(t)
	r := newRig(t, c.parent, "", nil)
	r.log.SetLevel(logrus.WarnLevel)
	r.start(policy.Performance)
	count := func() string { return fmt.Sprint(r.e.Count()) }
	for round := range rounds {
		for i := range n {
			c.child(fmt.Sprintf("job%04d", i), "")
		}
		r.until(fmt.Sprintf("round %d: %d workloads adopted", round, n), func() bool { return count() == fmt.Sprint(n) })
		r.apply(policy.Powersaving)
		testutil.WantEq(t, fmt.Sprintf("round %d: originals in state.json", round), fmt.Sprint(len(originals(r.saved()))), fmt.Sprint(n))
		for i := range n {
			if err := os.RemoveAll(filepath.Join(c.parent, fmt.Sprintf("job%04d", i))); err != nil {
				t.Fatal(err)
			}
		}
		r.until(fmt.Sprintf("round %d: no workload left", round), func() bool { return count() == "0" })
		r.apply(policy.Performance)
		testutil.WantEq(t, fmt.Sprintf("round %d: originals in state.json", round), fmt.Sprint(len(originals(r.saved()))), "0")
	}
	testutil.WantEq(t, "cpuset writes refused", fmt.Sprint(r.stats.Errors.Load()), "0")
	if !r.stop() {
		t.Error("restore incomplete")
	}
}
