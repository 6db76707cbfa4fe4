package policy

import (
	"math"
	"slices"
)

// EASMargin is the headroom EAS keeps between a performance domain's
// utilisation and the capacity of the state it picks: schedutil's
// map_util_perf() asks for util × 1.25 (kernel/sched/sched.h,
// Documentation/scheduler/sched-energy.rst).
const EASMargin = 1.25

// OPP is one performance state of a class in a PowerModel.
type OPP struct {
	// KHz is the state's frequency (kHz); intel_pstate's artificial
	// hybrid model numbers its states 2..5 instead.
	KHz int64 `json:"khz"`
	// Capacity is the work one CPU does per unit of time at this state,
	// in the model's capacity units (its biggest CPU at its top state =
	// 1024, SCHED_CAPACITY_SCALE).
	Capacity float64 `json:"capacity"`
	// Cost is the energy per unit of work at this state, in the model's
	// own unit (the kernel's cost: 10 × µW / capacity; abstract for an
	// artificial model; bogo-units for LISA's Juno). Only ratios between
	// costs of one model mean anything.
	Cost float64 `json:"cost"`
	// Wake is the power of keeping the class's cluster (its shared L2,
	// L3 or power domain) awake at this state rather than asleep, in
	// Cost × capacity units; 0 where the model has no such term (every
	// kernel energy model: dynamic power only).
	Wake float64 `json:"wake,omitempty"`
	// Inefficient: a faster state of the class costs no more; EAS skips
	// it (EM_PERF_STATE_INEFFICIENT with SKIP_INEFFICIENCIES).
	Inefficient bool `json:"inefficient,omitempty"`
}

// ClassPower is one efficiency class of a PowerModel.
type ClassPower struct {
	Name string `json:"name"` // the model's own name: A55, little, LPE, …
	OPPs []OPP  `json:"opps"` // ascending Capacity; at least one
}

// top is the class's fastest state.
func (c ClassPower) top() OPP { return c.OPPs[len(c.OPPs)-1] }

// PowerModel prices work per efficiency class at every performance state:
// the kernel's energy model read from debugfs, one derived from cpufreq's
// frequencies and published coefficients, or a published model
// (BracketModels). It is a model: its costs say which home is cheaper,
// the watts Simulate makes of them are estimates, never measurements.
type PowerModel struct {
	// Name identifies the model: "machine" for the machine's own,
	// else the published model's (m1-measured, juno-r0, …).
	Name string `json:"name"`
	// Source says where the numbers come from.
	Source string `json:"source"`
	// Classes, most efficient first, as CPUDesc.Class counts them once
	// the model is fitted to a machine (Fit).
	Classes []ClassPower `json:"classes"`
}

// Valid reports whether every class has a state with a positive capacity
// and a positive, finite cost.
func (m PowerModel) Valid() bool {
	if len(m.Classes) == 0 {
		return false
	}
	for _, c := range m.Classes {
		if len(c.OPPs) == 0 {
			return false
		}
		for _, o := range c.OPPs {
			if !(o.Capacity > 0) || !(o.Cost > 0) || math.IsInf(o.Cost, 0) || math.IsInf(o.Capacity, 0) || o.Wake < 0 || math.IsNaN(o.Wake) {
				return false
			}
		}
	}
	return true
}

// ref is the cost every relative cost is measured against: the most
// performant class at its top state.
func (m PowerModel) ref() float64 { return m.Classes[len(m.Classes)-1].top().Cost }

// State returns the state class (index into Classes) runs at to do
// frac of its top state's work per unit of time (0..1; the busiest CPU
// of its frequency domain): the lowest state, skipping inefficient ones,
// whose capacity covers frac × top capacity × EASMargin, else the top
// (as em_cpu_energy() picks it). rel is that state's cost relative to
// the model's most performant class at its top state (= 1); wake is its
// Wake in the same unit per 1024 capacity (the share of a top CPU fully
// busy that keeping the cluster awake costs).
func (m PowerModel) State(class int, frac float64) (o OPP, rel, wake float64) {
	c := m.Classes[min(max(class, 0), len(m.Classes)-1)]
	need := math.Max(frac, 0) * c.top().Capacity * EASMargin
	o = c.top()
	for _, s := range c.OPPs {
		if !s.Inefficient && s.Capacity >= need-1e-9 {
			o = s
			break
		}
	}
	r := m.ref()
	return o, o.Cost / r, o.Wake / (r * capacityScale)
}

// Fit returns m with one class per class of a machine whose classes,
// most efficient first, have capacities caps (1..1024): the same classes
// when the counts agree; else the machine's most performant class takes
// the model's most performant, every other class the model's class of
// nearest top capacity (by ratio) among its others, and a machine of one
// class the model's most performant. The model's
// capacities are rescaled so each class's top state has its machine
// class's capacity (the model says how energy per unit of work varies
// with the share of its top a class runs at; the machine says how big
// its classes are). m itself is returned for a model that is not Valid
// or no caps.
func (m PowerModel) Fit(caps []int) PowerModel {
	if !m.Valid() || len(caps) == 0 {
		return m
	}
	n, k := len(caps), len(m.Classes)
	out := PowerModel{Name: m.Name, Source: m.Source, Classes: make([]ClassPower, n)}
	for i := range caps {
		j := k - 1
		switch {
		case n == k:
			j = i
		case i < n-1:
			best := math.Inf(1)
			for jj, c := range m.Classes[:max(k-1, 1)] {
				d := math.Abs(math.Log(c.top().Capacity / float64(max(caps[i], 1))))
				if d < best {
					best, j = d, jj
				}
			}
		}
		src := m.Classes[j]
		scale := float64(max(caps[i], 1)) / src.top().Capacity
		cp := ClassPower{Name: src.Name, OPPs: slices.Clone(src.OPPs)}
		for s := range cp.OPPs {
			cp.OPPs[s].Capacity *= scale
			cp.OPPs[s].Wake *= scale
		}
		out.Classes[i] = cp
	}
	// The last machine class takes the model's last class, so ref() —
	// the model's most performant class at its top — is unchanged.
	return out
}

// HomeCost is the model's price of running work in class (of a fitted
// model): util units of capacity per unit of time (util ≥ 0, in the
// machine's capacity units), with its busiest CPU at cpuUtil (≤ the
// class's capacity), plus the wake cost of the class's cluster unless
// awake (other work keeps it awake anyway). The result is relative to
// the model's most performant class at its top state doing 1024 units
// (so 1 is one top CPU fully busy).
func (m PowerModel) HomeCost(class int, util, cpuUtil float64, awake bool) float64 {
	c := m.Classes[min(max(class, 0), len(m.Classes)-1)]
	_, rel, wake := m.State(class, cpuUtil/c.top().Capacity)
	cost := rel * util / capacityScale
	if !awake {
		cost += wake
	}
	return cost
}
