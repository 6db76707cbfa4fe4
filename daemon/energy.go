package daemon

// Measured energy per policy and power source.
//
// Time is cut into segments: a segment runs while the policy in force and
// the power source stay the same, and closes when either changes, when a
// client asks (RefreshEnergy) and at stop. Each close adds the segment's
// measured energy and time to its (policy, power source) total; the totals
// are kept in state.json across restarts.
//
// The energy comes from one source, chosen at every reading:
//
//   - "rapl": the powercap RAPL counters (sysfs.PowercapZones; Intel, and
//     AMD since Zen 2). Their sum over the top-level zones except psys is
//     the packages' energy: psys (the platform) contains the packages, and
//     subzones (core, uncore, dram) are parts of their package, so either
//     would count energy twice. A counter wraps to 0 after
//     max_energy_range_uj; a reading below the previous one is a wrap when
//     the energy it implies could have been drawn in the time since
//     (plausibleMicroWatts), and otherwise a counter that went backwards
//     (a reset, e.g. after resume on some firmware): that interval is not
//     counted. RAPL measures on AC and on battery alike.
//   - "battery": the discharge of the system batteries
//     (acpi.SystemBatteries; sysfs.BatteryPower: power_now µW, or
//     current_now µA × voltage_now µV), only while the machine runs on
//     battery. Readings are instantaneous, so the energy between two
//     readings is their mean times the time between them (trapezoid); the
//     last interval of a battery segment, which ends because the machine
//     left battery power, is priced at its last reading.
//   - "none": neither is available; nothing is measured.
//
// Only measured intervals count, so a total's Seconds is the time its
// Joules were measured over, and Joules / Seconds is an honest average:
// time on AC with only a battery to measure, an interval in which the
// batteries that discharge changed (one vanished), an unreadable or
// implausible value, or a counter that went backwards adds neither joules
// nor seconds. Time is the monotonic clock, which does not advance while
// the machine is suspended.
//
// There is no timer while idle, with one exception: with RAPL, a segment
// longer than a counter's wrap period (range ÷ power; about 34 minutes for
// a 262 kJ counter at a 64 W limit, hours on most laptops) would lose whole
// wraps unseen, so the meter reads again after half that period
// (guardAfter). Battery readings do not wrap and need no timer.

import (
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/schedpolicyd/schedpolicyd/acpi"
	"github.com/schedpolicyd/schedpolicyd/daemon/snapshot"
	"github.com/schedpolicyd/schedpolicyd/daemon/statefile"
	"github.com/schedpolicyd/schedpolicyd/policy"
	"github.com/schedpolicyd/schedpolicyd/sysfs"
)

type energyKey struct {
	policy policy.Policy
	source acpi.Source
}

// raplCounter is one zone's counter at a reading.
type raplCounter struct {
	name    string // the zone's name attribute
	summed  bool   // a top-level zone other than psys
	energy  uint64 // energy_uj, µJ
	rng     uint64 // max_energy_range_uj, µJ
	limitUW uint64 // largest power limit, µW (0 unknown)
}

// energySample is one reading of the energy source.
type energySample struct {
	at        time.Time
	source    string
	onBattery bool                   // the power source in force was battery
	zones     map[string]raplCounter // rapl: every readable zone
	// used names what the sample sums: the summed RAPL zones, or the
	// discharging system batteries ("BAT0,BAT1").
	used    string
	powerUW int64  // battery: the batteries' total discharge, µW
	ok      bool   // a point an interval can be measured from or to
	why     string // when !ok: why not
}

// zoneEnergy is the energy one RAPL zone measured since start, for the
// metrics file.
type zoneEnergy struct {
	Zone, Name string
	Joules     float64
}

// energyMeter does the accounting; the event loop owns it.
type energyMeter struct {
	fs  sysfs.FS
	log logrus.FieldLogger
	now func() time.Time

	totals map[energyKey]snapshot.EnergyTotal // closed segments
	seg    energyKey                          // the running segment
	segJ   float64                            // its measured J
	segS   float64                            // and s
	last   energySample
	zoneJ  map[string]*zoneEnergy // every RAPL zone's J since start
	warned string                 // the last reason logged, so each is said once
}

// newEnergyMeter returns a meter holding the saved totals; start begins
// the first segment.
func newEnergyMeter(fsys sysfs.FS, log logrus.FieldLogger, now func() time.Time, saved []snapshot.EnergyTotal) *energyMeter {
	m := &energyMeter{fs: fsys, log: log, now: now, totals: map[energyKey]snapshot.EnergyTotal{}, zoneJ: map[string]*zoneEnergy{}}
	for _, e := range saved {
		m.totals[energyKey{e.Policy, e.PowerSource}] = e
	}
	return m
}

// start begins the first segment, under k, with a reading.
func (m *energyMeter) start(k energyKey, onBattery bool) {
	m.seg = k
	m.last = m.read(onBattery)
	m.say(m.last)
}

