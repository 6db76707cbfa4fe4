package sysfs

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
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
// cgroupfs (platform.md §6) or on a plain directory tree that mimics it.
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

// OwnCPUs returns the managed parent's own requested cpuset.cpus (v1 and
// v2; on v2 the empty set means "inherit").
func (c *Cgroup) OwnCPUs() (CPUSet, error) {
	return cgReadCPUs(filepath.Join(c.path, "cpuset.cpus"))
}

// SetOwnCPUs writes the managed parent's own cpuset.cpus (WriteCPUs's
// format and errors). The daemon uses it on cgroup v1 only, whose default
// mode removes an offlined CPU from every cpuset for good (cpuset v1's
// hotplug handling, Documentation/admin-guide/cgroup-v1/cpusets.rst §1.9):
// without it a CPU that comes back could never be handed to a workload
// again, since children may only use their parent's CPUs (EACCES).
func (c *Cgroup) SetOwnCPUs(cpus CPUSet) error {
	v := cpus.String()
	if v == "" {
		v = "\n"
	}
	return WriteAttr(filepath.Join(c.path, "cpuset.cpus"), v)
}

// UpperCPUs returns the CPUs the managed parent's own parent may hand out
// (v1 cpuset.effective_cpus, or cpuset.cpus where that file is absent; v2
// cpuset.cpus.effective): the most the managed parent can hold.
func (c *Cgroup) UpperCPUs() (CPUSet, error) {
	up := filepath.Dir(c.path)
	if c.version == CgroupV2 {
		return cgReadCPUs(filepath.Join(up, "cpuset.cpus.effective"))
	}
	set, err := cgReadCPUs(filepath.Join(up, "cpuset.effective_cpus"))
	if errors.Is(err, fs.ErrNotExist) {
		return cgReadCPUs(filepath.Join(up, "cpuset.cpus"))
	}
	return set, err
}

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
	return WriteAttr(p, "+cpuset")
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
	return WriteAttr(dst, val)
}

// Version reports whether the cgroup is on the v1 or the v2 hierarchy.
func (c *Cgroup) Version() CgroupVersion { return c.version }

// Path returns the parent cgroup's directory, cleaned.
func (c *Cgroup) Path() string { return c.path }

// Allowed returns the CPUs the parent may hand out to its children: v1
// cpuset.effective_cpus (cpuset.cpus if that file is absent), v2
// cpuset.cpus.effective. The set is a cpulist of online CPUs; on v1 a child
// asking for anything else gets EACCES, on v2 the kernel intersects.
func (c *Cgroup) Allowed() (CPUSet, error) {
	if c.version == CgroupV2 {
		return cgReadCPUs(filepath.Join(c.path, "cpuset.cpus.effective"))
	}
	set, err := cgReadCPUs(filepath.Join(c.path, "cpuset.effective_cpus"))
	if errors.Is(err, fs.ErrNotExist) {
		return cgReadCPUs(filepath.Join(c.path, "cpuset.cpus"))
	}
	return set, err
}

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

// ReadCPUs returns the child's requested cpuset.cpus. On v2 the empty set
// means "inherit the parent's"; on v1 it means the child cannot run tasks.
func (c *Cgroup) ReadCPUs(name string) (CPUSet, error) {
	p, err := c.childFile(name, "cpuset.cpus")
	if err != nil {
		return CPUSet{}, err
	}
	return cgReadCPUs(p)
}

