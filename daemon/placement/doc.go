// Package placement is the placement engine the daemon's loop holds
// (Engine) and what its drivers share, held once in it: the Journal that
// records a value in state.json before it is written and restores only
// what is still ours, the CPU pressure trigger (PressureGate), the
// one-shot Confirmation of a crowded workload, the task-clock gate
// (ClockGate), the sampling back-off, the wakes' handling; the Driver
// interface and the optional capabilities a driver may have
// (backend.go), the slice rules' checks, and the Config and Counters the
// daemon hands the engine.
//
// The drivers are its sub-packages: cgroupfs (cpuset.cpus of the managed
// parent's children) and units (AllowedCPUs= of systemd units). Neither
// imports the daemon nor the other; the daemon imports both and has the
// engine drive one.
package placement
