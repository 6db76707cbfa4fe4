package sysfs

import (
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strconv"
	"strings"
)

// maxFreqStates bounds the frequencies read from one
// scaling_available_frequencies (real tables hold at most a few dozen).
const maxFreqStates = 256

// CPUFreqStates returns CPU id's frequencies in kHz, ascending, each
// once, and where they come from: cpufreq/scaling_available_frequencies
// (drivers with a frequency table: cpufreq-dt, scmi, qcom-cpufreq-hw;
// Documentation/admin-guide/pm/cpufreq.rst) as "scaling_available_frequencies",
// else cpuinfo_min_freq and cpuinfo_max_freq (intel_pstate, amd-pstate,
// which have no table) as "cpuinfo_min_freq/cpuinfo_max_freq". Errors: no
// readable frequency at all, a value that is not a positive number of kHz
// (at most 2^40), or more than 256 of them.
func (fsys FS) CPUFreqStates(id int) (khz []int64, from string, err error) {
	d := fsys.Path("devices/system/cpu", "cpu"+strconv.Itoa(id), "cpufreq")
	s, err := ReadAttr(d + "/scaling_available_frequencies")
	if err == nil {
		f := strings.Fields(s)
		if len(f) > maxFreqStates {
			return nil, "", fmt.Errorf("%s/scaling_available_frequencies: more than %d frequencies", d, maxFreqStates)
		}
		for _, w := range f {
			v, err := strconv.ParseInt(w, 10, 64)
			if err != nil || v <= 0 || v > maxEMValue {
				return nil, "", &ParseError{Path: d + "/scaling_available_frequencies", Err: fmt.Errorf("not a frequency: %q", w)}
			}
			khz = append(khz, v)
		}
		if len(khz) > 0 {
			slices.Sort(khz)
			return slices.Compact(khz), "scaling_available_frequencies", nil
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, "", err
	}
	for _, f := range []string{"cpuinfo_min_freq", "cpuinfo_max_freq"} {
		v, err := ReadIntAttr(d + "/" + f)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, "", err
		}
		if v <= 0 || v > maxEMValue {
			return nil, "", &ParseError{Path: d + "/" + f, Err: fmt.Errorf("%d is not a frequency", v)}
		}
		khz = append(khz, v)
	}
	if len(khz) == 0 {
		return nil, "", fmt.Errorf("%s: no frequency (scaling_available_frequencies, cpuinfo_min_freq, cpuinfo_max_freq): %w", d, fs.ErrNotExist)
	}
	slices.Sort(khz)
	return slices.Compact(khz), "cpuinfo_min_freq/cpuinfo_max_freq", nil
}

// CPUPart is an arm64 core's implementer and part number, from MIDR_EL1.
type CPUPart struct {
	Implementer uint8  // MIDR_EL1[31:24]: 0x41 Arm, 0x51 Qualcomm, 0x61 Apple
	Part        uint16 // MIDR_EL1[15:4]: 0xd05 Cortex-A55, 0xd0b Cortex-A76, 0xd44 Cortex-X1
}

// String reads like "0x41:0xd05".
func (p CPUPart) String() string { return fmt.Sprintf("%#02x:%#03x", p.Implementer, p.Part) }

// CPUPartOf reads CPU id's MIDR_EL1 from
// devices/system/cpu/cpuN/regs/identification/midr_el1 (arm64 only,
// readable by everyone; Documentation/arch/arm64/cpu-feature-registers.rst)
// and returns its implementer and part number. Errors: the file is
// missing (not arm64, or an older kernel) or not a hexadecimal register.
func (fsys FS) CPUPartOf(id int) (CPUPart, error) {
	p := fsys.Path("devices/system/cpu", "cpu"+strconv.Itoa(id), "regs/identification/midr_el1")
	s, err := ReadAttr(p)
	if err != nil {
		return CPUPart{}, err
	}
	v, err := strconv.ParseUint(strings.TrimPrefix(s, "0x"), 16, 64)
	if err != nil {
		return CPUPart{}, &ParseError{Path: p, Err: fmt.Errorf("not a hexadecimal register: %q", s)}
	}
	return CPUPart{Implementer: uint8(v >> 24), Part: uint16(v>>4) & 0xfff}, nil
}
