package energy

import (
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	logtest "github.com/sirupsen/logrus/hooks/test"

	"github.com/schedpolicyd/schedpolicyd/acpi"
	"github.com/schedpolicyd/schedpolicyd/daemon/snapshot"
	"github.com/schedpolicyd/schedpolicyd/internal/testutil"
	"github.com/schedpolicyd/schedpolicyd/policy"
	"github.com/schedpolicyd/schedpolicyd/sysfs"
)

// The RAPL counter range of Intel parts (2³² units of 61.04 µJ), µJ.
const raplRange = 262143328850

// fakeClock is the meter's time: it moves only when the test says.
type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time          { return c.t }
func (c *fakeClock) add(d time.Duration)     { c.t = c.t.Add(d) }
func newClock() *fakeClock                   { return &fakeClock{t: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)} }
func key(p policy.Policy, s acpi.Source) Key { return Key{p, s} }

// meterMachine is a mock sysfs root the meter reads, built in code (zone
// names hold ":", which committed file names may not).
type meterMachine struct {
	t    *testing.T
	root string
	fs   sysfs.FS
}

func newMeterMachine(t *testing.T) *meterMachine {
	t.Helper()
	root := t.TempDir()
	fsys, err := sysfs.NewFS(root)
	if err != nil {
		t.Fatal(err)
	}
	return &meterMachine{t: t, root: root, fs: fsys}
}

// zone creates or updates a RAPL zone: name attribute, counter (µJ),
// range and power limit (µW; 0 none).
func (m *meterMachine) zone(zone, name string, energy, rng, limitUW uint64) {
	d := filepath.Join(m.root, "class/powercap", zone)
	testutil.Put(m.t, d+"/name", name)
	testutil.Put(m.t, d+"/max_energy_range_uj", strconv.FormatUint(rng, 10))
	m.counter(zone, energy)
	if limitUW > 0 {
		testutil.Put(m.t, d+"/constraint_0_power_limit_uw", strconv.FormatUint(limitUW, 10))
	}
}

func (m *meterMachine) counter(zone string, energy uint64) {
	testutil.Put(m.t, filepath.Join(m.root, "class/powercap", zone, "energy_uj"), strconv.FormatUint(energy, 10))
}

// battery writes a supply's attributes (name → value; "" removes one).
func (m *meterMachine) supply(name string, attrs map[string]string) {
	for a, v := range attrs {
		p := filepath.Join(m.root, "class/power_supply", name, a)
		if v == "" {
			os.Remove(p)
			continue
		}
		testutil.Put(m.t, p, v)
	}
}

func (m *meterMachine) meter(c *fakeClock, saved ...snapshot.EnergyTotal) (*Meter, *logtest.Hook) {
	log, hook := logtest.NewNullLogger()
	log.SetLevel(logrus.DebugLevel)
	return NewMeter(m.fs, log, c.now, saved), hook
}

func checkTotals(t *testing.T, m *Meter, want []snapshot.EnergyTotal) {
	t.Helper()
	got := m.Totals()
	if len(want) == 0 {
		want = nil
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("totals:\n got %+v\nwant %+v", got, want)
	}
}

