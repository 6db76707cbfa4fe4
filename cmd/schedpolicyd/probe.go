package main

import (
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/schedpolicyd/schedpolicyd/acpi"
	"github.com/schedpolicyd/schedpolicyd/daemon"
	"github.com/schedpolicyd/schedpolicyd/daemon/bus"
	"github.com/schedpolicyd/schedpolicyd/daemon/energy"
	"github.com/schedpolicyd/schedpolicyd/daemon/placement/units"
	"github.com/schedpolicyd/schedpolicyd/daemon/statefile"
	"github.com/schedpolicyd/schedpolicyd/policy"
	"github.com/schedpolicyd/schedpolicyd/sysfs"
)

// probeReport is the JSON shape of `schedpolicyd probe --json`.
type probeReport struct {
	PowerSource      string          `json:"power_source"` // ac | battery | unknown
	Reason           string          `json:"reason"`
	Evidence         []acpi.Evidence `json:"evidence"`
	Boost            string          `json:"boost"`  // 1 | 0 | unsupported
	Policy           string          `json:"policy"` // effective policy
	PowerAware       int             `json:"power_aware"`
	PowerAwarePolicy string          `json:"power_aware_policy"`
	// KnobFrom says where the knob comes from: "state" (a choice saved in
	// the state directory), "config" (the configuration file's
	// power_aware and power_aware_policy; no choice saved) or "default"
	// (neither).
	KnobFrom string `json:"knob_from"`
	// Config is the configuration file read; "" when none was (the
	// default path does not exist).
	Config string `json:"config"`
	// Describes says whose setup this report shows: "running" (the daemon
	// on the bus applies the configuration file as it is now), "file"
	// (the file changed since the running daemon read it: a reload applies
	// it; every setting below is the file's), "file, no daemon" (none
	// answers on the bus) or "file, unknown: WHY".
	Describes string `json:"describes"`
	// Placement is how workloads would be placed ("systemd" or
	// "cgroupfs", from the configuration's placement, "auto" resolved),
	// PlacementWhy why, and Manage the slices placed with "systemd".
	Placement    string `json:"placement"`
	PlacementWhy string `json:"placement_why"`
	// CgroupRoot is the managed parent cgroup with placement "cgroupfs"
	// ("auto" resolved; "" for none).
	CgroupRoot string   `json:"cgroup_root,omitempty"`
	Manage     []string `json:"manage,omitempty"`
	// UserManagers: with a user slice (app.slice, background.slice,
	// session.slice) in Manage on cgroup v2 (below the sysfs root's
	// fs/cgroup), each running user's manager, whether its own units can
	// be placed now (cpuset delegated to it) or it is placed as a whole,
	// and whether the user's desktop says which app has the focus.
	UserManagers []units.UserManagerProbe `json:"user_managers,omitempty"`
	Topology     probeTopology            `json:"topology"`
	// CPUClasses are the efficiency classes (P-cores, E-cores, LP
	// E-cores; big.LITTLE), most efficient first, one class ("all") on a
	// homogeneous machine; CPUClassRule is the sysfs rung that separated
	// them (pmu, cpu_capacity, l3+max_freq, max_freq) or homogeneous.
	CPUClasses   []probeClass `json:"cpu_classes"`
	CPUClassRule string       `json:"cpu_class_rule"`
	// IntelLpmd is whether intel-lpmd owns its bus name (asked without
	// starting it) and, when it runs on a machine with LP E-cores, that
	// the daemon leaves their confinement to it.
	IntelLpmd daemon.LpmdProbe `json:"intel_lpmd"`
	// Schedulers says whether the kernel's Energy Aware Scheduling runs
	// and why not, whether a sched_ext BPF scheduler is loaded, whether
	// intel-lpmd runs, and what the daemon does beside them
	// (daemon.ReadSchedulers; docs/HYBRID-PLACEMENT.md §6).
	Schedulers daemon.Schedulers `json:"schedulers"`
	// Energy is which energy source the daemon would measure with.
	Energy energy.ProbeResult `json:"energy"`
	// PowerProfiles is power_profiles_api and, from the configured bus,
	// who owns the power-profiles names and whether the daemon follows or
	// serves them.
	PowerProfiles bus.PowerProfilesProbe `json:"power_profiles"`
	// BoostOwner is who else manages cpufreq boost, with the evidence
	// (daemon.BoostOwner: amd_pstate dynamic EPP, or the followed
	// power-profiles daemon with amd-pstate); "" nobody: boost_on_battery
	// would write it.
	BoostOwner string `json:"boost_owner"`
	// EnergyPrefs is, for EPP and the platform profile, what the machine
	// offers, who else owns the knob and what the daemon does with it
	// (daemon.ProbePrefs).
	EnergyPrefs []daemon.PrefProbe `json:"energy_prefs"`
	// KernelKnob is the real kernel sched_policy knob's value, "" when the
	// kernel has none; the daemon writes it only while it holds the value
	// it last wrote.
	KernelKnob string   `json:"kernel_knob"`
	Warnings   []string `json:"warnings,omitempty"`
}

