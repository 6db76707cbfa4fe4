package sysfs

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// PressureTrigger is a PSI (pressure stall information) trigger: the
// kernel wakes its reader when tasks of a scope stalled on the CPU for at
// least Stall within a Window (Documentation/accounting/psi.rst, "Monitoring
// for pressure thresholds"). It lets the daemon sleep with no periodic
// timer while every workload is idle and still notice when placement
// starts to matter: tasks that wait for a CPU.
//
// The scope is a cpu.pressure file: <procfs>/pressure/cpu (the whole
// machine; cgroup v1 has no per-cgroup PSI) or a cgroup v2 directory's
// cpu.pressure (that subtree only). The kernel signals with POLLPRI, which
// Go's network poller does not ask for, so one goroutine waits in poll(2);
// it parks its OS thread in the kernel and costs no wakeups while nothing
// stalls. The kernel fires at most once per Window.
//
// Pause and Resume stop and restart the polling without closing the
// trigger: a trigger made afresh may fire at its first evaluation however
// quiet the machine (seen on Linux 6.18 with the 2 s window), one kept
// does not.
type PressureTrigger struct {
	c      chan struct{}
	path   string
	fd     int // the PSI file, holding the trigger
	stopFd int // eventfd that ends the poll goroutine
	ctlFd  int // eventfd that has the poll goroutine look at paused again
	paused atomic.Bool
	done   chan struct{}
	once   sync.Once
	err    error // why the goroutine stopped early, if it did
}

// ErrNoPSI is wrapped by OpenPressureTrigger when path is not a kernel PSI
// file (absent, CONFIG_PSI off or psi=0, or a plain file in a mock tree).
var ErrNoPSI = errors.New("no kernel pressure stall information")

// ErrPSIFormat is wrapped by ParseCPUPressure for text that is not a
// pressure file's "some avg10=" line with a percentage.
var ErrPSIFormat = errors.New("invalid pressure stall information")

// Pressure is the "some" line of a PSI file (Documentation/accounting/psi.rst):
// the share of time in which at least one task waited for the resource.
type Pressure struct {
	// Avg10 is the average over the last 10 s, in percent (0–100; the
	// kernel updates it every 2 s).
	Avg10 float64
	// Total is the cumulative stall time since boot (the file gives µs);
	// 0 where the line has no total= field. Over an interval,
	// ΔTotal/Δwall is the stalled share of it.
	Total time.Duration
}

// ParseCPUPressure returns the "some" line of a cpu.pressure file ("some
// avg10=1.23 avg60=… total=…"). Errors wrap ErrPSIFormat: no "some
// avg10=" field, a value that is not a non-negative finite number, or a
// total= that is not a non-negative integer.
func ParseCPUPressure(s string) (Pressure, error) {
	for _, line := range strings.Split(s, "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || f[0] != "some" {
			continue
		}
		var pr Pressure
		avg := false
		for _, kv := range f[1:] {
			if v, ok := strings.CutPrefix(kv, "avg10="); ok {
				x, err := strconv.ParseFloat(v, 64)
				// NaN and ±Inf parse, but are no percentage: a NaN
				// would make every comparison in the planner false.
				if err != nil || x < 0 || math.IsNaN(x) || math.IsInf(x, 0) {
					return Pressure{}, fmt.Errorf("%w: cpu.pressure avg10 %q", ErrPSIFormat, v)
				}
				pr.Avg10, avg = x, true
			}
			if v, ok := strings.CutPrefix(kv, "total="); ok {
				us, err := strconv.ParseInt(v, 10, 64)
				if err != nil || us < 0 || us > math.MaxInt64/int64(time.Microsecond) {
					return Pressure{}, fmt.Errorf("%w: cpu.pressure total %q", ErrPSIFormat, v)
				}
				pr.Total = time.Duration(us) * time.Microsecond
			}
		}
		if !avg {
			break
		}
		return pr, nil
	}
	return Pressure{}, fmt.Errorf("%w: cpu.pressure has no \"some avg10=\"", ErrPSIFormat)
}

