package daemon

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/schedpolicyd/schedpolicyd/daemon/snapshot"
	"github.com/schedpolicyd/schedpolicyd/internal/testutil"
	"github.com/schedpolicyd/schedpolicyd/sysfs"
)

// TestClassedCPUDescs: on a hybrid machine each CPU gets its class index
// and class capacity; a homogeneous one is CPUDescs unchanged.
func TestClassedCPUDescs(t *testing.T) {
	read := func(name string) (sysfs.CPUTopology, sysfs.CPUClasses) {
		fs, err := sysfs.NewFS(filepath.Join("..", "sysfs", "testdata", "topology", name))
		if err != nil {
			t.Fatal(err)
		}
		topo, err := fs.CPUTopology()
		if err != nil {
			t.Fatal(err)
		}
		return topo, fs.CPUClasses(topo)
	}
	topo, cl := read("mtl-u-ultra7-164u")
	var got [][3]int
	for _, d := range ClassedCPUDescs(topo, cl) {
		got = append(got, [3]int{d.ID, d.Class, d.Capacity})
	}
	want := [][3]int{{0, 2, 1024}, {1, 2, 1024}, {2, 2, 1024}, {3, 2, 1024},
		{4, 1, 648}, {5, 1, 648}, {6, 1, 648}, {7, 1, 648}, {8, 1, 648}, {9, 1, 648}, {10, 1, 648}, {11, 1, 648},
		{12, 0, 358}, {13, 0, 358}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got  %v\nwant %v", got, want)
	}
	topo, cl = read("laptop-4c8t")
	if a, b := ClassedCPUDescs(topo, cl), CPUDescs(topo); !reflect.DeepEqual(a, b) {
		t.Errorf("homogeneous: %+v, want %+v", a, b)
	}
}

// TestCPUClassesPublished: the snapshot lists the CPU classes most
// efficient first (the CPUClasses property, as daemon/bus publishes it):
// one, "all", on the seed's laptop; E and P on an i7-1260P tree.
func TestCPUClassesPublished(t *testing.T) {
	d, _, _ := newMockLaptop(t).start(t)
	if got, want := d.Snapshot().CPUClasses, []snapshot.CPUClassEntry{{Name: "all", CPUs: "0-7", Capacity: 1024}}; !reflect.DeepEqual(got, want) {
		t.Errorf("laptop: CPUClasses = %v, want %v", got, want)
	}

	m := newMockLaptop(t)
	if err := os.RemoveAll(filepath.Join(m.sys, "devices")); err != nil {
		t.Fatal(err)
	}
	testutil.CopyFixture(t, "../sysfs/testdata/topology/adl-p-i7-1260p", m.sys)
	d2, _, _ := m.start(t)
	want := []snapshot.CPUClassEntry{{Name: "E", CPUs: "8-15", Capacity: 580}, {Name: "P", CPUs: "0-7", Capacity: 1024}}
	if got := d2.Snapshot().CPUClasses; !reflect.DeepEqual(got, want) {
		t.Errorf("i7-1260P: CPUClasses = %v, want %v", got, want)
	}
}

// TestLpmdStepAside: while intel-lpmd owns its bus name the daemon packs
// nothing onto the LP E-cores (it confines work there itself); when it
// leaves, it packs them again. The owner comes as daemon/bus hands it
// over (Controller.SetLpmdOwner), without a bus; that the service follows
// the name's owner on the bus, believing only the bus daemon, is
// daemon/bus's TestLpmdOwnerFollowed.
func TestLpmdStepAside(t *testing.T) {
	m := newMockLaptop(t)
	if err := os.RemoveAll(filepath.Join(m.sys, "devices")); err != nil {
		t.Fatal(err)
	}
	testutil.CopyFixture(t, "../sysfs/testdata/topology/mtl-u-ultra7-164u", m.sys)
	testutil.Put(t, m.managed+"/cpuset.cpus.effective", "0-13")
	for _, w := range []string{"a", "b"} {
		testutil.Put(t, filepath.Join(m.managed, w, "cpuset.cpus.effective"), "0-13")
	}
	d, _, _ := m.start(t)
	c := controller{d}
	cpus := func() string {
		return testutil.ReadTrim(t, filepath.Join(m.managed, "a/cpuset.cpus")) + " " + testutil.ReadTrim(t, filepath.Join(m.managed, "b/cpuset.cpus"))
	}
	if err := c.WriteKnob(t.Context(), fileCurrent, "powersaving", "test"); err != nil {
		t.Fatal(err)
	}
	// Two idle workloads, packed on the most efficient class: an LPE core.
	testutil.Eventually(t, "packed on the LP E-cores", func() (bool, string) { return cpus() == "12 12", cpus() })

	current := func() bool { return true }
	if err := c.SetLpmdOwner(t.Context(), ":1.7", current); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "off the LP E-cores", func() (bool, string) { return cpus() == "4 4", cpus() })
	var owner string
	if err := d.do(context.Background(), func() error { owner = d.lpmdOwner; return nil }); err != nil || owner != ":1.7" {
		t.Errorf("lpmdOwner %q, want :1.7 (%v)", owner, err)
	}
	// A request the service no longer stands behind (its connection is
	// not the current one) changes nothing.
	if err := c.SetLpmdOwner(t.Context(), "", func() bool { return false }); err != nil {
		t.Fatal(err)
	}
	if err := d.do(context.Background(), func() error { owner = d.lpmdOwner; return nil }); err != nil || owner != ":1.7" {
		t.Errorf("lpmdOwner %q after a stale request, want :1.7 (%v)", owner, err)
	}

	if err := c.SetLpmdOwner(t.Context(), "", current); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "back on the LP E-cores", func() (bool, string) { return cpus() == "12 12", cpus() })
}
