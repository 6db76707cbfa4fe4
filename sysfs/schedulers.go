package sysfs

import (
	"errors"
	"io/fs"
	"path/filepath"
	"strconv"
	"unicode/utf8"
)

// The other schedulers on the machine (issue 35, item 6): whether the
// kernel's Energy Aware Scheduling may run, and whether a sched_ext BPF
// scheduler replaces CFS. Each reader takes its root (sysfs, procfs) and
// reads attribute files only (ReadAttr: one read of at most 4096 bytes).

// EnergyAware is <procRoot>/sys/kernel/sched_energy_aware, the sysctl
// that enables and disables EAS (Documentation/admin-guide/sysctl/
// kernel.rst, "sched_energy_aware"). Since commit 8f833c82cdab
// ("sched/topology: Change behaviour of the 'sched_energy_aware' sysctl,
// based on the platform") it reads empty where EAS is not possible now,
// 0 where the administrator disabled it and 1 where it runs; before,
// 1 meant only "not disabled".
type EnergyAware struct {
	// Present: the file exists (a kernel with CONFIG_ENERGY_MODEL and
	// schedutil built in).
	Present bool `json:"present"`
	// Value is its content, whitespace trimmed: "1", "0" or "".
	Value string `json:"value"`
}

// ReadEnergyAware reads <procRoot>/sys/kernel/sched_energy_aware. A
// missing file is Present false and no error; any other read error is
// returned with the path.
func ReadEnergyAware(procRoot string) (EnergyAware, error) {
	v, err := ReadAttr(filepath.Join(procRoot, "sys/kernel/sched_energy_aware"))
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return EnergyAware{}, nil
	case err != nil:
		return EnergyAware{}, err
	}
	return EnergyAware{Present: true, Value: v}, nil
}

// SchedExt is the state of sched_ext, the BPF extensible scheduler class
// (Documentation/scheduler/sched-ext.rst): <root>/kernel/sched_ext/state
// and, while a BPF scheduler is attached, root/ops, its name.
type SchedExt struct {
	// Present: the kernel has sched_ext (the directory exists).
	Present bool `json:"present"`
	// State is "enabled", "disabled", or a transition ("enabling",
	// "disabling").
	State string `json:"state,omitempty"`
	// Ops is the attached scheduler's ops name (e.g. "lavd" for
	// scx_lavd, "simple"); "" when none is attached.
	Ops string `json:"ops,omitempty"`
}

// Loaded reports whether a BPF scheduler is attached or being attached.
func (s SchedExt) Loaded() bool {
	return s.State == "enabled" || s.State == "enabling"
}

// maxSchedExtName bounds State and Ops: a scheduler's ops name is at most
// SCX_OPS_NAME_LEN (128) bytes; longer content is cut, never kept whole.
const maxSchedExtName = 128

// SchedExt reads <root>/kernel/sched_ext/state and root/ops. A kernel
// without sched_ext (no directory) is Present false and no error; a
// missing root/ops is no scheduler attached. Content that is not UTF-8
// is quoted (strconv.Quote) and cut to maxSchedExtName bytes. Errors:
// state unreadable, with its path.
func (fsys FS) SchedExt() (SchedExt, error) {
	dir := fsys.Path("kernel/sched_ext")
	state, err := ReadAttr(filepath.Join(dir, "state"))
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return SchedExt{}, nil
	case err != nil:
		return SchedExt{}, err
	}
	s := SchedExt{Present: true, State: cleanName(state)}
	if ops, err := ReadAttr(filepath.Join(dir, "root/ops")); err == nil {
		s.Ops = cleanName(ops)
	}
	return s, nil
}

// cleanName is s, quoted when it is not printable UTF-8, at most
// maxSchedExtName bytes.
func cleanName(s string) string {
	if len(s) > maxSchedExtName {
		s = s[:maxSchedExtName]
	}
	if !utf8.ValidString(s) || strconv.Quote(s) != `"`+s+`"` {
		s = strconv.Quote(s)
	}
	return s
}

// ScalingGovernor reads cpu's cpufreq scaling_governor ("schedutil",
// "powersave", …); "" without cpufreq. Errors: other read errors.
func (fsys FS) ScalingGovernor(cpu int) (string, error) {
	v, err := ReadAttr(fsys.Path("devices/system/cpu", "cpu"+strconv.Itoa(cpu), "cpufreq/scaling_governor"))
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	return cleanName(v), err
}
