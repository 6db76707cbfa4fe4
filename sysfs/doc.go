// Package sysfs does all of schedpolicyd's pseudo-filesystem I/O: reading
// sysfs (CPU topology, power_supply, cpufreq boost) below a root directory,
// reading and writing cgroupfs cpusets (v1 and v2), and serving the virtual
// sched_policy tree (FUSE and plain-file backends).
//
// Every reader takes a root directory, so a test or a user can point it at a
// mock machine. The package does not log and imports nothing of ours.
package sysfs
