package daemon

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/schedpolicyd/schedpolicyd/cgroup"
)

// delegateXattrs are the extended attributes systemd sets to "1" on the
// cgroup of a unit with Delegate= (trusted.delegate since systemd 251;
// user.delegate since 252, for unprivileged managers): a subtree whose
// writer is the unit's own processes, not systemd (systemd's
// docs/CGROUP_DELEGATION.md, "Delegation").
var delegateXattrs = []string{"trusted.delegate", "user.delegate"}

// ForeignCgroupRoot is foreignCgroupRoot on this machine: sdBootedDir and
// cgroupMount.
func ForeignCgroupRoot(cgroupRoot string) string {
	return foreignCgroupRoot(sdBootedDir, cgroupMount, cgroupRoot)
}

// foreignCgroupRoot says why the cgroupfs placement at cgroupRoot would
// write cgroups that systemd owns, or returns "" when it would not. That
// is the case on a machine where systemd is PID 1 (runSystemd, normally
// /run/systemd/system, exists) and unified (normally /sys/fs/cgroup) is
// the cgroup v2 hierarchy, when cgroupRoot lies in it outside every
// subtree systemd delegated (no ancestor between unified and cgroupRoot
// carries a delegateXattrs attribute "1"). There systemd is the one writer
// of its tree, including the root cgroup's cgroup.subtree_control that
// the cgroupfs placement must write "+cpuset" to (systemd's
// docs/CGROUP_DELEGATION.md: one writer per cgroup).
//
// On cgroup v1, systemd never manages the cpuset hierarchy, so a cpuset
// cgroup of our own is nobody else's: "" is returned. Errors reading the
// attributes count as "not delegated".
func foreignCgroupRoot(runSystemd, unified, cgroupRoot string) string {
	if cgroupRoot == "" {
		return ""
	}
	if _, err := os.Stat(runSystemd); err != nil {
		return ""
	}
	if !cgroup.IsUnified(unified) {
		return ""
	}
	root := filepath.Clean(cgroupRoot)
	unified = filepath.Clean(unified)
	rel, err := filepath.Rel(unified, root)
	if err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
		return ""
	}
	for dir := root; ; dir = filepath.Dir(dir) {
		if delegated(dir) {
			return ""
		}
		if dir == unified || dir == "/" {
			break
		}
	}
	return fmt.Sprintf("placement \"cgroupfs\" writes %s and the root cgroup's cgroup.subtree_control on a cgroup v2 machine whose cgroups systemd owns (systemd is PID 1); "+
		"use placement \"systemd\" (the units of the managed slices, through systemd), or set cgroup_root inside a unit's subtree that systemd delegated (Delegate=cpuset)", root)
}

// delegated reports whether dir carries one of delegateXattrs set to "1".
func delegated(dir string) bool {
	buf := make([]byte, 8)
	for _, name := range delegateXattrs {
		n, err := unix.Getxattr(dir, name, buf)
		if err == nil && strings.TrimSpace(string(buf[:n])) == "1" {
			return true
		}
	}
	return false
}

// sdBootedDir exists where systemd is PID 1 (sd_booted(3)); cgroupMount is
// where the cgroup hierarchy (on v2, systemd's tree) is mounted.
const (
	sdBootedDir = "/run/systemd/system"
	cgroupMount = "/sys/fs/cgroup"
)
