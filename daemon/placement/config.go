package placement

import (
	"time"

	"github.com/sirupsen/logrus"

	"github.com/schedpolicyd/schedpolicyd/internal/names"
	"github.com/schedpolicyd/schedpolicyd/policy"
)

// Config is what a placement back end reads of the daemon's
// configuration, validated and with its defaults filled in by the daemon
// (daemon.Config has each field's range and default). The daemon owns it
// and hands each back end a pointer: SampleInterval and Slices change on
// a reload, on the loop, and the back end reads them there.
type Config struct {
	// CgroupRoot is the managed parent cgroup (cgroupfs placement).
	CgroupRoot string
	// ProcRoot is /proc, or a mock tree; SysfsRoot is /sys, or a mock tree
	// ("": sysfs.DefaultRoot): the units placement finds the cgroup v2
	// hierarchy at <SysfsRoot>/fs/cgroup and the possible CPUs at
	// <SysfsRoot>/devices/system/cpu/possible.
	ProcRoot, SysfsRoot string
	// RunRoot is /run, or a mock tree: the units placement reaches a
	// user's manager at <RunRoot>/user/UID/systemd/private ("": /run).
	RunRoot string
	// Manage lists the slices whose direct child services and scopes are
	// workloads (units placement).
	Manage []string
	// Slices are the slice rules by slice name (units placement).
	Slices map[string]policy.SliceRule
	// Exempt is the configuration's exempt setting: the workloads never
	// placed (exempt.go), beside the ones exempt over D-Bus.
	Exempt []names.Exempt
	// Bus is the D-Bus the units placement reaches systemd through:
	// "system", "session", an address, or "none".
	Bus string
	// SampleInterval is the sampling period while a workload is busy;
	// UtilHalfLife the half-life of the decayed utilisation average.
	SampleInterval, UtilHalfLife time.Duration
	// NoTaskClock turns the task-clock wake off (clockwake.go).
	NoTaskClock bool
	// Log is where the back end logs.
	Log logrus.FieldLogger
	// PressureFile, for tests: the PSI file the cgroupfs placement's
	// pressure trigger watches instead of <ProcRoot>/pressure/cpu.
	PressureFile string
}

// The placement modes, each back end's Mode.
const (
	// Cgroupfs places the direct children of Config.CgroupRoot by writing
	// their cpuset.cpus (package cgroupfs).
	Cgroupfs = "cgroupfs"
	// Systemd places the units of the managed slices through systemd's
	// D-Bus API, AllowedCPUs= (package units).
	Systemd = "systemd"
)