type probeTopology struct {
	Online   string   `json:"online"`   // cpulist of online CPUs
	CPUs     int      `json:"cpus"`     // online logical CPUs
	Cores    int      `json:"cores"`    // physical cores (distinct core_cpus_list)
	Packages int      `json:"packages"` // distinct package_cpus_list
	CoreList []string `json:"core_list"`
	PkgList  []string `json:"package_list"`
}

// probeClass is one efficiency class in `probe --json`'s cpu_classes,
// most efficient first (sysfs.CPUClasses).
type probeClass struct {
	Name string `json:"name"` // LPE, E, P (Intel); E, P (AMD); little, mid, big; all (one class)
	CPUs string `json:"cpus"` // cpulist
	// Capacity is relative to the biggest CPU (1024), CapacityFrom its
	// source: cpu_capacity, or derived from highest_perf or
	// cpuinfo_max_freq.
	Capacity     int    `json:"capacity"`
	CapacityFrom string `json:"capacity_from"`
	Cores        int    `json:"cores"`    // physical cores in the class
	Evidence     string `json:"evidence"` // the sysfs values that make the class
	// Order is the class's CPUs, most performant first by CPPC
	// highest_perf or amd_pstate_prefcore_ranking, when that differs
	// from ascending order (favoured cores).
	Order string `json:"order,omitempty"`
	// CostFrom says where the class's energy costs come from, strongest
	// first: the kernel's energy model (its domain), one derived from
	// cpufreq's frequencies and a core type's published coefficients,
	// or the published class ratios (the weakest source); only with more
	// than one class (daemon.MachineEnergy).
	CostFrom string `json:"cost_from,omitempty"`
}

// probeMain prints what the daemon would decide, reading only: no writes,
// no mounts; on the bus only who owns the power-profiles names (--bus,
// default the configuration's bus, else system; bus.ProbePowerProfiles). It reads the configuration file as the daemon does
// (--config, default /etc/schedpolicyd/schedpolicyd.conf; a missing
// default is no error): its sysfs_root and state_dir are the defaults of
// those flags, and its power_aware and power_aware_policy the knob until a
// choice is saved in the state directory (statefile.State.StartKnob). A bad
// file is a usage error (2), as for the daemon; a sysfs root that cannot
// be opened is 1. What cannot be read under the root becomes a warning of
// the report.
func probeMain(args []string, stdout, stderr io.Writer) int {
	o, code, ok := parseProbeFlags(args, stdout, stderr)
	if !ok {
		return code
	}
	fc, err := loadConfig(o.configPath, o.set["config"])
	if err != nil {
		fmt.Fprintf(stderr, "schedpolicyd probe: %v\n", err)
		return 2
	}
	cfg := daemon.Config{SysfsRoot: o.root, StateDir: o.stateDir, Placement: "auto", Bus: o.bus, ProcRoot: o.procRoot}
	fc.apply(&cfg, o.set)
	fs, err := sysfs.NewFS(cfg.SysfsRoot)
	if err != nil {
		fmt.Fprintf(stderr, "schedpolicyd probe: %v\n", err)
		return 1
	}
	r := probe(fs, cfg, fc)
	if o.json {
		return writeJSON(stdout, r)
	}
	writeProbeText(stdout, r, cfg.StateDir)
	return 0
}

// probeOptions are probe's flags as given.
type probeOptions struct {
	root       string          // --sysfs-root
	procRoot   string          // --proc-root
	stateDir   string          // --state-dir
	configPath string          // --config
	bus        string          // --bus
	json       bool            // --json
	set        map[string]bool // the flags given on the command line, by name
}

