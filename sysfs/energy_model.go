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

// energyModelDir is the kernel's energy model in debugfs (root only,
// kernel/power/energy_model.c): one directory per performance domain,
// named after its device (cpuN, the domain's first CPU), holding cpus (a
// cpulist), flags (the domain's EM_PERF_DOMAIN_* bits, "%#lx") and one
// ps:FREQ directory per performance state holding frequency (kHz), power
// (µW, or abstract with EM_PERF_DOMAIN_ARTIFICIAL), cost (10 × power /
// performance, or the driver's get_cost() with an artificial domain),
// performance (capacity units at that state, Linux ≥ 6.9) and inefficient
// (EM_PERF_STATE_INEFFICIENT: 1 when a faster state costs no more).
// sched-ext's scx_utils reads the same layout
// (rust/scx_utils/src/energy_model.rs). Older kernels lack flags,
// performance and inefficient; the reader accepts that.
const energyModelDir = "kernel/debug/energy_model"

// The energy model's domain flags (include/linux/energy_model.h).
const (
	EMFlagMicrowatts         = 1 << 0 // EM_PERF_DOMAIN_MICROWATTS: power is in µW
	EMFlagSkipInefficiencies = 1 << 1 // EM_PERF_DOMAIN_SKIP_INEFFICIENCIES
	EMFlagArtificial         = 1 << 2 // EM_PERF_DOMAIN_ARTIFICIAL: abstract power, cost from the driver
)

// Bounds on what the energy model reader accepts: a debugfs tree is the
// kernel's, but the root may be any directory.
const (
	maxEMDomains = MaxCPUs // one domain per CPU at most (intel_pstate's hybrid EM)
	maxEMStates  = 512     // performance states per domain; real tables have ≤ 32
	maxEMValue   = 1 << 40 // any power (µW), cost, performance or kHz above is garbage
)

// EMPerfState is one performance state of an energy model's domain, as
// debugfs shows it.
type EMPerfState struct {
	KHz         int64 // frequency (kHz); intel_pstate's hybrid EM numbers its states 2..5 instead
	Power       int64 // µW, or abstract with EMFlagArtificial
	Cost        int64 // the kernel's cost; 0 when the file is absent (Linux < 5.x)
	Performance int64 // capacity units (0..1024) at this state; 0 when absent (Linux < 6.9)
	Inefficient bool  // a faster state of the domain costs no more
}

// EMPerfDomain is one performance domain of the kernel's energy model.
type EMPerfDomain struct {
	Name  string // the debugfs directory, e.g. cpu4
	CPUs  CPUSet
	Flags int64 // EMFlag* bits; -1 when the flags file is absent (before Linux 6.x)
	// States ascending by frequency.
	States []EMPerfState
}

// Artificial reports an abstract model (EMFlagArtificial): its power
// values are not watts and its costs are the driver's.
func (d EMPerfDomain) Artificial() bool { return d.Flags > 0 && d.Flags&EMFlagArtificial != 0 }

// ErrNoEnergyModel is returned by ReadEnergyModel when the root has no
// readable energy model: debugfs not mounted there, not root, or no
// driver registered one.
var ErrNoEnergyModel = errors.New("no readable energy model (debugfs energy_model)")

// ReadEnergyModel reads every performance domain of the kernel's energy
// model below the root (<root>/kernel/debug/energy_model/, debugfs as
// mounted at /sys/kernel/debug: it reads, never mounts) with ALL its
// performance states, domains ordered by their first CPU. It fails with
// ErrNoEnergyModel when the directory is missing or unreadable or holds
// no CPU domain, and with an error naming the file for a domain or state
// that is malformed (a bad cpulist, a number that does not parse or is
// out of range, a ps:FREQ whose frequency file disagrees, too many
// domains or states, a CPU in two domains); nothing is returned then.
func (fsys FS) ReadEnergyModel() ([]EMPerfDomain, error) {
	dir := fsys.Path(energyModelDir)
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNoEnergyModel, err)
	}
	var out []EMPerfDomain
	var seen CPUSet
	for _, e := range entries {
		if !e.IsDir() || !strings.HasPrefix(e.Name(), "cpu") {
			continue // other devices (GPUs) register domains too
		}
		if len(out) >= maxEMDomains {
			return nil, fmt.Errorf("%s: more than %d performance domains", dir, maxEMDomains)
		}
		d, err := readEMDomain(dir+"/"+e.Name(), e.Name())
		if err != nil {
			return nil, err
		}
		if !seen.Intersect(d.CPUs).IsEmpty() {
			return nil, fmt.Errorf("%s/%s/cpus: CPUs %s are in another domain too", dir, e.Name(), seen.Intersect(d.CPUs))
		}
		seen = seen.Union(d.CPUs)
		out = append(out, d)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w: %s holds no CPU domain", ErrNoEnergyModel, dir)
	}
	slices.SortFunc(out, func(a, b EMPerfDomain) int { return a.CPUs.First() - b.CPUs.First() })
	return out, nil
}

