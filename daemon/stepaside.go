package daemon

import (
	"fmt"
	"strings"

	"github.com/schedpolicyd/schedpolicyd/sysfs"
)

// Stepping aside: before writing a knob another owner
// may manage, the daemon looks for that owner; if there is one it says so
// once (a warning naming the evidence) and does not write.

// Files read as evidence, relative to the sysfs root.
const (
	// amdPstateDynamicEPP is 1 while the kernel's amd_pstate driver
	// changes the energy-performance preference itself on power-source
	// changes (Linux 6.16+, dynamic_epp): it owns the trade-off boost is
	// part of.
	amdPstateDynamicEPP = "devices/system/cpu/amd_pstate/dynamic_epp"
	// scalingDriver0 is CPU 0's cpufreq driver ("amd-pstate-epp", …).
	scalingDriver0 = "devices/system/cpu/cpu0/cpufreq/scaling_driver"
)

// BoostOwner names who else manages cpufreq boost, with the evidence, or
// "" when nobody does: the kernel's amd_pstate dynamic EPP
// (amd_pstate/dynamic_epp = 1), or ppOwner (the power-profiles daemon
// followed, e.g. "net.hadess.PowerProfiles (:1.4)"; "" none) while CPU 0's
// scaling_driver is amd-pstate or amd-pstate-epp, whose power-profiles
// driver sets boost per profile. Unreadable files are no evidence.
func BoostOwner(fs sysfs.FS, ppOwner string) string {
	if v, err := sysfs.ReadAttr(fs.Path(amdPstateDynamicEPP)); err == nil && v == "1" {
		return "the kernel's amd_pstate dynamic EPP (" + amdPstateDynamicEPP + " = 1)"
	}
	if ppOwner != "" {
		if drv, err := sysfs.ReadAttr(fs.Path(scalingDriver0)); err == nil && strings.HasPrefix(drv, "amd-pstate") {
			return fmt.Sprintf("the power-profiles daemon %s, whose amd-pstate driver manages boost (%s = %s)", ppOwner, scalingDriver0, drv)
		}
	}
	return ""
}

// ppOwner names the power-profiles daemon followed, "NAME (OWNER)", for
// BoostOwner and PrefAside; "" none.
func (c *decider) ppOwner() string {
	if c.follow.name == "" {
		return ""
	}
	return c.follow.name + " (" + c.follow.owner + ")"
}

// stepAside reports, once per owner, that knob is left to owner.
func (d *Daemon) stepAside(knob, owner string) {
	if d.asideSaid == nil {
		d.asideSaid = map[string]string{}
	}
	if d.asideSaid[knob] == owner {
		return
	}
	d.asideSaid[knob] = owner
	if owner != "" {
		d.log.WithFields(map[string]any{"knob": knob, "owner": owner}).Warn("another owner manages this knob; not writing it")
	}
}