// WriteCPUs sets the child's cpuset.cpus with one write(2) of cpus.String()
// ("0-3,8"). The empty set is written as "\n", because kernfs ignores a
// zero-length write; on v2 that means "inherit". On a populated child it
// fails with ENOSPC, on v1 and (Linux 6.1 at least) on v2 too: see
// WriteAllCPUs.
//
// The error names the value and file and wraps the errno: ENOENT or ENODEV
// mean the child is gone (IsGone); v1 EACCES means CPUs outside the parent;
// EINVAL CPUs outside the top cpuset (offline); ERANGE CPUs ≥ nr_cpu_ids;
// EBUSY a child of this child still uses CPUs being removed. On v2 CPUs
// outside the parent are accepted and intersected: read EffectiveCPUs back.
func (c *Cgroup) WriteCPUs(name string, cpus CPUSet) error {
	p, err := c.childFile(name, "cpuset.cpus")
	if err != nil {
		return err
	}
	v := cpus.String()
	if v == "" {
		v = "\n"
	}
	return WriteAttr(p, v)
}

// allCPUs, in the kernel's cpulist syntax, is every CPU number below
// nr_cpu_ids: "N" is the list parser's last valid bit (platform.md §1.4).
const allCPUs = "0-N"

// WriteAllCPUs sets child name's cpuset.cpus to every CPU the kernel may
// have ("0-N": CPUs 0 to nr_cpu_ids−1, the possible CPUs, which the cgroup
// v2 top cpuset allows). On v2 the kernel intersects it with the parent's
// effective CPUs, so the child runs on all of its parent's CPUs and
// follows them as they change, as with an empty cpuset.cpus ("inherit").
// It is how "inherit" is given back to a cgroup that has tasks: Linux 6.1
// (Debian 12's) refuses to empty the cpuset.cpus of a populated cgroup
// with ENOSPC on v2 as on v1 (validate_change in kernel/cgroup/cpuset.c;
// seen in the VM of packaging/systemd-test/vm.sh; platform.md §6.3: newer
// kernels keep the rule for v1 only).
//
// Only on the kernel's cgroupfs, whose list parser resolves "N"; on a mock
// tree it returns an error wrapping errors.ErrUnsupported. Errors as for
// WriteCPUs (EINVAL if a CPU number below nr_cpu_ids is not possible; on
// v1 EACCES unless the parent has every CPU).
func (c *Cgroup) WriteAllCPUs(name string) error {
	if !c.kernel {
		return fmt.Errorf("write %q to cpuset.cpus: %w outside cgroupfs", allCPUs, errors.ErrUnsupported)
	}
	p, err := c.childFile(name, "cpuset.cpus")
	if err != nil {
		return err
	}
	return WriteAttr(p, allCPUs)
}

// SchedLoadBalance reads cgroup v1 cpuset.sched_load_balance of child name,
// or of the managed parent itself when name is "". On v2 (no such file) the
// error wraps errors.ErrUnsupported.
//
// The flag shapes sched domains only where no ancestor has it set: the
// kernel builds one domain over the CPUs of each topmost load-balanced
// cpuset and skips its descendants (generate_sched_domains in
// kernel/cgroup/cpuset.c). But every cpuset.cpus write to a cpuset whose
// own flag is set rebuilds the sched domains of the whole machine
// (update_cpumask → rebuild_sched_domains_locked), measured here at about
// 40 µs per write on 2 CPUs, more with more CPUs and cpusets.
func (c *Cgroup) SchedLoadBalance(name string) (bool, error) {
	p, err := c.loadBalanceFile(name)
	if err != nil {
		return false, err
	}
	v, err := cgReadString(p)
	if err != nil {
		return false, err
	}
	switch v {
	case "1":
		return true, nil
	case "0":
		return false, nil
	}
	return false, fmt.Errorf("read %s: unexpected value %q", p, v)
}

// SetSchedLoadBalance writes cgroup v1 cpuset.sched_load_balance of child
// name ("" is not allowed: the managed parent's flag is never changed).
// Errors as for SchedLoadBalance, plus the write's errno.
func (c *Cgroup) SetSchedLoadBalance(name string, on bool) error {
	if name == "" {
		return errors.New("cgroup: the managed parent's sched_load_balance is not changed")
	}
	p, err := c.loadBalanceFile(name)
	if err != nil {
		return err
	}
	v := "0"
	if on {
		v = "1"
	}
	return WriteAttr(p, v)
}