// parseProbeFlags parses probe's command line. ok is false when the
// caller should return code at once: 0 after --help, 2 on a usage error
// (parseFlags).
func parseProbeFlags(args []string, stdout, stderr io.Writer) (o probeOptions, code int, ok bool) {
	fl := flag.NewFlagSet("schedpolicyd probe", flag.ContinueOnError)
	fl.SetOutput(stderr)
	fl.StringVar(&o.root, "sysfs-root", sysfs.DefaultRoot, "sysfs root to read (a mock tree works); default: the configuration's sysfs_root, else /sys")
	fl.StringVar(&o.procRoot, "proc-root", "/proc", "procfs root to read sched_energy_aware from (a mock tree works)")
	fl.StringVar(&o.stateDir, "state-dir", daemon.DefaultStateDir, "read the saved knob from this directory; default: the configuration's state_dir, else /var/lib/schedpolicyd")
	fl.StringVar(&o.configPath, "config", DefaultConfigPath, "TOML configuration file, see schedpolicyd.conf(5): the knob until a choice is saved, and the defaults of --sysfs-root and --state-dir")
	fl.BoolVar(&o.json, "json", false, "print JSON instead of text")
	fl.StringVar(&o.bus, "bus", "system", "the bus to ask, starting nothing (system, session, an address; none: no bus at all): who owns the power-profiles names and intel-lpmd's, the power-profiles units systemd has, and the running daemon's ConfigDigest; default: the configuration's bus")
	fl.Usage = func() {
		fmt.Fprintln(fl.Output(), "Usage: schedpolicyd probe [--sysfs-root DIR] [--proc-root DIR] [--state-dir DIR] [--config FILE] [--bus BUS] [--json]")
		fl.PrintDefaults()
	}
	if code, ok = parseFlags(fl, "schedpolicyd probe", args, stdout, stderr); !ok {
		return o, code, false
	}
	o.set = map[string]bool{}
	fl.Visit(func(f *flag.Flag) { o.set[f.Name] = true })
	return o, 0, true
}

// probe reads what the daemon would decide on fs with cfg (the flags with
// the configuration file fc applied). What cannot be read becomes a
// warning, in the order read.
func probe(fs sysfs.FS, cfg daemon.Config, fc fileConfig) probeReport {
	r := probeReport{Config: fc.Path}
	r.probePlacement(cfg, fs.Root())
	dec, err := acpi.Read(fs)
	if err != nil {
		r.Warnings = append(r.Warnings, err.Error())
	}
	r.PowerSource, r.Reason, r.Evidence = string(dec.Source), dec.Reason, dec.Evidence
	if r.Boost, err = fs.Boost(); err != nil {
		r.Warnings = append(r.Warnings, err.Error())
	}
	r.probeKnob(cfg, dec.Source)
	r.probeTopology(fs, cfg.Bus, cfg.ProcRoot)
	r.Energy = energy.Probe(fs, dec.Source == acpi.Battery)
	r.Describes = describes(fc.Digest, bus.ProbeConfigDigest(cfg.Bus))
	r.PowerProfiles = bus.ProbePowerProfiles(cfg.Bus, fc.PowerProfilesAPIMode(), fc.PowerProfilesUnits)
	ppOwner := ""
	if name, ok := strings.CutPrefix(r.PowerProfiles.Action, "follow "); ok {
		ppOwner = name + " (" + r.PowerProfiles.Owners[name] + ")"
	}
	r.BoostOwner = daemon.BoostOwner(fs, ppOwner)
	r.EnergyPrefs = daemon.ProbePrefs(fs, cfg, ppOwner)
	r.KernelKnob, _ = sysfs.ReadAttr(fs.Path("devices/system/cpu/sched_policy/current_sched_policy"))
	r.Warnings = append(r.Warnings, r.Energy.Warnings...)
	return r
}

