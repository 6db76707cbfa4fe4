package policy

// balanceRules: SCHED_POLICY_BALANCE. Pack until group_capacity is used —
// one busy task per physical core with the 2013 smt_gain arithmetic
// (groups of an SMT domain get fix_small_capacity's 1) — with the domain
// threshold sd_capacity = DIV_ROUND_CLOSEST(Σ power, 1024) (5 on a 4C/8T
// package); small-task packing fills a CPU to 60 % (patch 13).
type balanceRules struct{}

var _ balancer = balanceRules{}

// balanceMaxUtil is find_leader_cpu's max_util for balance (patch 13:
// "maximum allowable util is 60%").
const balanceMaxUtil = 60

func (balanceRules) packs() bool { return true }
func (balanceRules) domainThreshold(d *dnode) float64 {
	return float64(divRoundClosest(d.power, capacityScale))
}
func (balanceRules) groupThreshold(g, d *dnode) float64 {
	return float64(groupCapacity(g.power, d.smt))
}
func (balanceRules) maxUtil() float64 { return balanceMaxUtil }
