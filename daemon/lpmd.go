package daemon

import (
	"fmt"

	"github.com/schedpolicyd/schedpolicyd/daemon/bus"
	"github.com/schedpolicyd/schedpolicyd/policy"
	"github.com/schedpolicyd/schedpolicyd/sysfs"
)

// Stepping aside for intel-lpmd (Intel's Low Power Mode daemon, "Energy
// Optimizer"): in its low-power mode it confines work to the LP E-cores
// with a cpuset of its own (systemd AllowedCPUs= on the slices, or a
// cgroup partition). While it runs the daemon leaves that confinement to
// it: the power-aware policies pack nothing onto the LPE class
// (policy.CPUDesc.Reserved) and the log and probe say so.

// LpmdStepAside describes what the daemon leaves to intel-lpmd running
// as owner on a machine with the given classes: "" when it does not run
// or the machine has no LPE class (nothing to leave).
func LpmdStepAside(owner string, c sysfs.CPUClasses) string {
	if owner == "" {
		return ""
	}
	for _, cl := range c.Classes {
		if cl.Name == sysfs.ClassLPE && c.Hybrid() {
			return fmt.Sprintf("intel-lpmd (%s %s) confines work to the LP E-cores %s itself; schedpolicyd packs nothing onto them", bus.LpmdName, owner, cl.CPUs)
		}
	}
	return ""
}

// reserveLPE marks the LPE class's CPUs Reserved in descs.
func reserveLPE(descs []policy.CPUDesc, c sysfs.CPUClasses) {
	for i := range descs {
		if k := c.Of(descs[i].ID); k >= 0 && c.Classes[k].Name == sysfs.ClassLPE {
			descs[i].Reserved = true
		}
	}
}

// setLpmd records intel-lpmd's owner ("" not running) and, when it came
// or went, reads the topology again so that the LP E-cores are left to it
// or taken back, saying so once, and plans.
func (d *Daemon) setLpmd(owner string) {
	if owner == d.lpmdOwner {
		return
	}
	was := d.lpmdOwner
	d.lpmdOwner = owner
	d.readTopology()
	if owner == "" && was != "" {
		d.log.WithField("owner", was).Info("intel-lpmd left the bus; the LP E-cores are packed again")
	}
	d.recompute("intel-lpmd "+map[bool]string{true: "started", false: "stopped"}[owner != ""], true)
}

// LpmdProbe is what `schedpolicyd probe` says about intel-lpmd.
type LpmdProbe struct {
	// Owner is the unique name owning bus.LpmdName, "" none.
	Owner string `json:"owner,omitempty"`
	// State is "running", "not running" or "unknown: WHY" (no bus).
	State string `json:"state"`
	// StepAside is what the daemon leaves to it (LpmdStepAside), ""
	// nothing.
	StepAside string `json:"step_aside,omitempty"`
}

// ProbeLpmd asks busAddr ("system", "session", an address; "none":
// unknown) who owns bus.LpmdName, starting nothing, and what the daemon
// would leave to it on a machine with classes c.
func ProbeLpmd(busAddr string, c sysfs.CPUClasses) LpmdProbe {
	if busAddr == "" {
		busAddr = "system"
	}
	if busAddr == "none" {
		return LpmdProbe{State: "unknown: bus none"}
	}
	owner, err := bus.LpmdOwnerAt(busAddr)
	if err != nil {
		return LpmdProbe{State: "unknown: no bus: " + err.Error()}
	}
	p := LpmdProbe{State: "not running", Owner: owner}
	if p.Owner != "" {
		p.State = "running"
		p.StepAside = LpmdStepAside(p.Owner, c)
	}
	return p
}
