package policy

// The published models that bracket a machine's estimate (issue 35, item
// 3; docs/ENERGY_MODEL.md, "Bracketing models", and docs/SOURCES.md give
// every source). Each is transcribed from its source's own inputs and
// prices per unit of work at every state it publishes; none is tuned to
// anything.

// DTOPP is one operating point of a device tree's operating-points-v2
// table: opp-hz in MHz and the first opp-microvolt value.
type DTOPP struct {
	MHz       int64
	MicroVolt int64
}

// DTCore is one CPU type of a device tree: capacity-dmips-mhz,
// dynamic-power-coefficient and its OPP table, ascending.
type DTCore struct {
	Name  string
	DMIPS int64 // capacity-dmips-mhz
	DPC   int64 // dynamic-power-coefficient (µW / MHz / V²)
	OPPs  []DTOPP
}

// DTPowerUW is the power the kernel's energy model gives an OPP of a
// device tree (drivers/opp/of.c, _get_power): dpc × mV² × MHz / 10⁶ µW,
// with mV = µV / 1000, all in integers as the kernel computes them.
func DTPowerUW(dpc int64, o DTOPP) int64 {
	mV := o.MicroVolt / 1000
	return dpc * mV * mV * o.MHz / 1000000
}

// DTModel is the energy model the kernel builds from a device tree:
// each core type's capacity is capacity-dmips-mhz × its top frequency,
// the largest scaled to 1024 (arch_topology.c, truncated), each state's
// capacity that × f / f_max (energy_model.c em_init_performance,
// truncated) and its cost power / capacity (µW per capacity unit; the
// kernel's cost is 10 × that). A state is inefficient when a faster one
// costs no more. Cores in ascending capacity.
func DTModel(name, source string, cores []DTCore) PowerModel {
	var maxRaw int64
	for _, c := range cores {
		maxRaw = max(maxRaw, c.DMIPS*c.OPPs[len(c.OPPs)-1].MHz)
	}
	m := PowerModel{Name: name, Source: source}
	for _, c := range cores {
		fmax := c.OPPs[len(c.OPPs)-1].MHz
		cpuCap := c.DMIPS * fmax * capacityScale / maxRaw
		cp := ClassPower{Name: c.Name}
		for _, o := range c.OPPs {
			perf := cpuCap * o.MHz / fmax
			cp.OPPs = append(cp.OPPs, OPP{KHz: o.MHz * 1000, Capacity: float64(perf), Cost: float64(DTPowerUW(c.DPC, o)) / float64(perf)})
		}
		markInefficient(cp.OPPs)
		m.Classes = append(m.Classes, cp)
	}
	return m
}

// markInefficient marks each state that a faster state of the same class
// beats or equals on cost, walking from the top as energy_model.c does.
func markInefficient(s []OPP) {
	best := -1.0
	for i := len(s) - 1; i >= 0; i-- {
		if best >= 0 && s[i].Cost >= best {
			s[i].Inefficient = true
			continue
		}
		best = s[i].Cost
	}
}

// GS101Cores are Google Tensor G1's cores in mainline Linux's
// arch/arm64/boot/dts/exynos/google/gs101.dtsi (torvalds/linux @
// 01272f05aae5): Cortex-A55, -A76 and -X1 with every OPP of their tables.
var GS101Cores = []DTCore{
	{Name: "A55", DMIPS: 250, DPC: 70, OPPs: []DTOPP{{300, 537500}, {574, 600000}, {738, 618750}, {930, 668750}, {1098, 712500}, {1197, 731250}, {1328, 762500}, {1401, 781250}, {1598, 831250}, {1704, 862500}, {1803, 906250}}},
	{Name: "A76", DMIPS: 620, DPC: 284, OPPs: []DTOPP{{400, 506250}, {553, 537500}, {696, 562500}, {799, 581250}, {910, 606250}, {1024, 625000}, {1197, 662500}, {1328, 687500}, {1491, 731250}, {1663, 775000}, {1836, 818750}, {1999, 868750}, {2130, 918750}, {2253, 968750}}},
	{Name: "X1", DMIPS: 1024, DPC: 650, OPPs: []DTOPP{{500, 500000}, {851, 556250}, {984, 575000}, {1106, 606250}, {1277, 631250}, {1426, 662500}, {1582, 693750}, {1745, 731250}, {1826, 750000}, {2048, 793750}, {2188, 831250}, {2252, 850000}, {2401, 887500}, {2507, 925000}, {2630, 968750}, {2704, 1000000}, {2802, 1056250}}},
}

