package daemon

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/godbus/dbus/v5"

	"github.com/schedpolicyd/schedpolicyd/daemon/bus"
	"github.com/schedpolicyd/schedpolicyd/daemon/snapshot"
	"github.com/schedpolicyd/schedpolicyd/internal/testutil"
	"github.com/schedpolicyd/schedpolicyd/policy"
)

// Names that are not UTF-8 on a private bus (issue 32, item 5): one cgroup
// called "caf\xe9" (é in Latin-1, one byte that is no UTF-8; an
// administrator's mkdir is enough) once made GetAll and Get(Workloads)
// fail for every client and kept PropertiesChanged from being sent. The
// daemon publishes such a name escaped (snapshot.Escape: `caf\xe9`, seven
// ASCII characters), takes that name back in SetWorkloadPolicy, and no
// other string it puts on the bus can make a reply invalid.

// latin1Name is the cgroup's name: "café" in Latin-1; published is the
// name the daemon publishes for it.
const (
	latin1Name = "caf\xe9"
	published  = `caf\xe9`
)

// workloadEntries is the Workloads property's value, signature a(sssdss).
func workloadEntries(t *testing.T, v dbus.Variant) [][]any {
	t.Helper()
	ws, ok := v.Value().([][]any)
	if !ok {
		t.Fatalf("Workloads is %s, want a(sssdss)", v.Signature())
	}
	return ws
}

// entryNamed is the Workloads entry called name, nil when there is none.
func entryNamed(ws [][]any, name string) []any {
	for _, w := range ws {
		if w[0] == name {
			return w
		}
	}
	return nil
}

// checkNonUTF8Workload checks, with a client on the daemon's bus, that the
// workload of the cgroup latin1Name below parent is published as
// published: GetAll and Get(Workloads) answer, name it escaped with its
// path escaped the same way, SetWorkloadPolicy takes that name, and a
// policy change still sends PropertiesChanged (with the Workloads) and
// PolicyChanged. cpus reads a workload's cpuset.cpus.
func checkNonUTF8Workload(t *testing.T, conn *dbus.Conn, parent string, cpus func(name string) string) {
	t.Helper()
	obj := conn.Object(bus.Name, bus.ObjectPath)
	testutil.Eventually(t, "the workload "+published+" published", func() (bool, string) {
		var all map[string]dbus.Variant
		if err := obj.Call("org.freedesktop.DBus.Properties.GetAll", 0, bus.Interface).Store(&all); err != nil {
			return false, "GetAll: " + err.Error()
		}
		ws := workloadEntries(t, all["Workloads"])
		return entryNamed(ws, published) != nil, fmt.Sprint(ws)
	})
	v, err := obj.GetProperty(bus.Interface + ".Workloads")
	if err != nil {
		t.Fatalf("Get(Workloads): %v", err)
	}
	w := entryNamed(workloadEntries(t, v), published)
	if w == nil {
		t.Fatalf("Get(Workloads) = %v: no %s", v, published)
	}
	if want := parent + "/" + published; w[1] != want {
		t.Errorf("its cgroup directory is published as %q, want %q", w[1], want)
	}

	sigs := make(chan *dbus.Signal, 64)
	conn.Signal(sigs)
	defer conn.RemoveSignal(sigs)
	if err := conn.AddMatchSignal(dbus.WithMatchObjectPath(bus.ObjectPath)); err != nil {
		t.Fatal(err)
	}
	// powersaving on AC: packed on CPU 0, which changes the Workloads too.
	if err := obj.Call(bus.Interface+".SetPowerAware", 0, uint32(2)).Err; err != nil {
		t.Fatal(err)
	}
	waitSignal(t, sigs, "org.freedesktop.DBus.Properties.PropertiesChanged", func(s *dbus.Signal) bool {
		ch, _ := s.Body[1].(map[string]dbus.Variant)
		ws, ok := ch["Workloads"]
		return ch["ActivePolicy"].Value() == "powersaving" && ok && entryNamed(workloadEntries(t, ws), published) != nil
	})
	waitSignal(t, sigs, bus.Interface+".PolicyChanged", func(s *dbus.Signal) bool { return s.Body[0] == "powersaving" })
	testutil.Eventually(t, latin1Name+" packed", func() (bool, string) { c := cpus(latin1Name); return c == "0", c })

	// The name as published is the name to give back.
	if err := obj.Call(bus.Interface+".SetWorkloadPolicy", 0, published, "performance").Err; err != nil {
		t.Fatalf("SetWorkloadPolicy(%q): %v", published, err)
	}
	testutil.Eventually(t, "the override applied to "+latin1Name, func() (bool, string) {
		c := cpus(latin1Name)
		return c != "0" && c != "", c
	})
	v, err = obj.GetProperty(bus.Interface + ".Workloads")
	if err != nil {
		t.Fatalf("Get(Workloads): %v", err)
	}
	if w := entryNamed(workloadEntries(t, v), published); w == nil || w[4] != "performance" {
		t.Errorf("after SetWorkloadPolicy: %v, want %s with override performance", v, published)
	}
	// Not the raw text `caf\x5cxe9` nor an upper-case spelling.
	for _, n := range []string{`caf\x5cxe9`, `caf\xE9`} {
		if err := obj.Call(bus.Interface+".SetWorkloadPolicy", 0, n, "").Err; dbusErrName(err) != errInvalidArgs {
			t.Errorf("SetWorkloadPolicy(%q): %v, want InvalidArgs (no such workload)", n, err)
		}
	}
}

