package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/schedpolicyd/schedpolicyd/internal/testutil"
	"github.com/schedpolicyd/schedpolicyd/sysfs"
)

// eppValues is every policy's EPP of the mock machine, "N=value", and
// the platform profile; a policy whose file is a directory reads "dir".
func eppValues(t *testing.T, sys string) string {
	t.Helper()
	var out []string
	for n := 0; n < 16; n++ {
		f := filepath.Join(sys, fmt.Sprintf("devices/system/cpu/cpufreq/policy%d/energy_performance_preference", n))
		if fi, err := os.Stat(f); err == nil && fi.IsDir() {
			out = append(out, fmt.Sprintf("%d=dir", n))
			continue
		}
		out = append(out, fmt.Sprintf("%d=%s", n, testutil.ReadTrim(t, f)))
	}
	return strings.Join(out, " ") + " pp=" + testutil.ReadTrim(t, filepath.Join(sys, sysfs.PlatformProfileFile))
}

// eppLine is eppValues with the P-cores' policies 0-7 at p07, policy9 a
// directory, the others at v and the platform profile at pp.
func eppLine(p07, v, pp string) string {
	var out []string
	for n := 0; n < 16; n++ {
		switch {
		case n < 8:
			out = append(out, fmt.Sprintf("%d=%s", n, p07))
		case n == 9:
			out = append(out, "9=dir")
		default:
			out = append(out, fmt.Sprintf("%d=%s", n, v))
		}
	}
	return strings.Join(out, " ") + " pp=" + pp
}

// TestEnergyPrefsRealBinary runs the real daemon on a mock i7-1260P
// (intel_pstate, pepc's adl0 EPP) whose P-cores' policies run the
// performance governor (intel_pstate refuses any other EPP there with
// EBUSY: those are not asked), whose policy9's EPP file is a directory
// (it cannot be read or written, as a file the kernel refuses — a
// stand-in: tmpfs has no EBUSY to give, and root writes a read-only
// file), with a ThinkPad's platform profile, on a private bus where no
// systemd runs (no knob daemon can be installed). On battery
// (powersaving) the other policies get power and the profile low-power,
// recorded first; after kill -9 and a restart on AC the start puts back
// the values the dead run found and says so; back on battery and a clean
// stop, the values found are back and state.json holds no record.
func TestEnergyPrefsRealBinary(t *testing.T) {
	testutil.NeedBusDaemon(t)
	bin := buildDaemon(t)
	addr := testutil.StartBus(t, testutil.BusOptions{}).Addr
	sys := mockMachine(t, "ac-offline-battery-unknown")
	testutil.CopyFixture(t, "../../sysfs/testdata/energypref/intel-performance-governor", sys)
	testutil.CopyFixture(t, "../../sysfs/testdata/energypref/thinkpad-dytc", sys)
	p9 := filepath.Join(sys, "devices/system/cpu/cpufreq/policy9/energy_performance_preference")
	if err := os.Remove(p9); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(p9, 0o755); err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()
	stateDir := filepath.Join(tmp, "state")
	args := []string{"--sysfs-root", sys, "--cgroup-root", "none", "--tree-dir", filepath.Join(tmp, "tree"), "--tree-backend", "plain",
		"--state-dir", stateDir, "--bus", addr, "--events", "fsnotify", "--debounce", "50ms", "--recheck-interval", "1s",
		"--power-profiles-api=false", "--log-level", "debug", "--config", emptyConf(t)}
	found := eppLine("performance", "balance_performance", "balanced")
	if got := eppValues(t, sys); got != found {
		t.Fatalf("the mock machine: %s", got)
	}
	wait := func(what, want string) {
		t.Helper()
		testutil.WaitFor(t, what, 15*time.Second, func() (bool, string) {
			got := eppValues(t, sys)
			return got == want, got
		})
	}

	p1 := startDaemonProc(t, bin, args...)
	onBattery(t, sys)
	wait("powersaving's values", eppLine("performance", "power", "low-power"))
	p1.logHas(t, "the governor's refusal said", "intel_pstate refuses any preference but performance under the performance governor (EBUSY)")
	p1.logHas(t, "policy9 said", `file=devices/system/cpu/cpufreq/policy9/energy_performance_preference why="cannot be read`)
	testutil.WaitFor(t, "the records applied in state.json", 10*time.Second, func() (bool, string) {
		recs, _ := savedState(t, stateDir)["energy_prefs"].([]any)
		applied := 0
		for _, r := range recs {
			if m, _ := r.(map[string]any); m["applied"] != nil && m["pending"] == nil {
				applied++
			}
		}
		return len(recs) == 8 && applied == 8, fmt.Sprintf("%d records, %d applied", len(recs), applied)
	})
	p1.kill9(t)
	if got := eppValues(t, sys); got != eppLine("performance", "power", "low-power") {
		t.Fatalf("after kill -9: %s; the test assumes nothing was restored", got)
	}

	onAC(t, sys)
	p2 := startDaemonProc(t, bin, args...)
	if got := eppValues(t, sys); got != found {
		t.Errorf("after the restart on AC (READY=1): %s\nwant the values found %s", got, found)
	}
	p2.logHas(t, "the unfinished stop logged", `found="8 energy preferences"`)
	p2.logHas(t, "the recovery logged", "energy preferences restored to the values a previous run that did not stop cleanly found")
	onBattery(t, sys)
	wait("powersaving's values again", eppLine("performance", "power", "low-power"))
	p2.stop(t)
	if got := eppValues(t, sys); got != found {
		t.Errorf("after the stop: %s\nwant %s", got, found)
	}
	if recs, ok := savedState(t, stateDir)["energy_prefs"]; ok {
		t.Errorf("state.json after the stop holds %v", recs)
	}
}
