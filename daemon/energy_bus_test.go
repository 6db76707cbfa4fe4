package daemon

import (
	"context"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/godbus/dbus/v5"

	"github.com/schedpolicyd/schedpolicyd/daemon/bus"
	"github.com/schedpolicyd/schedpolicyd/daemon/snapshot"
	"github.com/schedpolicyd/schedpolicyd/internal/testutil"
	"github.com/schedpolicyd/schedpolicyd/policy"
)

// energyProp reads the Energy property as (policy, source) → [J, s].
func energyProp(t *testing.T, conn *dbus.Conn) map[string][2]float64 {
	t.Helper()
	v, err := conn.Object(bus.Name, bus.ObjectPath).GetProperty(bus.Interface + ".Energy")
	if err != nil {
		t.Fatal(err)
	}
	var es []struct {
		Policy, Source  string
		Joules, Seconds float64
	}
	if err := v.Store(&es); err != nil {
		t.Fatalf("Energy %v: %v", v, err)
	}
	out := map[string][2]float64{}
	for _, e := range es {
		out[e.Policy+"/"+e.Source] = [2]float64{e.Joules, e.Seconds}
	}
	return out
}

func joules(m map[string][2]float64) map[string]float64 {
	out := map[string]float64{}
	for k, v := range m {
		out[k] = v[0]
	}
	return out
}

