package sysfs

import (
	"errors"
	"fmt"
	"io/fs"
)

// Boost states as served in the tree's boost file and on D-Bus.
const (
	BoostOn          = "1"           // boost (turbo) permitted
	BoostOff         = "0"           // boost forbidden
	BoostUnsupported = "unsupported" // no boost control on this machine
)

// BoostFiles returns the paths that hold the global boost state, in the order
// Boost consults them: cpufreq/boost (1 = on; acpi-cpufreq, amd-pstate, cppc)
// then intel_pstate/no_turbo (inverted: 1 = off). See the kernel's
// Documentation/admin-guide/pm/cpufreq.rst and intel_pstate.rst.
func (fsys FS) BoostFiles() []string {
	return []string{
		fsys.Path("devices/system/cpu/cpufreq/boost"),
		fsys.Path("devices/system/cpu/intel_pstate/no_turbo"),
	}
}

// Boost reports the global cpufreq boost state: BoostOn, BoostOff or
// BoostUnsupported when neither file exists (VMs, containers, drivers
// without boost). An existing file that cannot be read or parsed (for
// example EAGAIN from intel_pstate while its driver is off) is an error.
func (fsys FS) Boost() (string, error) {
	files := fsys.BoostFiles()
	for i, p := range files {
		v, err := ReadIntAttr(p)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return BoostUnsupported, fmt.Errorf("boost: %w", err)
		}
		on := v != 0
		if i == 1 { // no_turbo is inverted
			on = !on
		}
		if on {
			return BoostOn, nil
		}
		return BoostOff, nil
	}
	return BoostUnsupported, nil
}
