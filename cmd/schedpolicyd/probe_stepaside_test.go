package main

import (
	"path/filepath"
	"testing"

	"github.com/schedpolicyd/schedpolicyd/daemon/bus"
	"github.com/schedpolicyd/schedpolicyd/internal/testutil"
)

// TestProbeStepAside: probe shows the evidence of other owners — amd_pstate
// dynamic EPP managing boost, the kernel's own sched_policy knob — and the
// power-profiles mode (default auto).
func TestProbeStepAside(t *testing.T) {
	root := filepath.Join(t.TempDir(), "sys")
	testutil.CopyFixture(t, "../../sysfs/testdata/topology/laptop-4c8t", root)
	testutil.Put(t, filepath.Join(root, "devices/system/cpu/amd_pstate/dynamic_epp"), "1")
	testutil.Put(t, filepath.Join(root, "devices/system/cpu/sched_policy/current_sched_policy"), "balance")
	r := probeJSON(t, buildDaemon(t), root)
	if want := "the kernel's amd_pstate dynamic EPP (devices/system/cpu/amd_pstate/dynamic_epp = 1)"; r.BoostOwner != want {
		t.Errorf("boost_owner = %q, want %q", r.BoostOwner, want)
	}
	if r.KernelKnob != "balance" {
		t.Errorf("kernel_knob = %q, want balance", r.KernelKnob)
	}
	if r.PowerProfiles.Mode != bus.PowerProfilesAuto {
		t.Errorf("power_profiles.mode = %q, want auto", r.PowerProfiles.Mode)
	}
	plain := filepath.Join(t.TempDir(), "sys")
	testutil.CopyFixture(t, "../../sysfs/testdata/topology/laptop-4c8t", plain)
	if r := probeJSON(t, buildDaemon(t), plain); r.BoostOwner != "" || r.KernelKnob != "" {
		t.Errorf("no evidence: boost_owner %q, kernel_knob %q", r.BoostOwner, r.KernelKnob)
	}
}
