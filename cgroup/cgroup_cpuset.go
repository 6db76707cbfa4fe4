package cgroup

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/schedpolicyd/schedpolicyd/sysfs"
)

// OwnCPUs returns the managed parent's own requested cpuset.cpus (v1 and
// v2; on v2 the empty set means "inherit").
func (c *Cgroup) OwnCPUs() (sysfs.CPUSet, error) {
	return cgReadCPUs(filepath.Join(c.path, "cpuset.cpus"))
}

// SetOwnCPUs writes the managed parent's own cpuset.cpus (WriteCPUs's
// format and errors). The daemon uses it on cgroup v1 only, whose default
// mode removes an offlined CPU from every cpuset for good (cpuset v1's
// hotplug handling, Documentation/admin-guide/cgroup-v1/cpusets.rst §1.9):
// without it a CPU that comes back could never be handed to a workload
// again, since children may only use their parent's CPUs (EACCES).
func (c *Cgroup) SetOwnCPUs(cpus sysfs.CPUSet) error {
	v := cpus.String()
	if v == "" {
		v = "\n"
	}
	return sysfs.WriteAttr(filepath.Join(c.path, "cpuset.cpus"), v)
}

// UpperCPUs returns the CPUs the managed parent's own parent may hand out
// (v1 cpuset.effective_cpus, or cpuset.cpus where that file is absent; v2
// cpuset.cpus.effective): the most the managed parent can hold.
func (c *Cgroup) UpperCPUs() (sysfs.CPUSet, error) {
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

// Allowed returns the CPUs the parent may hand out to its children: v1
// cpuset.effective_cpus (cpuset.cpus if that file is absent), v2
// cpuset.cpus.effective. The set is a cpulist of online CPUs; on v1 a child
// asking for anything else gets EACCES, on v2 the kernel intersects.
func (c *Cgroup) Allowed() (sysfs.CPUSet, error) {
	if c.version == CgroupV2 {
		return cgReadCPUs(filepath.Join(c.path, "cpuset.cpus.effective"))
	}
	set, err := cgReadCPUs(filepath.Join(c.path, "cpuset.effective_cpus"))
	if errors.Is(err, fs.ErrNotExist) {
		return cgReadCPUs(filepath.Join(c.path, "cpuset.cpus"))
	}
	return set, err
}

// ReadCPUs returns the child's requested cpuset.cpus. On v2 the empty set
// means "inherit the parent's"; on v1 it means the child cannot run tasks.
func (c *Cgroup) ReadCPUs(name string) (sysfs.CPUSet, error) {
	p, err := c.childFile(name, "cpuset.cpus")
	if err != nil {
		return sysfs.CPUSet{}, err
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
func (c *Cgroup) WriteCPUs(name string, cpus sysfs.CPUSet) error {
	p, err := c.childFile(name, "cpuset.cpus")
	if err != nil {
		return err
	}
	v := cpus.String()
	if v == "" {
		v = "\n"
	}
	return sysfs.WriteAttr(p, v)
}

// allCPUs, in the kernel's cpulist syntax, is every CPU number below
// nr_cpu_ids: "N" is the list parser's last valid bit (bitmap_parselist,
// lib/bitmap.c; lib/bitmap-str.c in newer kernels).
const allCPUs = "0-N"

// WriteAllCPUs sets child name's cpuset.cpus to every CPU the kernel may
// have ("0-N": CPUs 0 to nr_cpu_ids−1, the possible CPUs, which the cgroup
// v2 top cpuset allows). On v2 the kernel intersects it with the parent's
// effective CPUs, so the child runs on all of its parent's CPUs and
// follows them as they change, as with an empty cpuset.cpus ("inherit").
// It is how "inherit" is given back to a cgroup that has tasks: Linux 6.1
// (Debian 12's) refuses to empty the cpuset.cpus of a populated cgroup
// with ENOSPC on v2 as on v1 (validate_change in kernel/cgroup/cpuset.c;
// seen in the VM of packaging/systemd-test/vm.sh; newer kernels keep the
// rule for v1 only, docs/SOURCES.md §10).
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
	return sysfs.WriteAttr(p, allCPUs)
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
// (update_cpumask → rebuild_sched_domains_locked), at a cost that grows
// with the CPUs and cpusets (docs/BENCHMARKS.md).
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
	return sysfs.WriteAttr(p, v)
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

// OpenCPUs opens child name's cpuset.cpus for reading and writing and keeps
// it open, so a policy switch that rewrites every workload's cpuset does not
// pay a path lookup and open per write, a good part of each write's cost
// (docs/BENCHMARKS.md). Only on the kernel's cgroupfs, where every write(2)
// is a whole command whatever the file offset (cgroup_file_write ignores
// it); on a mock tree it returns an error wrapping errors.ErrUnsupported and
// callers use WriteCPUs. A vanished child gives an error for which IsGone is
// true.
func (c *Cgroup) OpenCPUs(name string) (*CPUsFile, error) {
	if !c.kernel {
		return nil, fmt.Errorf("hold cpuset.cpus open: %w outside cgroupfs", errors.ErrUnsupported)
	}
	p, err := c.childFile(name, "cpuset.cpus")
	if err != nil {
		return nil, err
	}
	fd, err := sysfs.OpenRaw(p, syscall.O_RDWR)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", p, err)
	}
	return &CPUsFile{fd: fd, path: p}, nil
}

// Read returns the cpuset the file holds now, with one pread(2) at offset
// 0 (kernfs regenerates the content for a read at offset 0). Errors wrap
// the errno (ENODEV after rmdir: IsGone) or are a *sysfs.ParseError.
func (f *CPUsFile) Read() (sysfs.CPUSet, error) {
	var b [4096]byte
	for {
		n, err := syscall.Pread(f.fd, b[:], 0)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return sysfs.CPUSet{}, fmt.Errorf("read %s: %w", f.path, err)
		}
		set, err := sysfs.ParseCPUList(strings.TrimSpace(string(b[:n])))
		if err != nil {
			return sysfs.CPUSet{}, &sysfs.ParseError{Path: f.path, Err: err}
		}
		return set, nil
	}
}

// Write sets the cpuset with one pwrite(2) at offset 0, with WriteCPUs's
// value format and errors (after rmdir of the child: ENODEV, IsGone).
func (f *CPUsFile) Write(cpus sysfs.CPUSet) error {
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
func (c *Cgroup) EffectiveCPUs(name string) (sysfs.CPUSet, error) {
	file := "cpuset.effective_cpus"
	if c.version == CgroupV2 {
		file = "cpuset.cpus.effective"
	}
	p, err := c.childFile(name, file)
	if err != nil {
		return sysfs.CPUSet{}, err
	}
	return cgReadCPUs(p)
}