// TestEnergyRAPLSegments: each segment's counter delta goes to the policy
// and power source in force; psys and subzones are not added to the
// packages; every zone keeps its own total.
func TestEnergyRAPLSegments(t *testing.T) {
	mm := newMeterMachine(t)
	mm.zone("intel-rapl:0", "package-0", 10_000_000, raplRange, 15_000_000)
	mm.zone("intel-rapl:0:0", "core", 4_000_000, raplRange, 0)
	mm.zone("intel-rapl:1", "package-1", 20_000_000, raplRange, 15_000_000)
	mm.zone("intel-rapl:2", "psys", 90_000_000, raplRange, 0)
	c := newClock()
	m, _ := mm.meter(c)
	m.Start(key(policy.Performance, acpi.AC), false)
	if m.Source() != snapshot.EnergySourceRAPL {
		t.Fatalf("source %q, want rapl", m.Source())
	}

	c.add(2 * time.Second)
	mm.counter("intel-rapl:0", 11_500_000) // +1.5 J
	mm.counter("intel-rapl:0:0", 5_000_000)
	mm.counter("intel-rapl:1", 20_250_000) // +0.25 J
	mm.counter("intel-rapl:2", 99_000_000) // +9 J, not added
	if !m.CloseSegment(key(policy.Powersaving, acpi.Battery), true) {
		t.Fatal("CloseSegment reported no change")
	}
	checkTotals(t, m, []snapshot.EnergyTotal{{Policy: policy.Performance, PowerSource: acpi.AC, Joules: 1.75, Seconds: 2}})

	c.add(4 * time.Second)
	mm.counter("intel-rapl:0", 14_500_000) // +3 J
	mm.counter("intel-rapl:1", 21_250_000) // +1 J
	m.CloseSegment(key(policy.Performance, acpi.AC), false)
	c.add(1 * time.Second)
	mm.counter("intel-rapl:0", 15_000_000) // +0.5 J, into the existing total
	m.CloseSegment(key(policy.Performance, acpi.AC), false)
	checkTotals(t, m, []snapshot.EnergyTotal{{Policy: policy.Performance, PowerSource: acpi.AC, Joules: 2.25, Seconds: 3}, {Policy: policy.Powersaving, PowerSource: acpi.Battery, Joules: 4, Seconds: 4}})
	if got, want := m.Zones(), []Zone{
		{"intel-rapl:0", "package-0", 5}, {"intel-rapl:0:0", "core", 1}, {"intel-rapl:1", "package-1", 1.25}, {"intel-rapl:2", "psys", 9},
	}; !reflect.DeepEqual(got, want) {
		t.Errorf("zones %+v, want %+v", got, want)
	}
}

// TestEnergyRAPLWrap: a counter that passes max_energy_range_uj starts
// again at 0; the energy across the wrap is range − previous + current.
func TestEnergyRAPLWrap(t *testing.T) {
	mm := newMeterMachine(t)
	mm.zone("intel-rapl:0", "package-0", raplRange-1_000_000, raplRange, 64_000_000)
	c := newClock()
	m, hook := mm.meter(c)
	m.Start(key(policy.Balance, acpi.Unknown), false)
	c.add(3 * time.Second)
	mm.counter("intel-rapl:0", 500_000) // 1 J to the top, 0.5 J after it
	m.CloseSegment(key(policy.Balance, acpi.Unknown), false)
	checkTotals(t, m, []snapshot.EnergyTotal{{Policy: policy.Balance, PowerSource: acpi.Unknown, Joules: 1.5, Seconds: 3}})
	for _, e := range hook.AllEntries() {
		if e.Level <= logrus.WarnLevel {
			t.Errorf("a wrap is normal, yet: %s %v", e.Message, e.Data)
		}
	}
}

// TestEnergyRAPLBackwards: a counter below its previous value that no wrap
// explains (262 kJ in 10 s) went backwards: that interval is not counted,
// with a warning, and the next one is, from the new value.
func TestEnergyRAPLBackwards(t *testing.T) {
	mm := newMeterMachine(t)
	mm.zone("intel-rapl:0", "package-0", 5_000_000_000, raplRange, 64_000_000)
	c := newClock()
	m, hook := mm.meter(c)
	m.Start(key(policy.Performance, acpi.AC), false)
	c.add(10 * time.Second)
	mm.counter("intel-rapl:0", 1_000_000_000) // reset, e.g. by firmware at resume
	m.CloseSegment(key(policy.Performance, acpi.AC), false)
	checkTotals(t, m, nil)
	warned := false
	for _, e := range hook.AllEntries() {
		if e.Level == logrus.WarnLevel && strings.Contains(e.Data["why"].(string), "went backwards") {
			warned = true
		}
	}
	if !warned {
		t.Errorf("no warning about the counter; log: %v", hook.AllEntries())
	}

	c.add(5 * time.Second)
	mm.counter("intel-rapl:0", 1_002_000_000) // +2 J
	m.CloseSegment(key(policy.Performance, acpi.AC), false)
	checkTotals(t, m, []snapshot.EnergyTotal{{Policy: policy.Performance, PowerSource: acpi.AC, Joules: 2, Seconds: 5}})

	// A forward jump no zone can draw (100 kJ in 1 s) is no measurement
	// either.
	c.add(1 * time.Second)
	mm.counter("intel-rapl:0", 101_002_000_000)
	m.CloseSegment(key(policy.Performance, acpi.AC), false)
	checkTotals(t, m, []snapshot.EnergyTotal{{Policy: policy.Performance, PowerSource: acpi.AC, Joules: 2, Seconds: 5}})

	// After hours, the same wrap is plausible (≤ 1 kW on average).
	mm.counter("intel-rapl:0", raplRange-250_000)
	m.Advance(false)
	c.add(time.Hour)
	mm.counter("intel-rapl:0", 10_000_000) // 0.25 J to the top, 10 J after it
	m.CloseSegment(key(policy.Performance, acpi.AC), false)
	checkTotals(t, m, []snapshot.EnergyTotal{{Policy: policy.Performance, PowerSource: acpi.AC, Joules: 12.25, Seconds: 3605}})
}

