// Package energy measures the energy the machine draws per policy and
// power source in force, from the powercap RAPL counters or the system
// batteries' discharge, and says what a machine offers to measure with
// (Probe).
package energy

// Measured energy per policy and power source.
//
// Time is cut into segments: a segment runs while the policy in force and
// the power source stay the same, and closes when either changes, when a
// client asks (the daemon's RefreshEnergy) and at stop. Each close adds
// the segment's measured energy and time to its (policy, power source)
// total; the daemon keeps the totals in state.json across restarts.
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
// wraps unseen, so the daemon has the meter read again after half that
// period (Meter.GuardAfter). Battery readings do not wrap and need no
// timer.

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

// Key names a segment and the total it adds to: the policy in force and
// the power source in force while it ran.
type Key struct {
	Policy policy.Policy
	Source acpi.Source
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

// Zone is the energy one RAPL zone measured since the meter was made, for
// the metrics file. Every readable zone has one, psys and subzones
// included, whether or not its energy is summed into the totals.
type Zone struct {
	// Zone is the powercap zone's directory name, e.g. intel-rapl:0 or
	// intel-rapl:0:0.
	Zone string
	// Name is its name attribute, e.g. package-0, core or psys.
	Name string
	// Joules is the energy its energy_uj counter advanced by over the
	// intervals it could be measured in, J.
	Joules float64
}

// Meter does the accounting: it cuts time into segments (Key), reads the
// energy source at each cut and adds each segment's measured joules and
// seconds to its total. It is not safe for concurrent use: one goroutine
// (the daemon's event loop) owns it.
type Meter struct {
	fs  sysfs.FS
	log logrus.FieldLogger
	now func() time.Time

	totals map[Key]snapshot.EnergyTotal // closed segments
	seg    Key                          // the running segment
	segJ   float64                      // its measured J
	segS   float64                      // and s
	last   energySample
	zoneJ  map[string]*Zone // every RAPL zone's J since start
	warned string           // the last reason logged, so each is said once
}

// NewMeter returns a meter that reads machine fsys (the RAPL zones under
// class/powercap, the supplies under class/power_supply), logs unusable
// readings to log, takes its time from now (time.Now in the daemon; its
// monotonic reading is what intervals are measured with) and starts from
// the saved totals (state.json's, already checked by
// statefile.ValidEnergyTotal; nil for none). It reads nothing yet: Start
// begins the first segment.
func NewMeter(fsys sysfs.FS, log logrus.FieldLogger, now func() time.Time, saved []snapshot.EnergyTotal) *Meter {
	m := &Meter{fs: fsys, log: log, now: now, totals: map[Key]snapshot.EnergyTotal{}, zoneJ: map[string]*Zone{}}
	for _, e := range saved {
		m.totals[Key{e.Policy, e.PowerSource}] = e
	}
	return m
}

// Start begins the first segment, under k, with a reading; onBattery says
// whether the power source in force is battery (the batteries measure
// only then). Call it once, before Advance and CloseSegment.
func (m *Meter) Start(k Key, onBattery bool) {
	m.seg = k
	m.last = m.read(onBattery)
	m.say(m.last)
}

// Advance reads now and adds the interval since the last reading to the
// running segment, when it can be measured; the totals do not change
// until the segment closes. onBattery is as for Start. An interval that
// cannot be measured (a counter that went backwards, batteries that
// changed, an unusable reading) adds neither joules nor seconds and is
// logged, once per reason.
func (m *Meter) Advance(onBattery bool) {
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
func (m *Meter) say(s energySample) {
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

// CloseSegment reads now (as Advance), adds the running segment's joules
// and seconds to its total and starts the next segment under next, which
// may be the same key. onBattery is as for Start. It reports whether the
// totals changed, i.e. whether the segment measured anything and the
// totals are worth saving.
func (m *Meter) CloseSegment(next Key, onBattery bool) bool {
	m.Advance(onBattery)
	changed := m.segS > 0 || m.segJ > 0
	if changed {
		t := m.totals[m.seg]
		t.Policy, t.PowerSource = m.seg.Policy, m.seg.Source
		t.Joules += m.segJ
		t.Seconds += m.segS
		m.totals[m.seg] = t
	}
	m.seg, m.segJ, m.segS = next, 0, 0
	return changed
}

// Segment returns the key of the running segment: Start's or the last
// CloseSegment's.
func (m *Meter) Segment() Key { return m.seg }

// Totals returns the closed segments' totals, one per key that measured
// anything (the saved ones included), each with its joules (J) and the
// seconds (s) they were measured over, in policy order (performance,
// balance, powersaving), then ac, battery, unknown (statefile.SortEnergy);
// nil when there are none. The running segment is not in them.
func (m *Meter) Totals() []snapshot.EnergyTotal {
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

// Source is the source of the last reading: snapshot.EnergySourceRAPL
// (the powercap RAPL counters), snapshot.EnergySourceBattery (the system
// batteries' power_supply attributes, also while on AC, when they are
// there but do not measure) or snapshot.EnergySourceNone; "" before Start.
func (m *Meter) Source() string { return m.last.source }

// Zones returns every RAPL zone's energy (J) since the meter was made, by
// zone directory name; empty when no RAPL interval was measured.
func (m *Meter) Zones() []Zone {
	out := make([]Zone, 0, len(m.zoneJ))
	for _, z := range m.zoneJ {
		out = append(out, *z)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Zone < out[j].Zone })
	return out
}

// guardPowerUW is the power assumed for a zone without a readable power
// limit when computing the wrap guard (250 W).
const guardPowerUW = 250_000_000

// GuardAfter is how long the meter may wait after its last reading before
// it must read RAPL again (Advance) without missing a wrap: half of the
// shortest wrap period, max_energy_range_uj (µJ) ÷ power (µW), at the
// highest power limit of the zones read (or 250 W when none is readable),
// and at least 1 s. 0 when no counter can wrap (battery, none): no timer
// is needed.
func (m *Meter) GuardAfter() time.Duration {
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
func (m *Meter) read(onBattery bool) energySample {
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
func (m *Meter) readBatteries(s *energySample) string {
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
func (m *Meter) interval(last, cur energySample) (joules, seconds float64, why string) {
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
					z = &Zone{Zone: zone, Name: c.name}
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
