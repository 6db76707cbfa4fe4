package daemon

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/schedpolicyd/schedpolicyd/sysfs"
)

// The other schedulers on the machine (issue 35, item 6;
// docs/HYBRID-PLACEMENT.md §6): the kernel's Energy Aware Scheduling, a
// sched_ext BPF scheduler, intel-lpmd. The daemon places with cpusets
// whichever of them runs, since each keeps tasks within their cpusets;
// what it says of each is here, and probe and the log print it.

// EAS states (EAS.State).
const (
	EASActive   = "active"
	EASInactive = "inactive"
	EASUnknown  = "unknown"
)

// EAS is whether the kernel's Energy Aware Scheduling runs, from what
// user space can read: the kernel enables it only where an energy model
// is registered, CPU capacities are asymmetric, SMT is off and the
// cpufreq governor is schedutil (commit 8f833c82cdab; sched-energy.rst
// §6), and the administrator did not switch it off (sched_energy_aware).
type EAS struct {
	// State is EASActive, EASInactive, or EASUnknown when every condition
	// that could be read holds but one could not be read (the energy
	// model, in debugfs, as a user).
	State string `json:"state"`
	// Sysctl is /proc/sys/kernel/sched_energy_aware.
	Sysctl sysfs.EnergyAware `json:"sched_energy_aware"`
	// EnergyModel is "present (N performance domains)", "none" or
	// "unreadable: WHY".
	EnergyModel string `json:"energy_model"`
	// SMT: some online core has more than one thread.
	SMT bool `json:"smt"`
	// Asymmetric: the machine has more than one efficiency class
	// (sysfs.CPUClasses), as SD_ASYM_CPUCAPACITY requires.
	Asymmetric bool `json:"asymmetric"`
	// Governor is the first online CPU's cpufreq scaling_governor, ""
	// without cpufreq.
	Governor string `json:"governor"`
	// Why lists each condition that keeps EAS off (or unknown), in words.
	Why []string `json:"why,omitempty"`
}

// Schedulers is what the daemon finds of the other schedulers and what it
// does beside each (probe's "schedulers", the log's "other schedulers").
type Schedulers struct {
	EAS      EAS            `json:"eas"`
	SchedExt sysfs.SchedExt `json:"sched_ext"`
	// IntelLpmd is "running", "not running" or "unknown: WHY"
	// (LpmdProbe.State, or the daemon's own view of the bus).
	IntelLpmd string `json:"intel_lpmd"`
	// Does says what the daemon does beside them, one sentence each.
	Does []string `json:"does"`
	// Warnings are what could not be read.
	Warnings []string `json:"warnings,omitempty"`
}

// ReadSchedulers reads the other schedulers below fs's root and procRoot
// (/proc) on a machine of topology t and classes c, with intel-lpmd's
// state lpmd as the bus says it and stepAside what the daemon leaves to
// it (LpmdStepAside, "" nothing). Nothing it cannot read is fatal: it
// says so in Warnings and in the state it gives.
func ReadSchedulers(fs sysfs.FS, procRoot string, t sysfs.CPUTopology, c sysfs.CPUClasses, lpmd, stepAside string) Schedulers {
	var s Schedulers
	s.EAS = readEAS(fs, procRoot, t, c, &s.Warnings)
	var err error
	if s.SchedExt, err = fs.SchedExt(); err != nil {
		s.Warnings = append(s.Warnings, err.Error())
	}
	s.IntelLpmd = lpmd
	switch s.EAS.State {
	case EASActive:
		s.Does = append(s.Does, "EAS places each task at wake-up on the CPU its energy model prices cheapest, within the task's cpuset: the daemon's cpusets decide which CPUs each workload may use (packing, background work off the focused app's cores), EAS where inside them; the daemon prices homes with the same energy model")
	case EASUnknown:
		s.Does = append(s.Does, "whether EAS runs is unknown (its energy model cannot be read here); if it does, it chooses CPUs inside the daemon's cpusets")
	}
	if s.SchedExt.Loaded() {
		name := s.SchedExt.Ops
		if name == "" {
			name = "a BPF scheduler"
		}
		s.Does = append(s.Does, fmt.Sprintf("sched_ext scheduler %s replaces CFS for the tasks it runs; it keeps them within their cpusets (the kernel refuses a dispatch outside a task's allowed CPUs), so the daemon's cpusets still say which work may run where; the energy estimates assume CFS's spreading and do not describe %s", name, name))
	}
	if stepAside != "" {
		s.Does = append(s.Does, stepAside)
	}
	if len(s.Does) == 0 {
		s.Does = append(s.Does, "no other scheduler places work here: CFS spreads tasks within the daemon's cpusets")
	}
	return s
}

