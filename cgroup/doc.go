// Package cgroup reads, writes and watches cgroupfs, v1 and v2: a managed
// parent and its children (Cgroup: cpuset.cpus and its effective set,
// sched_load_balance, tasks, creation and removal), their load (CPU time,
// runnable and waiting threads, cpu.pressure), and watches on them
// (CgroupWatch for children, attached tasks and other writers;
// CloseWriteWatch for writes by other processes).
//
// Paths are the caller's (the managed parent, a unit's ControlGroup),
// read with sysfs's kernel-file primitives, which refuse what is not a
// regular file. The package does not log; of ours it imports only sysfs
// (for those primitives and CPU sets).
package cgroup
