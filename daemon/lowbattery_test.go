package daemon

import (
	"testing"
)

// TestLowBatteryConfig: low_battery is a percentage, 0 (off) to 100;
// New refuses 101 with an error naming the setting. (The tier itself:
// TestDeciderLowBatteryTier, TestDeciderLowBatteryOff.)
func TestLowBatteryConfig(t *testing.T) {
	if _, err := New(Config{SysfsRoot: t.TempDir(), LowBattery: 101}); err == nil || err.Error() != "low_battery 101: want a percentage 1 to 100, or 0 for off" {
		t.Errorf("low_battery 101: %v", err)
	}
	for _, lb := range []int{0, 1, 100} {
		if _, err := New(Config{SysfsRoot: t.TempDir(), LowBattery: lb}); err != nil {
			t.Errorf("low_battery %d: %v", lb, err)
		}
	}
}
