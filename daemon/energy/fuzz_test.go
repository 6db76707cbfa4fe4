package energy

import (
	"math"
	"testing"
	"time"

	"github.com/schedpolicyd/schedpolicyd/acpi"
	"github.com/schedpolicyd/schedpolicyd/daemon/statefile"
	"github.com/schedpolicyd/schedpolicyd/internal/testutil"
	"github.com/schedpolicyd/schedpolicyd/policy"
)

// FuzzEnergyReadings: whatever two RAPL readings, two battery readings
// and the time between them hold, the meter does not panic and its totals
// stay finite and ≥ 0, with no more seconds than passed.
func FuzzEnergyReadings(f *testing.F) {
	f.Add("1000", "2000", "262143328850", "15000000", "7210000", "5000000", int64(time.Second))
	f.Add("262143328849", "5", "262143328850", "0", "-1", "18446744073709551616", int64(0))
	f.Add("5", "4", "5", "99999999999999999999", "9223372036854775807", "-9223372036854775808", int64(time.Hour))
	f.Add("x", "", "0", "", "1e3", "0x10", int64(-1))
	f.Fuzz(func(t *testing.T, e1, e2, rng, limit, p1, p2 string, dt int64) {
		if dt < 0 || dt > int64(1000*time.Hour) {
			return
		}
		for _, rapl := range []bool{true, false} {
			mm := newMeterMachine(t)
			c := newClock()
			if rapl {
				d := mm.root + "/class/powercap/intel-rapl:0/"
				for f, v := range map[string]string{"energy_uj": e1, "max_energy_range_uj": rng, "constraint_0_power_limit_uw": limit, "name": "package-0"} {
					putRaw(t, d+f, v)
				}
			} else {
				mm.supply("BAT0", map[string]string{"type": "Battery", "status": "Discharging"})
				putRaw(t, mm.root+"/class/power_supply/BAT0/power_now", p1)
			}
			m, _ := mm.meter(c)
			m.Start(key(policy.Powersaving, acpi.Battery), true)
			c.add(time.Duration(dt))
			if rapl {
				putRaw(t, mm.root+"/class/powercap/intel-rapl:0/energy_uj", e2)
			} else {
				putRaw(t, mm.root+"/class/power_supply/BAT0/power_now", p2)
			}
			m.CloseSegment(key(policy.Performance, acpi.AC), false)
			m.GuardAfter()
			for _, tot := range m.Totals() {
				if tot.Joules < 0 || tot.Seconds < 0 || math.IsNaN(tot.Joules) || math.IsInf(tot.Joules, 0) || tot.Seconds > time.Duration(dt).Seconds()+1e-9 {
					t.Fatalf("total %+v after %v", tot, time.Duration(dt))
				}
				if err := statefile.ValidEnergyTotal(tot); err != nil {
					t.Fatalf("total %+v would not load back: %v", tot, err)
				}
			}
		}
	})
}

// putRaw writes v as it is (no newline), as a driver might hold it.
func putRaw(t *testing.T, path, v string) {
	t.Helper()
	testutil.WriteFile(t, path, v)
}