// readEMDomain reads one domain directory d (name its base name).
func readEMDomain(d, name string) (EMPerfDomain, error) {
	pd := EMPerfDomain{Name: name, Flags: -1}
	s, err := ReadAttr(d + "/cpus")
	if err != nil {
		return pd, err
	}
	if pd.CPUs, err = ParseCPUList(s); err != nil || pd.CPUs.IsEmpty() {
		return pd, &ParseError{Path: d + "/cpus", Err: fmt.Errorf("not a non-empty cpulist: %q", s)}
	}
	if s, err := ReadAttr(d + "/flags"); err == nil {
		v, perr := strconv.ParseInt(strings.TrimPrefix(s, "0x"), 16, 64)
		if perr != nil || v < 0 {
			return pd, &ParseError{Path: d + "/flags", Err: fmt.Errorf("not a hex flag word: %q", s)}
		}
		pd.Flags = v
	} else if !errors.Is(err, fs.ErrNotExist) {
		return pd, err
	}
	states, err := os.ReadDir(d)
	if err != nil {
		return pd, err
	}
	for _, st := range states {
		f, ok := strings.CutPrefix(st.Name(), "ps:")
		if !ok || !st.IsDir() {
			continue
		}
		if len(pd.States) >= maxEMStates {
			return pd, fmt.Errorf("%s: more than %d performance states", d, maxEMStates)
		}
		ps, err := readEMState(d+"/"+st.Name(), f)
		if err != nil {
			return pd, err
		}
		pd.States = append(pd.States, ps)
	}
	if len(pd.States) == 0 {
		return pd, fmt.Errorf("%s: no performance state (ps:FREQ)", d)
	}
	slices.SortFunc(pd.States, func(a, b EMPerfState) int { return int(a.KHz - b.KHz) })
	for i := 1; i < len(pd.States); i++ {
		if pd.States[i].KHz == pd.States[i-1].KHz {
			return pd, fmt.Errorf("%s: two states at %d kHz", d, pd.States[i].KHz)
		}
	}
	return pd, nil
}

// readEMState reads one ps:FREQ directory; freq is FREQ.
func readEMState(d, freq string) (EMPerfState, error) {
	var ps EMPerfState
	khz, err := strconv.ParseInt(freq, 10, 64)
	if err != nil || khz <= 0 || khz > maxEMValue {
		return ps, &ParseError{Path: d, Err: fmt.Errorf("not a frequency: %q", freq)}
	}
	ps.KHz = khz
	num := func(file string, required bool) (int64, error) {
		v, err := ReadIntAttr(d + "/" + file)
		switch {
		case errors.Is(err, fs.ErrNotExist) && !required:
			return 0, nil
		case err != nil:
			return 0, err
		case v < 0 || v > maxEMValue:
			return 0, &ParseError{Path: d + "/" + file, Err: fmt.Errorf("%d out of range", v)}
		}
		return v, nil
	}
	if f, err := num("frequency", false); err != nil {
		return ps, err
	} else if f != 0 && f != khz {
		return ps, &ParseError{Path: d + "/frequency", Err: fmt.Errorf("%d kHz in a directory named ps:%d", f, khz)}
	}
	if ps.Power, err = num("power", true); err != nil {
		return ps, err
	}
	if ps.Cost, err = num("cost", false); err != nil {
		return ps, err
	}
	if ps.Performance, err = num("performance", false); err != nil {
		return ps, err
	}
	ineff, err := num("inefficient", false)
	if err != nil {
		return ps, err
	}
	ps.Inefficient = ineff != 0
	return ps, nil
}

// ClassEnergyFromEM returns each class's energy per unit of work relative
// to the most performant class (the last, = 1), from the kernel's energy
// model: power / performance at the highest-frequency state of the
// performance domain holding the class's first CPU (performance derived
// as the class capacity × f / f_max where the kernel does not show it).
// ok is false when the energy model is absent or unreadable for any
// class (debugfs not mounted, not root, no EM), or describes nothing
// usable. Kept for the class-ratio summary (`plan`'s per-class cost);
// prices at every operating point come from ReadEnergyModel.
func (fsys FS) ClassEnergyFromEM(c CPUClasses) (cost []float64, ok bool) {
	pds, err := fsys.ReadEnergyModel()
	if err != nil || len(c.Classes) == 0 {
		return nil, false
	}
	per := make([]float64, len(c.Classes))
	for i, cl := range c.Classes {
		for _, p := range pds {
			if !p.CPUs.Contains(cl.CPUs.First()) {
				continue
			}
			top := p.States[len(p.States)-1]
			perf := float64(top.Performance)
			if perf <= 0 {
				perf = float64(cl.Capacity)
			}
			if p.Artificial() {
				per[i] = float64(top.Cost) // already per unit of work
			} else if top.Power > 0 && perf > 0 {
				per[i] = float64(top.Power) / perf
			}
		}
		if !(per[i] > 0) {
			return nil, false
		}
	}
	top := per[len(per)-1]
	for i := range per {
		per[i] /= top
	}
	return per, true
}
