package daemon

// Stats are counters kept since Run started, for the soak command, tests
// and diagnostics. Reading them is safe for concurrent use.
type Stats struct {
	// Events is the number of wake-ups the event loop handled: power
	// states, CPU hotplug hints, requests from the tree and D-Bus, cgroup
	// directory events, sampling ticks and tree losses.
	Events int64
	// Decisions is the number of times the effective policy was derived
	// and a plan made (recompute).
	Decisions int64
	// CPUSetWrites is the number of cpuset.cpus writes that succeeded,
	// restores on exit included.
	CPUSetWrites int64
	// Errors is the number of cpuset writes the kernel refused (vanished
	// workloads excluded) and of failed tree remounts.
	Errors int64
	// TreeRemounts is the number of times the tree was served again after
	// it was unmounted from outside.
	TreeRemounts int64
	// Samples is the number of times the workloads' CPU time was sampled
	// (periodic ticks, attached tasks, CPU pressure).
	Samples int64
	// PressureWakes is the number of times the CPU pressure trigger woke
	// the loop (tasks waited for a CPU; see sysfs.PressureTrigger).
	PressureWakes int64
	// ClockWakes is the number of confirmations started because a packed
	// workload's task-clock counters signalled a burst (daemon/placement/clockwake.go).
	ClockWakes int64
}

// Stats returns the counters so far. Safe for concurrent use.
func (d *Daemon) Stats() Stats {
	return Stats{
		Events:        d.stats.Events.Load(),
		Decisions:     d.stats.Decisions.Load(),
		CPUSetWrites:  d.stats.Writes.Load(),
		Errors:        d.stats.Errors.Load(),
		TreeRemounts:  d.stats.Remounts.Load(),
		Samples:       d.stats.Samples.Load(),
		PressureWakes: d.stats.PressureWakes.Load(),
		ClockWakes:    d.stats.ClockWakes.Load(),
	}
}
