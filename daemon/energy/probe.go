package energy

import (
	"errors"
	"io"
	"io/fs"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/schedpolicyd/schedpolicyd/acpi"
	"github.com/schedpolicyd/schedpolicyd/sysfs"
)

// ProbeResult is what `schedpolicyd probe` says about energy measurement:
// the source the meter would use on the machine now and what it found.
type ProbeResult struct {
	// Source is snapshot.EnergySourceRAPL, EnergySourceBattery or
	// EnergySourceNone.
	Source string `json:"source"`
	// Measuring reports that a reading now can start or end a measured
	// interval: RAPL always, the batteries only while on battery.
	Measuring bool `json:"measuring"`
	// Why says why not, when Measuring is false.
	Why string `json:"why,omitempty"`
	// Zones are the RAPL zones found, readable or not.
	Zones []ProbeZone `json:"rapl_zones,omitempty"`
	// Batteries are the system batteries (acpi.SystemBatteries).
	Batteries []ProbeBattery `json:"batteries,omitempty"`
	// Warnings name what keeps a source from being used.
	Warnings []string `json:"warnings,omitempty"`
}

// ProbeZone is one powercap RAPL zone (class/powercap/intel-rapl:*) as
// the meter sees it.
type ProbeZone struct {
	Zone   string `json:"zone"`             // intel-rapl:0
	Parent string `json:"parent,omitempty"` // the package of a subzone
	Name   string `json:"name"`             // package-0, core, psys
	// Summed: a top-level zone other than psys, whose energy is counted.
	Summed bool   `json:"summed"`
	Error  string `json:"error,omitempty"` // why its counter cannot be read
}

// ProbeBattery is one system battery (class/power_supply) and its power
// reading.
type ProbeBattery struct {
	Supply string   `json:"supply"`
	Status string   `json:"status"`
	Watts  *float64 `json:"watts,omitempty"` // W, when a power can be read
	From   string   `json:"from,omitempty"`  // power_now or current_now*voltage_now
	Error  string   `json:"error,omitempty"` // why its power cannot be read
}

// Probe reads, as the Meter does, which energy source machine fsys offers
// (the powercap RAPL zones, else the system batteries' power_supply
// attributes), onBattery saying whether the power source in force is
// battery. It lists every RAPL zone and system battery it found, each with
// the error that keeps it from being read, and warns of what keeps RAPL
// from being read (an unreadable powercap class, counters readable by root
// only); it returns no error. It only reads, and logs nothing.
func Probe(fsys sysfs.FS, onBattery bool) ProbeResult {
	quiet := logrus.New()
	quiet.Out = io.Discard // probe reports; it does not log
	m := NewMeter(fsys, quiet, time.Now, nil)
	s := m.read(onBattery)
	p := ProbeResult{Source: s.source, Measuring: s.ok, Why: s.why}
	if s.ok {
		p.Why = ""
	}
	zones, err := fsys.PowercapZones()
	if err != nil {
		p.Warnings = append(p.Warnings, err.Error())
	}
	denied := false
	for _, z := range zones {
		pz := ProbeZone{Zone: z.Zone, Parent: z.Parent, Name: z.Name, Summed: z.TopLevel() && z.Name != "psys"}
		if z.Err != nil {
			pz.Error = z.Err.Error()
			denied = denied || errors.Is(z.Err, fs.ErrPermission)
		}
		p.Zones = append(p.Zones, pz)
	}
	if denied {
		p.Warnings = append(p.Warnings, "RAPL energy_uj is readable by root only (kernels since November 2020, CVE-2020-8694): run probe as root to see what the daemon, which runs as root, measures")
	}
	if supplies, err := fsys.PowerSupplies(); err == nil {
		for _, b := range acpi.SystemBatteries(supplies) {
			pb := ProbeBattery{Supply: b.Name, Status: b.Status}
			bp, err := fsys.BatteryPower(b.Name)
			if err != nil {
				pb.Error = err.Error()
			} else {
				w := float64(bp.MicroWatts) / 1e6
				pb.Watts, pb.From = &w, bp.From
			}
			p.Batteries = append(p.Batteries, pb)
		}
	}
	return p
}