// advance reads now and adds the interval since the last reading to the
// running segment, when it can be measured.
func (m *energyMeter) advance(onBattery bool) {
	cur := m.read(onBattery)
	j, s, why := m.interval(m.last, cur)
	switch {
	case why == "":
		m.segJ += j
		m.segS += s
	case cur.ok && m.last.ok:
		// Both readings are fine, the interval between them is not: a
		// counter that went backwards, batteries that changed.
		m.log.WithFields(logrus.Fields{"source": cur.source, "why": why}).Warn("energy: interval not counted")
	}
	m.say(cur)
	m.last = cur
}

// say logs a reading that cannot be used, once per reason; expected states
// (on AC with batteries only, no source at all) at debug level.
func (m *energyMeter) say(s energySample) {
	why := s.why
	if s.ok {
		why = ""
	}
	if why == m.warned {
		return
	}
	m.warned = why
	if why == "" {
		return
	}
	l := m.log.WithFields(logrus.Fields{"source": s.source, "why": why})
	if s.source == snapshot.EnergySourceNone || (s.source == snapshot.EnergySourceBattery && !s.onBattery) {
		l.Debug("energy: nothing to measure")
		return
	}
	l.Warn("energy: reading not usable; its interval is not counted")
}

// closeSegment reads now, adds the running segment to its total and starts
// the next one under next. It reports whether the totals changed.
func (m *energyMeter) closeSegment(next energyKey, onBattery bool) bool {
	m.advance(onBattery)
	changed := m.segS > 0 || m.segJ > 0
	if changed {
		t := m.totals[m.seg]
		t.Policy, t.PowerSource = m.seg.policy, m.seg.source
		t.Joules += m.segJ
		t.Seconds += m.segS
		m.totals[m.seg] = t
	}
	m.seg, m.segJ, m.segS = next, 0, 0
	return changed
}

// Totals returns the closed segments' totals, in policy order
// (performance, balance, powersaving), then ac, battery, unknown; nil when
// there are none.
func (m *energyMeter) Totals() []snapshot.EnergyTotal {
	if len(m.totals) == 0 {
		return nil
	}
	out := make([]snapshot.EnergyTotal, 0, len(m.totals))
	for _, t := range m.totals {
		out = append(out, t)
	}
	statefile.SortEnergy(out)
	return out
}

// Source is the source of the last reading: snapshot.EnergySourceRAPL,
// snapshot.EnergySourceBattery or snapshot.EnergySourceNone.
func (m *energyMeter) Source() string { return m.last.source }

// zones returns every RAPL zone's energy since start, by zone.
func (m *energyMeter) zones() []zoneEnergy {
	out := make([]zoneEnergy, 0, len(m.zoneJ))
	for _, z := range m.zoneJ {
		out = append(out, *z)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Zone < out[j].Zone })
	return out
}

// guardPowerUW is the power assumed for a zone without a readable power
// limit when computing the wrap guard (250 W).
const guardPowerUW = 250_000_000

// guardAfter is how long the meter may wait before it reads RAPL again
// without missing a wrap: half of the shortest wrap period, range ÷ power,
// at the highest power limit of the zones read (or guardPowerUW). 0 when
// no counter can wrap (battery, none).
func (m *energyMeter) guardAfter() time.Duration {
	if m.last.source != snapshot.EnergySourceRAPL {
		return 0
	}
	var limit, rng uint64
	for _, z := range m.last.zones {
		limit = max(limit, z.limitUW)
		if rng == 0 || z.rng < rng {
			rng = z.rng
		}
	}
	if limit == 0 {
		limit = guardPowerUW
	}
	// rng µJ ÷ limit µW = seconds to wrap; half of it.
	d := time.Duration(float64(rng) / float64(limit) / 2 * float64(time.Second))
	return max(d, time.Second)
}

// read takes one sample: RAPL when a summed zone can be read, else the
// system batteries when one of them reports a power attribute, else none.
func (m *energyMeter) read(onBattery bool) energySample {
	s := energySample{at: m.now(), onBattery: onBattery}
	zones, err := m.fs.PowercapZones()
	var used []string
	var zoneWhy []string
	if err != nil {
		zoneWhy = append(zoneWhy, err.Error())
	}
	for _, z := range zones {
		if z.Err != nil {
			zoneWhy = append(zoneWhy, fmt.Sprintf("%s: %v", z.Zone, z.Err))
			continue
		}
		c := raplCounter{name: z.Name, summed: z.TopLevel() && z.Name != "psys", energy: z.EnergyUJ, rng: z.MaxEnergyRangeUJ, limitUW: z.PowerLimitUW}
		if s.zones == nil {
			s.zones = map[string]raplCounter{}
		}
		s.zones[z.Zone] = c
		if c.summed {
			used = append(used, z.Zone)
		}
	}
	if len(used) > 0 {
		s.source, s.used, s.ok = snapshot.EnergySourceRAPL, strings.Join(used, ","), true
		return s
	}
	s.zones = nil
	s.source = snapshot.EnergySourceBattery
	why := m.readBatteries(&s)
	if why != "" {
		s.why = why
		if len(zoneWhy) > 0 && s.source == snapshot.EnergySourceNone {
			s.why = "RAPL: " + strings.Join(zoneWhy, "; ") + "; batteries: " + why
		}
	}
	return s
}