// TestNonUTF8WorkloadName: a workload whose cgroup's name is not UTF-8,
// in the mock cgroup root, without a bus: the daemon publishes its name
// and cgroup directory escaped, packs it, takes the published name back
// in SetWorkloadPolicy (neither the raw text of the escape nor an
// upper-case spelling), and the tree's workloads file lists the same
// published name. That the service sends such a snapshot is daemon/bus's
// TestBusStringsInvalidForBus; the whole path on a real cgroup and a bus
// is TestBusNonUTF8WorkloadNameRealCgroup.
func TestNonUTF8WorkloadName(t *testing.T) {
	m := newMockLaptop(t)
	testutil.Put(t, filepath.Join(m.managed, latin1Name, "cpuset.cpus"), "")
	testutil.Put(t, filepath.Join(m.managed, latin1Name, "cpuset.cpus.effective"), "0-7")
	testutil.Put(t, filepath.Join(m.managed, latin1Name, "cpu.stat"), "usage_usec 0\nuser_usec 0\nsystem_usec 0")
	d, _, _ := m.start(t)
	c := controller{d}
	cpus := func() string { return testutil.ReadTrim(t, filepath.Join(m.managed, latin1Name, "cpuset.cpus")) }
	entry := func() *snapshot.WorkloadStatus {
		for _, w := range d.Snapshot().Workloads {
			if w.Name == published {
				return &w
			}
		}
		return nil
	}
	testutil.Eventually(t, "the workload "+published+" published", func() (bool, string) {
		return entry() != nil, fmt.Sprint(d.Snapshot().Workloads)
	})
	if w, want := entry(), m.managed+"/"+published; w.Path != want {
		t.Errorf("its cgroup directory is published as %q, want %q", w.Path, want)
	}
	if ws := d.Snapshot().Workloads; len(ws) != 3 {
		t.Errorf("workloads %v, want a, b and %s", ws, published)
	}
	// powersaving on AC: packed on CPU 0.
	if err := c.WriteKnob(t.Context(), filePowerAware, "2", "test"); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, latin1Name+" packed", func() (bool, string) { c := cpus(); return c == "0", c })

	// The name as published is the name to give back.
	if err := c.SetWorkloadPolicy(t.Context(), published, policy.Performance); err != nil {
		t.Fatalf("SetWorkloadPolicy(%q): %v", published, err)
	}
	testutil.Eventually(t, "the override applied to "+latin1Name, func() (bool, string) {
		c := cpus()
		return c != "0" && c != "", c
	})
	if w := entry(); w == nil || w.Override != policy.Performance {
		t.Errorf("after SetWorkloadPolicy: %+v, want %s with override performance", w, published)
	}
	// Not the raw text `caf\x5cxe9` nor an upper-case spelling.
	for _, n := range []string{`caf\x5cxe9`, `caf\xE9`} {
		checkInvalid(t, "SetWorkloadPolicy("+n+")", c.SetWorkloadPolicy(t.Context(), n, ""), fmt.Sprintf("invalid value: no workload %q", n))
	}
	// The tree's workloads file lists the same published name (with its
	// backslash written \134, as that file writes every backslash).
	tree := testutil.Read(t, filepath.Join(m.tree, TreePrefix, fileWorkloads))
	if !strings.Contains(tree, `caf\134xe9 `) {
		t.Errorf("the workloads file:\n%s\nwant a line for caf\\134xe9", tree)
	}
}

