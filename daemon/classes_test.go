package daemon

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/godbus/dbus/v5"

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

// TestBusCPUClasses: the CPUClasses property lists the classes most
// efficient first as exported on a real bus: one, "all", on the seed's
// laptop; E and P on an i7-1260P tree.
func TestBusCPUClasses(t *testing.T) {
	_, _, conn, _ := busDaemon(t, false)
	if got, want := prop(t, conn, "CPUClasses"), [][]any{{"all", "0-7", uint32(1024)}}; !reflect.DeepEqual(got, want) {
		t.Errorf("laptop: CPUClasses = %v, want %v", got, want)
	}

	addr := testutil.StartBus(t, testutil.BusOptions{AnyUser: true}).Addr
	m := newMockLaptop(t)
	if err := os.RemoveAll(filepath.Join(m.sys, "devices")); err != nil {
		t.Fatal(err)
	}
	testutil.CopyFixture(t, "../sysfs/testdata/topology/adl-p-i7-1260p", m.sys)
	m.startWith(t, func(c *Config) { c.Bus = addr })
	c2, err := dbus.Connect(addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c2.Close() })
	testutil.Eventually(t, "bus name", func() (bool, string) { return testutil.NameOwned(c2, BusName) })
	want := [][]any{{"E", "8-15", uint32(580)}, {"P", "0-7", uint32(1024)}}
	if got := prop(t, c2, "CPUClasses"); !reflect.DeepEqual(got, want) {
		t.Errorf("i7-1260P: CPUClasses = %v, want %v", got, want)
	}
}
