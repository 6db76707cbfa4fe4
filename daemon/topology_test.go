package daemon

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/godbus/dbus/v5"

	"github.com/schedpolicyd/schedpolicyd/daemon/bus"
	"github.com/schedpolicyd/schedpolicyd/internal/testutil"
)

// laptopTopology is the Topology property of the seed's 4-core/8-thread
// laptop (sysfs/testdata/topology/laptop-4c8t) with the given CPUs online:
// one package and one LLC named by CPU 0, core c holding CPUs c and c+4.
func laptopTopology(online ...int) [][]any {
	var out [][]any
	for _, c := range online {
		out = append(out, []any{uint32(c), uint32(0), uint32(0), uint32(c % 4)})
	}
	return out
}

// TestBusTopology: the Topology property lists every online CPU with its
// package, LLC and core as exported on a real bus; it is not re-sent with
// changes that leave the topology alone (a policy switch), and a CPU going
// offline and coming back is one PropertiesChanged each that carries it.
func TestBusTopology(t *testing.T) {
	_, m, conn, _ := busDaemon(t, false)
	obj := conn.Object(bus.Name, bus.ObjectPath)
	if got, want := prop(t, conn, "Topology"), laptopTopology(0, 1, 2, 3, 4, 5, 6, 7); !reflect.DeepEqual(got, want) {
		t.Fatalf("Topology = %v, want %v", got, want)
	}

	if err := conn.AddMatchSignal(dbus.WithMatchObjectPath(bus.ObjectPath), dbus.WithMatchMember("PropertiesChanged")); err != nil {
		t.Fatal(err)
	}
	sigs := make(chan *dbus.Signal, 100)
	conn.Signal(sigs)
	// changes returns the PropertiesChanged bodies received so far.
	var seen []map[string]dbus.Variant
	changes := func() []map[string]dbus.Variant {
		for {
			select {
			case s := <-sigs:
				if len(s.Body) >= 2 {
					if ch, ok := s.Body[1].(map[string]dbus.Variant); ok {
						seen = append(seen, ch)
					}
				}
			default:
				return seen
			}
		}
	}
	// waitChange waits for a PropertiesChanged in which prop has value
	// want and returns it.
	waitChange := func(prop string, want any) map[string]dbus.Variant {
		var found map[string]dbus.Variant
		testutil.WaitFor(t, fmt.Sprintf("PropertiesChanged with %s=%v", prop, want), 10*time.Second, func() (bool, string) {
			for _, ch := range changes() {
				if v, ok := ch[prop]; ok && reflect.DeepEqual(v.Value(), want) {
					found = ch
					return true, ""
				}
			}
			return false, fmt.Sprint(seen)
		})
		return found
	}

	if err := obj.Call(bus.Interface+".SetPolicy", 0, "powersaving").Err; err != nil {
		t.Fatal(err)
	}
	if ch := waitChange("ActivePolicy", "powersaving"); ch["Topology"].Signature().String() != "" {
		t.Errorf("a policy switch re-sent Topology: %v", ch)
	}

	cpu4 := filepath.Join(m.sys, "devices/system/cpu/cpu4")
	saved := filepath.Join(t.TempDir(), "cpu4")
	if err := os.Rename(cpu4, saved); err != nil {
		t.Fatal(err)
	}
	putAtomic(t, filepath.Join(m.sys, "devices/system/cpu/online"), "0-3,5-7")
	waitChange("Topology", laptopTopology(0, 1, 2, 3, 5, 6, 7))
	if got, want := prop(t, conn, "Topology"), laptopTopology(0, 1, 2, 3, 5, 6, 7); !reflect.DeepEqual(got, want) {
		t.Errorf("Topology with CPU 4 offline = %v, want %v", got, want)
	}
	if err := os.Rename(saved, cpu4); err != nil {
		t.Fatal(err)
	}
	putAtomic(t, filepath.Join(m.sys, "devices/system/cpu/online"), "0-7")
	waitChange("Topology", laptopTopology(0, 1, 2, 3, 4, 5, 6, 7))
}
