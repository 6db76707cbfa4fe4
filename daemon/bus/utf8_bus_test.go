package bus

import (
	"errors"
	"testing"

	"github.com/godbus/dbus/v5"

	"github.com/schedpolicyd/schedpolicyd/daemon/snapshot"
	"github.com/schedpolicyd/schedpolicyd/policy"
)

// bad is a string that cannot go on the bus: "café" in Latin-1, and a NUL.
const bad = "caf\xe9\x00"

// badOnBus is bad as the bus gets it.
const badOnBus = `caf\xe9\x00`

// TestBusStringsInvalidForBus: a daemon whose every published string,
// reply and error carries bytes that are not UTF-8 and a NUL (as a name an
// administrator's mkdir chose, a power supply's name a reason quotes, a
// path in an error might) still answers every call and sends every
// signal, on both APIs, on a private bus: the strings arrive escaped.
func TestBusStringsInvalidForBus(t *testing.T) {
	st := startService(t, "", Config{PowerProfilesAPI: PowerProfilesServe})
	f := st.f
	f.set(&snapshot.Snapshot{
		Policy: policy.Performance, PowerSource: "ac", PolicyReason: "reason " + bad, Boost: "1",
		Workloads:    []snapshot.WorkloadStatus{{Name: bad, Path: "/cg/" + bad, CPUs: "0-3", Class: "workload"}},
		Holds:        []snapshot.Hold{{Cookie: 1, Policy: policy.Performance, Reason: bad, Owner: ":1.9", AppID: bad}},
		CPUClasses:   []snapshot.CPUClassEntry{{Name: bad, CPUs: "0-3", Capacity: 1024}},
		ConfigDigest: bad,
	})
	obj := st.obj()
	var all map[string]dbus.Variant
	if err := obj.Call(propsIface+".GetAll", 0, Interface).Store(&all); err != nil {
		t.Fatalf("GetAll: %v", err)
	}
	if ws := all["Workloads"].Value().([][]any); len(ws) != 1 || ws[0][0] != badOnBus || ws[0][1] != "/cg/"+badOnBus {
		t.Errorf("Workloads = %v, want %s in /cg/%s", ws, badOnBus, badOnBus)
	}
	for name, want := range map[string]string{"Reason": "reason " + badOnBus, "ConfigDigest": badOnBus} {
		if got := all[name].Value(); got != want {
			t.Errorf("%s = %q, want %q", name, got, want)
		}
		// Get, through the fast path and through godbus's dispatch (a
		// call that expects no reply is left to it; a Get with an empty
		// interface name too, which answers an error).
		v, err := obj.GetProperty(Interface + "." + name)
		if err != nil || v.Value() != want {
			t.Errorf("Get %s = %v, %v; want %q", name, v, err, want)
		}
	}
	if hs := all["Holds"].Value().([][]any); len(hs) != 1 || hs[0][2] != badOnBus {
		t.Errorf("Holds = %v", hs)
	}
	if cs := all["CPUClasses"].Value().([][]any); len(cs) != 1 || cs[0][0] != badOnBus {
		t.Errorf("CPUClasses = %v", cs)
	}

	// The power-profiles API: its holds carry the reason and the
	// application's id.
	for _, n := range ppNames {
		v, err := st.client.Object(n.name, n.path).GetProperty(n.name + ".ActiveProfileHolds")
		if err != nil {
			t.Fatalf("%s ActiveProfileHolds: %v", n.name, err)
		}
		hs, _ := v.Value().([]map[string]dbus.Variant)
		if len(hs) != 1 || hs[0]["Reason"].Value() != badOnBus || hs[0]["ApplicationId"].Value() != badOnBus {
			t.Errorf("%s ActiveProfileHolds = %v", n.name, v)
		}
	}

	// Signals: PropertiesChanged and PolicyChanged of a change.
	sigs := make(chan *dbus.Signal, 64)
	st.client.Signal(sigs)
	if err := st.client.AddMatchSignal(dbus.WithMatchObjectPath(ObjectPath)); err != nil {
		t.Fatal(err)
	}
	f.set(&snapshot.Snapshot{Policy: policy.Powersaving, PowerSource: "battery", PolicyReason: "held by " + bad,
		Workloads: []snapshot.WorkloadStatus{{Name: bad, Path: "/cg/" + bad, CPUs: "0", Class: "workload"}}})
	pc := nextSignal(t, sigs, propsIface+".PropertiesChanged")
	changed := pc.Body[1].(map[string]dbus.Variant)
	if changed["Reason"].Value() != "held by "+badOnBus || changed["ActivePolicy"].Value() != "powersaving" {
		t.Errorf("PropertiesChanged = %v", changed)
	}
	if ws := changed["Workloads"].Value().([][]any); len(ws) != 1 || ws[0][0] != badOnBus {
		t.Errorf("PropertiesChanged Workloads = %v", ws)
	}
	if s := nextSignal(t, sigs, Interface+".PolicyChanged"); s.Body[0] != "powersaving" || s.Body[1] != "held by "+badOnBus {
		t.Errorf("PolicyChanged %v", s.Body)
	}

	// A method reply and an error.
	f.change(func() {
		f.estimate = snapshot.PowerEstimates{Model: bad, Note: bad, Policies: []snapshot.PowerEstimate{{Policy: policy.Balance, Watts: 1}},
			Models: []snapshot.ModelEstimates{{Model: bad, Policies: []snapshot.PowerEstimate{{Policy: policy.Balance, Watts: 1}}}}}
	})
	var model, note string
	var est []estimateEntry
	if err := obj.Call(Interface+".EstimatePower", 0).Store(&model, &note, &est); err != nil || model != badOnBus || note != badOnBus {
		t.Errorf("EstimatePower = %q, %q, %v, %v", model, note, est, err)
	}
	var est2 []modelEstimateEntry
	var spread []policySpreadEntry
	if err := obj.Call(Interface+".EstimatePowerModels", 0).Store(&model, &note, &est2, &spread); err != nil || model != badOnBus || note != badOnBus ||
		len(est2) != 1 || est2[0].Model != badOnBus {
		t.Errorf("EstimatePowerModels = %q, %q, %v, %v", model, note, est2, err)
	}
	f.change(func() { f.fail = errors.New("cannot read /sys/" + bad) })
	err := obj.Call(Interface+".Rebalance", 0).Err
	var de dbus.Error
	if !errors.As(err, &de) || de.Name != "org.freedesktop.DBus.Error.Failed" || len(de.Body) != 1 || de.Body[0] != "cannot read /sys/"+badOnBus {
		t.Errorf("Rebalance failing = %#v, want Failed with the text escaped", err)
	}
}