// TestEnergyRAPLOverBus: the daemon on a mock laptop with a RAPL package
// counter, on a private bus: segments close at a policy change and on
// RefreshEnergy (coalesced within a second), Energy carries the exact
// counter deltas with PropertiesChanged, anyone may refresh, and the
// totals survive a restart.
func TestEnergyRAPLOverBus(t *testing.T) {
	addr := testutil.StartBus(t, testutil.BusOptions{AnyUser: true}).Addr
	m := newMockLaptop(t)
	zone := filepath.Join(m.sys, "class/powercap/intel-rapl:0")
	testutil.Put(t, zone+"/name", "package-0")
	testutil.Put(t, zone+"/max_energy_range_uj", "262143328850")
	testutil.Put(t, zone+"/constraint_0_power_limit_uw", "45000000")
	counter := uint64(1_000_000_000)
	bump := func(uj uint64) {
		counter += uj
		testutil.Put(t, zone+"/energy_uj", strconv.FormatUint(counter, 10))
	}
	bump(0)
	started := time.Now()
	d, cancel, done := m.startCfg(t, func(c *Config) { c.Bus = addr })
	conn, err := dbus.Connect(addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	testutil.Eventually(t, "bus name", func() (bool, string) { return testutil.NameOwned(conn, bus.Name) })
	obj := conn.Object(bus.Name, bus.ObjectPath)
	if src := prop(t, conn, "EnergySource"); src != "rapl" {
		t.Fatalf("EnergySource %v, want rapl", src)
	}
	if e := energyProp(t, conn); len(e) != 0 {
		t.Fatalf("Energy before any segment closed: %v", e)
	}
	conn.AddMatchSignal(dbus.WithMatchObjectPath(bus.ObjectPath))
	sigs := make(chan *dbus.Signal, 50)
	conn.Signal(sigs)

	bump(2_500_000)
	if err := obj.Call(bus.Interface+".RefreshEnergy", 0).Err; err != nil {
		t.Fatal(err)
	}
	waitSignal(t, sigs, "org.freedesktop.DBus.Properties.PropertiesChanged", func(s *dbus.Signal) bool {
		_, ok := s.Body[1].(map[string]dbus.Variant)["Energy"]
		return ok
	})
	e := energyProp(t, conn)
	if got := e["performance/ac"]; got[0] != 2.5 || got[1] <= 0 || got[1] > time.Since(started).Seconds() {
		t.Errorf("after a refresh: %v, want performance/ac 2.5 J over (0, %.3f] s", e, time.Since(started).Seconds())
	}

	// Coalesced: a second refresh within a second reads nothing.
	bump(1_000_000)
	if err := obj.Call(bus.Interface+".RefreshEnergy", 0).Err; err != nil {
		t.Fatal(err)
	}
	if got := joules(energyProp(t, conn)); !reflect.DeepEqual(got, map[string]float64{"performance/ac": 2.5}) {
		t.Errorf("a refresh within 1 s read the counter: %v", got)
	}

	// A policy change closes the segment: the 1 J goes to performance.
	if err := obj.Call(bus.Interface+".SetPolicy", 0, "powersaving").Err; err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "performance/ac 3.5 J", func() (bool, string) {
		got := joules(energyProp(t, conn))
		return reflect.DeepEqual(got, map[string]float64{"performance/ac": 3.5}), "Energy " + strconv.Quote(strings.TrimSpace(fmtMap(got)))
	})
	bump(4_000_000)
	time.Sleep(EnergyRefreshInterval)
	// Anyone may refresh: it changes no setting.
	if os.Geteuid() == 0 {
		if _, err := exec.LookPath("setpriv"); err == nil {
			if _, err := exec.LookPath("busctl"); err == nil {
				out, err := exec.Command("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
					"busctl", "--address="+addr, "call", bus.Name, string(bus.ObjectPath), bus.Interface, "RefreshEnergy").CombinedOutput()
				if err != nil {
					t.Fatalf("RefreshEnergy as nobody: %v %s", err, out)
				}
			}
		}
	} else if err := obj.Call(bus.Interface+".RefreshEnergy", 0).Err; err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "powersaving/ac 4 J", func() (bool, string) {
		got := joules(energyProp(t, conn))
		return reflect.DeepEqual(got, map[string]float64{"performance/ac": 3.5, "powersaving/ac": 4}), fmtMap(got)
	})
	before := energyProp(t, conn)

	// Bad calls change nothing.
	if err := obj.Call(bus.Interface+".RefreshEnergy", 0, "x").Err; dbusErrName(err) != errInvalidArgs {
		t.Errorf("RefreshEnergy(\"x\"): %v, want InvalidArgs", err)
	}

	// The energy model for the same (idle) load: the platform's idle
	// power, the packages' none, for every policy.
	var model, note string
	var est []struct {
		Policy              string
		Watts, PackageWatts float64
	}
	if err := obj.Call(bus.Interface+".EstimatePower", 0).Store(&model, &note, &est); err != nil {
		t.Fatal(err)
	}
	// The mock laptop is the seed's 4-core/8-thread machine: no note.
	if model != policy.SNBLaptop.Name || note != "" || len(est) != 3 || est[0].Policy != "performance" || est[2].Policy != "powersaving" {
		t.Fatalf("EstimatePower = %q %q %+v", model, note, est)
	}
	for _, e := range est {
		if e.Watts != policy.SNBLaptop.IdleW || e.PackageWatts != 0 {
			t.Errorf("idle estimate %+v, want %v W and 0 W for the packages", e, policy.SNBLaptop.IdleW)
		}
	}
	// Under every model (the calibration, then the five bracketing
	// models; the calibration is already the SMT machine's), the same
	// idle platform; no change from performance anywhere.
	var est2 []struct {
		Model, Policy       string
		Watts, PackageWatts float64
	}
	var spread []struct {
		Policy                             string
		Low, High, LowPackage, HighPackage float64
		Change, ChangeSpread               float64
		Distinguishable                    bool
	}
	if err := obj.Call(bus.Interface+".EstimatePowerModels", 0).Store(&model, &note, &est2, &spread); err != nil {
		t.Fatal(err)
	}
	models := []string{policy.SNBLaptop.Name, policy.ModelM1, policy.ModelJuno, policy.ModelGS101, policy.ModelRK3588, policy.ModelIntelEM}
	if model != policy.SNBLaptop.Name || note != "" || len(est2) != 3*len(models) || len(spread) != 3 {
		t.Fatalf("EstimatePowerModels = %q %q %+v %+v", model, note, est2, spread)
	}
	for i, e := range est2 {
		if e.Model != models[i/3] || e.Policy != string(policy.AvailablePolicies[i%3]) || e.Watts != policy.SNBLaptop.IdleW || e.PackageWatts != 0 {
			t.Errorf("estimate %d = %+v, want %s %s at %v W", i, e, models[i/3], policy.AvailablePolicies[i%3], policy.SNBLaptop.IdleW)
		}
	}
	for i, sp := range spread {
		if sp.Policy != string(policy.AvailablePolicies[i]) || sp.Low != 12 || sp.High != 12 || sp.LowPackage != 0 || sp.HighPackage != 0 || sp.Change != 0 || sp.ChangeSpread != 0 || sp.Distinguishable {
			t.Errorf("spread %d = %+v", i, sp)
		}
	}

	// Across a restart: the totals come back from state.json, and the
	// segment the stop closed is added (no energy since, some seconds).
	cancel()
	<-done
	_ = d
	m.startCfg(t, func(c *Config) { c.Bus = addr })
	testutil.Eventually(t, "bus name again", func() (bool, string) { return testutil.NameOwned(conn, bus.Name) })
	after := energyProp(t, conn)
	if !reflect.DeepEqual(joules(after), joules(before)) || after["powersaving/ac"][1] <= before["powersaving/ac"][1] || after["performance/ac"] != before["performance/ac"] {
		t.Errorf("after a restart %v, want the joules of %v and more time (the segment the stop closed)", after, before)
	}
}

func fmtMap(m map[string]float64) string {
	var b strings.Builder
	for k, v := range m {
		b.WriteString(k + "=" + strconv.FormatFloat(v, 'g', -1, 64) + " ")
	}
	return b.String()
}

