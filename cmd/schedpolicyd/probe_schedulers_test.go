package main

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/schedpolicyd/schedpolicyd/daemon"
	"github.com/schedpolicyd/schedpolicyd/internal/testutil"
)

// TestProbeSchedulers (issue 35, item 6): probe says whether EAS runs,
// whether a sched_ext scheduler is loaded and whether intel-lpmd runs,
// and what the daemon does beside them, from the sysfs and procfs roots
// it is given: the mainline RK3588 with its energy model, schedutil and
// sched_energy_aware 1, then with scx_lavd loaded.
func TestProbeSchedulers(t *testing.T) {
	for _, c := range []struct {
		overlay string
		lines   []string
		eas     string
		ops     string
	}{
		{"eas-on", []string{
			"schedulers:\n",
			"  EAS:         active\n",
			"               sched_energy_aware 1, energy model present (3 performance domains), governor schedutil, SMT no, asymmetric yes\n",
			"  sched_ext:   disabled\n",
			"  the daemon:  EAS places each task at wake-up on the CPU its energy model prices cheapest, within the task's cpuset",
		}, daemon.EASActive, ""},
		{"scx-lavd", []string{
			"  EAS:         inactive (sched_energy_aware is empty: the kernel says EAS is not possible now; the cpufreq governor is none (no cpufreq), not schedutil)\n",
			"               sched_energy_aware empty, energy model present (3 performance domains), governor none, SMT no, asymmetric yes\n",
			"  sched_ext:   enabled, ops lavd\n",
			"  the daemon:  sched_ext scheduler lavd replaces CFS for the tasks it runs; it keeps them within their cpusets",
		}, daemon.EASInactive, "lavd"},
	} {
		dir := t.TempDir()
		sys, proc := filepath.Join(dir, "sys"), filepath.Join(dir, "proc")
		testutil.CopyFixture(t, filepath.Join(topoFixtures, "rk3588-mainline"), sys)
		testutil.CopyFixture(t, "../../sysfs/testdata/schedulers/"+c.overlay+"/sys", sys)
		testutil.CopyFixture(t, "../../sysfs/testdata/schedulers/"+c.overlay+"/proc", proc)
		text, r := runProbe(t, "--sysfs-root", sys, "--proc-root", proc)
		for _, l := range c.lines {
			if !strings.Contains(text, l) {
				t.Errorf("%s: text lacks %q:\n%s", c.overlay, l, text)
			}
		}
		if r.Schedulers.EAS.State != c.eas || r.Schedulers.SchedExt.Ops != c.ops || r.Schedulers.IntelLpmd != "unknown: bus none" {
			t.Errorf("%s: --json schedulers %+v", c.overlay, r.Schedulers)
		}
	}
}
