package daemon

import "github.com/sirupsen/logrus"

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
