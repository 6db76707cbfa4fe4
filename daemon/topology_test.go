package daemon

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/schedpolicyd/schedpolicyd/daemon/snapshot"
	"github.com/schedpolicyd/schedpolicyd/internal/testutil"
	"github.com/schedpolicyd/schedpolicyd/policy"
)

// laptopTopology is the Topology of the seed's 4-core/8-thread laptop
// (sysfs/testdata/topology/laptop-4c8t) with the given CPUs online: one
// package and one LLC named by CPU 0, core c holding CPUs c and c+4.
func laptopTopology(online ...int) []snapshot.TopologyEntry {
	var out []snapshot.TopologyEntry
	for _, c := range online {
		out = append(out, snapshot.TopologyEntry{CPU: uint32(c), Package: 0, LLC: 0, Core: uint32(c % 4)})
	}
	return out
}

// TestTopologyPublished: the snapshot lists every online CPU with its
// package, LLC and core (the Topology property, as daemon/bus publishes
// it, sending it only when it changed); a policy switch leaves it alone,
// and a CPU going offline and coming back is published each time.
func TestTopologyPublished(t *testing.T) {
	m := newMockLaptop(t)
	d, _, _ := m.start(t)
	topology := func(want []snapshot.TopologyEntry) func() (bool, string) {
		return func() (bool, string) {
			got := d.Snapshot().Topology
			return reflect.DeepEqual(got, want), fmt.Sprint(got)
		}
	}
	if got, want := d.Snapshot().Topology, laptopTopology(0, 1, 2, 3, 4, 5, 6, 7); !reflect.DeepEqual(got, want) {
		t.Fatalf("Topology = %v, want %v", got, want)
	}
	before := d.Snapshot()
	if err := (controller{d}).WriteKnob(t.Context(), fileCurrent, "powersaving", "test"); err != nil {
		t.Fatal(err)
	}
	if s := d.Snapshot(); s.Policy != policy.Powersaving || !reflect.DeepEqual(s.Topology, before.Topology) {
		t.Errorf("after a policy switch: policy %s, Topology %v; want powersaving and %v", s.Policy, s.Topology, before.Topology)
	}

	cpu4 := filepath.Join(m.sys, "devices/system/cpu/cpu4")
	saved := filepath.Join(t.TempDir(), "cpu4")
	if err := os.Rename(cpu4, saved); err != nil {
		t.Fatal(err)
	}
	putAtomic(t, filepath.Join(m.sys, "devices/system/cpu/online"), "0-3,5-7")
	testutil.Eventually(t, "Topology without CPU 4", topology(laptopTopology(0, 1, 2, 3, 5, 6, 7)))
	if err := os.Rename(saved, cpu4); err != nil {
		t.Fatal(err)
	}
	putAtomic(t, filepath.Join(m.sys, "devices/system/cpu/online"), "0-7")
	testutil.Eventually(t, "Topology with CPU 4 back", topology(laptopTopology(0, 1, 2, 3, 4, 5, 6, 7)))
}
