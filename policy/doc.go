// Package policy holds schedpolicyd's pure decisions, with no I/O: the 0/1/2
// power_aware knob and its mapping to the effective balance policy, the
// parsing rules of the knob files, and the balancer that turns a CPU topology
// and workload loads into a placement plan (workload → CPUs).
//
// The package imports nothing of ours and nothing that touches the system,
// so every function here is deterministic and table-testable.
package policy
