package policy

import "math"

// performanceRules: SCHED_POLICY_PERFORMANCE, today's spreading behaviour.
// Every workload may use every allowed CPU; CFS spreads inside the set.
type performanceRules struct{}

var _ balancer = performanceRules{}

func (performanceRules) packs() bool                        { return false }
func (performanceRules) domainThreshold(*dnode) float64     { return math.Inf(-1) }
func (performanceRules) groupThreshold(_, _ *dnode) float64 { return 0 }
func (performanceRules) maxUtil() float64                   { return 0 }
