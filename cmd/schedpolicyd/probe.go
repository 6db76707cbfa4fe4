package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/schedpolicyd/schedpolicyd/acpi"
	"github.com/schedpolicyd/schedpolicyd/daemon"
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
	Topology         probeTopology   `json:"topology"`
	Warnings         []string        `json:"warnings,omitempty"`
}

type probeTopology struct {
	Online   string   `json:"online"`   // cpulist of online CPUs
	CPUs     int      `json:"cpus"`     // online logical CPUs
	Cores    int      `json:"cores"`    // physical cores (distinct core_cpus_list)
	Packages int      `json:"packages"` // distinct package_cpus_list
	CoreList []string `json:"core_list"`
	PkgList  []string `json:"package_list"`
}

// probeMain prints what the daemon would decide, reading only: no writes,
// no mounts, no bus. The knob comes from the state directory when it holds
// a saved choice, else the defaults.
func probeMain(args []string, stdout, stderr io.Writer) int {
	fl := flag.NewFlagSet("schedpolicyd probe", flag.ContinueOnError)
	fl.SetOutput(stderr)
	root := fl.String("sysfs-root", sysfs.DefaultRoot, "sysfs root to read (a mock tree works)")
	stateDir := fl.String("state-dir", daemon.DefaultStateDir, "read the saved knob from this directory")
	asJSON := fl.Bool("json", false, "print JSON instead of text")
	fl.Usage = func() {
		fmt.Fprintln(fl.Output(), "Usage: schedpolicyd probe [--sysfs-root DIR] [--state-dir DIR] [--json]")
		fl.PrintDefaults()
	}
	if code, ok := parseFlags(fl, "schedpolicyd probe", args, stdout, stderr); !ok {
		return code
	}
	fs, err := sysfs.NewFS(*root)
	if err != nil {
		fmt.Fprintf(stderr, "schedpolicyd probe: %v\n", err)
		return 1
	}
	var r probeReport
	dec, err := acpi.Read(fs)
	if err != nil {
		r.Warnings = append(r.Warnings, err.Error())
	}
	r.PowerSource, r.Reason, r.Evidence = string(dec.Source), dec.Reason, dec.Evidence
	if r.Boost, err = fs.Boost(); err != nil {
		r.Warnings = append(r.Warnings, err.Error())
	}
	st, err := daemon.LoadState(*stateDir)
	if err != nil {
		r.Warnings = append(r.Warnings, err.Error())
	}
	knob := st.Knob
	r.PowerAware, r.PowerAwarePolicy = int(knob.PowerAware), string(knob.PowerAwarePolicy)
	r.Policy = string(knob.Effective(string(dec.Source)))
	topo, err := fs.CPUTopology()
	if err != nil {
		r.Warnings = append(r.Warnings, err.Error())
	} else {
		r.Topology = probeTopology{Online: topo.Online.String(), CPUs: topo.Online.Size()}
		for _, c := range topo.Cores() {
			r.Topology.CoreList = append(r.Topology.CoreList, c.String())
		}
		for _, p := range topo.Packages() {
			r.Topology.PkgList = append(r.Topology.PkgList, p.String())
		}
		r.Topology.Cores, r.Topology.Packages = len(r.Topology.CoreList), len(r.Topology.PkgList)
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(r); err != nil {
			return 1
		}
		return 0
	}
	fmt.Fprintf(stdout, "topology:      %s (%s), %s, %s\n", plural(r.Topology.CPUs, "CPU"), r.Topology.Online, plural(r.Topology.Cores, "core"), plural(r.Topology.Packages, "package"))
	fmt.Fprintf(stdout, "  cores:       %s\n", strings.Join(r.Topology.CoreList, " "))
	fmt.Fprintf(stdout, "  packages:    %s\n", strings.Join(r.Topology.PkgList, " "))
	fmt.Fprintf(stdout, "power source:  %s\n", r.PowerSource)
	fmt.Fprintf(stdout, "  reason:      %s\n", r.Reason)
	for _, e := range r.Evidence {
		fmt.Fprintf(stdout, "  evidence:    %s/%s = %s (%s)\n", e.Supply, e.Attribute, e.Value, e.Rule)
	}
	fmt.Fprintf(stdout, "boost:         %s\n", r.Boost)
	fmt.Fprintf(stdout, "knob:          power_aware=%d power_aware_policy=%s\n", r.PowerAware, r.PowerAwarePolicy)
	fmt.Fprintf(stdout, "policy:        %s\n", r.Policy)
	for _, w := range r.Warnings {
		fmt.Fprintf(stdout, "warning:       %s\n", w)
	}
	return 0
}

func plural(n int, word string) string {
	if n == 1 {
		return "1 " + word
	}
	return fmt.Sprintf("%d %ss", n, word)
}
