package daemon

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/schedpolicyd/schedpolicyd/acpi"
	"github.com/schedpolicyd/schedpolicyd/daemon/energy"
	"github.com/schedpolicyd/schedpolicyd/daemon/placement"
	"github.com/schedpolicyd/schedpolicyd/daemon/snapshot"
	"github.com/schedpolicyd/schedpolicyd/policy"
	"github.com/schedpolicyd/schedpolicyd/sysfs"
)

// The event loop's side of the energy meter (package energy) and the energy
// model's estimate for the current load (EstimatePower).

// EnergyRefreshInterval coalesces RefreshEnergy: a call within this long of
// the previous refresh returns without reading, so a client in a loop
// cannot make the daemon read counters and write state.json without pause.
// The totals it then sees are at most this old.
const EnergyRefreshInterval = time.Second

// energyKey is the segment the daemon is in now.
func (d *Daemon) energyKey() energy.Key {
	return energy.Key{Policy: d.dec.effective, Source: d.dec.power.Source}
}

// followEnergy closes the running segment when the policy in force or the
// power source changed since it began.
func (d *Daemon) followEnergy() {
	k := d.energyKey()
	if k == d.energy.Segment() {
		return
	}
	if d.closeEnergySegment() {
		d.energyDirty = true
	}
	d.armEnergyGuard()
}

// saveEnergy writes changed totals to state.json, unless what is there
// already holds them (the placement saves before its writes).
func (d *Daemon) saveEnergy() {
	if !d.energyDirty {
		return
	}
	d.energyDirty = false
	d.place.PutRecords()
	if d.store.Changed() {
		if err := d.store.Checkpoint(); err != nil {
			d.energyDirty = true // kept in memory, saved with the next change
		}
	}
}

// armEnergyGuard (re)starts the wrap guard after a reading: RAPL only.
func (d *Daemon) armEnergyGuard() {
	d.energyGuard.arm(d.energy.GuardAfter())
}

// wrapGuard is the energy meter's wrap guard (Daemon.energyGuard): a
// one-shot timer re-armed after each reading for as long as the meter may
// wait before its next one (energy.Meter.GuardAfter), stopped while no
// counter can wrap. Its timer is made at the first arm, so a guard armed
// in a synctest bubble runs on the bubble's clock. A nil guard (before
// start) arms nothing and has no channel.
type wrapGuard struct{ t *time.Timer }

// arm has the guard fire after (stopped if after ≤ 0).
func (g *wrapGuard) arm(after time.Duration) {
	switch {
	case g == nil:
	case after <= 0:
		g.stop()
	case g.t == nil:
		g.t = time.NewTimer(after)
	default:
		g.t.Reset(after)
	}
}

// C fires when the guard is due; nil while it never was armed.
func (g *wrapGuard) C() <-chan time.Time {
	if g == nil || g.t == nil {
		return nil
	}
	return g.t.C
}

func (g *wrapGuard) stop() {
	if g != nil && g.t != nil {
		g.t.Stop()
	}
}

// energyGuardRead is the wrap guard's reading: it extends the running
// segment without closing it, so the totals do not change.
func (d *Daemon) energyGuardRead() {
	before := d.energy.Source()
	d.energy.Advance(d.dec.power.Source == acpi.Battery)
	d.armEnergyGuard()
	if d.energy.Source() != before {
		d.publish()
	}
}

// refreshEnergy is RefreshEnergy on the loop: read now, close the running
// segment into the totals (the next one starts under the same policy and
// power source), save and publish. Coalesced: see EnergyRefreshInterval.
func (d *Daemon) refreshEnergy() {
	now := time.Now()
	if !d.energyRefreshed.IsZero() && now.Sub(d.energyRefreshed) < EnergyRefreshInterval {
		return
	}
	d.energyRefreshed = now
	if d.closeEnergySegment() {
		d.energyDirty = true
	}
	d.armEnergyGuard()
	d.saveEnergy()
	d.publish()
}

// estimateCache keeps EstimatePower's last answer for EnergyRefreshInterval.
type estimateCache struct {
	mu  sync.Mutex // guards the fields below
	at  time.Time
	est snapshot.PowerEstimates
}