// TestEnergyBatteryOverBus: on a mock laptop running on battery
// (power_now 7.21 W) the battery segment measures exactly 7.21 W on
// average, also for its end at the plug; time on AC is not measured by
// the battery.
func TestEnergyBatteryOverBus(t *testing.T) {
	addr := testutil.StartBus(t, testutil.BusOptions{}).Addr
	m := newMockLaptop(t)
	ps := filepath.Join(m.sys, "class/power_supply")
	putAtomic(t, ps+"/AC/online", "0")
	putAtomic(t, ps+"/BAT0/status", "Discharging")
	putAtomic(t, ps+"/BAT0/power_now", "7210000")
	putAtomic(t, ps+"/BAT0/energy_now", "28830000") // µWh: no part in it
	d := m.startWith(t, func(c *Config) { c.Bus = addr })
	conn, err := dbus.Connect(addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	testutil.Eventually(t, "bus name", func() (bool, string) { return testutil.NameOwned(conn, bus.Name) })
	if s := d.Snapshot(); s.PowerSource != "battery" || s.Policy != policy.Powersaving || s.EnergySource != snapshot.EnergySourceBattery {
		t.Fatalf("snapshot %s %s %s, want battery, powersaving, battery", s.PowerSource, s.Policy, s.EnergySource)
	}
	time.Sleep(200 * time.Millisecond)
	if err := conn.Object(bus.Name, bus.ObjectPath).Call(bus.Interface+".RefreshEnergy", 0).Err; err != nil {
		t.Fatal(err)
	}
	avg := func(v [2]float64) float64 { return v[0] / v[1] }
	e := energyProp(t, conn)
	if got := e["powersaving/battery"]; len(e) != 1 || got[1] < 0.2 || math.Abs(avg(got)-7.21) > 1e-9 {
		t.Fatalf("Energy %v, want powersaving/battery at 7.21 W over ≥ 0.2 s", e)
	}
	first := e["powersaving/battery"]

	time.Sleep(200 * time.Millisecond)
	putAtomic(t, ps+"/AC/online", "1")
	putAtomic(t, ps+"/BAT0/status", "Charging")
	testutil.Eventually(t, "the plug closes the battery segment", func() (bool, string) {
		e := energyProp(t, conn)
		got := e["powersaving/battery"]
		return got[1] > first[1], fmtMap(joules(e))
	})
	e = energyProp(t, conn)
	if got := e["powersaving/battery"]; len(e) != 1 || math.Abs(avg(got)-7.21) > 1e-9 {
		t.Errorf("Energy %v, want only powersaving/battery, still 7.21 W", e)
	}
	time.Sleep(EnergyRefreshInterval)
	if err := conn.Object(bus.Name, bus.ObjectPath).Call(bus.Interface+".RefreshEnergy", 0).Err; err != nil {
		t.Fatal(err)
	}
	if e := energyProp(t, conn); len(e) != 1 {
		t.Errorf("time on AC measured by a charging battery: %v", e)
	}
}

// TestEstimatePowerStopped: after the loop ends EstimatePower says so.
func TestEstimatePowerStopped(t *testing.T) {
	m := newMockLaptop(t)
	d, cancel, done := m.startCfg(t, nil)
	if r, err := (controller{d}).EstimatePower(context.Background()); err != nil || len(r.Policies) != 3 {
		t.Fatalf("EstimatePower = %+v, %v", r, err)
	}
	cancel()
	<-done
	time.Sleep(EnergyRefreshInterval)
	if _, err := (controller{d}).EstimatePower(context.Background()); err != ErrStopped {
		t.Errorf("after stop: %v, want ErrStopped", err)
	}
}

// TestEstimatePowerOtherShape: on a machine the model was not fitted on
// (a 2-socket 4-core Nehalem EP, priced with the 8-core SNB EP's
// calibration) the answer says its watts only rank the policies.
func TestEstimatePowerOtherShape(t *testing.T) {
	m := newMockLaptop(t)
	if err := os.RemoveAll(filepath.Join(m.sys, "devices")); err != nil {
		t.Fatal(err)
	}
	testutil.CopyFixture(t, "../sysfs/testdata/topology/nhm-ep-2s4c2t/devices", filepath.Join(m.sys, "devices"))
	d := m.startWith(t, func(c *Config) { c.CgroupRoot = "" })
	r, err := (controller{d}).EstimatePower(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	want := "the snb-ep-2s8c2t model was fitted on 2 packages × 8 cores × 2 threads; this machine is 2 packages × 4 cores × 2 threads: its watts compare the policies, they are no estimate of this machine's power"
	if r.Model != policy.SNBServer.Name || r.Note != want || len(r.Policies) != 3 {
		t.Errorf("EstimatePower = %+v, want model %s and the note %q", r, policy.SNBServer.Name, want)
	}
	for _, e := range r.Policies {
		if e.Watts != policy.SNBServer.IdleW || e.PackageWatts != 0 {
			t.Errorf("no workloads: %+v, want %v W and 0 W", e, policy.SNBServer.IdleW)
		}
	}
}
