package policy

// balancer is one balance policy's rules as the patch set defines them
// (patches 09, 12, 13, 17). One implementation per file:
// performance.go, balance.go, powersaving.go.
type balancer interface {
	// packs reports whether the policy packs at all (performance does not).
	packs() bool
	// domainThreshold is the most load, in CPUs, the domain may carry and
	// still be power-balanced; above it the domain is balanced for
	// performance ("race to idle").
	domainThreshold(d *dnode) float64
	// groupThreshold is how much load, in CPUs, the group g of domain d is
	// filled with before the next group is used.
	groupThreshold(g, d *dnode) float64
	// maxUtil is find_leader_cpu's max_util, in percent.
	maxUtil() float64
}

func balancerFor(p Policy) balancer {
	switch p {
	case Balance:
		return balanceRules{}
	case Powersaving:
		return powersavingRules{}
	default:
		return performanceRules{}
	}
}