// OpenPressureTrigger arms a trigger "some <stall µs> <window µs>" on the
// PSI file path (e.g. /proc/pressure/cpu or <cgroup v2 dir>/cpu.pressure).
// stall must be > 0 and ≤ window; the kernel's rule for window: 500ms–10s
// up to Linux 6.4 (where /proc/pressure/* also needs CAP_SYS_RESOURCE to be
// opened for writing); from 6.5 up to 10s with CAP_SYS_RESOURCE, else a
// multiple of 2s (the systemd unit does not grant it). Errors: ErrNoPSI (wrapped) when path is
// not a PSI file on procfs or cgroup2; the open or write error otherwise
// (EINVAL for parameters the kernel refuses, EPERM/EACCES). C receives a
// coalesced value each time the kernel signals; Close stops it.
func OpenPressureTrigger(path string, stall, window time.Duration) (*PressureTrigger, error) {
	if stall <= 0 || stall > window {
		return nil, fmt.Errorf("pressure trigger on %s: stall %v must be in (0, window %v]", path, stall, window)
	}
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return nil, fmt.Errorf("pressure trigger on %s: %w: %w", path, ErrNoPSI, err)
	}
	// Only the kernel's own files signal: a regular file in a mock tree
	// would accept the trigger and never fire.
	if st.Type != unix.PROC_SUPER_MAGIC && st.Type != unix.CGROUP2_SUPER_MAGIC {
		return nil, fmt.Errorf("pressure trigger on %s: %w: not on procfs or cgroup2 (filesystem magic %#x)", path, ErrNoPSI, st.Type)
	}
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("pressure trigger on %s: %w", path, err)
	}
	spec := fmt.Sprintf("some %d %d", stall.Microseconds(), window.Microseconds())
	// The kernel wants the trigger with its terminating NUL.
	if _, err := unix.Write(fd, append([]byte(spec), 0)); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("pressure trigger %q on %s: %w", spec, path, err)
	}
	efd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("pressure trigger on %s: eventfd: %w", path, err)
	}
	cfd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		unix.Close(efd)
		unix.Close(fd)
		return nil, fmt.Errorf("pressure trigger on %s: eventfd: %w", path, err)
	}
	t := &PressureTrigger{c: make(chan struct{}, 1), path: path, fd: fd, stopFd: efd, ctlFd: cfd, done: make(chan struct{})}
	go t.wait()
	return t, nil
}

// C receives a value (coalesced) each time the stall threshold is crossed.
func (t *PressureTrigger) C() <-chan struct{} { return t.c }

func (t *PressureTrigger) wait() {
	defer close(t.done)
	all := []unix.PollFd{{Fd: int32(t.stopFd), Events: unix.POLLIN}, {Fd: int32(t.ctlFd), Events: unix.POLLIN}, {Fd: int32(t.fd), Events: unix.POLLPRI}}
	for {
		fds := all
		if t.paused.Load() {
			fds = all[:2] // the kernel keeps the event for the next poll
		}
		for i := range fds {
			fds[i].Revents = 0
		}
		_, err := unix.Poll(fds, -1)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			t.err = err
			return
		}
		if fds[0].Revents != 0 {
			return
		}
		if fds[1].Revents != 0 {
			var b [8]byte
			unix.Read(t.ctlFd, b[:]) // look at paused again
			continue
		}
		if len(fds) < 3 {
			continue
		}
		psi := fds[2]
		if psi.Revents&(unix.POLLERR|unix.POLLNVAL) != 0 {
			// The cgroup was removed: the trigger is gone for good.
			t.err = fmt.Errorf("pressure trigger on %s: the kernel closed it (revents %#x)", t.path, psi.Revents)
			return
		}
		if psi.Revents&unix.POLLPRI != 0 {
			select {
			case t.c <- struct{}{}:
			default:
			}
		}
	}
}

// Pause stops the polling: no wakeup of the poll goroutine's thread
// follows, but for at most one already under way (its signal is on C, as
// is one the kernel gave before). The kernel keeps the trigger, and an
// event it signals meanwhile is seen at once after Resume. Costs no
// wakeup itself.
func (t *PressureTrigger) Pause() { t.paused.Store(true) }

// Resume polls again after Pause (one wakeup of the poll goroutine).
func (t *PressureTrigger) Resume() {
	if t.paused.Swap(false) {
		unix.Write(t.ctlFd, []byte{1, 0, 0, 0, 0, 0, 0, 0})
	}
}

// Done is closed when the trigger stops: after Close, or early when the
// kernel dropped it (Err says why).
func (t *PressureTrigger) Done() <-chan struct{} { return t.done }

// Err is why the trigger stopped early; nil while it runs or after Close.
func (t *PressureTrigger) Err() error {
	select {
	case <-t.done:
		return t.err
	default:
		return nil
	}
}

// Close stops the trigger and releases its files; safe to call twice.
func (t *PressureTrigger) Close() error {
	t.once.Do(func() {
		one := []byte{1, 0, 0, 0, 0, 0, 0, 0}
		unix.Write(t.stopFd, one)
		<-t.done
		unix.Close(t.stopFd)
		unix.Close(t.ctlFd)
		unix.Close(t.fd)
	})
	return nil
}