// TestEnergyRAPLGuard: the wrap guard is half the counter's wrap period at
// the zones' highest power limit; none without RAPL.
func TestEnergyRAPLGuard(t *testing.T) {
	mm := newMeterMachine(t)
	mm.zone("intel-rapl:0", "package-0", 1, raplRange, 64_000_000)
	mm.zone("intel-rapl:0:0", "core", 1, raplRange, 0)
	c := newClock()
	m, _ := mm.meter(c)
	m.Start(key(policy.Performance, acpi.AC), false)
	// 262143328850 µJ ÷ 64 W ÷ 2 = 2047.994756640625 s.
	if got, want := m.GuardAfter(), 2047994756640*time.Nanosecond; got < want-time.Microsecond || got > want+time.Microsecond {
		t.Errorf("GuardAfter = %v, want %v", got, want)
	}
	// AMD's 65 kJ counter and no readable limit: 250 W.
	mm2 := newMeterMachine(t)
	mm2.zone("intel-rapl:0", "package-0", 1, 65_535_999_000, 0)
	m2, _ := mm2.meter(c)
	m2.Start(key(policy.Performance, acpi.AC), false)
	if got, want := m2.GuardAfter(), 131071998*time.Microsecond; got < want-time.Microsecond || got > want+time.Microsecond {
		t.Errorf("GuardAfter without a limit = %v, want %v", got, want)
	}
	// Batteries do not wrap.
	mm3 := newMeterMachine(t)
	mm3.supply("BAT0", map[string]string{"type": "Battery", "status": "Discharging", "power_now": "5000000"})
	m3, _ := mm3.meter(c)
	m3.Start(key(policy.Powersaving, acpi.Battery), true)
	if g := m3.GuardAfter(); g != 0 {
		t.Errorf("GuardAfter with batteries = %v, want 0 (no timer)", g)
	}
}

// TestEnergyBattery: on battery the discharge is integrated between
// readings (power_now µW, current_now µA × voltage_now µV); time on AC is
// not measured; the segment that ends with the plug is priced at its last
// reading.
func TestEnergyBattery(t *testing.T) {
	mm := newMeterMachine(t)
	mm.supply("AC", map[string]string{"type": "Mains", "online": "0"})
	mm.supply("BAT0", map[string]string{"type": "Battery", "present": "1", "status": "Discharging", "power_now": "7000000", "energy_now": "28830000"})
	c := newClock()
	m, _ := mm.meter(c)
	m.Start(key(policy.Powersaving, acpi.Battery), true)
	if m.Source() != snapshot.EnergySourceBattery {
		t.Fatalf("source %q, want battery", m.Source())
	}
	c.add(10 * time.Second)
	mm.supply("BAT0", map[string]string{"power_now": "5000000"})
	m.CloseSegment(key(policy.Powersaving, acpi.Battery), true) // RefreshEnergy: (7 W + 5 W) / 2 × 10 s
	checkTotals(t, m, []snapshot.EnergyTotal{{Policy: policy.Powersaving, PowerSource: acpi.Battery, Joules: 60, Seconds: 10}})

	// The driver switches to current × voltage: 0.5 A × 12 V = 6 W.
	c.add(4 * time.Second)
	mm.supply("BAT0", map[string]string{"power_now": "", "current_now": "500000", "voltage_now": "12000000"})
	m.CloseSegment(key(policy.Balance, acpi.Battery), true) // (5 + 6) / 2 × 4 = 22 J
	checkTotals(t, m, []snapshot.EnergyTotal{{Policy: policy.Powersaving, PowerSource: acpi.Battery, Joules: 82, Seconds: 14}})

	// Plugged in: the 8 s since the last reading are priced at 6 W.
	c.add(8 * time.Second)
	mm.supply("AC", map[string]string{"online": "1"})
	mm.supply("BAT0", map[string]string{"status": "Charging", "current_now": "1500000"})
	m.CloseSegment(key(policy.Performance, acpi.AC), false)
	checkTotals(t, m, []snapshot.EnergyTotal{{Policy: policy.Balance, PowerSource: acpi.Battery, Joules: 48, Seconds: 8}, {Policy: policy.Powersaving, PowerSource: acpi.Battery, Joules: 82, Seconds: 14}})

	// On AC nothing is measured: the batteries do not carry the draw.
	c.add(time.Hour)
	if m.CloseSegment(key(policy.Performance, acpi.AC), false) {
		t.Error("an AC segment measured by a charging battery changed the totals")
	}
	if m.Source() != snapshot.EnergySourceBattery {
		t.Errorf("source on AC %q, want battery (available, not measuring)", m.Source())
	}
	checkTotals(t, m, []snapshot.EnergyTotal{{Policy: policy.Balance, PowerSource: acpi.Battery, Joules: 48, Seconds: 8}, {Policy: policy.Powersaving, PowerSource: acpi.Battery, Joules: 82, Seconds: 14}})
}

