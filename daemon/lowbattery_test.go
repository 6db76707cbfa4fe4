package daemon

import (
	"fmt"
	"path/filepath"
	"testing"

	"github.com/schedpolicyd/schedpolicyd/internal/testutil"
	"github.com/schedpolicyd/schedpolicyd/policy"
)

// TestLowBatteryTier: automatic mode with power_aware_policy balance and
// low_battery 20 on a mock laptop. On battery at 50 % balance; below 20 %
// powersaving with the reason; back at 22 % still powersaving (hysteresis
// 5 points); at 25 % balance again; on AC at 10 % performance.
func TestLowBatteryTier(t *testing.T) {
	m := newMockLaptop(t)
	ps := filepath.Join(m.sys, "class/power_supply")
	testutil.Put(t, ps+"/BAT0/capacity", "50")
	d := m.startWith(t, func(c *Config) {
		c.LowBattery = 20
		c.DefaultKnob = &policy.Knob{PowerAware: policy.PowerAwareAuto, PowerAwarePolicy: policy.Balance}
	})
	want := func(what string, p policy.Policy, reason string) {
		t.Helper()
		testutil.Eventually(t, what, func() (bool, string) {
			s := d.Snapshot()
			return s.Policy == p && (reason == "" || s.PolicyReason == reason), fmt.Sprintf("%s: %s", s.Policy, s.PolicyReason)
		})
	}
	testutil.Put(t, ps+"/AC/online", "0")
	testutil.Put(t, ps+"/BAT0/status", "Discharging")
	want("battery at 50%: balance", policy.Balance, "")
	testutil.Put(t, ps+"/BAT0/capacity", "19")
	want("19%: powersaving", policy.Powersaving, "power_aware=1 (automatic), the machine runs on battery and the system batteries are at 19%, below low_battery 20% (powersaving until 25%): "+d.Snapshot().Reason)
	testutil.Put(t, ps+"/BAT0/capacity", "22")
	want("22%: still powersaving", policy.Powersaving, "power_aware=1 (automatic), the machine runs on battery and the system batteries are at 22%, not yet back 5 points above low_battery 20% (powersaving until 25%): "+d.Snapshot().Reason)
	testutil.Put(t, ps+"/BAT0/capacity", "25")
	want("25%: balance again", policy.Balance, "power_aware=1 (automatic) and the machine runs on battery: "+d.Snapshot().Reason)
	testutil.Put(t, ps+"/BAT0/capacity", "10")
	want("10% on battery: powersaving", policy.Powersaving, "")
	testutil.Put(t, ps+"/AC/online", "1")
	testutil.Put(t, ps+"/BAT0/status", "Charging")
	want("10% on AC: performance", policy.Performance, "")
}

// TestLowBatteryOff: low_battery 0 never overrides balance.
func TestLowBatteryOff(t *testing.T) {
	m := newMockLaptop(t)
	ps := filepath.Join(m.sys, "class/power_supply")
	testutil.Put(t, ps+"/BAT0/capacity", "5")
	testutil.Put(t, ps+"/AC/online", "0")
	testutil.Put(t, ps+"/BAT0/status", "Discharging")
	d := m.startWith(t, func(c *Config) {
		c.DefaultKnob = &policy.Knob{PowerAware: policy.PowerAwareAuto, PowerAwarePolicy: policy.Balance}
	})
	if s := d.Snapshot(); s.Policy != policy.Balance {
		t.Errorf("low_battery 0 at 5%%: %s (%s), want balance", s.Policy, s.PolicyReason)
	}
	if _, err := New(Config{SysfsRoot: m.sys, LowBattery: 101}); err == nil {
		t.Errorf("low_battery 101 accepted")
	}
}
