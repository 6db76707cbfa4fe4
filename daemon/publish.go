package daemon

import (
	"github.com/schedpolicyd/schedpolicyd/daemon/snapshot"
)

func (d *Daemon) status() string {
	return snapshot.FormatStatus(d.dec.effective, d.dec.knob.PowerAware, d.dec.power.Source, d.place.Count())
}

// publish stores a new snapshot, refreshes the plain tree, updates D-Bus
// properties (emitting PropertiesChanged for changed ones) and systemd's
// STATUS.
func (d *Daemon) publish() {
	s := d.newSnapshot()
	old := d.snap.Swap(s)
	if d.tree != nil {
		if err := d.tree.Changed(); err != nil {
			d.log.WithError(err).Warn("refreshing tree")
		}
	}
	d.bus.Publish(s)
	if d.metrics != nil {
		d.metrics.update(renderMetrics(metricsInput{snap: s, stats: d.Stats(), zones: d.energy.meter.Zones(), started: d.started}))
	}
	if old == nil || old.Policy != s.Policy || old.PowerSource != s.PowerSource || old.Knob != s.Knob || len(old.Workloads) != len(s.Workloads) {
		d.notify.Status(d.status())
	}
}

func (d *Daemon) newSnapshot() *snapshot.Snapshot {
	s := &snapshot.Snapshot{
		Boost: d.boost.value, Workloads: d.place.Status(),
		Topology: d.cpus.topoProp, CPUClasses: d.cpus.classProp,
		EnergySource: d.energy.meter.Source(), Energy: d.energy.meter.Totals(), ConfigDigest: d.cfg.ConfigDigest,
	}
	for _, x := range d.place.Exempts() {
		s.Exempt = append(s.Exempt, snapshot.ExemptEntry{Entry: x.Entry.String(), From: string(x.From)})
	}
	d.dec.inForce(s)
	s.KnobFrom, s.KnobChosenAt = d.dec.knobFrom(), d.dec.chosenAt
	return s
}
