package cgroup

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

	"github.com/schedpolicyd/schedpolicyd/sysfs"
)

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
	ns, err := sysfs.ReadIntAttr(filepath.Join(dir, "cpuacct.usage"))
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
	ns, err := sysfs.ReadIntAttr(filepath.Join(dir, "cpuacct.usage"))
	if err != nil {
		return 0, err
	}
	return time.Duration(ns), nil
}

// DirCPUPressure returns cpu.pressure's "some" line (sysfs.ParseCPUPressure;
// PSI, cgroup v2) of the cgroup at dir (any cgroup: a systemd unit's), as
// CPUPressure does for a child of the managed parent. Cgroup v1 has no
// such file: the error wraps fs.ErrNotExist; a malformed file's error
// names it and wraps sysfs.ErrPSIFormat.
func DirCPUPressure(dir string) (sysfs.Pressure, error) {
	p := filepath.Join(dir, "cpu.pressure")
	b, err := sysfs.ReadFileRaw(p)
	if err != nil {
		return sysfs.Pressure{}, err
	}
	v, err := sysfs.ParseCPUPressure(string(b))
	if err != nil {
		return sysfs.Pressure{}, fmt.Errorf("%s: %w", p, err)
	}
	return v, nil
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
	s, err := sysfs.ReadAttr(path)
	if err != nil {
		return 0, err
	}
	f, _, _ := strings.Cut(s, " ")
	ns, err := strconv.ParseInt(f, 10, 64)
	if err != nil {
		return 0, &sysfs.ParseError{Path: path, Err: err}
	}
	return ns, nil
}

// cgReadStatUsec returns usage_usec of a v2 cpu.stat file.
func cgReadStatUsec(path string) (time.Duration, error) {
	b, err := sysfs.ReadFileRaw(path)
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
			return 0, &sysfs.ParseError{Path: path, Err: fmt.Errorf("bad usage_usec %q", v)}
		}
		return time.Duration(us) * time.Microsecond, nil
	}
	return 0, &sysfs.ParseError{Path: path, Err: errors.New("no usage_usec line")}
}

// Runnable returns how many of the child's threads are runnable right now
// (DirRunnable on its directory): the instant nr_running the 2013 patch set
// uses for placement decisions. A vanished child gives an error for which
// IsGone is true.
func (c *Cgroup) Runnable(name string) (int, error) {
	dir, err := c.ChildPath(name)
	if err != nil {
		return 0, err
	}
	return DirRunnable(dir, c.procRoot)
}

