package daemon

import (
	"fmt"

	"github.com/sirupsen/logrus"
)

// LowBatteryHysteresis is how many percentage points above
// Config.LowBattery the charge must be back before the low-battery tier
// ends, so a charge that wavers around the threshold does not flip the
// policy.
const LowBatteryHysteresis = 5

// setBatteryPercent records the system batteries' charge (percent, -1
// unknown) and enters or leaves the low-battery tier: it starts when the
// charge is known and below Config.LowBattery, and ends once it is at
// least LowBattery + LowBatteryHysteresis, unknown, or the tier is off
// (LowBattery 0). It applies only on battery in automatic mode (decide);
// the caller recomputes.
func (d *Daemon) setBatteryPercent(pct int) {
	d.batteryPct = pct
	was := d.lowBattery
	switch {
	case d.cfg.LowBattery == 0 || pct < 0:
		d.lowBattery = false
	case pct < d.cfg.LowBattery:
		d.lowBattery = true
	case pct >= d.cfg.LowBattery+LowBatteryHysteresis:
		d.lowBattery = false
	}
	if was != d.lowBattery {
		d.log.WithFields(logrus.Fields{"battery_percent": pct, "low_battery": d.cfg.LowBattery, "in_force": d.lowBattery}).Info("low-battery tier changed")
	}
}

// lowBatteryReason is the policy's reason while the tier is in force: the
// charge, the threshold and, within the hysteresis, that it is not yet
// back at LowBattery + LowBatteryHysteresis.
func (d *Daemon) lowBatteryReason() string {
	where := fmt.Sprintf("below low_battery %d%%", d.cfg.LowBattery)
	if d.batteryPct >= d.cfg.LowBattery {
		where = fmt.Sprintf("not yet back %d points above low_battery %d%%", LowBatteryHysteresis, d.cfg.LowBattery)
	}
	return fmt.Sprintf("power_aware=1 (automatic), the machine runs on battery and the system batteries are at %d%%, %s (powersaving until %d%%): %s",
		d.batteryPct, where, d.cfg.LowBattery+LowBatteryHysteresis, d.power.Reason)
}
