package units

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/schedpolicyd/schedpolicyd/daemon/placement"
	"github.com/schedpolicyd/schedpolicyd/internal/testutil"
	"github.com/schedpolicyd/schedpolicyd/policy"
	"github.com/schedpolicyd/schedpolicyd/sysfs"
)

// TestUnitsConfirmCrowded: a unit with AllowedCPUs= set whose own
// cpu.pressure stall grew by at least unitStallCandidate since the last
// sample (any stall at a pressure wake) gets a confirmation, and the
// confirmation reads the schedstat of the threads in its cgroup subtree
// over its 30 ms: two threads runnable throughout on one CPU (2.00
// runnable threads) raise its utilisation to 1; the same threads asleep,
// a borderline count that stays borderline when confirmed once more, a
// stall below the bar, or a unit without AllowedCPUs=, change nothing.
// The unit's cgroup is a directory tree (cgroup.threads, cpu.stat,
// cpu.pressure) and the threads' /proc/<tid>/schedstat files are written
// by the test, on synctest's clock, so each case's average is exact
// whatever else the machine runs (the real files are read by the cgroup
// and sysfs packages' tests and by the VM's pressure-wake check).
func TestUnitsConfirmCrowded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		root := t.TempDir()
		proc := filepath.Join(root, "proc")
		unit := filepath.Join(root, "system.slice/spin.service")
		tids := []string{"101", "102"}
		// A user manager placed whole holds its processes in children.
		testutil.Put(t, filepath.Join(unit, "cgroup.threads"), "")
		testutil.Put(t, filepath.Join(unit, "app.slice/cgroup.threads"), "")
		testutil.Put(t, filepath.Join(unit, "app.slice/x.scope/cgroup.threads"), strings.Join(tids, "\n")+"\n")
		runnable := map[string]time.Duration{} // run+wait per thread so far
		schedstat := func(each time.Duration) {
			for _, tid := range tids {
				runnable[tid] += each
				// Split between running and waiting: only the sum counts.
				testutil.Put(t, filepath.Join(proc, tid, "schedstat"), fmt.Sprintf("%d %d 7\n", runnable[tid]/3, runnable[tid]-runnable[tid]/3))
			}
		}
		schedstat(0)
		usage, total := 1_000_000, 1_000 // µs
		put := func() {
			testutil.Put(t, filepath.Join(unit, "cpu.stat"), fmt.Sprintf("usage_usec %d\nuser_usec 0\nsystem_usec 0\n", usage))
			testutil.Put(t, filepath.Join(unit, "cpu.pressure"), fmt.Sprintf("some avg10=0.00 avg60=0.00 avg300=0.00 total=%d\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n", total))
		}
		put()
		u := &Placement{
			e:       placement.NewEngine(&placement.Config{UtilHalfLife: policy.DefaultHalfLife}, logrus.New(), &placement.Counters{}, nil),
			unified: true, procRoot: proc,
			workloads: map[string]*unitWorkload{
				"spin.service": {name: "spin.service", cgroup: unit, cpus: sysfs.NewCPUSet(0), lastAt: time.Now()},
			},
		}
		u.attach()
		w := u.workloads["spin.service"]
		u.Sample() // the first read of the stall total: no delta yet
		// confirm: a sample with the stall (µs) given, a confirmation
		// for signal, and each thread runnable for each of the
		// confirmation's 30 ms (and of a retry's, retryEach).
		confirm := func(stall int, signal string, minStall, each, retryEach time.Duration) (started, confirmed bool) {
			t.Helper()
			usage += 100_000
			total += stall
			put()
			u.Sample()
			u.e.StartConfirm(signal, minStall == unitWakeStall)
			c := u.e.ConfirmC()
			if c == nil {
				return false, false
			}
			schedstat(each)
			<-c
			if len(u.e.OnWake(placement.WakeConfirmDue)) > 0 {
				return true, true
			}
			// A borderline count is confirmed once more at once, as the
			// loop does.
			if c = u.e.ConfirmC(); c == nil {
				return true, false
			}
			schedstat(retryEach)
			<-c
			return true, len(u.e.OnWake(placement.WakeConfirmDue)) > 0
		}
		const window = 30 * time.Millisecond

		if started, _ := confirm(9_000, "sample", unitStallCandidate, window, 0); started {
			t.Fatalf("a 9 ms stall (below %s) started a confirmation at a sample", unitStallCandidate)
		}
		if started, ok := confirm(2_000, "cpu pressure", unitWakeStall, window, 0); !started || !ok || w.avg.Util != 1 {
			t.Fatalf("two threads runnable throughout, a 2 ms stall at a pressure wake: started %v, confirmed %v, util %.3f; want a confirmation raising util to 1", started, ok, w.avg.Util)
		}
		w.avg = policy.UtilAverage{Usage: w.avg.Usage}
		if started, ok := confirm(60_000, "sample", unitStallCandidate, window, 0); !started || !ok || w.avg.Util != 1 {
			t.Fatalf("two threads runnable throughout, a 60 ms stall: started %v, confirmed %v, util %.3f; want a confirmation raising util to 1", started, ok, w.avg.Util)
		}
		w.avg = policy.UtilAverage{Usage: w.avg.Usage}
		if started, ok := confirm(60_000, "sample", unitStallCandidate, 0, 0); !started || ok || w.avg.Util >= 1 {
			t.Fatalf("threads asleep, a 60 ms stall: started %v, confirmed %v, util %.3f; want a confirmation that finds it light", started, ok, w.avg.Util)
		}
		// 1.00 runnable threads on one CPU: borderline (within
		// WakeMargin); confirmed once more, at 1.00 again: light, at
		// 2.00: crowded.
		if started, ok := confirm(60_000, "sample", unitStallCandidate, window/2, window/2); !started || ok || w.avg.Util >= 1 {
			t.Fatalf("1.00 runnable threads twice: started %v, confirmed %v, util %.3f; want light", started, ok, w.avg.Util)
		}
		if started, ok := confirm(60_000, "sample", unitStallCandidate, window/2, window); !started || !ok || w.avg.Util != 1 {
			t.Fatalf("1.00, then 2.00 runnable threads: started %v, confirmed %v, util %.3f; want the retry to confirm it", started, ok, w.avg.Util)
		}
		w.cpus = sysfs.CPUSet{} // AllowedCPUs= unset: every CPU already
		if started, _ := confirm(60_000, "cpu pressure", unitWakeStall, window, 0); started {
			t.Fatal("a unit without AllowedCPUs= started a confirmation")
		}
	})
}
