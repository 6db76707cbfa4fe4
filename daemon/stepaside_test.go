package daemon

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/schedpolicyd/schedpolicyd/acpi"
	"github.com/schedpolicyd/schedpolicyd/daemon/statefile"
	"github.com/schedpolicyd/schedpolicyd/internal/testutil"
	"github.com/schedpolicyd/schedpolicyd/policy"
	"github.com/schedpolicyd/schedpolicyd/sysfs"
)

func waitPolicy(t *testing.T, d *Daemon, what string, src acpi.Source, p policy.Policy) {
	t.Helper()
	testutil.Eventually(t, what, func() (bool, string) {
		s := d.Snapshot()
		return s.PowerSource == src && s.Policy == p, string(s.PowerSource) + " " + string(s.Policy)
	})
}

// TestStepAsideBoostDynamicEPP: with amd_pstate dynamic EPP on,
// boost_on_battery "off" leaves boost alone on battery; with it off (the
// control) the same unplug switches boost off.
func TestStepAsideBoostDynamicEPP(t *testing.T) {
	m := newMockLaptop(t)
	boost := filepath.Join(m.sys, "devices/system/cpu/cpufreq/boost")
	epp := filepath.Join(m.sys, amdPstateDynamicEPP)
	testutil.Put(t, boost, "1")
	testutil.Put(t, epp, "1")
	d := m.startWith(t, func(c *Config) { c.BoostOnBattery = "off" })
	m.plug(t, false)
	waitPolicy(t, d, "on battery", acpi.Battery, policy.Powersaving)
	if got := testutil.ReadTrim(t, boost); got != "1" {
		t.Errorf("boost with dynamic EPP on = %q, want untouched 1", got)
	}
	if st, _ := statefile.LoadState(m.state); len(st.Boost) != 0 {
		t.Errorf("a boost setting was saved although boost is not ours: %+v", st.Boost)
	}
	testutil.Put(t, epp, "0")
	m.plug(t, true)
	waitPolicy(t, d, "on AC", acpi.AC, policy.Performance)
	m.plug(t, false)
	testutil.Eventually(t, "boost off once dynamic EPP is off", func() (bool, string) {
		got := testutil.ReadTrim(t, boost)
		return got == "0", got
	})
}

// TestBoostOwner: the evidence BoostOwner reports, for probe too.
func TestBoostOwner(t *testing.T) {
	root := t.TempDir()
	fs, err := sysfs.NewFS(root)
	if err != nil {
		t.Fatal(err)
	}
	if o := BoostOwner(fs, "net.hadess.PowerProfiles (:1.4)"); o != "" {
		t.Errorf("no evidence: %q", o)
	}
	testutil.Put(t, filepath.Join(root, scalingDriver0), "amd-pstate-epp")
	if o := BoostOwner(fs, ""); o != "" {
		t.Errorf("amd-pstate without a power-profiles daemon: %q", o)
	}
	if o, want := BoostOwner(fs, "net.hadess.PowerProfiles (:1.4)"), "the power-profiles daemon net.hadess.PowerProfiles (:1.4), whose amd-pstate driver manages boost (devices/system/cpu/cpu0/cpufreq/scaling_driver = amd-pstate-epp)"; o != want {
		t.Errorf("PPD with amd-pstate: %q, want %q", o, want)
	}
	testutil.Put(t, filepath.Join(root, scalingDriver0), "intel_pstate")
	if o := BoostOwner(fs, "net.hadess.PowerProfiles (:1.4)"); o != "" {
		t.Errorf("PPD with intel_pstate: %q", o)
	}
	testutil.Put(t, filepath.Join(root, amdPstateDynamicEPP), "1")
	if o, want := BoostOwner(fs, ""), "the kernel's amd_pstate dynamic EPP (devices/system/cpu/amd_pstate/dynamic_epp = 1)"; o != want {
		t.Errorf("dynamic EPP: %q, want %q", o, want)
	}
}

// TestStepAsideKernelKnob: the real sched_policy knob is written while it
// holds our last value; once another writer changes it we leave it, and
// take it up again when it holds our value again. The knob changes go
// through the tree's write path, which returns once the loop applied them.
func TestStepAsideKernelKnob(t *testing.T) {
	m := newMockLaptop(t)
	knob := filepath.Join(m.sys, "devices/system/cpu/sched_policy/current_sched_policy")
	testutil.Put(t, knob, "balance")
	d := m.startWith(t, nil)
	if got := testutil.ReadTrim(t, knob); got != "performance" {
		t.Fatalf("kernel knob at start = %q, want performance written", got)
	}
	set := func(v string) {
		t.Helper()
		if err := d.writeFile(context.Background(), filePowerAware, []byte(v), "test"); err != nil {
			t.Fatal(err)
		}
	}
	set("2")
	if got := testutil.ReadTrim(t, knob); got != "powersaving" {
		t.Fatalf("kernel knob = %q, want powersaving written", got)
	}
	testutil.Put(t, knob, "balance") // another writer
	set("0")
	if s, got := d.Snapshot(), testutil.ReadTrim(t, knob); s.Policy != policy.Performance || got != "balance" {
		t.Errorf("policy %s, kernel knob %q; want performance and the other writer's balance left", s.Policy, got)
	}
	testutil.Put(t, knob, "powersaving") // our last value again
	set("2")                             // powersaving: nothing to write
	set("0")
	if got := testutil.ReadTrim(t, knob); got != "performance" {
		t.Errorf("kernel knob = %q, want performance written again", got)
	}
}