// TestEnergyVanishedBattery: when one of two discharging batteries
// vanishes, the interval in which it did is not counted (who delivered
// what is unknown); the next one is, from the battery that is left. A
// single battery that vanishes takes the machine off battery power
// (the power source becomes unknown): its segment is priced at its last
// reading, and nothing after.
func TestEnergyVanishedBattery(t *testing.T) {
	mm := newMeterMachine(t)
	mm.supply("BAT0", map[string]string{"type": "Battery", "status": "Discharging", "power_now": "3000000"})
	mm.supply("BAT1", map[string]string{"type": "Battery", "status": "Discharging", "power_now": "4000000"})
	c := newClock()
	m, _ := mm.meter(c)
	m.Start(key(policy.Powersaving, acpi.Battery), true)
	c.add(10 * time.Second)
	if err := os.RemoveAll(filepath.Join(mm.root, "class/power_supply/BAT1")); err != nil {
		t.Fatal(err)
	}
	m.CloseSegment(key(policy.Powersaving, acpi.Battery), true)
	checkTotals(t, m, nil)
	c.add(10 * time.Second)
	mm.supply("BAT0", map[string]string{"power_now": "5000000"})
	m.CloseSegment(key(policy.Powersaving, acpi.Battery), true) // (3 + 5) / 2 × 10
	checkTotals(t, m, []snapshot.EnergyTotal{{Policy: policy.Powersaving, PowerSource: acpi.Battery, Joules: 40, Seconds: 10}})

	c.add(2 * time.Second)
	if err := os.RemoveAll(filepath.Join(mm.root, "class/power_supply/BAT0")); err != nil {
		t.Fatal(err)
	}
	m.CloseSegment(key(policy.Performance, acpi.Unknown), false) // 5 W × 2 s
	if m.Source() != snapshot.EnergySourceNone {
		t.Errorf("source with no battery left %q, want none", m.Source())
	}
	c.add(time.Minute)
	m.CloseSegment(key(policy.Performance, acpi.Unknown), false)
	checkTotals(t, m, []snapshot.EnergyTotal{{Policy: policy.Powersaving, PowerSource: acpi.Battery, Joules: 50, Seconds: 12}})
}

// TestEnergyBatteryUnits: only power_now (µW) and current_now × voltage_now
// are powers. A battery with energy_now (µWh) alone is no source, and a
// reading in the wrong unit (nW) is never added.
func TestEnergyBatteryUnits(t *testing.T) {
	// tenSeconds meters one supply with these attributes for a 10 s
	// powersaving segment on battery.
	tenSeconds := func(t *testing.T, name string, attrs map[string]string) (*Meter, *logtest.Hook) {
		mm := newMeterMachine(t)
		mm.supply(name, attrs)
		c := newClock()
		m, hook := mm.meter(c)
		m.Start(key(policy.Powersaving, acpi.Battery), true)
		c.add(10 * time.Second)
		m.CloseSegment(key(policy.Powersaving, acpi.Battery), true)
		return m, hook
	}
	t.Run("energy_now µWh only", func(t *testing.T) {
		m, _ := tenSeconds(t, "BAT0", map[string]string{"type": "Battery", "status": "Discharging", "energy_now": "28830000", "energy_full": "45040000"})
		if m.Source() != snapshot.EnergySourceNone {
			t.Errorf("source %q, want none", m.Source())
		}
		checkTotals(t, m, nil)
	})
	t.Run("power_now in nW", func(t *testing.T) {
		m, hook := tenSeconds(t, "BAT0", map[string]string{"type": "Battery", "status": "Discharging", "power_now": "7210000000"})
		if m.Source() != snapshot.EnergySourceBattery {
			t.Errorf("source %q, want battery", m.Source())
		}
		checkTotals(t, m, nil)
		if e := hook.LastEntry(); e == nil || e.Level != logrus.WarnLevel || !strings.Contains(e.Data["why"].(string), "implausible") {
			t.Errorf("no warning naming the implausible value: %v", hook.AllEntries())
		}
	})
	t.Run("a discharging peripheral", func(t *testing.T) {
		m, _ := tenSeconds(t, "hidpp_battery_0", map[string]string{"type": "Battery", "scope": "Device", "status": "Discharging", "power_now": "100000"})
		if m.Source() != snapshot.EnergySourceNone {
			t.Errorf("source %q, want none: a mouse is not the machine", m.Source())
		}
		checkTotals(t, m, nil)
	})
}