func (c *Cgroup) loadBalanceFile(name string) (string, error) {
	if c.version != CgroupV1 {
		return "", fmt.Errorf("cpuset.sched_load_balance: %w on cgroup %s", errors.ErrUnsupported, c.version)
	}
	if name == "" {
		return filepath.Join(c.path, "cpuset.sched_load_balance"), nil
	}
	return c.childFile(name, "cpuset.sched_load_balance")
}

// CPUsFile is a child's cpuset.cpus held open for repeated writes
// (OpenCPUs). Not safe for concurrent use.
type CPUsFile struct {
	fd   int
	path string
}

// OpenCPUs opens child name's cpuset.cpus for reading and writing and keeps it open,
// so a policy switch that rewrites every workload's cpuset does not pay a
// path lookup and open per write: 1,000 writes of a changed cpuset took
// 42–52 ms with open/write/close and ~30 ms held open on this 2-CPU VM.
// Only on the kernel's cgroupfs, where every write(2) is a whole command
// whatever the file offset (cgroup_file_write ignores it); on a mock tree
// it returns an error wrapping errors.ErrUnsupported and callers use
// WriteCPUs. A vanished child gives an error for which IsGone is true.
func (c *Cgroup) OpenCPUs(name string) (*CPUsFile, error) {
	if !c.kernel {
		return nil, fmt.Errorf("hold cpuset.cpus open: %w outside cgroupfs", errors.ErrUnsupported)
	}
	p, err := c.childFile(name, "cpuset.cpus")
	if err != nil {
		return nil, err
	}
	fd, err := openRaw(p, syscall.O_RDWR)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", p, err)
	}
	return &CPUsFile{fd: fd, path: p}, nil
}

// Read returns the cpuset the file holds now, with one pread(2) at offset
// 0 (kernfs regenerates the content for a read at offset 0). Errors wrap
// the errno (ENODEV after rmdir: IsGone) or the parse error.
func (f *CPUsFile) Read() (CPUSet, error) {
	var b [4096]byte
	for {
		n, err := syscall.Pread(f.fd, b[:], 0)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return CPUSet{}, fmt.Errorf("read %s: %w", f.path, err)
		}
		return ParseCPUList(strings.TrimSpace(string(b[:n])))
	}
}

// Write sets the cpuset with one pwrite(2) at offset 0, with WriteCPUs's
// value format and errors (after rmdir of the child: ENODEV, IsGone).
func (f *CPUsFile) Write(cpus CPUSet) error {
	v := cpus.String()
	if v == "" {
		v = "\n"
	}
	for {
		_, err := syscall.Pwrite(f.fd, []byte(v), 0)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return fmt.Errorf("write %q to %s: %w", v, f.path, err)
		}
		return nil
	}
}

// Close releases the file; nil-safe.
func (f *CPUsFile) Close() {
	if f != nil {
		syscall.Close(f.fd)
	}
}

// EffectiveCPUs returns the CPUs the child's tasks may actually run on: v1
// cpuset.effective_cpus (in default v1 mode the same as cpuset.cpus), v2
// cpuset.cpus.effective (requested ∩ parent's effective ∩ online, or the
// parent's effective set when that is empty).
func (c *Cgroup) EffectiveCPUs(name string) (CPUSet, error) {
	file := "cpuset.effective_cpus"
	if c.version == CgroupV2 {
		file = "cpuset.cpus.effective"
	}
	p, err := c.childFile(name, file)
	if err != nil {
		return CPUSet{}, err
	}
	return cgReadCPUs(p)
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
	return WriteAttr(p, strconv.Itoa(pid))
}

