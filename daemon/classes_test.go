package daemon

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/godbus/dbus/v5"

	"github.com/schedpolicyd/schedpolicyd/daemon/bus"
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
	testutil.Eventually(t, "bus name", func() (bool, string) { return testutil.NameOwned(c2, bus.Name) })
	want := [][]any{{"E", "8-15", uint32(580)}, {"P", "0-7", uint32(1024)}}
	if got := prop(t, c2, "CPUClasses"); !reflect.DeepEqual(got, want) {
		t.Errorf("i7-1260P: CPUClasses = %v, want %v", got, want)
	}
}

// TestLpmdStepAside: while intel-lpmd owns its bus name the daemon packs
// nothing onto the LP E-cores (it confines work there itself) and says so
// once; when it leaves, it packs them again. The daemon follows the
// name's owner on its own (no other event is needed). The fake lpmd is a
// second connection owning the name on a private bus.
func TestLpmdStepAside(t *testing.T) {
	addr := testutil.StartBus(t, testutil.BusOptions{AnyUser: true}).Addr
	m := newMockLaptop(t)
	if err := os.RemoveAll(filepath.Join(m.sys, "devices")); err != nil {
		t.Fatal(err)
	}
	testutil.CopyFixture(t, "../sysfs/testdata/topology/mtl-u-ultra7-164u", m.sys)
	testutil.Put(t, m.managed+"/cpuset.cpus.effective", "0-13")
	for _, w := range []string{"a", "b"} {
		testutil.Put(t, filepath.Join(m.managed, w, "cpuset.cpus.effective"), "0-13")
	}
	d := m.startWith(t, func(c *Config) { c.Bus = addr })
	conn, err := dbus.Connect(addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	testutil.Eventually(t, "bus name", func() (bool, string) { return testutil.NameOwned(conn, bus.Name) })
	obj := conn.Object(bus.Name, bus.ObjectPath)
	cpus := func() string {
		return testutil.ReadTrim(t, filepath.Join(m.managed, "a/cpuset.cpus")) + " " + testutil.ReadTrim(t, filepath.Join(m.managed, "b/cpuset.cpus"))
	}
	if err := obj.Call(bus.Interface+".SetPolicy", 0, "powersaving").Err; err != nil {
		t.Fatal(err)
	}
	// Two idle workloads, packed on the most efficient class: an LPE core.
	testutil.Eventually(t, "packed on the LP E-cores", func() (bool, string) { return cpus() == "12 12", cpus() })

	lpmd, err := dbus.Connect(addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lpmd.Close() })
	if r, err := lpmd.RequestName(bus.LpmdName, dbus.NameFlagDoNotQueue); err != nil || r != dbus.RequestNameReplyPrimaryOwner {
		t.Fatalf("fake intel-lpmd cannot own %s: %v %v", bus.LpmdName, r, err)
	}
	testutil.Eventually(t, "off the LP E-cores", func() (bool, string) { return cpus() == "4 4", cpus() })
	var owner string
	if err := d.do(context.Background(), func() error { owner = d.lpmdOwner; return nil }); err != nil || owner != lpmd.Names()[0] {
		t.Errorf("lpmdOwner %q, want %q (%v)", owner, lpmd.Names()[0], err)
	}

	if _, err := lpmd.ReleaseName(bus.LpmdName); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "back on the LP E-cores", func() (bool, string) { return cpus() == "12 12", cpus() })
}
