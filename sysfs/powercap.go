package sysfs

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"strconv"
	"strings"
)

// PowercapZone is one power zone of the kernel's power capping framework,
// <root>/class/powercap/<Zone>/ (Documentation/power/powercap/powercap.rst):
// a RAPL package ("intel-rapl:0", name "package-0"), one of its subzones
// ("intel-rapl:0:0" core, "intel-rapl:0:1" uncore, "intel-rapl:0:2" dram)
// or the platform ("intel-rapl:1", name "psys"). AMD processors since Zen 2
// show their package zones under the same intel-rapl control type.
type PowercapZone struct {
	// Zone is the directory name: "intel-rapl:0", "intel-rapl:0:2".
	Zone string
	// Parent is the zone this one is a subzone of ("intel-rapl:0" for
	// "intel-rapl:0:2"); "" for a top-level zone.
	Parent string
	// Name is the zone's name attribute ("package-0", "core", "uncore",
	// "dram", "psys"); "" if it cannot be read.
	Name string
	// EnergyUJ is energy_uj, the zone's energy counter in µJ. It counts up
	// from an arbitrary value and wraps to 0 after MaxEnergyRangeUJ. Valid
	// only when Err is nil.
	EnergyUJ uint64
	// MaxEnergyRangeUJ is max_energy_range_uj (µJ), the counter's range
	// (RAPL: 2³² energy units, about 262 kJ on Intel and 65 kJ on AMD).
	// Valid only when Err is nil.
	MaxEnergyRangeUJ uint64
	// PowerLimitUW is the largest readable constraint_N_power_limit_uw
	// (µW; RAPL's long- and short-term limits PL1 and PL2); 0 when none
	// can be read.
	PowerLimitUW uint64
	// Err is why the counter cannot be used, nil when it can: the read
	// error of energy_uj or max_energy_range_uj (errors.Is(Err,
	// fs.ErrPermission) where energy_uj is readable by root only, as on
	// kernels since November 2020, CVE-2020-8694), a parse error, or
	// ErrEnergyRange.
	Err error
}

// ErrEnergyRange is a PowercapZone.Err for a counter outside its range:
// max_energy_range_uj is 0, or energy_uj is above it. The reading is not
// an energy.
var ErrEnergyRange = errors.New("energy_uj outside max_energy_range_uj")

// TopLevel reports whether the zone is not a subzone (a package, or psys).
func (z PowercapZone) TopLevel() bool { return z.Parent == "" }

// PowercapZones lists the RAPL zones below <root>/class/powercap, top-level
// zones and subzones, ordered by their numbers (intel-rapl:0, intel-rapl:0:0,
// intel-rapl:0:1, intel-rapl:1, …, intel-rapl:10). Only directories named
// intel-rapl:N[:M...] are zones: the control type directory intel-rapl and
// the intel-rapl-mmio zones (a second interface to the same package
// counters, which would count them twice) are left out. A missing powercap
// class is not an error: no zones (a VM, or no RAPL driver). A zone whose
// counter cannot be read is listed with its Err; the error return is only
// for a class directory that cannot be listed.
func (fsys FS) PowercapZones() ([]PowercapZone, error) {
	dir := fsys.Path("class", "powercap")
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", dir, err)
	}
	type numbered struct {
		zone PowercapZone
		nums []int
	}
	var zs []numbered
	for _, e := range entries {
		nums, ok := raplZoneNumbers(e.Name())
		if !ok {
			continue
		}
		d := dir + "/" + e.Name()
		if st, err := os.Stat(d); err != nil || !st.IsDir() { // real sysfs: a symlink into devices/virtual/powercap
			continue
		}
		z := PowercapZone{Zone: e.Name()}
		if len(nums) > 1 {
			z.Parent = raplZoneName(nums[:len(nums)-1])
		}
		z.Name, _ = ReadAttr(d + "/name")
		z.PowerLimitUW = maxPowerLimit(d)
		z.EnergyUJ, z.MaxEnergyRangeUJ, z.Err = readCounter(d)
		zs = append(zs, numbered{z, nums})
	}
	slices.SortFunc(zs, func(a, b numbered) int { return slices.Compare(a.nums, b.nums) })
	if len(zs) == 0 {
		return nil, nil
	}
	out := make([]PowercapZone, len(zs))
	for i, z := range zs {
		out[i] = z.zone
	}
	return out, nil
}

// raplZoneNumbers parses "intel-rapl:0:2" into [0 2]; ok is false for any
// other name.
func raplZoneNumbers(name string) ([]int, bool) {
	rest, ok := strings.CutPrefix(name, "intel-rapl:")
	if !ok {
		return nil, false
	}
	var nums []int
	for _, p := range strings.Split(rest, ":") {
		n, err := strconv.Atoi(p)
		if err != nil || n < 0 || p != strconv.Itoa(n) {
			return nil, false
		}
		nums = append(nums, n)
	}
	return nums, true
}

func raplZoneName(nums []int) string {
	var b strings.Builder
	b.WriteString("intel-rapl")
	for _, n := range nums {
		b.WriteString(":" + strconv.Itoa(n))
	}
	return b.String()
}

// readCounter reads energy_uj and max_energy_range_uj of zone directory d.
func readCounter(d string) (energy, rng uint64, err error) {
	read := func(file string) (uint64, error) {
		s, err := ReadAttr(d + "/" + file)
		if err != nil {
			return 0, err
		}
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return 0, &ParseError{Path: d + "/" + file, Err: err}
		}
		return v, nil
	}
	if energy, err = read("energy_uj"); err != nil {
		return 0, 0, err
	}
	if rng, err = read("max_energy_range_uj"); err != nil {
		return 0, 0, err
	}
	if rng == 0 || energy > rng {
		return 0, 0, fmt.Errorf("%s: energy_uj %d, max_energy_range_uj %d: %w", d, energy, rng, ErrEnergyRange)
	}
	return energy, rng, nil
}

// maxPowerLimit returns the largest constraint_N_power_limit_uw of zone
// directory d (µW), 0 when none can be read.
func maxPowerLimit(d string) uint64 {
	var best uint64
	for n := 0; n < 8; n++ {
		s, err := ReadAttr(fmt.Sprintf("%s/constraint_%d_power_limit_uw", d, n))
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				break
			}
			continue
		}
		if v, err := strconv.ParseUint(s, 10, 64); err == nil {
			best = max(best, v)
		}
	}
	return best
}
