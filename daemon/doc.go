// Package daemon wires schedpolicyd together: one event loop owns the knob's
// decision (a decider: the knob, choices, holds, the power source; no I/O),
// the workloads and the current plan; it applies plans to cgroup cpusets,
// persists the user's choices, serves the virtual sysfs tree and talks to
// systemd. Its D-Bus service is package daemon/bus, which asks the loop
// through bus.Controller, implemented by an adapter (controller.go), and
// is handed every snapshot it publishes (daemon/snapshot); what survives a
// restart, state.json, is read and written by package daemon/statefile,
// and the energy per policy and power source is measured by package
// daemon/energy's Meter, which the loop drives (energy_loop.go).
package daemon