// Usage returns the child's cumulative CPU time, including its descendants.
//
//   - v2: usage_usec of cpu.stat (µs; present even without the cpu
//     controller).
//   - v1 with cpuacct co-mounted (cpuacct.usage in the child's directory):
//     cpuacct.usage (ns).
//   - v1 otherwise: the sum, over the thread IDs in the child's tasks file,
//     of the first field of <ProcRoot>/<tgid>/task/<tid>/schedstat (ns spent
//     on a CPU; needs CONFIG_SCHED_INFO), with the TGIDs from cgroup.procs.
//     Threads that exit during the read are skipped. This fallback is NOT
//     monotonic: the time of threads that exited or left the cgroup drops
//     out of the sum, so callers must clamp negative deltas to zero.
//
// Errors name the file; a vanished child gives an error for which IsGone is
// true.
func (c *Cgroup) Usage(name string) (time.Duration, error) {
	dir, err := c.ChildPath(name)
	if err != nil {
		return 0, err
	}
	if c.version == CgroupV2 {
		return cgReadStatUsec(filepath.Join(dir, "cpu.stat"))
	}
	ns, err := ReadIntAttr(filepath.Join(dir, "cpuacct.usage"))
	if err == nil {
		return time.Duration(ns), nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return 0, err
	}
	return c.schedstatUsage(dir)
}

// DirUsage returns the cumulative CPU time of the cgroup at dir (any
// cgroup, not only a child of a managed parent: a systemd unit's): v2's
// usage_usec of cpu.stat (µs), else v1's cpuacct.usage (ns). Errors name
// the file; IsGone is true for a cgroup that is gone (or, on v1, a cgroup
// without cpuacct accounting).
func DirUsage(dir string) (time.Duration, error) {
	d, err := cgReadStatUsec(filepath.Join(dir, "cpu.stat"))
	if !errors.Is(err, fs.ErrNotExist) {
		return d, err
	}
	ns, err := ReadIntAttr(filepath.Join(dir, "cpuacct.usage"))
	if err != nil {
		return 0, err
	}
	return time.Duration(ns), nil
}

// IsUnified reports whether root (normally /sys/fs/cgroup) is a cgroup v2
// mount: the unified hierarchy, where systemd applies AllowedCPUs=.
func IsUnified(root string) bool {
	var st unix.Statfs_t
	return unix.Statfs(root, &st) == nil && st.Type == unix.CGROUP2_SUPER_MAGIC
}

// schedstatUsage is Usage's v1 fallback over procfs.
func (c *Cgroup) schedstatUsage(dir string) (time.Duration, error) {
	tids, err := cgReadIDs(filepath.Join(dir, "tasks"))
	if err != nil {
		return 0, err
	}
	if len(tids) == 0 {
		return 0, nil
	}
	tgids, err := cgReadIDs(filepath.Join(dir, "cgroup.procs"))
	if err != nil {
		return 0, err
	}
	want := make(map[int]bool, len(tids))
	for _, t := range tids {
		want[t] = true
	}
	var total time.Duration
	for _, tgid := range tgids {
		taskDir := filepath.Join(c.procRoot, strconv.Itoa(tgid), "task")
		entries, err := os.ReadDir(taskDir)
		if err != nil {
			continue // the process exited
		}
		for _, e := range entries {
			tid, err := strconv.Atoi(e.Name())
			if err != nil || !want[tid] {
				continue
			}
			delete(want, tid) // count each thread once
			ns, err := cgReadSchedstat(filepath.Join(taskDir, e.Name(), "schedstat"))
			if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ESRCH) {
				continue // the thread exited
			}
			if err != nil {
				return 0, err
			}
			total += time.Duration(ns)
		}
	}
	return total, nil
}

// cgReadSchedstat returns the first field (ns on a CPU) of a
// /proc/<pid>/task/<tid>/schedstat file ("run_ns wait_ns timeslices").
func cgReadSchedstat(path string) (int64, error) {
	s, err := ReadAttr(path)
	if err != nil {
		return 0, err
	}
	f, _, _ := strings.Cut(s, " ")
	ns, err := strconv.ParseInt(f, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("parse %s: %w", path, err)
	}
	return ns, nil
}

