package policy

// powersavingRules: SCHED_POLICY_POWERSAVING. Pack until every logical CPU
// of a group is busy: group threshold group_weight, domain threshold
// span_weight; small-task packing fills a CPU to 100 % (FULL_UTIL).
type powersavingRules struct{}

var _ balancer = powersavingRules{}

// powersavingMaxUtil is find_leader_cpu's max_util for powersaving
// (FULL_UTIL, patch 11/13).
const powersavingMaxUtil = 100

func (powersavingRules) packs() bool                        { return true }
func (powersavingRules) domainThreshold(d *dnode) float64   { return float64(d.weight()) }
func (powersavingRules) groupThreshold(g, _ *dnode) float64 { return float64(g.weight()) }
func (powersavingRules) maxUtil() float64                   { return powersavingMaxUtil }