// RK3588Cores are Rockchip RK3588's cores in mainline Linux:
// rk3588-base.dtsi (torvalds/linux @ 05b24f63b49b: capacity-dmips-mhz
// 530 / 1024, dynamic-power-coefficient 228 / 416) and rk3588-opp.dtsi
// (@ 276856db91b4, the big clusters' tables are the same).
var RK3588Cores = []DTCore{
	{Name: "A55", DMIPS: 530, DPC: 228, OPPs: []DTOPP{{1008, 675000}, {1200, 712500}, {1416, 762500}, {1608, 850000}, {1800, 950000}}},
	{Name: "A76", DMIPS: 1024, DPC: 416, OPPs: []DTOPP{{1200, 675000}, {1416, 725000}, {1608, 762500}, {1800, 850000}, {2016, 925000}, {2208, 987500}, {2400, 1000000}}},
}

// Names of the bracketing models (BracketModels) and of the Sandy Bridge
// laptop calibration, as estimates list them.
const (
	ModelM1      = "m1-measured"
	ModelJuno    = "juno-r0"
	ModelGS101   = "gs101-dt"
	ModelRK3588  = "rk3588-dt"
	ModelIntelEM = "intel-hybrid-em"
	ModelMachine = "machine"
)

// M1Model is Apple M1's measured power (AsahiLinux/linux PR #229,
// t8103.dtsi opp-microwatt) at the lowest and highest states of its
// Icestorm (E) and Firestorm (P) clusters, capacities 459 / 1024 (Qais
// Yousef's RFC 00/16, linux-pm 2024-08-20) × f / f_max: E 600 MHz 47296
// µW, 2064 MHz 412979 µW; P 600 MHz 290230 µW, 3204 MHz 4951324 µW.
// Measured, so it may hold cluster and uncore power the DT models lack.
func M1Model() PowerModel {
	return PowerModel{Name: ModelM1, Source: "Apple M1 t8103.dtsi opp-microwatt (AsahiLinux/linux PR #229), measured; capacities 459/1024 (linux-pm RFC, 2024-08-20)", Classes: []ClassPower{
		{Name: "Icestorm", OPPs: []OPP{{KHz: 600000, Capacity: 133, Cost: 47296.0 / 133}, {KHz: 2064000, Capacity: 459, Cost: 412979.0 / 459}}},
		{Name: "Firestorm", OPPs: []OPP{{KHz: 600000, Capacity: 192, Cost: 290230.0 / 192}, {KHz: 3204000, Capacity: 1024, Cost: 4951324.0 / 1024}}},
	}}
}

// JunoModel is ARM Juno r0's legacy EAS model as LISA keeps it
// (ARM-software/lisa lisa/platforms/juno_r0.py): per-CPU (capacity,
// power) at five OPPs each of the Cortex-A53 and -A57 clusters, in
// bogo-units, and the clusters' active power per OPP above their
// cluster-sleep power (A53 17, A57 24) as the wake cost.
func JunoModel() PowerModel {
	mk := func(name string, khz, capacity, power, cluster []int64, sleep int64) ClassPower {
		cp := ClassPower{Name: name}
		for i := range khz {
			cp.OPPs = append(cp.OPPs, OPP{KHz: khz[i], Capacity: float64(capacity[i]), Cost: float64(power[i]) / float64(capacity[i]), Wake: float64(max(cluster[i]-sleep, 0))})
		}
		markInefficient(cp.OPPs)
		return cp
	}
	return PowerModel{Name: ModelJuno, Source: "ARM Juno r0, LISA lisa/platforms/juno_r0.py (legacy EAS model: CPU and cluster active power, cluster-sleep)", Classes: []ClassPower{
		mk("A53", []int64{450000, 575000, 700000, 775000, 850000}, []int64{235, 302, 368, 406, 447}, []int64{33, 46, 61, 76, 93}, []int64{26, 30, 39, 47, 57}, 17),
		mk("A57", []int64{450000, 625000, 800000, 950000, 1100000}, []int64{417, 579, 744, 883, 1023}, []int64{168, 251, 359, 479, 616}, []int64{24, 32, 43, 49, 64}, 24),
	}}
}

// IntelHybridModel is the artificial energy model intel_pstate registers
// on hybrid parts without SMT, by the rules of Linux 6.19
// (drivers/cpufreq/intel_pstate.c hybrid_active_power and
// hybrid_get_cost, "cpufreq: intel_pstate: hybrid: Adjust energy model
// rules"): four states at 40, 60, 80 and 100 % of a CPU's capacity,
// numbered 2..5, each costing its number plus 0 (LPE: Atom without L3),
// 1 (E: Atom with L3) or 2 (P) per unit of work. It encodes an ordering,
// not watts. The class capacities (355 / 782 / 1024, Arrow Lake-H's)
// only place the classes; the costs do not depend on them.
func IntelHybridModel() PowerModel {
	mk := func(name string, capacity float64, add float64) ClassPower {
		cp := ClassPower{Name: name}
		for n := int64(2); n <= 5; n++ {
			cp.OPPs = append(cp.OPPs, OPP{KHz: n, Capacity: capacity * float64(n) / 5, Cost: float64(n) + add})
		}
		return cp
	}
	return PowerModel{Name: ModelIntelEM, Source: "intel_pstate's hybrid energy model, Linux 6.19 rules (artificial: an ordering, not watts)", Classes: []ClassPower{
		mk("LPE", 355, 0), mk("E", 782, 1), mk("P", 1024, 2),
	}}
}

