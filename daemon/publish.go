package daemon

import (
	"github.com/schedpolicyd/schedpolicyd/daemon/snapshot"
)

func (d *Daemon) status() string {
	return snapshot.FormatStatus(d.effective, d.knob.PowerAware, d.power.Source, d.place.Count())
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
		d.metrics.update(renderMetrics(metricsInput{snap: s, stats: d.Stats(), zones: d.energy.Zones(), started: d.started}))
	}
	if old == nil || old.Policy != s.Policy || old.PowerSource != s.PowerSource || old.Knob != s.Knob || len(old.Workloads) != len(s.Workloads) {
		d.notify.Status(d.status())
	}
}

// workloadStatus lists every workload: cgroupfs children or units.
func (d *Daemon) workloadStatus() []WorkloadStatus { return d.place.Status() }

func (d *Daemon) newSnapshot() *snapshot.Snapshot {
	return &snapshot.Snapshot{
		Policy: d.effective, Knob: d.knob, PowerSource: d.power.Source,
		Reason: d.power.Reason, PolicyReason: d.policyReason, LastChange: d.lastChange,
		Boost: d.boost, Workloads: d.workloadStatus(), Holds: d.holdList(),
		Topology: d.topoProp, CPUClasses: d.classProp,
		EnergySource: d.energy.Source(), Energy: d.energy.Totals(), ConfigDigest: d.cfg.ConfigDigest,
		KnobFrom: d.knobFrom(), KnobChosenAt: d.chosenAt,
	}
}
