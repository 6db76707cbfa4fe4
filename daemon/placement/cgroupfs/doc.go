// Package cgroupfs is the placement back end that writes cpusets itself:
// each direct child of the managed parent cgroup (Config.CgroupRoot) is a
// workload, placed through its cpuset.cpus, on machines without systemd
// and on cgroup v1, where systemd never manages cpusets. It watches the
// parent with inotify (children appearing and leaving, cpusets written by
// someone else, tasks attached), holds a flock on the parent so that a
// second manager refuses to start, and reaps the workloads it created
// once their last task exits. Placement is a placement.Driver, made with
// the placement.Engine that holds it, with every optional capability.
package cgroupfs
