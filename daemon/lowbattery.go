package daemon

import (
	"fmt"
)

// LowBatteryHysteresis is how many percentage points above
// Config.LowBattery the charge must be back before the low-battery tier
// ends, so a charge that wavers around the threshold does not flip the
// policy.
const LowBatteryHysteresis = 5

// setBatteryPercent records the system batteries' charge (percent, -1
// unknown) and enters or leaves the low-battery tier: it starts when the
// charge is known and below the LowBattery setting, and ends once it is
// at least LowBattery + LowBatteryHysteresis, unknown, or the tier is off
// (LowBattery 0). It applies only on battery in automatic mode (decide).
// changed reports that the tier began or ended; the caller says so and
// decides again.
func (c *decider) setBatteryPercent(pct int) (changed bool) {
	c.batteryPct = pct
	was := c.lowBattery
	switch {
	case c.set.LowBattery == 0 || pct < 0:
		c.lowBattery = false
	case pct < c.set.LowBattery:
		c.lowBattery = true
	case pct >= c.set.LowBattery+LowBatteryHysteresis:
		c.lowBattery = false
	}
	return was != c.lowBattery
}

// lowBatteryReason is the policy's reason while the tier is in force: the
// charge, the threshold and, within the hysteresis, that it is not yet
// back at LowBattery + LowBatteryHysteresis.
func (c *decider) lowBatteryReason() string {
	lb := c.set.LowBattery
	where := fmt.Sprintf("below low_battery %d%%", lb)
	if c.batteryPct >= lb {
		where = fmt.Sprintf("not yet back %d points above low_battery %d%%", LowBatteryHysteresis, lb)
	}
	return fmt.Sprintf("power_aware=1 (automatic), the machine runs on battery and the system batteries are at %d%%, %s (powersaving until %d%%): %s",
		c.batteryPct, where, lb+LowBatteryHysteresis, c.power.Reason)
}
