package bus

import (
	"encoding/xml"
	"reflect"
	"testing"

	"github.com/godbus/dbus/v5"
	"github.com/godbus/dbus/v5/introspect"

	"github.com/schedpolicyd/schedpolicyd/daemon/snapshot"
)

// TestIntrospectionMatchesExports compares the committed XML contract with
// what the daemon really exports: every method with its argument
// signatures and directions (by reflection, as godbus dispatches) and every
// property with its type (from the values the Properties handler serves).
func TestIntrospectionMatchesExports(t *testing.T) {
	var node introspect.Node
	if err := xml.Unmarshal([]byte(IntrospectionXML), &node); err != nil {
		t.Fatalf("committed XML does not parse: %v", err)
	}
	if len(node.Interfaces) != 1 || node.Interfaces[0].Name != Interface {
		t.Fatalf("XML interfaces = %+v, want only %s", node.Interfaces, Interface)
	}
	iface := node.Interfaces[0]

	// Each method as "in signature -> out signature".
	signatures := func(ms []introspect.Method) map[string]string {
		out := map[string]string{}
		for _, m := range ms {
			var in, res string
			for _, a := range m.Args {
				if a.Direction == "out" {
					res += a.Type
				} else {
					in += a.Type
				}
			}
			out[m.Name] = in + " -> " + res
		}
		return out
	}
	fromXML, exported := signatures(iface.Methods), signatures(introspect.Methods(busObject{}))
	if !reflect.DeepEqual(fromXML, exported) {
		t.Errorf("methods differ:\nXML      %v\nexported %v", fromXML, exported)
	}

	vals := propertyValues(snapshot.Snapshot{Holds: []snapshot.Hold{{Cookie: 1}}, Workloads: []snapshot.WorkloadStatus{{Name: "w"}}})
	seen := map[string]bool{}
	for _, p := range iface.Properties {
		seen[p.Name] = true
		v, ok := vals[p.Name]
		if !ok {
			t.Errorf("property %s in the XML is not served", p.Name)
			continue
		}
		if got := dbus.SignatureOf(v).String(); got != p.Type {
			t.Errorf("property %s: XML type %s, served %s", p.Name, p.Type, got)
		}
		wantAccess := "read"
		if p.Name == "PowerAware" || p.Name == "PowerAwarePolicy" {
			wantAccess = "readwrite"
		}
		if p.Access != wantAccess {
			t.Errorf("property %s: XML access %s, Set allows %s", p.Name, p.Access, wantAccess)
		}
	}
	for name := range vals {
		if !seen[name] {
			t.Errorf("served property %s is missing from the XML", name)
		}
	}
	if len(iface.Signals) != 1 || iface.Signals[0].Name != "PolicyChanged" {
		t.Errorf("signals = %+v, want PolicyChanged", iface.Signals)
	}
}