// DirRunnable returns how many threads of the cgroup directory dir and of
// every cgroup below it are runnable right now (state R in
// <procRoot>/<tid>/stat). Thread IDs come from each directory's threads
// file (DirThreads); threads that exit during the read are skipped. Errors
// name the file; a vanished dir gives one for which IsGone is true.
func DirRunnable(dir, procRoot string) (int, error) {
	tids, err := DirThreads(dir)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, tid := range tids {
		b, err := sysfs.ReadFileRaw(filepath.Join(procRoot, strconv.Itoa(tid), "stat"))
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

// RunDelay returns the time the child's threads have spent running on a
// CPU and waiting on a run queue (DirRunDelay on its directory). Errors
// name the file.
func (c *Cgroup) RunDelay(name string) (run, wait time.Duration, err error) {
	dir, err := c.ChildPath(name)
	if err != nil {
		return 0, 0, err
	}
	return DirRunDelay(dir, c.procRoot)
}

// DirRunDelay returns the time the threads of the cgroup directory dir and
// of every cgroup below it (DirThreads) have spent running on a CPU and
// waiting on a run queue, summed over the threads alive now: fields 1 and
// 2 of each <procRoot>/<tid>/schedstat (ns; needs CONFIG_SCHED_INFO;
// Documentation/scheduler/sched-stats.rst). Over an interval,
// Δ(run+wait)/Δwall is the average number of runnable threads, the
// patch's nr_running averaged rather than sampled. Threads that exit in
// between take their time with them (a delta may be negative). Errors name
// the file.
func DirRunDelay(dir, procRoot string) (run, wait time.Duration, err error) {
	tids, err := DirThreads(dir)
	if err != nil {
		return 0, 0, err
	}
	for _, tid := range tids {
		b, err := sysfs.ReadFileRaw(filepath.Join(procRoot, strconv.Itoa(tid), "schedstat"))
		if err != nil {
			continue // exited
		}
		f := strings.Fields(string(b))
		if len(f) < 2 {
			return 0, 0, fmt.Errorf("parse /proc/%d/schedstat: %q", tid, b)
		}
		r, err1 := strconv.ParseInt(f[0], 10, 64)
		w, err2 := strconv.ParseInt(f[1], 10, 64)
		if err1 != nil || err2 != nil {
			return 0, 0, fmt.Errorf("parse /proc/%d/schedstat: %q", tid, b)
		}
		run += time.Duration(r)
		wait += time.Duration(w)
	}
	return run, wait, nil
}

// DirThreads returns the thread IDs in the cgroup directory dir and in
// every cgroup below it: each directory's cgroup.threads (cgroup v2), or
// tasks where there is none (v1). A directory whose link count is 2 has no
// subdirectory (cgroupfs, like tmpfs and ext4, counts them) and is not
// listed; any other count is. A child cgroup removed during the walk is
// skipped; an error reading dir itself is returned (it names the file, and
// IsGone is true for a vanished dir).
//
// The tree below dir may be a user's (a delegated subtree, where the user
// makes cgroups at will), so the walk is bounded: at most MaxThreadDirs
// cgroups, MaxThreadDepth levels below dir and MaxThreads IDs; a tree
// past any of them is an error (ErrTooManyThreads), not a longer walk.
func DirThreads(dir string) ([]int, error) {
	w := threadWalk{}
	if err := w.walk(dir, 0); err != nil {
		return nil, err
	}
	return w.tids, nil
}

// The bounds of DirThreads: cgroups walked, depth below the cgroup, and
// threads (PID_MAX_LIMIT is 4,194,304; a cgroup of a workload with more
// than 65,536 threads is not confirmed thread by thread).
const (
	MaxThreadDirs  = 1024
	MaxThreadDepth = 32
	MaxThreads     = 65536
)

// ErrTooManyThreads is DirThreads's error for a tree past its bounds.
var ErrTooManyThreads = errors.New("more cgroups, levels or threads than the daemon walks")

type threadWalk struct {
	tids []int
	dirs int
}

func (w *threadWalk) walk(dir string, depth int) error {
	w.dirs++
	if w.dirs > MaxThreadDirs || depth > MaxThreadDepth {
		return fmt.Errorf("%s: %w (%d cgroups, %d levels at most)", dir, ErrTooManyThreads, MaxThreadDirs, MaxThreadDepth)
	}
	tids, err := cgReadIDs(filepath.Join(dir, "cgroup.threads"))
	if errors.Is(err, fs.ErrNotExist) {
		tids, err = cgReadIDs(filepath.Join(dir, "tasks"))
	}
	if err != nil {
		return err
	}
	w.tids = append(w.tids, tids...)
	if len(w.tids) > MaxThreads {
		return fmt.Errorf("%s: %w (%d threads at most)", dir, ErrTooManyThreads, MaxThreads)
	}
	var st syscall.Stat_t
	if syscall.Lstat(dir, &st) == nil && st.Nlink == 2 {
		return nil
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil // dir went away after its threads were read
	}
	for _, e := range ents {
		if !e.IsDir() {
			continue
		}
		if err := w.walk(filepath.Join(dir, e.Name()), depth+1); err != nil {
			if errors.Is(err, ErrTooManyThreads) {
				return err
			}
			continue // removed meanwhile
		}
	}
	return nil
}

// CPUPressure returns the child's cgroup v2 CPU pressure, the "some" line
// of its cpu.pressure file (sysfs.ParseCPUPressure). On v1, or where PSI is
// off, the file is absent: the error satisfies errors.Is(err,
// fs.ErrNotExist); a malformed file wraps sysfs.ErrPSIFormat.
func (c *Cgroup) CPUPressure(name string) (sysfs.Pressure, error) {
	dir, err := c.ChildPath(name)
	if err != nil {
		return sysfs.Pressure{}, err
	}
	return DirCPUPressure(dir)
}
