// Package sysfs reads sysfs below a root directory: CPU topology and
// classes, cpufreq (boost, frequency states, governors, energy
// preferences), power_supply, powercap (RAPL) and the debugfs energy
// model; with them the kernel's pressure stall information
// (/proc/pressure), the scheduler knobs under /proc/sys/kernel, a
// process's exit (pidfd) and the primitives the cgroup package shares:
// kernel files read and written with one system call (ReadAttr,
// WriteAttr, OpenRaw, ReadFileRaw), ParseError, and CPU sets (CPUSet,
// ParseCPUList).
//
// Every reader takes a root directory, so a test or a user can point it at a
// mock machine. cgroupfs is the cgroup package's, the served sched_policy
// tree the tree package's. The package does not log and imports nothing of
// ours.
package sysfs
