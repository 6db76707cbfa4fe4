package statefile

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/schedpolicyd/schedpolicyd/policy"
)

// TestStatePrefs: the energy preference records survive a save and a
// load; records naming anything but a preference file, with a bad value,
// without an original or twice are dropped alone (PrefsErr says why) and
// the rest of the file is used; SaveState refuses them.
func TestStatePrefs(t *testing.T) {
	dir := t.TempDir()
	want := State{Knob: policy.DefaultKnob(), Prefs: []PrefRecord{
		{File: "devices/system/cpu/cpufreq/policy0/energy_performance_preference", Original: "balance_performance", Applied: "power"},
		{File: "firmware/acpi/platform_profile", Original: "balanced", Pending: "low-power"},
	}}
	if err := SaveState(dir, want); err != nil {
		t.Fatal(err)
	}
	got, err := LoadState(dir)
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("got %+v, %v; want %+v", got, err, want)
	}
	if u := got.Unfinished(); u != "2 energy preferences" {
		t.Errorf("Unfinished = %q", u)
	}

	const head = `{"version": 2, "power_aware": 2, "power_aware_policy": "balance", "cgroups": [{"path": "/a", "original_cpus": "1", "applied_cpus": "0"}], "energy_prefs": `
	for name, prefs := range map[string]string{
		"another file":     `[{"file": "devices/system/cpu/cpufreq/boost", "original": "1"}]`,
		"escaping":         `[{"file": "devices/system/cpu/cpufreq/policy0/../../../../../etc/passwd", "original": "x"}]`,
		"absolute":         `[{"file": "/sys/firmware/acpi/platform_profile", "original": "balanced"}]`,
		"bad value":        `[{"file": "firmware/acpi/platform_profile", "original": "balanced\nx"}]`,
		"no original":      `[{"file": "firmware/acpi/platform_profile", "original": "", "applied": "quiet"}]`,
		"a file twice":     `[{"file": "firmware/acpi/platform_profile", "original": "balanced"}, {"file": "firmware/acpi/platform_profile", "original": "quiet"}]`,
		"long value":       `[{"file": "firmware/acpi/platform_profile", "original": "` + strings.Repeat("a", 33) + `"}]`,
		"upper-case value": `[{"file": "firmware/acpi/platform_profile", "original": "Balanced"}]`,
	} {
		if err := os.WriteFile(filepath.Join(dir, StateFile), []byte(head+prefs+"}"), 0o644); err != nil {
			t.Fatal(err)
		}
		st, err := LoadState(dir)
		if err != nil || st.PrefsErr == nil || st.Prefs != nil || len(st.Cgroups) != 1 || st.Knob.PowerAware != 2 {
			t.Errorf("%s: %+v, %v; want the records alone dropped, with a reason", name, st, err)
		}
	}
	if err := SaveState(t.TempDir(), State{Knob: policy.DefaultKnob(), Prefs: []PrefRecord{{File: "devices/system/cpu/cpufreq/boost", Original: "1"}}}); err == nil {
		t.Errorf("SaveState of a record of another file succeeded")
	}
}
