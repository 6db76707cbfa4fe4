package cgroup

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/schedpolicyd/schedpolicyd/sysfs"
)

// detectCgroupVersion implements OpenCgroup's detection rules; kernel
// reports a real cgroupfs (by its filesystem magic).
func detectCgroupVersion(path, parent string) (v CgroupVersion, kernel bool, err error) {
	var st unix.Statfs_t
	probe := path
	if !cgExists(probe) {
		probe = parent
	}
	if err := unix.Statfs(probe, &st); err != nil {
		return 0, false, fmt.Errorf("open cgroup %s: statfs %s: %w", path, probe, err)
	}
	switch int64(st.Type) {
	case unix.CGROUP2_SUPER_MAGIC:
		return CgroupV2, true, nil
	case unix.CGROUP_SUPER_MAGIC:
		return CgroupV1, true, nil
	}
	for _, dir := range []string{path, parent} {
		if cgExists(filepath.Join(dir, "cgroup.controllers")) {
			return CgroupV2, false, nil
		}
	}
	for _, dir := range []string{path, parent} {
		if cgExists(filepath.Join(dir, "cpuset.cpus")) {
			return CgroupV1, false, nil
		}
	}
	return 0, false, fmt.Errorf("open cgroup %s: not a cgroup directory: no cgroupfs mount, and neither cgroup.controllers nor cpuset.cpus in it or in %s", path, parent)
}

func (c *Cgroup) createV1(parent string) error {
	if !cgExists(filepath.Join(parent, "cpuset.cpus")) {
		return fmt.Errorf("create cgroup %s: %w: %s has no cpuset.cpus, not a cgroup v1 cpuset hierarchy", c.path, ErrNoCpuset, parent)
	}
	if err := os.Mkdir(c.path, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("create cgroup: %w", err)
	}
	for _, file := range []string{"cpuset.cpus", "cpuset.mems"} {
		if err := cgFillFrom(filepath.Join(c.path, file), filepath.Join(parent, file)); err != nil {
			return fmt.Errorf("create cgroup %s: %w", c.path, err)
		}
	}
	return nil
}

func (c *Cgroup) createV2(parent string) error {
	if err := cgNeedController(parent, "cgroup.controllers",
		"it is probably bound to a cgroup v1 hierarchy (see /proc/self/cgroup), or an ancestor does not enable it in cgroup.subtree_control"); err != nil {
		return err
	}
	if err := cgEnableCpuset(parent); err != nil {
		return fmt.Errorf("create cgroup %s: %w", c.path, err)
	}
	if err := os.Mkdir(c.path, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("create cgroup: %w", err)
	}
	if err := cgEnableCpuset(c.path); err != nil {
		return fmt.Errorf("create cgroup %s: %w", c.path, err)
	}
	return nil
}

// cgNeedController fails with ErrNoCpuset unless "cpuset" is listed in
// dir/file (cgroup.controllers or cgroup.subtree_control); hint is appended.
func cgNeedController(dir, file, hint string) error {
	p := filepath.Join(dir, file)
	has, err := cgHasCpuset(p)
	if err != nil {
		return fmt.Errorf("open cgroup %s: %w", dir, err)
	}
	if !has {
		return fmt.Errorf("open cgroup: %w: \"cpuset\" is not in %s: %s", ErrNoCpuset, p, hint)
	}
	return nil
}

// cgHasCpuset reports whether a v2 controller list ("cpuset cpu", or "+cpuset"
// in a mock file) names cpuset.
func cgHasCpuset(path string) (bool, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return false, err
	}
	for _, f := range strings.Fields(string(b)) {
		if strings.TrimPrefix(f, "+") == "cpuset" {
			return true, nil
		}
	}
	return false, nil
}

// cgEnableCpuset writes "+cpuset" to dir/cgroup.subtree_control unless it is
// already enabled there.
func cgEnableCpuset(dir string) error {
	p := filepath.Join(dir, "cgroup.subtree_control")
	has, err := cgHasCpuset(p)
	if err != nil {
		return err
	}
	if has {
		return nil
	}
	return sysfs.WriteAttr(p, "+cpuset")
}

// cgFillFrom copies the content of from into dst when dst is empty.
func cgFillFrom(dst, from string) error {
	cur, err := cgReadString(dst)
	if err != nil {
		return err
	}
	if cur != "" {
		return nil
	}
	val, err := cgReadString(from)
	if err != nil {
		return err
	}
	if val == "" {
		return fmt.Errorf("cannot fill %s: %s is empty too", dst, from)
	}
	return sysfs.WriteAttr(dst, val)
}

// IsUnified reports whether root (normally /sys/fs/cgroup) is a cgroup v2
// mount: the unified hierarchy, where systemd applies AllowedCPUs=.
func IsUnified(root string) bool {
	var st unix.Statfs_t
	return unix.Statfs(root, &st) == nil && st.Type == unix.CGROUP2_SUPER_MAGIC
}
