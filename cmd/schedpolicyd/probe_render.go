package main

// What `schedpolicyd probe` prints without --json: one section per part
// of the report, a "name:" column and the value after it.

import (
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strings"

	"github.com/schedpolicyd/schedpolicyd/daemon"
	"github.com/schedpolicyd/schedpolicyd/daemon/bus"
	"github.com/schedpolicyd/schedpolicyd/daemon/energy"
	"github.com/schedpolicyd/schedpolicyd/daemon/placement/units"
	"github.com/schedpolicyd/schedpolicyd/daemon/statefile"
	"github.com/schedpolicyd/schedpolicyd/sysfs"
)

// writeProbeText prints r as text: the topology and classes, the power
// source and boost, the knob and policy (a saved choice read from
// stateDir), the placement, the energy source, the power profiles and
// the warnings.
func writeProbeText(w io.Writer, r probeReport, stateDir string) {
	writeProbeTopology(w, r)
	writeProbePower(w, r)
	writeProbeKnob(w, r, stateDir)
	writeProbePlacement(w, r)
	writeProbeSchedulers(w, r.Schedulers)
	printEnergyProbe(w, r.Energy)
	writeProbePowerProfiles(w, r)
	for _, m := range r.Warnings {
		fmt.Fprintf(w, "warning:       %s\n", m)
	}
}

// writeProbeTopology prints the CPUs, cores and packages, the efficiency
// classes, and intel-lpmd where it runs or the machine has LP E-cores.
func writeProbeTopology(w io.Writer, r probeReport) {
	fmt.Fprintf(w, "topology:      %s (%s), %s, %s\n", count(r.Topology.CPUs, "CPU"), r.Topology.Online, count(r.Topology.Cores, "core"), count(r.Topology.Packages, "package"))
	fmt.Fprintf(w, "  cores:       %s\n", strings.Join(r.Topology.CoreList, " "))
	fmt.Fprintf(w, "  packages:    %s\n", strings.Join(r.Topology.PkgList, " "))
	if len(r.CPUClasses) > 0 {
		var cs []string
		for _, c := range r.CPUClasses {
			cs = append(cs, c.Name+" "+c.CPUs)
		}
		if len(r.CPUClasses) == 1 {
			fmt.Fprintf(w, "  classes:     one, %s (no sysfs rung separates the CPUs: homogeneous)\n", cs[0])
		} else {
			fmt.Fprintf(w, "  classes:     %d by %s, most efficient first: %s\n", len(r.CPUClasses), r.CPUClassRule, strings.Join(cs, ", "))
			for _, c := range r.CPUClasses {
				fmt.Fprintf(w, "  class %-6s %s, %s, capacity %d (%s): %s\n", c.Name+":", c.CPUs, count(c.Cores, "core"), c.Capacity, c.CapacityFrom, c.Evidence)
				if c.Order != "" {
					fmt.Fprintf(w, "               order by CPPC: %s\n", c.Order)
				}
				if c.CostFrom != "" {
					fmt.Fprintf(w, "               costs from %s\n", c.CostFrom)
				}
			}
		}
	}
	hasLPE := slices.ContainsFunc(r.CPUClasses, func(c probeClass) bool { return c.Name == sysfs.ClassLPE })
	if r.IntelLpmd.State == "running" || (hasLPE && r.IntelLpmd.State != "") {
		fmt.Fprintf(w, "  intel-lpmd:  %s", r.IntelLpmd.State)
		if r.IntelLpmd.Owner != "" {
			fmt.Fprintf(w, " (%s %s)", bus.LpmdName, r.IntelLpmd.Owner)
		}
		fmt.Fprintln(w)
		if r.IntelLpmd.StepAside != "" {
			fmt.Fprintf(w, "  steps aside: %s\n", r.IntelLpmd.StepAside)
		}
	}
}

