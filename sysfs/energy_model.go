package sysfs

import (
	"os"
	"strconv"
	"strings"
)

// energyModelDir is the kernel's energy model in debugfs (root only),
// one directory per performance domain named after its first CPU, with a
// cpus cpulist and one ps:FREQ directory per performance state holding
// power (µW, or abstract units), performance (capacity units at that
// state, 6.x) and frequency (kHz). sched-ext's scx_utils reads the same
// layout (rust/scx_utils/src/energy_model.rs).
const energyModelDir = "kernel/debug/energy_model"

// ClassEnergyFromEM returns each class's energy per unit of work relative
// to the most performant class (the last, = 1), from the kernel's energy
// model: power / performance at the highest-frequency state of the
// performance domain holding the class's first CPU. ok is false when the
// energy model is absent or unreadable for any class (debugfs not
// mounted, not root, no EM), or describes nothing usable.
func (fsys FS) ClassEnergyFromEM(c CPUClasses) (cost []float64, ok bool) {
	dir := fsys.Path(energyModelDir)
	entries, err := os.ReadDir(dir)
	if err != nil || len(c.Classes) == 0 {
		return nil, false
	}
	type pd struct {
		cpus        CPUSet
		power, perf float64
		freq        int64
	}
	var pds []pd
	for _, e := range entries {
		if !strings.HasPrefix(e.Name(), "cpu") {
			continue
		}
		d := dir + "/" + e.Name()
		s, err := ReadAttr(d + "/cpus")
		if err != nil {
			continue
		}
		set, err := ParseCPUList(s)
		if err != nil {
			continue
		}
		states, err := os.ReadDir(d)
		if err != nil {
			continue
		}
		best := pd{cpus: set}
		for _, st := range states {
			f, found := strings.CutPrefix(st.Name(), "ps:")
			if !found {
				continue
			}
			freq, err := strconv.ParseInt(f, 10, 64)
			if err != nil || freq <= best.freq {
				continue
			}
			pw, err1 := ReadIntAttr(d + "/" + st.Name() + "/power")
			pf, err2 := ReadIntAttr(d + "/" + st.Name() + "/performance")
			if err1 != nil || err2 != nil || pw <= 0 || pf <= 0 {
				continue
			}
			best.freq, best.power, best.perf = freq, float64(pw), float64(pf)
		}
		if best.freq > 0 {
			pds = append(pds, best)
		}
	}
	per := make([]float64, len(c.Classes))
	for i, cl := range c.Classes {
		for _, p := range pds {
			if p.cpus.Contains(cl.CPUs.First()) {
				per[i] = p.power / p.perf
			}
		}
		if per[i] <= 0 {
			return nil, false
		}
	}
	top := per[len(per)-1]
	for i := range per {
		per[i] /= top
	}
	return per, true
}
