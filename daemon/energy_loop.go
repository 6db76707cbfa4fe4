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
	"github.com/schedpolicyd/schedpolicyd/daemon/statefile"
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

// energyKey is the segment the daemon is in now: the policy in force and
// the power source.
func (c *decider) energyKey() energy.Key {
	return energy.Key{Policy: c.effective, Source: c.power.Source}
}

// onBattery reports whether the power source is the battery (the meter
// then falls back to the batteries' power where there is no RAPL).
func (c *decider) onBattery() bool { return c.power.Source == acpi.Battery }

// energyLoop is the loop's side of the energy meter (Daemon.energy): the
// meter, whether its totals changed since they were saved, when
// RefreshEnergy last read it and the wrap guard. Loop-owned; the store
// and the engine it saves through are handed in, since keepState makes
// the store anew.
type energyLoop struct {
	meter *energy.Meter
	// dirty: the totals changed since they were last saved.
	dirty bool
	// refreshed is when RefreshEnergy last read the counters.
	refreshed time.Time
	// guard fires when RAPL must be read so no wrap is missed; nil before
	// start.
	guard *wrapGuard
}

// closeSegment closes the meter's running segment and starts the next
// under k (energy.Meter.CloseSegment), the totals written into store; it
// reports whether they changed.
func (e *energyLoop) closeSegment(k energy.Key, battery bool, store *statefile.Store) bool {
	if !e.meter.CloseSegment(k, battery) {
		return false
	}
	store.SetEnergy(e.meter.Totals())
	return true
}

// follow closes the running segment when the policy in force or the power
// source (k) changed since it began.
func (e *energyLoop) follow(k energy.Key, battery bool, store *statefile.Store) {
	if k == e.meter.Segment() {
		return
	}
	if e.closeSegment(k, battery, store) {
		e.dirty = true
	}
	e.armGuard()
}

// save writes changed totals to state.json, unless what is there already
// holds them (the placement saves before its writes): the engine's
// records are put in first.
func (e *energyLoop) save(place *placement.Engine, store *statefile.Store) {
	if !e.dirty {
		return
	}
	e.dirty = false
	place.PutRecords()
	if store.Changed() {
		if err := store.Checkpoint(); err != nil {
			e.dirty = true // kept in memory, saved with the next change
		}
	}
}

// armGuard (re)starts the wrap guard after a reading: RAPL only.
func (e *energyLoop) armGuard() {
	e.guard.arm(e.meter.GuardAfter())
}

// wrapGuard is the energy meter's wrap guard (energyLoop.guard): a
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

// guardRead is the wrap guard's reading: it extends the running segment
// without closing it, so the totals do not change. It reports whether the
// meter's source changed (the caller publishes).
func (e *energyLoop) guardRead(battery bool) (sourceChanged bool) {
	before := e.meter.Source()
	e.meter.Advance(battery)
	e.armGuard()
	return e.meter.Source() != before
}

// refresh is RefreshEnergy on the loop: read now, close the running
// segment into the totals (the next one starts under the same key k),
// save; it reports whether it read (the caller publishes). Coalesced: a
// call within EnergyRefreshInterval of the last reads nothing.
func (e *energyLoop) refresh(k energy.Key, battery bool, place *placement.Engine, store *statefile.Store) bool {
	now := time.Now()
	if !e.refreshed.IsZero() && now.Sub(e.refreshed) < EnergyRefreshInterval {
		return false
	}
	e.refreshed = now
	if e.closeSegment(k, battery, store) {
		e.dirty = true
	}
	e.armGuard()
	e.save(place, store)
	return true
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
