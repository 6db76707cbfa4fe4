package daemon

import (
	"fmt"

	"github.com/schedpolicyd/schedpolicyd/acpi"
	"github.com/schedpolicyd/schedpolicyd/policy"
)

func (d *Daemon) status() string {
	n := len(d.pl.workloads)
	if d.units != nil {
		n += len(d.units.workloads)
	}
	return statusText(d.effective, d.knob.PowerAware, d.power.Source, n)
}

// StatusText is the one line systemd shows as the unit's status (STATUS=,
// `systemctl show -p StatusText`): the effective policy, the knob, the power
// source and the number of workloads, for example "policy powersaving
// (power_aware 2), power source battery, 3 workloads". It reads the last
// published snapshot, so it is safe from any goroutine.
func (s Snapshot) StatusText() string {
	return statusText(s.Policy, s.Knob.PowerAware, s.PowerSource, len(s.Workloads))
}

func statusText(p policy.Policy, powerAware policy.PowerAware, src acpi.Source, workloads int) string {
	return fmt.Sprintf("policy %s (power_aware %d), power source %s, %d workloads", p, powerAware, src, workloads)
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
	d.bus.update(*s)
	if d.metrics != nil {
		d.metrics.update(renderMetrics(metricsInput{snap: s, stats: d.Stats(), zones: d.energy.zones(), started: d.started}))
	}
	if old == nil || old.Policy != s.Policy || old.PowerSource != s.PowerSource || old.Knob != s.Knob || len(old.Workloads) != len(s.Workloads) {
		d.notify.Status(d.status())
	}
}

// workloadStatus lists every workload: cgroupfs children, then units.
func (d *Daemon) workloadStatus() []WorkloadStatus {
	ws := d.pl.status()
	if d.units != nil {
		ws = append(ws, d.units.status()...)
	}
	return ws
}

func (d *Daemon) newSnapshot() *Snapshot {
	s := &Snapshot{
		Policy: d.effective, Knob: d.knob, PowerSource: d.power.Source,
		Reason: d.power.Reason, PolicyReason: d.policyReason, LastChange: d.lastChange,
		Boost: d.boost, Workloads: d.workloadStatus(), Holds: d.holdList(),
		Topology: d.topoProp, CPUClasses: d.classProp,
		EnergySource: d.energy.Source(), Energy: d.energy.Totals(), ConfigDigest: d.cfg.ConfigDigest,
	}
	s.props = propertyValues(*s)
	return s
}
