package daemon

import (
	"context"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/schedpolicyd/schedpolicyd/daemon/snapshot"
	"github.com/schedpolicyd/schedpolicyd/internal/testutil"
	"github.com/schedpolicyd/schedpolicyd/policy"
)

// energyOf is the daemon's published Energy as (policy/source) → [J, s].
func energyOf(d *Daemon) map[string][2]float64 {
	out := map[string][2]float64{}
	for _, e := range d.Snapshot().Energy {
		out[string(e.Policy)+"/"+string(e.PowerSource)] = [2]float64{e.Joules, e.Seconds}
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

// TestEnergyRAPL: the daemon on a mock laptop with a RAPL package
// counter, asked as daemon/bus asks it (controller{d}) without a bus:
// segments close at a policy change and on RefreshEnergy (coalesced
// within a second), Energy carries the exact counter deltas, the idle
// load's estimates are the platform's idle power under every model, and
// the totals survive a restart. That the service publishes Energy with
// PropertiesChanged and lets anyone refresh is daemon/bus's
// (TestPropertiesPublished, TestSettersRefusedToOthers).
func TestEnergyRAPL(t *testing.T) {
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
	d, cancel, done := m.startCfg(t, nil)
	c := controller{d}
	ctx := t.Context()
	if src := d.Snapshot().EnergySourceName(); src != "rapl" {
		t.Fatalf("EnergySource %v, want rapl", src)
	}
	if e := energyOf(d); len(e) != 0 {
		t.Fatalf("Energy before any segment closed: %v", e)
	}

	bump(2_500_000)
	if err := c.RefreshEnergy(ctx); err != nil {
		t.Fatal(err)
	}
	e := energyOf(d)
	if got := e["performance/ac"]; got[0] != 2.5 || got[1] <= 0 || got[1] > time.Since(started).Seconds() {
		t.Errorf("after a refresh: %v, want performance/ac 2.5 J over (0, %.3f] s", e, time.Since(started).Seconds())
	}

	// Coalesced: a second refresh within a second reads nothing.
	bump(1_000_000)
	if err := c.RefreshEnergy(ctx); err != nil {
		t.Fatal(err)
	}
	if got := joules(energyOf(d)); !reflect.DeepEqual(got, map[string]float64{"performance/ac": 2.5}) {
		t.Errorf("a refresh within 1 s read the counter: %v", got)
	}

	// A policy change closes the segment: the 1 J goes to performance.
	if err := c.WriteKnob(ctx, fileCurrent, "powersaving", "test"); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "performance/ac 3.5 J", func() (bool, string) {
		got := joules(energyOf(d))
		return reflect.DeepEqual(got, map[string]float64{"performance/ac": 3.5}), "Energy " + strconv.Quote(strings.TrimSpace(fmtMap(got)))
	})
	bump(4_000_000)
	time.Sleep(EnergyRefreshInterval)
	if err := c.RefreshEnergy(ctx); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "powersaving/ac 4 J", func() (bool, string) {
		got := joules(energyOf(d))
		return reflect.DeepEqual(got, map[string]float64{"performance/ac": 3.5, "powersaving/ac": 4}), fmtMap(got)
	})
	before := energyOf(d)

	// The energy model for the same (idle) load: the platform's idle
	// power, the packages' none, for every policy.
	r, err := c.EstimatePower(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// The mock laptop is the seed's 4-core/8-thread machine: no note.
	if r.Model != policy.SNBLaptop.Name || r.Note != "" || len(r.Policies) != 3 || r.Policies[0].Policy != policy.Performance || r.Policies[2].Policy != policy.Powersaving {
		t.Fatalf("EstimatePower = %q %q %+v", r.Model, r.Note, r.Policies)
	}
	for _, e := range r.Policies {
		if e.Watts != policy.SNBLaptop.IdleW || e.PackageWatts != 0 {
			t.Errorf("idle estimate %+v, want %v W and 0 W for the packages", e, policy.SNBLaptop.IdleW)
		}
	}
	// Under every model (the calibration, then the five bracketing
	// models; the calibration is already the SMT machine's), the same
	// idle platform; no change from performance anywhere.
	models := []string{policy.SNBLaptop.Name, policy.ModelM1, policy.ModelJuno, policy.ModelGS101, policy.ModelRK3588, policy.ModelIntelEM}
	if len(r.Models) != len(models) || len(r.Spread) != 3 {
		t.Fatalf("EstimatePower's models %+v, spread %+v", r.Models, r.Spread)
	}
	for i, me := range r.Models {
		if me.Model != models[i] || len(me.Policies) != 3 {
			t.Errorf("model %d = %+v, want %s with 3 policies", i, me, models[i])
			continue
		}
		for j, e := range me.Policies {
			if e.Policy != policy.AvailablePolicies[j] || e.Watts != policy.SNBLaptop.IdleW || e.PackageWatts != 0 {
				t.Errorf("estimate %d/%d = %+v, want %s %s at %v W", i, j, e, models[i], policy.AvailablePolicies[j], policy.SNBLaptop.IdleW)
			}
		}
	}
	for i, sp := range r.Spread {
		if sp.Policy != policy.AvailablePolicies[i] || sp.LowWatts != 12 || sp.HighWatts != 12 || sp.LowPackageWatts != 0 || sp.HighPackageWatts != 0 ||
			sp.VsPerformance.Watts != 0 || sp.VsPerformance.Spread != 0 || sp.VsPerformance.Distinguishable {
			t.Errorf("spread %d = %+v", i, sp)
		}
	}

	// Across a restart: the totals come back from state.json, and the
	// segment the stop closed is added (no energy since, some seconds).
	cancel()
	<-done
	d2, _, _ := m.startCfg(t, nil)
	after := energyOf(d2)
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

// TestEnergyBattery: on a mock laptop running on battery (power_now
// 7.21 W) the battery segment measures exactly 7.21 W on average, also
// for its end at the plug; time on AC is not measured by the battery.
// Refreshed as daemon/bus asks it (controller{d}), without a bus.
func TestEnergyBattery(t *testing.T) {
	m := newMockLaptop(t)
	ps := filepath.Join(m.sys, "class/power_supply")
	putAtomic(t, ps+"/AC/online", "0")
	putAtomic(t, ps+"/BAT0/status", "Discharging")
	putAtomic(t, ps+"/BAT0/power_now", "7210000")
	putAtomic(t, ps+"/BAT0/energy_now", "28830000") // µWh: no part in it
	d, _, _ := m.start(t)
	c := controller{d}
	if s := d.Snapshot(); s.PowerSource != "battery" || s.Policy != policy.Powersaving || s.EnergySource != snapshot.EnergySourceBattery {
		t.Fatalf("snapshot %s %s %s, want battery, powersaving, battery", s.PowerSource, s.Policy, s.EnergySource)
	}
	time.Sleep(200 * time.Millisecond)
	if err := c.RefreshEnergy(t.Context()); err != nil {
		t.Fatal(err)
	}
	avg := func(v [2]float64) float64 { return v[0] / v[1] }
	e := energyOf(d)
	if got := e["powersaving/battery"]; len(e) != 1 || got[1] < 0.2 || math.Abs(avg(got)-7.21) > 1e-9 {
		t.Fatalf("Energy %v, want powersaving/battery at 7.21 W over ≥ 0.2 s", e)
	}
	first := e["powersaving/battery"]

	time.Sleep(200 * time.Millisecond)
	putAtomic(t, ps+"/AC/online", "1")
	putAtomic(t, ps+"/BAT0/status", "Charging")
	testutil.Eventually(t, "the plug closes the battery segment", func() (bool, string) {
		e := energyOf(d)
		got := e["powersaving/battery"]
		return got[1] > first[1], fmtMap(joules(e))
	})
	e = energyOf(d)
	if got := e["powersaving/battery"]; len(e) != 1 || math.Abs(avg(got)-7.21) > 1e-9 {
		t.Errorf("Energy %v, want only powersaving/battery, still 7.21 W", e)
	}
	time.Sleep(EnergyRefreshInterval)
	if err := c.RefreshEnergy(t.Context()); err != nil {
		t.Fatal(err)
	}
	if e := energyOf(d); len(e) != 1 {
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
