package cgroup

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"syscall"

	"github.com/schedpolicyd/schedpolicyd/sysfs"
)

// CgroupVersion is the cgroup hierarchy a Cgroup lives on.
type CgroupVersion int

// The two cgroup hierarchies.
const (
	CgroupV1 CgroupVersion = 1 // legacy hierarchy with the cpuset controller mounted on its own
	CgroupV2 CgroupVersion = 2 // unified hierarchy
)

// String returns "v1" or "v2".
func (v CgroupVersion) String() string {
	switch v {
	case CgroupV1:
		return "v1"
	case CgroupV2:
		return "v2"
	}
	return "CgroupVersion(" + strconv.Itoa(int(v)) + ")"
}

// ErrCgroupName is wrapped by the errors of every method taking a child
// name when the name is not a single, printable path component.
var ErrCgroupName = errors.New("invalid cgroup name")

// ErrNoCpuset is wrapped by OpenCgroup's error when the cpuset controller is
// not usable at the path: not available on that v2 subtree (bound to a v1
// hierarchy, or not enabled by an ancestor), not enabled in the parent's
// cgroup.subtree_control, or the v1 hierarchy is not the cpuset one.
var ErrNoCpuset = errors.New("cpuset controller not available")

// Cgroup is a managed parent cgroup whose direct child directories are the
// workloads. Children are named by their directory name; all files live on
// cgroupfs (Documentation/admin-guide/cgroup-v1/cpusets.rst, cgroup-v2.rst)
// or on a plain directory tree that mimics it.
//
// A Cgroup holds no open files and is safe for concurrent use. Writes are
// single write(2) calls, never temp-and-rename. Errors name the file and wrap
// the errno; IsGone reports the ones that mean the child vanished.
type Cgroup struct {
	path     string
	version  CgroupVersion
	procRoot string
	// kernel: path is on the kernel's cgroupfs (not a mock tree), where a
	// cpuset.cpus file may be held open and written again (OpenCPUs).
	kernel bool
}

// CgroupOptions tunes OpenCgroup.
type CgroupOptions struct {
	// Create makes the parent directory if it is missing and enables the
	// cpuset controller for it and its children (see OpenCgroup).
	Create bool
	// ProcRoot is where procfs is mounted, "/proc" when empty. Only the v1
	// Usage fallback reads it.
	ProcRoot string
}

// OpenCgroup opens the managed parent cgroup at path (a directory on
// cgroupfs, e.g. /sys/fs/cgroup/cpuset/schedpolicyd).
//
// The version comes from statfs(2) of path (or, when it is missing, of its
// parent directory): CGROUP2_SUPER_MAGIC is v2, CGROUP_SUPER_MAGIC is v1.
// On any other filesystem (mock trees in tests) it comes from the files:
// cgroup.controllers in path or its parent directory means v2, cpuset.cpus
// means v1.
//
// Without opts.Create the directory must exist (else an error satisfying
// errors.Is(err, fs.ErrNotExist)) and already be usable: v1 cpuset.cpus
// present, v2 "cpuset" in its cgroup.subtree_control.
//
// With opts.Create:
//   - v1: mkdir path (an existing directory is fine), then copy cpuset.cpus
//     and cpuset.mems from the parent directory into the new cgroup when they
//     are empty, so that children can be filled and tasks attached;
//   - v2: check that "cpuset" is in the parent directory's
//     cgroup.controllers, add "+cpuset" to the parent directory's
//     cgroup.subtree_control if it is missing, mkdir path, and add "+cpuset"
//     to path's own cgroup.subtree_control if missing.
//
// Only path itself is created, never its ancestors. When the cpuset
// controller cannot be used the error wraps ErrNoCpuset and says why; on v2
// that usually means it is bound to a v1 hierarchy (see /proc/self/cgroup).
// Write errors wrap the errno (EBUSY, EACCES, ...).
func OpenCgroup(path string, opts CgroupOptions) (*Cgroup, error) {
	if path == "" {
		return nil, errors.New("open cgroup: empty path")
	}
	path = filepath.Clean(path)
	parent := filepath.Dir(path)
	c := &Cgroup{path: path, procRoot: opts.ProcRoot}
	if c.procRoot == "" {
		c.procRoot = "/proc"
	}

	_, statErr := os.Stat(path)
	if statErr != nil && !(opts.Create && errors.Is(statErr, fs.ErrNotExist)) {
		return nil, fmt.Errorf("open cgroup %s: %w", path, statErr)
	}
	v, kernel, err := detectCgroupVersion(path, parent)
	if err != nil {
		return nil, err
	}
	c.version, c.kernel = v, kernel

	switch {
	case v == CgroupV1 && opts.Create:
		err = c.createV1(parent)
	case v == CgroupV1:
		if !cgExists(filepath.Join(path, "cpuset.cpus")) {
			err = fmt.Errorf("open cgroup %s: %w: no cpuset.cpus, not a cgroup v1 cpuset hierarchy", path, ErrNoCpuset)
		}
	case opts.Create:
		err = c.createV2(parent)
	default:
		err = cgNeedController(path, "cgroup.subtree_control",
			"write \"+cpuset\" to it or open with Create")
	}
	if err != nil {
		return nil, err
	}
	return c, nil
}