// probePlacement fills the placement cfg resolves to, and what it places:
// the cgroupfs parent (with a warning for one another manager owns), or
// the slices managed with systemd and, for user slices, the users'
// managers.
func (r *probeReport) probePlacement(cfg daemon.Config, sysfsRoot string) {
	r.Placement, r.PlacementWhy = daemon.ResolvePlacement(cfg.Placement)
	if r.Placement == daemon.PlacementCgroupfs {
		c := daemon.Config{CgroupRoot: cfg.CgroupRoot}
		if c.CgroupRoot == "" {
			c.CgroupRoot = "auto"
		}
		resolveCgroupRoot(&c)
		r.CgroupRoot = c.CgroupRoot
		if w := daemon.ForeignCgroupRoot(r.CgroupRoot); w != "" {
			r.Warnings = append(r.Warnings, w)
		}
	}
	if r.Placement == daemon.PlacementSystemd {
		r.Manage = cfg.Manage
		if r.Manage == nil {
			r.Manage = daemon.DefaultManage
		}
		for _, m := range r.Manage {
			if m == "app.slice" || m == "background.slice" || m == "session.slice" {
				r.UserManagers = units.ProbeUserManagers(sysfsRoot)
				break
			}
		}
	}
}

// probeKnob fills the knob the daemon would start with (a choice saved in
// cfg.StateDir, else the configuration's, else the default), where it
// comes from, and the policy it gives on source.
func (r *probeReport) probeKnob(cfg daemon.Config, source acpi.Source) {
	st, err := statefile.LoadState(cfg.StateDir)
	if err != nil {
		r.Warnings = append(r.Warnings, err.Error())
	}
	knob := st.StartKnob(cfg.DefaultKnob)
	switch {
	case st.Chosen:
		r.KnobFrom = "state"
	case cfg.DefaultKnob != nil:
		r.KnobFrom = "config"
	default:
		r.KnobFrom = "default"
	}
	r.PowerAware, r.PowerAwarePolicy = int(knob.PowerAware), string(knob.PowerAwarePolicy)
	r.Policy = string(knob.Effective(string(source)))
}

// probeTopology fills the online CPUs, cores and packages under fs, the
// efficiency classes, intel-lpmd's state (asked on busName) and the other
// schedulers (EAS read below procRoot too); a topology that cannot be
// read is a warning and leaves them empty.
func (r *probeReport) probeTopology(fs sysfs.FS, busName, procRoot string) {
	topo, err := fs.CPUTopology()
	if err != nil {
		r.Warnings = append(r.Warnings, err.Error())
		return
	}
	r.Topology = probeTopology{Online: topo.Online.String(), CPUs: topo.Online.Size()}
	for _, c := range topo.Cores() {
		r.Topology.CoreList = append(r.Topology.CoreList, c.String())
	}
	for _, p := range topo.Packages() {
		r.Topology.PkgList = append(r.Topology.PkgList, p.String())
	}
	r.Topology.Cores, r.Topology.Packages = len(r.Topology.CoreList), len(r.Topology.PkgList)
	classes := fs.CPUClasses(topo)
	r.IntelLpmd = daemon.ProbeLpmd(busName, classes)
	if procRoot == "" {
		procRoot = "/proc"
	}
	r.Schedulers = daemon.ReadSchedulers(fs, procRoot, topo, classes, r.IntelLpmd.State, r.IntelLpmd.StepAside)
	r.Warnings = append(r.Warnings, r.Schedulers.Warnings...)
	r.CPUClassRule = classes.Rule
	costs := daemon.MachineEnergy(policy.SNBLaptop, fs, classes)
	for i, cl := range classes.Classes {
		pc := probeClass{Name: cl.Name, CPUs: cl.CPUs.String(), Capacity: cl.Capacity, CapacityFrom: cl.CapacityFrom, Evidence: cl.Evidence}
		for _, c := range topo.Cores() {
			if c.IsSubsetOf(cl.CPUs) {
				pc.Cores++
			}
		}
		if !slices.IsSorted(cl.Order) {
			pc.Order = strings.Trim(strings.Join(strings.Fields(fmt.Sprint(cl.Order)), ","), "[]")
		}
		if i < len(costs.ClassFrom) {
			pc.CostFrom = costs.ClassFrom[i]
		}
		r.CPUClasses = append(r.CPUClasses, pc)
	}
}

// describes compares the digest of the configuration file read (file, ""
// without one) with the running daemon's (bus.ProbeConfigDigest): see
// probeReport.Describes.
func describes(file string, running bus.ConfigDigestProbe) string {
	switch {
	case running.Err != "":
		return "file, unknown: " + running.Err
	case !running.Running:
		return "file, no daemon"
	case running.Digest == file:
		return "running"
	}
	return "file"
}