// TestBusNonUTF8WorkloadNameRealCgroup: the same with a real cgroup v1
// cpuset of the test's own whose child is called "caf\xe9".
func TestBusNonUTF8WorkloadNameRealCgroup(t *testing.T) {
	addr := testutil.StartBus(t, testutil.BusOptions{AnyUser: true}).Addr
	parent := testutil.CpusetV1Parent(t, "schedpolicyd-test")
	if err := os.Mkdir(filepath.Join(parent, latin1Name), 0o755); err != nil {
		t.Fatal(err)
	}
	m := thisMachineLaptop(t)
	m.startWith(t, func(c *Config) { c.CgroupRoot = parent; c.Bus = addr })
	conn, err := dbus.Connect(addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	testutil.Eventually(t, "bus name", func() (bool, string) { return testutil.NameOwned(conn, bus.Name) })
	checkNonUTF8Workload(t, conn, parent, func(name string) string {
		b, _ := os.ReadFile(filepath.Join(parent, name, "cpuset.cpus"))
		return strings.TrimSpace(string(b))
	})
}

// TestNonUTF8PowerSupplyName: a power supply whose name is not UTF-8
// (the kernel names some after what firmware or a device reports) is
// quoted as it is by the power source's reason, which the policy's reason
// carries, before and after a change of the knob; the service escapes it
// on the bus (daemon/bus's TestBusStringsInvalidForBus: Reason in GetAll,
// Get and PropertiesChanged, and PolicyChanged).
func TestNonUTF8PowerSupplyName(t *testing.T) {
	m := newMockLaptop(t)
	ps := filepath.Join(m.sys, "class/power_supply")
	if err := os.Rename(filepath.Join(ps, "AC"), filepath.Join(ps, "AC\xff")); err != nil {
		t.Fatal(err)
	}
	d, _, _ := m.start(t)
	const want = "power_aware=1 (automatic) and no positive evidence of battery operation (power source ac): AC: Mains supply AC\xff reports online=1 (rule 2)"
	if r := d.Snapshot().PolicyReason; r != want {
		t.Errorf("Reason = %q, want %q", r, want)
	}
	// powersaving, then back to automatic: performance on AC, for the
	// reason that quotes the supply.
	for _, mode := range []string{"2", "1"} {
		if err := (controller{d}).WriteKnob(t.Context(), filePowerAware, mode, "test"); err != nil {
			t.Fatal(err)
		}
	}
	if s := d.Snapshot(); s.Knob.PowerAware != policy.PowerAwareAuto || s.Policy != policy.Performance || s.PolicyReason != want {
		t.Errorf("back to automatic: power_aware %d, %s, reason %q; want 1, performance, %q", s.Knob.PowerAware, s.Policy, s.PolicyReason, want)
	}
}
