// Package daemon wires schedpolicyd together: one event loop owns the knob,
// the power source, the workloads and the current plan; it applies plans to
// cgroup cpusets, persists the user's choices, serves the virtual sysfs tree
// and the D-Bus service, and talks to systemd.
package daemon
