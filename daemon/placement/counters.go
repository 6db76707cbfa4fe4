package placement

import (
	"sync/atomic"

	"github.com/schedpolicyd/schedpolicyd/policy"
	"github.com/schedpolicyd/schedpolicyd/sysfs"
)

// Counters back Stats; updated by the event loop only.
type Counters struct {
	Events, Decisions, Writes, Errors, Remounts, Samples, PressureWakes, ClockWakes atomic.Int64
}

// ModelInput is what the model needs, copied from the loop.
type ModelInput struct {
	Topo    policy.Topology
	Classes sysfs.CPUClasses // the efficiency classes, for their energy costs
	Online  sysfs.CPUSet     // the online CPUs
	Allowed []int            // those the workloads may have
	Placed  []policy.Load    // the workloads the policy places
	Fixed   []policy.Load    // the others: a performance override, a release
	CPUs    map[string][]int // the fixed ones' CPUs
}
