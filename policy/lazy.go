package policy

import (
	"math"
	"math/bits"
	"time"
)

// LazyState is patch 18's lazy power balance history ("sched: lazy power
// balance" of the 2013 patch set, docs/SOURCES.md §1), kept per decision for the whole
// managed CPU set (the kernel keeps one per sched_domain). It is a value:
// pass the Plan.Lazy of one decision as Input.Lazy of the next. The zero
// value is an empty history, which allows packing at once.
type LazyState struct {
	// Record is perf_lb_record: shifted left once per power-aware
	// decision; bit 0 is set when that decision balanced for performance
	// (some domain was over its threshold).
	Record uint64 `json:"record"`
	// Last is the time of the previous decision (sd->last_balance); zero
	// before the first.
	Last time.Time `json:"last"`
	// RaceToIdle reports that this decision's plan raced to idle: the
	// whole set over its threshold, or held there by the history (see
	// PlanPlacement, "Race to idle"). It is the plan of the machine's
	// policy over every workload, the one that carries the history.
	RaceToIdle bool `json:"race_to_idle,omitempty"`
}

// Masks of need_perf_balance (patch 18).
const (
	perfLBHighMask = 0xffffffff00000000 // PERF_LB_HH_MASK: decisions 33..64 ago
	perfLBLowMask  = 0x00000000ffffffff // PERF_LB_LH_MASK: the last 32
	// lazyMaxPerfInHigh: at most this many performance decisions among
	// the 32 before the last 32.
	lazyMaxPerfInHigh = 4
	// lazyResetIntervals: the history is cleared after this many
	// max_intervals without a decision ("8 * max_interval").
	lazyResetIntervals = 8
)

// step records one decision, like need_perf_balance: shift; set bit 0 for
// a performance decision; for a power decision, clear the history first
// when more than 8 × maxInterval passed since the previous decision
// (maxInterval ≤ 0 or zero times: never). 8 × maxInterval saturates: a
// maxInterval beyond an eighth of time.Duration's range never clears it.
func (s LazyState) step(perf bool, now time.Time, maxInterval time.Duration) LazyState {
	prev := s.Last
	s.Record <<= 1
	if !now.IsZero() {
		s.Last = now
	}
	if perf {
		s.Record |= 1
		return s
	}
	if maxInterval > 0 && maxInterval <= math.MaxInt64/lazyResetIntervals && !now.IsZero() && !prev.IsZero() &&
		now.Sub(prev) > lazyResetIntervals*maxInterval {
		s.Record = 0
	}
	return s
}

// LazyResetAfter is how long without a decision clears the history at the
// next power decision (8 × maxInterval, patch 18's reset; saturating): a
// decision made later packs at once if the load allows it. 0 where the
// history is never cleared: maxInterval ≤ 0, or beyond an eighth of
// time.Duration's range (as step).
func LazyResetAfter(maxInterval time.Duration) time.Duration {
	if maxInterval <= 0 || maxInterval > math.MaxInt64/lazyResetIntervals {
		return 0
	}
	return lazyResetIntervals * maxInterval
}

// PowerBalanceAllowed reports whether the history allows a power balance
// (packing): no performance decision in the last 32 and at most 4 in the
// 32 before those.
func (s LazyState) PowerBalanceAllowed() bool {
	return s.Record&perfLBLowMask == 0 && bits.OnesCount64(s.Record&perfLBHighMask) <= lazyMaxPerfInHigh
}