// writeProbePower prints the power source with its reason and evidence,
// and boost with who else manages it.
func writeProbePower(w io.Writer, r probeReport) {
	fmt.Fprintf(w, "power source:  %s\n", r.PowerSource)
	fmt.Fprintf(w, "  reason:      %s\n", r.Reason)
	for _, e := range r.Evidence {
		fmt.Fprintf(w, "  evidence:    %s/%s = %s (%s)\n", e.Supply, e.Attribute, e.Value, e.Rule)
	}
	fmt.Fprintf(w, "boost:         %s\n", r.Boost)
	if r.BoostOwner != "" {
		fmt.Fprintf(w, "  managed by:  %s; boost_on_battery steps aside\n", r.BoostOwner)
	}
	for _, p := range r.EnergyPrefs {
		label := p.Knob + ":"
		if len(label) < 15 {
			label += strings.Repeat(" ", 15-len(label))
		} else {
			label += " "
		}
		fmt.Fprintf(w, "%s%s (%s = %q)\n", label, p.Action, p.Knob, p.Mode)
		if p.Offered != "" {
			fmt.Fprintf(w, "  offered:     %s\n", p.Offered)
		}
	}
}

// writeProbeKnob prints whose setup the report describes, the knob and
// where it comes from (a choice saved in stateDir, the configuration or
// the default), the policy and the kernel's own knob.
func writeProbeKnob(w io.Writer, r probeReport, stateDir string) {
	from := map[string]string{
		"state":   "a choice saved in " + filepath.Join(stateDir, statefile.StateFile),
		"config":  "the configuration " + r.Config + "; no choice saved",
		"default": "the default; no choice saved, none configured",
	}[r.KnobFrom]
	desc := map[string]string{
		"running":         "the running daemon's setup: it applies " + configName(r.Config) + " as it is now",
		"file":            "the file " + configName(r.Config) + ", changed since the running daemon read it (systemctl reload schedpolicyd applies it)",
		"file, no daemon": "the file " + configName(r.Config) + " (no daemon answers on the bus)",
	}[r.Describes]
	if why, ok := strings.CutPrefix(r.Describes, "file, unknown: "); ok {
		desc = "the file " + configName(r.Config) + " (whether a daemon runs is unknown: " + why + ")"
	}
	fmt.Fprintf(w, "describes:     %s\n", desc)
	fmt.Fprintf(w, "knob:          power_aware=%d power_aware_policy=%s (%s)\n", r.PowerAware, r.PowerAwarePolicy, from)
	fmt.Fprintf(w, "policy:        %s\n", r.Policy)
	if r.KernelKnob != "" {
		fmt.Fprintf(w, "  kernel knob: %s (written while it holds the daemon's last value)\n", r.KernelKnob)
	}
}

// writeProbePlacement prints the placement and why, the managed slices
// or cgroup parent, and each user manager's state.
func writeProbePlacement(w io.Writer, r probeReport) {
	fmt.Fprintf(w, "placement:     %s (%s)\n", r.Placement, r.PlacementWhy)
	if len(r.Manage) > 0 {
		fmt.Fprintf(w, "  manage:      %s\n", strings.Join(r.Manage, " "))
	}
	if r.CgroupRoot != "" {
		fmt.Fprintf(w, "  cgroup root: %s\n", r.CgroupRoot)
	}
	for _, m := range r.UserManagers {
		switch {
		case m.Delegated && m.InUse:
			fmt.Fprintf(w, "  user:        %s: cpuset delegated now and in use by its units; its units are placed through it\n", m.Unit)
		case m.Delegated:
			// A manager already running when cpuset reached its cgroup
			// (the package's daemon-reload) never turns it on for its
			// units: its AllowedCPUs= is then stored, not applied, until
			// the manager starts again (seen in the VM, systemd 252).
			fmt.Fprintf(w, "  user:        %s: cpuset delegated now (none of its units uses it yet); its units are placed through it, from the user's next login if this manager was already running when cpuset was delegated\n", m.Unit)
		default:
			fmt.Fprintf(w, "  user:        %s: placed as a whole, never confined: %s\n", m.Unit, m.Why)
		}
		switch {
		case m.Apps == 0:
		case m.FocusMarked == 0:
			fmt.Fprintf(w, "    focus:     none of its %d apps carries %s: the desktop says nothing of the focus; its apps are left unconfined\n", m.Apps, units.FocusXattr)
		default:
			fmt.Fprintf(w, "    focus:     %d of its %d apps carry %s: the desktop says which app has the focus\n", m.FocusMarked, m.Apps, units.FocusXattr)
		}
	}
}

