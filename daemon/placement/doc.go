// Package placement is what the two placement back ends share: the
// Backend interface the daemon's loop drives, the Journal that records a
// value in state.json before it is written and restores only what is
// still ours, the one-shot Confirmation of a crowded workload, the
// task-clock gate (ClockGate), the sampling back-off, the slice rules'
// checks, and the Config and Counters the daemon hands each back end.
//
// The back ends are its sub-packages: cgroupfs (cpuset.cpus of the
// managed parent's children) and units (AllowedCPUs= of systemd units).
// Neither imports the daemon nor the other; the daemon imports both and
// holds one.
package placement