// readEAS reads EAS's conditions; unreadable ones are warned about.
func readEAS(fs sysfs.FS, procRoot string, t sysfs.CPUTopology, c sysfs.CPUClasses, warn *[]string) EAS {
	e := EAS{Asymmetric: c.Hybrid()}
	var err error
	if e.Sysctl, err = sysfs.ReadEnergyAware(procRoot); err != nil {
		*warn = append(*warn, err.Error())
	}
	for _, core := range t.Cores() {
		if core.Size() > 1 {
			e.SMT = true
			break
		}
	}
	if e.Governor, err = fs.ScalingGovernor(t.Online.First()); err != nil {
		*warn = append(*warn, err.Error())
	}
	emKnown := true
	switch pds, err := fs.ReadEnergyModel(); {
	case err == nil:
		e.EnergyModel = fmt.Sprintf("present (%d performance domains)", len(pds))
	case errors.Is(err, sysfs.ErrNoEnergyModel) && debugfsMounted(fs):
		e.EnergyModel = "none"
	case errors.Is(err, sysfs.ErrNoEnergyModel):
		e.EnergyModel, emKnown = "unreadable: debugfs is not mounted or not readable here", false
	default:
		e.EnergyModel, emKnown = "unreadable: "+err.Error(), false
	}
	switch {
	case !e.Sysctl.Present:
		e.Why = append(e.Why, "no sched_energy_aware (a kernel without the energy model or schedutil)")
	case e.Sysctl.Value == "0":
		e.Why = append(e.Why, "sched_energy_aware is 0: the administrator switched EAS off")
	case e.Sysctl.Value == "":
		e.Why = append(e.Why, "sched_energy_aware is empty: the kernel says EAS is not possible now")
	}
	if emKnown && e.EnergyModel == "none" {
		e.Why = append(e.Why, "no energy model registered")
	}
	if !e.Asymmetric {
		e.Why = append(e.Why, "CPU capacities are not asymmetric (one kind of core)")
	}
	if e.SMT {
		e.Why = append(e.Why, "SMT is on (EAS runs only without it)")
	}
	if e.Governor != "schedutil" {
		g := e.Governor
		if g == "" {
			g = "none (no cpufreq)"
		}
		e.Why = append(e.Why, "the cpufreq governor is "+g+", not schedutil")
	}
	switch {
	case len(e.Why) > 0:
		e.State = EASInactive
	case !emKnown:
		e.State = EASUnknown
		e.Why = append(e.Why, "the energy model is "+e.EnergyModel)
	default:
		e.State = EASActive
	}
	return e
}

// debugfsMounted reports whether <root>/kernel/debug has any entry: an
// empty or missing directory is debugfs not mounted (or not readable),
// where the absence of energy_model proves nothing.
func debugfsMounted(fs sysfs.FS) bool {
	ents, err := os.ReadDir(fs.Path("kernel/debug"))
	return err == nil && len(ents) > 0
}

// Summary is s in one line for the log: EAS's state (and why), the
// sched_ext scheduler, intel-lpmd.
func (s Schedulers) Summary() (eas, schedExt string) {
	eas = s.EAS.State
	if len(s.EAS.Why) > 0 {
		eas += " (" + strings.Join(s.EAS.Why, "; ") + ")"
	}
	switch {
	case !s.SchedExt.Present:
		schedExt = "not in this kernel"
	case s.SchedExt.Loaded():
		schedExt = s.SchedExt.State + ", ops " + s.SchedExt.Ops
	default:
		schedExt = s.SchedExt.State
	}
	return eas, schedExt
}

// noteSchedulers logs the other schedulers when what the daemon finds
// differs from what it last said (at start, after a hotplug, when
// intel-lpmd comes or goes).
func (d *Daemon) noteSchedulers(t sysfs.CPUTopology, c sysfs.CPUClasses, stepAside string) {
	lpmd := "not running"
	if d.lpmdOwner != "" {
		lpmd = "running"
	}
	s := ReadSchedulers(d.fs, d.cfg.ProcRoot, t, c, lpmd, stepAside)
	eas, scx := s.Summary()
	said := eas + "|" + scx + "|" + lpmd + "|" + strings.Join(s.Warnings, "|")
	if said == d.schedulersSaid {
		return
	}
	d.schedulersSaid = said
	d.log.WithFields(map[string]any{"eas": eas, "sched_ext": scx, "intel_lpmd": lpmd, "does": strings.Join(s.Does, "; ")}).Info("other schedulers")
	for _, w := range s.Warnings {
		d.log.WithField("warning", w).Debug("other schedulers: cannot read")
	}
}
