package policy

// powersavingRules: SCHED_POLICY_POWERSAVING. Pack until every logical CPU
// of a group is busy: group threshold group_weight, domain threshold
// span_weight; small-task packing fills a CPU to 100 % (FULL_UTIL). On a
// hybrid topology the weights are counted in capacity (dnode.capw: an
// E-core of cpu_capacity 580 holds 0.57 of a P-core's load).
type powersavingRules struct{}

var _ balancer = powersavingRules{}

// powersavingMaxUtil is find_leader_cpu's max_util for powersaving
// (FULL_UTIL, patch 11/13).
const powersavingMaxUtil = 100

func (powersavingRules) packs() bool                        { return true }
func (powersavingRules) domainThreshold(d *dnode) float64   { return d.capw }
func (powersavingRules) groupThreshold(g, _ *dnode) float64 { return g.capw }
func (powersavingRules) maxUtil() float64                   { return powersavingMaxUtil }
