package cgroupfs

// The sampling back-off as the cgroupfs driver drives it (moved from
// package daemon, where it booted a daemon and watched its timer:
// TestDaemonSamplingBacksOffWhileIdle). The loop's timer taking the
// period (sampleTimer) is daemon/loop_test.go's.

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/schedpolicyd/schedpolicyd/daemon/placement"
	"github.com/schedpolicyd/schedpolicyd/internal/testutil"
	"github.com/schedpolicyd/schedpolicyd/policy"
)

// TestSamplingBacksOffWhileIdle, on the cgroup v2 mock (no CPU pressure
// file, so sampling cannot stop and backs off instead): with every
// workload idle (CPU time not moving) the sampling period stays at 10 ms
// for placement.IdleSamplesBeforeBackoff-1 samples, then doubles at each
// sample up to 32×; a task attached to a workload (a write to its
// cgroup.procs) brings it back at once, through the driver's wake.
func TestSamplingBacksOffWhileIdle(t *testing.T) {
	const base = 10 * time.Millisecond
	c := mockTree(t)
	a := c.child("a", "")
	testutil.Put(t, filepath.Join(a, "cgroup.procs"), "")
	r := newRig(t, c.parent, "", func(cfg *placement.Config) { cfg.SampleInterval = base })
	r.start(policy.Performance)
	var got []time.Duration
	for range 8 {
		r.sample()
		got = append(got, r.e.SampleEvery())
	}
	want := []time.Duration{base, base, 2 * base, 4 * base, 8 * base, 16 * base, 32 * base, 32 * base}
	testutil.WantEq(t, "the period after each idle sample", fmtDurations(got), fmtDurations(want))
	if !r.e.Sampling() {
		t.Error("sampling stopped without a CPU pressure trigger to wake it")
	}

	testutil.Put(t, filepath.Join(a, "cgroup.procs"), "4242")
	r.until("the period back after a task was attached", func() bool { return r.e.SampleEvery() == base })
	testutil.WantEq(t, "what brought it back", r.last, "attached")
}

// fmtDurations is ds as one string.
func fmtDurations(ds []time.Duration) string {
	var s string
	for _, d := range ds {
		s += d.String() + " "
	}
	return s
}