// BracketModels are the published models every estimate is also made
// under, in this order: Apple M1 measured, Juno r0, gs101's and RK3588's
// mainline device trees, intel_pstate's hybrid model. The Sandy Bridge
// calibration (ModelFor) joins them on x86 machines with SMT; it prices
// every class alike.
func BracketModels() []PowerModel {
	return []PowerModel{
		M1Model(),
		JunoModel(),
		DTModel(ModelGS101, "Google Tensor G1, mainline gs101.dtsi (dynamic-power-coefficient × V² × f)", GS101Cores),
		DTModel(ModelRK3588, "Rockchip RK3588, mainline rk3588-base.dtsi and rk3588-opp.dtsi (dynamic-power-coefficient × V² × f)", RK3588Cores),
		IntelHybridModel(),
	}
}

// UarchPower is a microarchitecture's published dynamic power: the
// dynamic-power-coefficient and voltage-frequency table one mainline
// device tree gives it. It prices a machine of that core type that has
// no energy model of its own (no debugfs, or no coefficient in its
// tree), at the frequencies cpufreq lists (DerivedClass): an estimate,
// since voltages are the source chip's, not this one's.
type UarchPower struct {
	Name   string  // Cortex-A55, …
	DPC    int64   // dynamic-power-coefficient
	VF     []DTOPP // the source's operating points, ascending
	Source string  // the device tree it comes from
}

// UarchPowers are the published coefficients by MIDR_EL1 implementer
// and part number: Cortex-A55 (0x41, 0xd05), -A76 (0x41, 0xd0b) and -X1
// (0x41, 0xd44), all three from gs101.dtsi (GS101Cores), the one mainline
// tree that gives every OPP's voltage for the three.
var UarchPowers = map[[2]int]UarchPower{
	{0x41, 0xd05}: {Name: "Cortex-A55", DPC: GS101Cores[0].DPC, VF: GS101Cores[0].OPPs, Source: "gs101.dtsi"},
	{0x41, 0xd0b}: {Name: "Cortex-A76", DPC: GS101Cores[1].DPC, VF: GS101Cores[1].OPPs, Source: "gs101.dtsi"},
	{0x41, 0xd44}: {Name: "Cortex-X1", DPC: GS101Cores[2].DPC, VF: GS101Cores[2].OPPs, Source: "gs101.dtsi"},
}

// MicroVoltAt interpolates u's voltage (µV) at mhz linearly between its
// table's points, clamped to the table's ends.
func (u UarchPower) MicroVoltAt(mhz int64) int64 {
	vf := u.VF
	if mhz <= vf[0].MHz {
		return vf[0].MicroVolt
	}
	for i := 1; i < len(vf); i++ {
		if mhz <= vf[i].MHz {
			a, b := vf[i-1], vf[i]
			return a.MicroVolt + (b.MicroVolt-a.MicroVolt)*(mhz-a.MHz)/(b.MHz-a.MHz)
		}
	}
	return vf[len(vf)-1].MicroVolt
}

// DerivedClass prices a class of capacity (its CPUs' at the top
// frequency, 1..1024) whose cpufreq lists khz (ascending) by u: at each
// frequency, power = dpc × mV² × MHz / 10⁶ µW (DTPowerUW, mV interpolated
// by MicroVoltAt), capacity = capacity × f / f_max, cost = power /
// capacity. Nil OPPs for an empty khz.
func DerivedClass(u UarchPower, capacity int, khz []int64) ClassPower {
	cp := ClassPower{Name: u.Name}
	if len(khz) == 0 || len(u.VF) == 0 {
		return cp
	}
	fmax := khz[len(khz)-1]
	for _, f := range khz {
		mhz := f / 1000
		c := float64(int64(capacity) * f / fmax)
		if c <= 0 {
			continue
		}
		p := DTPowerUW(u.DPC, DTOPP{MHz: mhz, MicroVolt: u.MicroVoltAt(mhz)})
		cp.OPPs = append(cp.OPPs, OPP{KHz: f, Capacity: c, Cost: float64(p) / c})
	}
	markInefficient(cp.OPPs)
	return cp
}
