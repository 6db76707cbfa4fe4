package acpi

import (
	"path/filepath"
	"testing"

	"github.com/schedpolicyd/schedpolicyd/internal/testutil"
	"github.com/schedpolicyd/schedpolicyd/sysfs"
)

// TestBatteryPercent: energy_now/energy_full summed over the system
// batteries, else their mean capacity; a peripheral's battery never
// counts; nothing readable is -1.
func TestBatteryPercent(t *testing.T) {
	for _, tc := range []struct {
		name  string
		files map[string]string
		want  int
	}{
		{"no supplies", nil, -1},
		{"capacity only", map[string]string{"BAT0/type": "Battery", "BAT0/capacity": "17"}, 17},
		{"energy wins over capacity", map[string]string{"BAT0/type": "Battery", "BAT0/capacity": "90",
			"BAT0/energy_now": "9000000", "BAT0/energy_full": "45000000"}, 20},
		{"two batteries by energy", map[string]string{
			"BAT0/type": "Battery", "BAT0/energy_now": "10000000", "BAT0/energy_full": "20000000",
			"BAT1/type": "Battery", "BAT1/energy_now": "0", "BAT1/energy_full": "30000000"}, 20},
		{"one lacks energy: mean capacity", map[string]string{
			"BAT0/type": "Battery", "BAT0/capacity": "10", "BAT0/energy_now": "1", "BAT0/energy_full": "10",
			"BAT1/type": "Battery", "BAT1/capacity": "31"}, 20},
		{"mouse battery ignored", map[string]string{"BAT0/type": "Battery", "BAT0/capacity": "50",
			"hidpp_battery_0/type": "Battery", "hidpp_battery_0/scope": "Device", "hidpp_battery_0/capacity": "1"}, 50},
		{"no capacity, no energy", map[string]string{"BAT0/type": "Battery", "BAT0/status": "Discharging"}, -1},
		{"capacity above 100 clamped", map[string]string{"BAT0/type": "Battery", "BAT0/energy_now": "110", "BAT0/energy_full": "100"}, 100},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			testutil.Put(t, filepath.Join(root, "class/power_supply/.keep"), "")
			for f, v := range tc.files {
				testutil.Put(t, filepath.Join(root, "class/power_supply", f), v)
			}
			fs, err := sysfs.NewFS(root)
			if err != nil {
				t.Fatal(err)
			}
			ps, err := fs.PowerSupplies()
			if err != nil {
				t.Fatal(err)
			}
			if got := BatteryPercent(fs, ps); got != tc.want {
				t.Errorf("BatteryPercent = %d, want %d", got, tc.want)
			}
		})
	}
}