// TestEnergyRAPLUnreadable: a RAPL counter that cannot be read (here a
// directory in its place; as non-root, EACCES: see sysfs's
// TestPowercapZonesUnreadableForNonRoot and the probe test) leaves the
// batteries to measure.
func TestEnergyRAPLUnreadable(t *testing.T) {
	mm := newMeterMachine(t)
	mm.zone("intel-rapl:0", "package-0", 1, raplRange, 0)
	p := filepath.Join(mm.root, "class/powercap/intel-rapl:0/energy_uj")
	os.Remove(p)
	os.Mkdir(p, 0o755)
	mm.supply("BAT0", map[string]string{"type": "Battery", "status": "Discharging", "power_now": "2000000"})
	c := newClock()
	m, _ := mm.meter(c)
	m.Start(key(policy.Powersaving, acpi.Battery), true)
	c.add(3 * time.Second)
	m.CloseSegment(key(policy.Powersaving, acpi.Battery), true)
	if m.Source() != snapshot.EnergySourceBattery {
		t.Fatalf("source %q, want battery", m.Source())
	}
	checkTotals(t, m, []snapshot.EnergyTotal{{Policy: policy.Powersaving, PowerSource: acpi.Battery, Joules: 6, Seconds: 3}})
}

// TestEnergySavedTotals: totals from state.json are the starting point.
func TestEnergySavedTotals(t *testing.T) {
	mm := newMeterMachine(t)
	mm.zone("intel-rapl:0", "package-0", 0, raplRange, 0)
	c := newClock()
	m, _ := mm.meter(c, snapshot.EnergyTotal{Policy: policy.Performance, PowerSource: acpi.AC, Joules: 100, Seconds: 50}, snapshot.EnergyTotal{Policy: policy.Balance, PowerSource: acpi.AC, Joules: 1, Seconds: 1})
	m.Start(key(policy.Performance, acpi.AC), false)
	c.add(time.Second)
	mm.counter("intel-rapl:0", 4_000_000)
	m.CloseSegment(key(policy.Performance, acpi.AC), false)
	checkTotals(t, m, []snapshot.EnergyTotal{{Policy: policy.Performance, PowerSource: acpi.AC, Joules: 104, Seconds: 51}, {Policy: policy.Balance, PowerSource: acpi.AC, Joules: 1, Seconds: 1}})
}

// TestEnergyIdleSecondBattery: a second battery that does not discharge
// (status Unknown, as the ThinkPad dual-battery fixture's BAT0) adds
// nothing, whatever rate its firmware still shows.
func TestEnergyIdleSecondBattery(t *testing.T) {
	mm := newMeterMachine(t)
	mm.supply("BAT0", map[string]string{"type": "Battery", "present": "1", "status": "Unknown", "power_now": "1000000"})
	mm.supply("BAT1", map[string]string{"type": "Battery", "present": "1", "status": "Discharging", "power_now": "9000000"})
	c := newClock()
	m, _ := mm.meter(c)
	m.Start(key(policy.Powersaving, acpi.Battery), true)
	c.add(2 * time.Second)
	m.CloseSegment(key(policy.Powersaving, acpi.Battery), true)
	checkTotals(t, m, []snapshot.EnergyTotal{{Policy: policy.Powersaving, PowerSource: acpi.Battery, Joules: 18, Seconds: 2}})
}
