package daemon

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/schedpolicyd/schedpolicyd/internal/testutil"
	"github.com/schedpolicyd/schedpolicyd/policy"
	"github.com/schedpolicyd/schedpolicyd/sysfs"
)

// TestUnitsConfirmCrowded: a unit with AllowedCPUs= set whose own
// cpu.pressure stall grew by at least unitStallCandidate since the last
// sample (any stall at a pressure wake) gets a confirmation, and the
// confirmation reads the real
// schedstat of the threads in its cgroup subtree: two CPU-bound threads on
// one CPU raise its utilisation to 1; the same threads asleep, or a stall
// below the bar, or a unit without AllowedCPUs=, change nothing. The
// unit's cgroup is a directory tree (cgroup.threads, cpu.stat,
// cpu.pressure) naming the real threads of a real process.
func TestUnitsConfirmCrowded(t *testing.T) {
	if runtime.NumCPU() < 2 {
		t.Skip("needs two CPUs")
	}
	if _, err := os.Stat("/proc/self/schedstat"); err != nil {
		t.Skipf("no /proc/<tid>/schedstat (CONFIG_SCHED_INFO off): %v", err)
	}
	proc := startThreadsProc(t)
	proc.run(t, 2, 0) // two spinners from now on
	root := t.TempDir()
	unit := filepath.Join(root, "system.slice/spin.service")
	// The process's threads, in a scope below the unit (a user manager
	// placed whole holds its processes in such children).
	var tids []string
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", proc.pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		tids = append(tids, e.Name())
	}
	testutil.Put(t, filepath.Join(unit, "cgroup.threads"), "")
	testutil.Put(t, filepath.Join(unit, "app.slice/cgroup.threads"), "")
	testutil.Put(t, filepath.Join(unit, "app.slice/x.scope/cgroup.threads"), strings.Join(tids, "\n")+"\n")
	usage, total := 1_000_000, 1_000 // µs
	put := func() {
		testutil.Put(t, filepath.Join(unit, "cpu.stat"), fmt.Sprintf("usage_usec %d\nuser_usec 0\nsystem_usec 0\n", usage))
		testutil.Put(t, filepath.Join(unit, "cpu.pressure"), fmt.Sprintf("some avg10=0.00 avg60=0.00 avg300=0.00 total=%d\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n", total))
	}
	put()
	u := &unitPlacement{
		cfg: &Config{UtilHalfLife: policy.DefaultHalfLife}, log: logrus.New(), stats: &counters{},
		unified: true, procRoot: "/proc",
		workloads: map[string]*unitWorkload{
			"spin.service": {name: "spin.service", cgroup: unit, cpus: sysfs.NewCPUSet(0), lastAt: time.Now()},
		},
	}
	w := u.workloads["spin.service"]
	u.sample() // the first read of the stall total: no delta yet
	confirm := func(stall int, signal string, minStall time.Duration) (started, confirmed bool) {
		t.Helper()
		usage += 100_000
		total += stall
		put()
		u.sample()
		u.startConfirm(signal, minStall)
		c := u.confirmC()
		if c == nil {
			return false, false
		}
		<-c
		if u.confirmWake() {
			return true, true
		}
		// A borderline count is confirmed once more at once, as the loop
		// does (a loaded machine makes one likely: a waiting thread's
		// schedstat lags until it runs).
		if c = u.confirmC(); c == nil {
			return true, false
		}
		<-c
		return true, u.confirmWake()
	}

	if started, _ := confirm(9_000, "sample", unitStallCandidate); started {
		t.Fatalf("a 9 ms stall (below %s) started a confirmation at a sample", unitStallCandidate)
	}
	if started, ok := confirm(2_000, "cpu pressure", unitWakeStall); !started || !ok || w.avg.Util != 1 {
		t.Fatalf("two spinners, a 2 ms stall at a pressure wake: started %v, confirmed %v, util %.3f; want a confirmation raising util to 1", started, ok, w.avg.Util)
	}
	w.avg = policy.UtilAverage{Usage: w.avg.Usage}
	if started, ok := confirm(60_000, "sample", unitStallCandidate); !started || !ok || w.avg.Util != 1 {
		t.Fatalf("two spinners, a 60 ms stall: started %v, confirmed %v, util %.3f; want a confirmation raising util to 1", started, ok, w.avg.Util)
	}

	proc.run(t, 0, 0) // the spinners stop
	time.Sleep(20 * time.Millisecond)
	w.avg = policy.UtilAverage{Usage: w.avg.Usage}
	if started, ok := confirm(60_000, "sample", unitStallCandidate); !started || ok || w.avg.Util >= 1 {
		t.Fatalf("threads asleep, a 60 ms stall: started %v, confirmed %v, util %.3f; want a confirmation that finds it light", started, ok, w.avg.Util)
	}

	proc.run(t, 2, 0)
	w.cpus = sysfs.CPUSet{} // AllowedCPUs= unset: every CPU already
	if started, _ := confirm(60_000, "cpu pressure", unitWakeStall); started {
		t.Fatal("a unit without AllowedCPUs= started a confirmation")
	}
}