// writeProbePowerProfiles prints power_profiles_api's mode and action,
// the owners of the power-profiles names and what is installed.
func writeProbePowerProfiles(w io.Writer, r probeReport) {
	fmt.Fprintf(w, "power profiles: %s: %s\n", r.PowerProfiles.Mode, r.PowerProfiles.Action)
	for _, name := range []string{"org.freedesktop.UPower.PowerProfiles", "net.hadess.PowerProfiles"} {
		if o, ok := r.PowerProfiles.Owners[name]; ok {
			fmt.Fprintf(w, "  owner:       %s: %s\n", name, o)
		}
	}
	if r.PowerProfiles.Installed != "" {
		fmt.Fprintf(w, "  installed:   %s\n", r.PowerProfiles.Installed)
	}
}

// printEnergyProbe prints probe's energy lines: the source and whether it
// measures now, then each RAPL zone and system battery.
func printEnergyProbe(w io.Writer, e energy.ProbeResult) {
	state := "measuring"
	if !e.Measuring {
		state = "not measuring now: " + e.Why
	}
	fmt.Fprintf(w, "energy:        %s (%s)\n", e.Source, state)
	for _, z := range e.Zones {
		role := "summed"
		switch {
		case z.Parent != "":
			role = "part of " + z.Parent + ", not summed"
		case !z.Summed:
			role = "the platform, which contains the packages; not summed"
		}
		if z.Error != "" {
			role = "unreadable: " + z.Error
		}
		fmt.Fprintf(w, "  rapl zone:   %s %s: %s\n", z.Zone, z.Name, role)
	}
	for _, b := range e.Batteries {
		status := b.Status
		if status == "" {
			status = "(no status)"
		}
		if b.Watts != nil {
			fmt.Fprintf(w, "  battery:     %s %s, %.2f W (%s)\n", b.Supply, status, *b.Watts, b.From)
		} else {
			fmt.Fprintf(w, "  battery:     %s %s, no power reading: %s\n", b.Supply, status, b.Error)
		}
	}
}

func configName(path string) string {
	if path == "" {
		return "(no configuration file)"
	}
	return path
}

// writeProbeSchedulers prints whether EAS runs (and why not), the
// sched_ext scheduler, and what the daemon does beside them and
// intel-lpmd (whose state writeProbeTopology prints where it matters).
func writeProbeSchedulers(w io.Writer, s daemon.Schedulers) {
	if s.EAS.State == "" {
		return // no topology was read
	}
	eas, scx := s.Summary()
	fmt.Fprintf(w, "schedulers:\n")
	fmt.Fprintf(w, "  EAS:         %s\n", eas)
	fmt.Fprintf(w, "               sched_energy_aware %s, energy model %s, governor %s, SMT %s, asymmetric %s\n",
		sysctlWord(s.EAS.Sysctl), s.EAS.EnergyModel, orNone(s.EAS.Governor), yesNo(s.EAS.SMT), yesNo(s.EAS.Asymmetric))
	fmt.Fprintf(w, "  sched_ext:   %s\n", scx)
	for _, d := range s.Does {
		fmt.Fprintf(w, "  the daemon:  %s\n", d)
	}
}

func sysctlWord(e sysfs.EnergyAware) string {
	switch {
	case !e.Present:
		return "absent"
	case e.Value == "":
		return "empty"
	}
	return e.Value
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}