// cgReadStatUsec returns usage_usec of a v2 cpu.stat file.
func cgReadStatUsec(path string) (time.Duration, error) {
	b, err := readFileRaw(path)
	if err != nil {
		return 0, err
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		k, v, _ := strings.Cut(sc.Text(), " ")
		if k != "usage_usec" {
			continue
		}
		us, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		if err != nil || us < 0 {
			return 0, fmt.Errorf("parse %s: bad usage_usec %q", path, v)
		}
		return time.Duration(us) * time.Microsecond, nil
	}
	return 0, fmt.Errorf("parse %s: no usage_usec line", path)
}

// cgReadString reads a whole cgroupfs file (which may exceed a page, unlike
// sysfs attributes) and trims surrounding whitespace.
func cgReadString(path string) (string, error) {
	b, err := readFileRaw(path)
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(b)), nil
}

// cgReadCPUs reads a cpulist file.
func cgReadCPUs(path string) (CPUSet, error) {
	s, err := cgReadString(path)
	if err != nil {
		return CPUSet{}, err
	}
	set, err := ParseCPUList(s)
	if err != nil {
		return CPUSet{}, fmt.Errorf("parse %s: %w", path, err)
	}
	return set, nil
}

// cgReadIDs reads a file of one decimal ID per line (cgroup.procs, tasks).
func cgReadIDs(path string) ([]int, error) {
	s, err := cgReadString(path)
	if err != nil {
		return nil, err
	}
	var out []int
	for _, f := range strings.Fields(s) {
		id, err := strconv.Atoi(f)
		if err != nil || id <= 0 {
			return nil, fmt.Errorf("parse %s: bad ID %q", path, f)
		}
		out = append(out, id)
	}
	return out, nil
}

func cgExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// IsGone reports whether err means a cgroup (or a file in it) no longer
// exists: ENOENT (open after rmdir) or ENODEV (I/O on a file opened before
// the cgroup was removed). A workload whose cgroup is gone has exited and
// been cleaned up; it is not a bug.
func IsGone(err error) bool {
	return errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENODEV)
}

// Runnable returns how many of the child's threads are runnable right now
// (state R in <ProcRoot>/<tid>/stat): the instant nr_running the 2013 patch
// set uses for placement decisions. Thread IDs come from the child's
// threads file (v2 cgroup.threads, v1 tasks); threads that exit during the
// read are skipped. A vanished child gives an error for which IsGone is
// true.
func (c *Cgroup) Runnable(name string) (int, error) {
	file := "tasks"
	if c.version == CgroupV2 {
		file = "cgroup.threads"
	}
	p, err := c.childFile(name, file)
	if err != nil {
		return 0, err
	}
	tids, err := cgReadIDs(p)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, tid := range tids {
		b, err := readFileRaw(filepath.Join(c.procRoot, strconv.Itoa(tid), "stat"))
		if err != nil {
			continue // exited
		}
		// "pid (comm) S ...": comm may hold spaces and parentheses.
		s := string(b)
		if i := strings.LastIndexByte(s, ')'); i >= 0 && i+2 < len(s) && s[i+2] == 'R' {
			n++
		}
	}
	return n, nil
}

// CPUPressure returns the child's cpu.pressure file (cgroup v2 PSI, e.g.
// "some avg10=1.23 avg60=... total=...") for policy.ParseCPUPressure. On v1,
// or where PSI is off, the file is absent: the error satisfies
// errors.Is(err, fs.ErrNotExist).
func (c *Cgroup) CPUPressure(name string) (string, error) {
	p, err := c.childFile(name, "cpu.pressure")
	if err != nil {
		return "", err
	}
	b, err := readFileRaw(p)
	if err != nil {
		return "", err
	}
	return string(b), nil
}