// EstimatePower runs the energy model (docs/ENERGY_MODEL.md) for each
// policy, in policy order, on the machine's topology and the managed
// workloads' current utilisation: each policy's plan as the balancer would
// make it (without the lazy history), priced with policy.ModelFor's
// calibration (each efficiency class at its cost on a hybrid machine,
// MachineEnergy), whose name it returns with a note when the model was
// not fitted on a machine of this shape. Workloads with a performance
// override keep every allowed CPU and released ones their own, under
// every policy. The same plans are priced under every model of
// SpreadModelsFor (Models, the machine's own first, so Policies is
// Models[0]'s), with each policy's range across them and its effect
// against performance (policy.EffectOf): modelled, never measured. Load
// outside the managed workloads is not seen. The answer is computed off
// the event loop and reused for EnergyRefreshInterval. Errors:
// ErrStopped, or ctx's.
func (c controller) EstimatePower(ctx context.Context) (snapshot.PowerEstimates, error) {
	d := c.d
	d.est.mu.Lock()
	defer d.est.mu.Unlock()
	if !d.est.at.IsZero() && time.Since(d.est.at) < EnergyRefreshInterval {
		return d.est.est, nil
	}
	var in placement.ModelInput
	if err := d.do(ctx, func() error { in = d.modelInput(); return nil }); err != nil {
		return snapshot.PowerEstimates{}, err
	}
	r := EstimatePowerOf(d.fs, in)
	d.est.at, d.est.est = time.Now(), r
	return r, nil
}

// EstimatePowerOf is EstimatePower's answer for in, the machine below
// fs's root (its own energy model, MachineEnergy) and the workloads' load.
func EstimatePowerOf(fs sysfs.FS, in placement.ModelInput) snapshot.PowerEstimates {
	base := policy.ModelFor(in.Topo)
	m := MachineEnergy(base, fs, in.Classes).Model
	r := snapshot.PowerEstimates{Model: m.Name}
	if !m.Describes(in.Topo) {
		shape, _ := policy.ShapeOf(in.Topo)
		r.Note = fmt.Sprintf("the %s model was fitted on %s; this machine is %s: its watts compare the policies, they are no estimate of this machine's power", m.Name, m.Machine, shape)
	}
	loads := append(append([]policy.Load(nil), in.Placed...), in.Fixed...)
	plans := make([]policy.Plan, len(policy.AvailablePolicies))
	for i, p := range policy.AvailablePolicies {
		plan := policy.PlanPlacement(policy.Input{Topology: in.Topo, Allowed: in.Allowed, Policy: p, Loads: in.Placed, DisableLazy: true})
		if plan.CPUs == nil {
			plan.CPUs = map[string][]int{}
		}
		for n, c := range in.CPUs {
			plan.CPUs[n] = c
		}
		plans[i] = plan
	}
	models := SpreadModelsFor(m, base, in.Classes, in.Topo)
	watts := make([][]float64, len(plans)) // by policy, then model
	for _, nm := range models {
		me := snapshot.ModelEstimates{Model: nm.Name}
		for i, p := range policy.AvailablePolicies {
			w := nm.Model.Simulate(in.Topo, plans[i], loads).Watts
			watts[i] = append(watts[i], w)
			me.Policies = append(me.Policies, snapshot.PowerEstimate{Policy: p, Watts: w, PackageWatts: w - nm.Model.IdleW})
		}
		r.Models = append(r.Models, me)
	}
	r.Policies = r.Models[0].Policies
	perf := slices.Index(policy.AvailablePolicies, policy.Performance)
	for i, p := range policy.AvailablePolicies {
		sp := snapshot.PolicySpread{Policy: p, LowWatts: math.Inf(1), HighWatts: math.Inf(-1), LowPackageWatts: math.Inf(1), HighPackageWatts: math.Inf(-1)}
		for _, me := range r.Models {
			e := me.Policies[i]
			sp.LowWatts, sp.HighWatts = min(sp.LowWatts, e.Watts), max(sp.HighWatts, e.Watts)
			sp.LowPackageWatts, sp.HighPackageWatts = min(sp.LowPackageWatts, e.PackageWatts), max(sp.HighPackageWatts, e.PackageWatts)
		}
		if i != perf {
			sp.VsPerformance = policy.EffectOf(watts[i], watts[perf])
		}
		r.Spread = append(r.Spread, sp)
	}
	return r
}

// modelInput copies the model's inputs; on the loop.
func (d *Daemon) modelInput() placement.ModelInput {
	v := &d.cpus
	in := placement.ModelInput{Topo: v.topo, Classes: v.classes, Online: v.allowed, Allowed: v.allowed.List(), CPUs: map[string][]int{}}
	d.place.ModelLoads(&in)
	return in
}