// Version reports whether the cgroup is on the v1 or the v2 hierarchy.
func (c *Cgroup) Version() CgroupVersion { return c.version }

// Path returns the parent cgroup's directory, cleaned.
func (c *Cgroup) Path() string { return c.path }

// Children returns the names of the parent's direct child directories (the
// workloads), sorted. Files and symlinks are not children.
func (c *Cgroup) Children() ([]string, error) {
	entries, err := os.ReadDir(c.path)
	if err != nil {
		return nil, fmt.Errorf("list cgroup children: %w", err)
	}
	var out []string
	for _, e := range entries {
		if e.IsDir() {
			out = append(out, e.Name())
		}
	}
	return out, nil // os.ReadDir sorts by name
}

// ChildPath returns the directory of the child called name. The name must be
// one path component: "", ".", "..", names containing "/" and names with
// control characters (bytes < 0x20 and 0x7f) give an error wrapping
// ErrCgroupName.
func (c *Cgroup) ChildPath(name string) (string, error) {
	if err := validCgroupName(name); err != nil {
		return "", err
	}
	return filepath.Join(c.path, name), nil
}

func validCgroupName(name string) error {
	switch name {
	case "", ".", "..":
		return fmt.Errorf("%w %q", ErrCgroupName, name)
	}
	for i := 0; i < len(name); i++ {
		if b := name[i]; b == '/' || b < 0x20 || b == 0x7f {
			return fmt.Errorf("%w %q: contains %q", ErrCgroupName, name, b)
		}
	}
	return nil
}

// childFile returns the path of file in the child's directory.
func (c *Cgroup) childFile(name, file string) (string, error) {
	dir, err := c.ChildPath(name)
	if err != nil {
		return "", err
	}
	return filepath.Join(dir, file), nil
}

// PrepareChild makes an existing child usable. On v1 a new child starts
// with empty cpuset.cpus and cpuset.mems, and attaching a task then fails
// with ENOSPC: each empty one is filled with the parent's. On v2 an empty
// cpuset.cpus already means "inherit", so it only checks that the child
// exists. Calling it again is harmless. A vanished child gives an error for
// which IsGone is true.
func (c *Cgroup) PrepareChild(name string) error {
	dir, err := c.ChildPath(name)
	if err != nil {
		return err
	}
	if c.version == CgroupV2 {
		if _, err := os.Stat(dir); err != nil {
			return fmt.Errorf("prepare cgroup: %w", err)
		}
		return nil
	}
	for _, file := range []string{"cpuset.cpus", "cpuset.mems"} {
		if err := cgFillFrom(filepath.Join(dir, file), filepath.Join(c.path, file)); err != nil {
			return fmt.Errorf("prepare cgroup %s: %w", dir, err)
		}
	}
	return nil
}

// Procs returns the process IDs (TGIDs) in the child, from cgroup.procs, in
// file order. Processes may exit at any moment after the read.
func (c *Cgroup) Procs(name string) ([]int, error) {
	p, err := c.childFile(name, "cgroup.procs")
	if err != nil {
		return nil, err
	}
	return cgReadIDs(p)
}

// CreateChild makes a new child cgroup called name (mode 0755) and prepares
// it (PrepareChild), so a task can be attached at once. Errors: a bad name
// wraps ErrCgroupName; an existing child wraps fs.ErrExist (EEXIST); other
// mkdir errors wrap their errno.
func (c *Cgroup) CreateChild(name string) error {
	dir, err := c.ChildPath(name)
	if err != nil {
		return err
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
		return fmt.Errorf("create cgroup: %w", err)
	}
	return c.PrepareChild(name)
}

// RemoveChild removes the child cgroup called name (rmdir). The kernel
// refuses with EBUSY while it has tasks or children; a missing child is not
// an error.
func (c *Cgroup) RemoveChild(name string) error {
	dir, err := c.ChildPath(name)
	if err != nil {
		return err
	}
	if err := os.Remove(dir); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove cgroup: %w", err)
	}
	return nil
}

// Attach moves the process pid (all its threads) into the child by writing
// it to cgroup.procs, one PID per write(2) as the kernel requires. Errors
// wrap the errno: ESRCH no such process; on v1 ENOSPC when the child's
// cpuset.cpus or cpuset.mems is empty (call PrepareChild first).
func (c *Cgroup) Attach(name string, pid int) error {
	p, err := c.childFile(name, "cgroup.procs")
	if err != nil {
		return err
	}
	if pid <= 0 {
		return fmt.Errorf("attach to %s: invalid PID %d", p, pid)
	}
	return sysfs.WriteAttr(p, strconv.Itoa(pid))
}

// IsGone reports whether err means a cgroup (or a file in it) no longer
// exists: ENOENT (open after rmdir) or ENODEV (I/O on a file opened before
// the cgroup was removed). A workload whose cgroup is gone has exited and
// been cleaned up; it is not a bug.
func IsGone(err error) bool {
	return errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENODEV)
}
