package sysfs

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// The energy-performance preference (EPP) of cpufreq policies and the ACPI
// platform profile: what a policy of schedpolicyd moves beside the CPUs
// (daemon/energypref). Sources: the kernel's
// Documentation/admin-guide/pm/intel_pstate.rst and amd-pstate.rst
// ("Energy vs Performance Hints": energy_performance_preference and
// energy_performance_available_preferences per policy, in active mode with
// HWP or CPPC EPP) and Documentation/userspace-api/sysfs-platform_profile.rst
// (platform_profile, platform_profile_choices).
const (
	// CPUFreqPolicyGlob matches the cpufreq policy directories.
	CPUFreqPolicyGlob = "devices/system/cpu/cpufreq/policy*"
	// EPPFile and EPPChoicesFile are in a policy's directory.
	EPPFile        = "energy_performance_preference"
	EPPChoicesFile = "energy_performance_available_preferences"
	// PlatformProfileFile and PlatformProfileChoicesFile are the ACPI
	// platform profile's legacy files (all handlers at once on Linux ≥
	// 6.14, which added class/platform-profile/).
	PlatformProfileFile        = "firmware/acpi/platform_profile"
	PlatformProfileChoicesFile = "firmware/acpi/platform_profile_choices"
)

// eppFileRE and the platform profile's name are the only files a
// preference record may name (PrefFileValid).
var eppFileRE = regexp.MustCompile(`^devices/system/cpu/cpufreq/policy[0-9]{1,6}/energy_performance_preference$`)

// PrefFileValid reports whether file, relative to the sysfs root, is one
// of the preference files: a policy's energy_performance_preference or
// the platform profile.
func PrefFileValid(file string) bool {
	return file == PlatformProfileFile || eppFileRE.MatchString(file)
}

// prefValueRE bounds a preference value: the kernel's names
// ("balance_power", "low-power") or intel_pstate's raw EPP number.
var prefValueRE = regexp.MustCompile(`^[a-z0-9_-]{1,32}$`)

// PrefValueValid reports whether v looks like a preference value (at most
// 32 bytes of a-z, 0-9, '_' and '-').
func PrefValueValid(v string) bool { return prefValueRE.MatchString(v) }

// EPPPolicy is one cpufreq policy that offers an energy-performance
// preference.
type EPPPolicy struct {
	// Name is the directory's name, "policy0".
	Name string
	// File is its energy_performance_preference, relative to the root.
	File string
	// CPUs are the policy's related_cpus (a cpulist; "" unreadable).
	CPUs string
	// Available are the names of energy_performance_available_preferences,
	// in the kernel's order ("default" included).
	Available []string
	// Governor is scaling_governor ("" unreadable) and Driver
	// scaling_driver ("intel_pstate", "amd-pstate-epp").
	Governor, Driver string
}

// Offers reports whether v is one of p's available preferences.
func (p EPPPolicy) Offers(v string) bool {
	for _, a := range p.Available {
		if a == v {
			return true
		}
	}
	return false
}

// EPPPolicies lists the cpufreq policies that have an
// energy_performance_preference file, in numeric order of their names. A
// policy without energy_performance_available_preferences, or whose list
// cannot be read (an inactive policy, all its CPUs offline: EBUSY), is
// left out: nothing can be chosen for it now. Errors: only a glob error
// (a malformed root).
func (fsys FS) EPPPolicies() ([]EPPPolicy, error) {
	dirs, err := filepath.Glob(filepath.Join(escapeGlob(fsys.root), CPUFreqPolicyGlob))
	if err != nil {
		return nil, err
	}
	num := func(d string) int {
		n, _ := strconv.Atoi(strings.TrimPrefix(filepath.Base(d), "policy"))
		return n
	}
	sort.Slice(dirs, func(i, j int) bool { return num(dirs[i]) < num(dirs[j]) })
	var out []EPPPolicy
	for _, d := range dirs {
		if _, err := ReadAttr(filepath.Join(d, EPPFile)); errors.Is(err, fs.ErrNotExist) {
			continue
		}
		avail, err := ReadAttr(filepath.Join(d, EPPChoicesFile))
		if err != nil || avail == "" {
			continue
		}
		p := EPPPolicy{Name: filepath.Base(d), File: fsys.rel(filepath.Join(d, EPPFile)), Available: strings.Fields(avail)}
		p.CPUs, _ = ReadAttr(filepath.Join(d, "related_cpus"))
		p.Governor, _ = ReadAttr(filepath.Join(d, "scaling_governor"))
		p.Driver, _ = ReadAttr(filepath.Join(d, "scaling_driver"))
		out = append(out, p)
	}
	return out, nil
}

// PlatformProfile is the ACPI platform profile's state.
type PlatformProfile struct {
	// Present: the platform_profile file exists.
	Present bool
	// Choices are platform_profile_choices, in the kernel's order.
	Choices []string
}

// Offers reports whether v is one of the choices.
func (p PlatformProfile) Offers(v string) bool {
	for _, c := range p.Choices {
		if c == v {
			return true
		}
	}
	return false
}

// PlatformProfile reads whether the platform profile exists and its
// choices. A profile whose choices cannot be read or are empty is not
// Present (nothing can be chosen).
func (fsys FS) PlatformProfile() PlatformProfile {
	if _, err := ReadAttr(fsys.Path(PlatformProfileFile)); err != nil {
		return PlatformProfile{}
	}
	c, err := ReadAttr(fsys.Path(PlatformProfileChoicesFile))
	if err != nil || c == "" {
		return PlatformProfile{}
	}
	return PlatformProfile{Present: true, Choices: strings.Fields(c)}
}

// ReadPref reads the preference file file (relative to the root; one
// PrefFileValid accepts). Errors: a file that is not a preference file,
// or the read's (ENOENT once its policy is gone, EBUSY from an inactive
// cpufreq policy).
func (fsys FS) ReadPref(file string) (string, error) {
	if !PrefFileValid(file) {
		return "", fmt.Errorf("%q is not an energy preference file", file)
	}
	return ReadAttr(fsys.Path(file))
}

// WritePref writes value to the preference file file (relative to the
// root). Errors: a file that is not a preference file or a value that
// PrefValueValid refuses (nothing is written), or the write's: EBUSY
// from intel_pstate or amd-pstate-epp for a preference other than
// "performance" under the performance governor (intel_pstate.rst, "Energy
// vs Performance Hints"; amd_pstate.c) and from an inactive policy,
// EINVAL for a value the driver does not offer, EOPNOTSUPP from a
// platform profile handler that refuses.
func (fsys FS) WritePref(file, value string) error {
	if !PrefFileValid(file) {
		return fmt.Errorf("%q is not an energy preference file", file)
	}
	if !PrefValueValid(value) {
		return fmt.Errorf("%q is not an energy preference value", value)
	}
	return WriteAttr(fsys.Path(file), value)
}
