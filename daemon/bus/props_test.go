package bus

import (
	"reflect"
	"testing"
	"time"

	"github.com/godbus/dbus/v5"

	"github.com/schedpolicyd/schedpolicyd/daemon/snapshot"
	"github.com/schedpolicyd/schedpolicyd/policy"
)

// changedValues is a PropertiesChanged's interface, changed values (as Go
// values) and invalidated names.
func changedValues(t *testing.T, s *dbus.Signal) (string, map[string]any, []string) {
	t.Helper()
	if len(s.Body) != 3 {
		t.Fatalf("PropertiesChanged body %v", s.Body)
	}
	iface, _ := s.Body[0].(string)
	changed, _ := s.Body[1].(map[string]dbus.Variant)
	inval, _ := s.Body[2].([]string)
	out := map[string]any{}
	for k, v := range changed {
		out[k] = v.Value()
	}
	return iface, out, inval
}

// TestPropertiesPublished: each publication emits one PropertiesChanged
// carrying exactly the properties that changed (none at all when nothing
// did), and PolicyChanged after it when ActivePolicy changed; Get and
// GetAll serve the latest snapshot, its lists converted to their
// signatures.
func TestPropertiesPublished(t *testing.T) {
	st := startService(t, "", Config{})
	if err := st.client.AddMatchSignal(dbus.WithMatchObjectPath(ObjectPath)); err != nil {
		t.Fatal(err)
	}
	sigs := make(chan *dbus.Signal, 16)
	st.client.Signal(sigs)
	// The fake's first snapshot: performance, power_aware 1, on AC.
	base := *st.f.Published()

	s2 := base
	s2.Policy, s2.Knob.PowerAware, s2.PolicyReason = policy.Powersaving, policy.PowerAwareOn, "power_aware=2"
	st.f.set(&s2)
	iface, changed, inval := changedValues(t, nextSignal(t, sigs, propsIface+".PropertiesChanged"))
	want := map[string]any{"ActivePolicy": "powersaving", "PowerAware": uint32(2), "Reason": "power_aware=2"}
	if iface != Interface || !reflect.DeepEqual(changed, want) || len(inval) != 0 {
		t.Fatalf("PropertiesChanged(%s, %v, %v), want (%s, %v, [])", iface, changed, inval, Interface, want)
	}
	pc := nextSignal(t, sigs, Interface+".PolicyChanged")
	if !reflect.DeepEqual(pc.Body, []any{"powersaving", "power_aware=2"}) {
		t.Fatalf("PolicyChanged%v, want (powersaving, power_aware=2)", pc.Body)
	}

	// The same values again (a new snapshot): nothing is emitted, so the
	// next signal is the next change's, and no PolicyChanged comes with it.
	s3 := s2
	st.f.set(&s3)
	s4 := s3
	s4.Boost = "1"
	s4.Workloads = []snapshot.WorkloadStatus{{Name: "w", Path: "/cg/w", CPUs: "0-1", Util: 0.5, Override: policy.Performance, Class: "workload"}}
	s4.Holds = []snapshot.Hold{{Cookie: 7, Policy: policy.Balance, Reason: "r", Owner: ":1.9", AppID: "org.example.App"}}
	s4.Topology = []snapshot.TopologyEntry{{CPU: 0, Package: 0, LLC: 0, Core: 0}, {CPU: 1, Package: 0, LLC: 0, Core: 0}}
	s4.Energy = []snapshot.EnergyTotal{{Policy: policy.Performance, PowerSource: "ac", Joules: 3.5, Seconds: 2.25}}
	s4.CPUClasses = []snapshot.CPUClassEntry{{Name: "E", CPUs: "8-15", Capacity: 580}, {Name: "P", CPUs: "0-7", Capacity: 1024}}
	st.f.set(&s4)
	s := nextSignal(t, sigs, "")
	if s.Name != propsIface+".PropertiesChanged" {
		t.Fatalf("after an unchanged snapshot and a change: %s%v, want the change's PropertiesChanged", s.Name, s.Body)
	}
	_, changed, _ = changedValues(t, s)
	want = map[string]any{
		"Boost":      "1",
		"Workloads":  [][]any{{"w", "/cg/w", "0-1", 0.5, "performance", "workload"}},
		"Holds":      [][]any{{uint32(7), "balance", "r", ":1.9"}}, // AppID is not part of it
		"Topology":   [][]any{{uint32(0), uint32(0), uint32(0), uint32(0)}, {uint32(1), uint32(0), uint32(0), uint32(0)}},
		"CPUClasses": [][]any{{"E", "8-15", uint32(580)}, {"P", "0-7", uint32(1024)}},
		"Energy":     [][]any{{"performance", "ac", 3.5, 2.25}},
	}
	if !reflect.DeepEqual(changed, want) {
		t.Fatalf("changed %v, want %v", changed, want)
	}

	// Get (the fast path) and GetAll serve the latest snapshot.
	var all map[string]dbus.Variant
	if err := st.obj().Call(propsIface+".GetAll", 0, Interface).Store(&all); err != nil {
		t.Fatal(err)
	}
	got := map[string]any{}
	for k, v := range all {
		got[k] = v.Value()
	}
	wantAll := map[string]any{
		"ActivePolicy": "powersaving", "AvailablePolicies": []string{"performance", "balance", "powersaving"},
		"PowerAware": uint32(2), "PowerAwarePolicy": "powersaving", "PowerSource": "ac", "OnBattery": false,
		"Boost": "1", "Reason": "power_aware=2", "Workloads": want["Workloads"], "Holds": want["Holds"],
		"Topology": want["Topology"], "CPUClasses": want["CPUClasses"], "EnergySource": "none", "Energy": want["Energy"],
		"ConfigDigest": "", "LastChange": uint64(time.Time{}.UnixMicro()),
		"KnobFrom": "", "KnobChosenAt": uint64(0), // the zero time: 0, not a date before 1970
		"Confined": [][]any{}, "Exemptions": [][]any{},
	}
	if !reflect.DeepEqual(got, wantAll) {
		t.Errorf("GetAll:\n%v\nwant\n%v", got, wantAll)
	}
}