// readBatteries fills s from the system batteries and returns why it is
// not a usable point ("" when it is). s.source becomes snapshot.EnergySourceNone
// when no system battery has a power attribute.
func (m *energyMeter) readBatteries(s *energySample) string {
	supplies, err := m.fs.PowerSupplies()
	if err != nil {
		s.source = snapshot.EnergySourceNone
		return err.Error()
	}
	type reading struct {
		p   sysfs.BatteryPower
		err error
	}
	bats := acpi.SystemBatteries(supplies)
	got := map[string]reading{}
	metered := false
	for _, b := range bats {
		p, err := m.fs.BatteryPower(b.Name)
		got[b.Name] = reading{p, err}
		if !errors.Is(err, sysfs.ErrNoBatteryPower) {
			metered = true
		}
	}
	if !metered {
		s.source = snapshot.EnergySourceNone
		if len(bats) == 0 {
			return "no RAPL counter and no system battery"
		}
		return "no RAPL counter, and no system battery reports power_now or current_now and voltage_now"
	}
	if !s.onBattery {
		return "the machine is not on battery: the batteries do not carry its draw"
	}
	var names []string
	for _, b := range bats {
		if b.Status != "Discharging" {
			continue
		}
		r := got[b.Name]
		if r.err != nil {
			return fmt.Sprintf("discharging battery %s: %v", b.Name, r.err)
		}
		names = append(names, b.Name)
		s.powerUW += r.p.MicroWatts
	}
	if len(names) == 0 {
		return "no system battery is discharging"
	}
	s.used, s.ok = strings.Join(names, ","), true
	return ""
}

// plausibleMicroWatts is the most a zone can be taken to draw between two
// readings (µW): twice its highest power limit, and at least 1 kW. A wrap
// that implies more is a counter that went backwards.
func plausibleMicroWatts(c raplCounter) float64 {
	return max(1e9, 2*float64(c.limitUW))
}

// raplDelta is the energy (µJ) zone counter prev → cur shows over dt
// seconds, wrapping at the range; ok is false for a counter that went
// backwards or jumped further than the zone can draw.
func raplDelta(prev, cur raplCounter, dt float64) (uint64, bool) {
	if cur.rng != prev.rng {
		return 0, false
	}
	var d uint64
	if cur.energy >= prev.energy {
		d = cur.energy - prev.energy
	} else {
		d = prev.rng - prev.energy + cur.energy
	}
	// 1 J of slack for readings taken moments apart.
	if float64(d) > plausibleMicroWatts(prev)*dt+1e6 {
		return 0, false
	}
	return d, true
}

// interval returns the energy (J) and time (s) measured between two
// samples, or why the interval cannot be measured. It also adds each RAPL
// zone's energy to the zone totals.
func (m *energyMeter) interval(last, cur energySample) (joules, seconds float64, why string) {
	dt := cur.at.Sub(last.at).Seconds()
	switch {
	case dt < 0:
		return 0, 0, "the clock went backwards"
	case !last.ok:
		return 0, 0, "no usable reading at the start: " + last.why
	}
	if last.source == snapshot.EnergySourceRAPL {
		for zone, c := range cur.zones {
			p, ok := last.zones[zone]
			if !ok {
				continue
			}
			if d, ok := raplDelta(p, c, dt); ok {
				z := m.zoneJ[zone]
				if z == nil {
					z = &zoneEnergy{Zone: zone, Name: c.name}
					m.zoneJ[zone] = z
				}
				z.Joules += float64(d) / 1e6
			}
		}
		if cur.source != snapshot.EnergySourceRAPL || cur.used != last.used {
			return 0, 0, fmt.Sprintf("the RAPL zones read changed from %s to %q", last.used, cur.used)
		}
		var sum uint64
		for _, zone := range strings.Split(last.used, ",") {
			d, ok := raplDelta(last.zones[zone], cur.zones[zone], dt)
			if !ok {
				return 0, 0, fmt.Sprintf("%s went from %d to %d µJ (range %d) in %.3f s: a counter that went backwards, not a wrap",
					zone, last.zones[zone].energy, cur.zones[zone].energy, last.zones[zone].rng, dt)
			}
			sum += d
		}
		return float64(sum) / 1e6, dt, ""
	}
	// Battery.
	switch {
	case cur.source == snapshot.EnergySourceBattery && cur.ok && cur.used == last.used:
		return float64(last.powerUW+cur.powerUW) / 2 / 1e6 * dt, dt, ""
	case !cur.onBattery:
		// The segment ends because the machine left battery power.
		return float64(last.powerUW) / 1e6 * dt, dt, ""
	case cur.ok:
		return 0, 0, fmt.Sprintf("the discharging batteries changed from %s to %s", last.used, cur.used)
	}
	return 0, 0, cur.why
}
