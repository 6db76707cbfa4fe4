// Package policy holds schedpolicyd's pure decisions, with no I/O: the 0/1/2
// power_aware knob and its mapping to the effective balance policy, the
// parsing rules of the knob files, the balancer that turns a CPU topology
// and workload loads into a placement plan (workload → CPUs) the way the 2013
// "sched: power aware scheduling" patches balance sched domains, patch 18's
// lazy-balance history, a PELT-like utilisation average and an energy model.
//
// The package imports nothing of ours and nothing that touches the system,
// so every function here is deterministic and table-testable.
package policy
