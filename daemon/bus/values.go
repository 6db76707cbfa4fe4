package bus

// The property values of Interface, computed from a snapshot, and their
// publication on a connection.

import (
	"reflect"
	"time"

	"github.com/schedpolicyd/schedpolicyd/daemon/snapshot"
	"github.com/schedpolicyd/schedpolicyd/policy"
)

// The published lists while they are empty (no hold yet, before the
// topology could be read): not nil, so that they compare equal
// (equalValue) to an empty list built elsewhere.
var (
	noHolds    = []snapshot.Hold{}
	noTopology = []snapshot.TopologyEntry{}
	noClasses  = []snapshot.CPUClassEntry{}
	noExempt   = []snapshot.ExemptEntry{}
)

// propertyValues maps a snapshot to the D-Bus property values of Interface,
// with the Go types godbus encodes as the XML's signatures.
func propertyValues(snap snapshot.Snapshot) map[string]any {
	avail := make([]string, len(policy.AvailablePolicies))
	for i, p := range policy.AvailablePolicies {
		avail[i] = string(p)
	}
	ws := make([]workloadEntry, 0, len(snap.Workloads))
	for _, w := range snap.Workloads {
		ws = append(ws, workloadEntry{w.Name, w.Path, w.CPUs, w.Util, string(w.Override), w.Class})
	}
	// A hold is its own (usss) entry, and the snapshot's list is shared
	// from one publication to the next while the holds do not change (the
	// daemon's holdIndex): no per-hold work here, and update compares it
	// in O(1).
	holds := snap.Holds
	if holds == nil {
		holds = noHolds
	}
	confined := []confinedEntry{}
	for _, w := range snap.Workloads {
		if w.Confined {
			confined = append(confined, confinedEntry{w.Name, w.Manager, w.CPUs, w.Class, string(w.Policy)})
		}
	}
	exempt := snap.Exempt
	if exempt == nil {
		exempt = noExempt
	}
	topo := snap.Topology
	if topo == nil {
		topo = noTopology
	}
	classes := snap.CPUClasses
	if classes == nil {
		classes = noClasses
	}
	return map[string]any{
		"CPUClasses":        classes,
		"ConfigDigest":      snap.ConfigDigest,
		"ActivePolicy":      string(snap.Policy),
		"AvailablePolicies": avail,
		"PowerAware":        uint32(snap.Knob.PowerAware),
		"PowerAwarePolicy":  string(snap.Knob.PowerAwarePolicy),
		"PowerSource":       string(snap.PowerSource),
		"OnBattery":         snap.PowerSource == "battery",
		"Boost":             snap.Boost,
		"Reason":            snap.PolicyReason,
		"Workloads":         ws,
		"LastChange":        uint64(snap.LastChange.UnixMicro()),
		"KnobFrom":          snap.KnobFrom,
		"KnobChosenAt":      chosenAtMicros(snap.KnobChosenAt),
		"Holds":             holds,
		"Topology":          topo,
		"EnergySource":      snap.EnergySourceName(),
		"Energy":            energyEntries(snap.Energy),
		"Confined":          confined,
		"Exemptions":        exempt,
	}
}

// workloadEntry is one element of the Workloads property, signature
// (sssdss): name, cgroup directory, cpulist, utilisation (CPUs),
// override, class (WorkloadStatus.Class).
type workloadEntry struct {
	Name, Path, CPUs string
	Util             float64
	Override         string
	Class            string
}

// confinedEntry is one element of the Confined property, signature
// (sssss): a workload placed on fewer CPUs than it may have
// (WorkloadStatus.Confined) — its name (as Exempt takes it), manager
// ("system", "user:UID", "" for a cgroup), cpulist, class and the
// policy that placed it.
type confinedEntry struct {
	Name, Manager, CPUs, Class, Policy string
}

// update emits one PropertiesChanged carrying every property whose value
// differs from the last published one, and PolicyChanged when ActivePolicy
// changed. Called with svc.mu held (Publish, install).
func (s *session) update(snap *snapshot.Snapshot) {
	if s == nil {
		return
	}
	vals := s.svc.values(snap)
	prev := s.properties.publish(vals)
	if prev["ActivePolicy"] != vals["ActivePolicy"] {
		s.conn.Emit(ObjectPath, Interface+".PolicyChanged", string(snap.Policy), snap.PolicyReason)
	}
	s.pp.update(*snap)
}

// equalValue compares two property values (strings, numbers, slices of
// the entry structs). reflect.DeepEqual, not a formatted comparison: with
// 1,000 workloads formatting both Workloads lists on every publish was 5 %
// of a policy switch's CPU.
func equalValue(a, b any) bool {
	return reflect.DeepEqual(a, b)
}

// chosenAtMicros is KnobChosenAt's value: t in µs since the Unix epoch, 0
// for the zero time (not known, or no choice in force).
func chosenAtMicros(t time.Time) uint64 {
	if t.IsZero() {
		return 0
	}
	return uint64(t.UnixMicro())
}
