package sysfs

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/schedpolicyd/schedpolicyd/internal/testutil"
)

// TestEPPPolicies reads the i7-1260P's 16 intel_pstate policies (pepc's
// adl0) in numeric order with their list, governor and driver; a policy
// without a list (an inactive one) is left out; WritePref and ReadPref
// accept only the preference files and preference values.
func TestEPPPolicies(t *testing.T) {
	root := t.TempDir()
	testutil.CopyFixture(t, "testdata/energypref/intel-adl-p-i7-1260p", root)
	testutil.CopyFixture(t, "testdata/energypref/asus-wmi-quiet", root)
	os.Remove(filepath.Join(root, "devices/system/cpu/cpufreq/policy15", EPPChoicesFile))
	fsys, err := NewFS(root)
	if err != nil {
		t.Fatal(err)
	}
	pols, err := fsys.EPPPolicies()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range pols {
		names = append(names, p.Name)
	}
	if got := strings.Join(names, " "); got != "policy0 policy1 policy2 policy3 policy4 policy5 policy6 policy7 policy8 policy9 policy10 policy11 policy12 policy13 policy14" {
		t.Errorf("policies %s", got)
	}
	p := pols[10]
	if p.File != "devices/system/cpu/cpufreq/policy10/energy_performance_preference" || p.CPUs != "10" || p.Governor != "powersave" || p.Driver != "intel_pstate" ||
		strings.Join(p.Available, " ") != "default performance balance_performance balance_power power" || !p.Offers("balance_power") || p.Offers("quiet") {
		t.Errorf("policy10: %+v", p)
	}
	if pp := fsys.PlatformProfile(); !pp.Present || strings.Join(pp.Choices, " ") != "quiet balanced performance" || pp.Offers("low-power") {
		t.Errorf("platform profile: %+v", pp)
	}
	if err := fsys.WritePref(p.File, "power"); err != nil {
		t.Fatal(err)
	}
	if v, err := fsys.ReadPref(p.File); err != nil || v != "power" {
		t.Errorf("ReadPref = %q, %v", v, err)
	}
	for _, c := range []struct{ file, v string }{
		{"devices/system/cpu/cpufreq/boost", "1"},
		{"devices/system/cpu/cpufreq/policy1/../policy2/energy_performance_preference", "power"},
		{"/sys/firmware/acpi/platform_profile", "quiet"},
		{PlatformProfileFile, "quiet\nperformance"},
		{PlatformProfileFile, ""},
	} {
		if err := fsys.WritePref(c.file, c.v); err == nil {
			t.Errorf("WritePref(%q, %q) succeeded", c.file, c.v)
		}
	}
	if _, err := fsys.ReadPref("devices/system/cpu/online"); err == nil {
		t.Error("ReadPref of another file succeeded")
	}
	empty, _ := NewFS(t.TempDir())
	if pols, err := empty.EPPPolicies(); err != nil || len(pols) != 0 {
		t.Errorf("no cpufreq: %v, %v", pols, err)
	}
	if pp := empty.PlatformProfile(); pp.Present {
		t.Errorf("no platform profile: %+v", pp)
	}
	if _, err := empty.ReadPref(PlatformProfileFile); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("ReadPref without the file: %v", err)
	}
}
