// Package taskclock wakes its owner when a group of tasks has run for a
// given amount of CPU time, with no timer: the kernel counts the CPU time
// (perf software counters, perf_event_open(2)) and signals each time a
// counter has run another Period (a counter overflow, delivered as SIGIO
// through O_ASYNC; see "Overflow handling" in perf_event_open(2)).
//
// A group is either a set of tasks or a cgroup v2 directory:
//
//   - SetTasks opens one PERF_COUNT_SW_TASK_CLOCK counter per task, with
//     inherit set, so that the threads and processes those tasks create from
//     then on are counted too (their overflows signal through the counter
//     they inherited from). The kernel refuses to map a ring buffer of an
//     inherited per-task counter (EINVAL from mmap), so poll(2) on it reports
//     POLLHUP at once: the signal is the only notification. Counting another
//     user's tasks needs ptrace read access to them (CAP_SYS_PTRACE).
//   - SetCgroup opens one PERF_COUNT_SW_CPU_CLOCK counter per CPU filtered by
//     the cgroup (PERF_FLAG_PID_CGROUP: it counts while a task of the cgroup
//     or of a descendant runs on that CPU). It needs the perf_event
//     controller, implicit on cgroup v2, and CAP_PERFMON or CAP_SYS_ADMIN.
//
// The signal says that some counter overflowed, not which (Go's os/signal
// gives no siginfo): the owner calls Burst for each group it cares about.
// A Watch is not safe for concurrent use; C may be received from anywhere.
package taskclock

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"slices"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// ErrLimit is returned when opening a group's counters would hold more than
// the Watch's maximum.
var ErrLimit = errors.New("too many counters")

// Watch is a set of counter groups by key. The zero value is not usable;
// make one with New.
type Watch struct {
	period time.Duration
	max    int
	open   int // counters held, all groups
	groups map[string]*group
	sig    chan os.Signal
	c      chan struct{}
	quit   chan struct{}
}

type group struct {
	fds    []int
	period time.Duration
	// what is what the counters count (tasks, or the cgroup and CPUs), so
	// that SetCgroup with the same ones keeps them.
	what   string
	mark   time.Duration // the counters' sum at markAt
	markAt time.Time
	paused bool
}

// New returns a Watch whose counters signal each time they have counted
// another period of CPU time (at least 1 ms), holding at most limit counters
// (file descriptors) in all.
func New(period time.Duration, limit int) *Watch {
	return &Watch{
		period: max(period, time.Millisecond), max: limit,
		groups: map[string]*group{},
		c:      make(chan struct{}, 1),
	}
}

// C receives a value after one or more counters overflowed since the last
// receive.
func (w *Watch) C() <-chan struct{} { return w.c }

// Period is the CPU time between a counter's signals, unless a Set call
// gives another.
func (w *Watch) Period() time.Duration { return w.period }

// GroupPeriod is key's counters' period (0 without counters).
func (w *Watch) GroupPeriod(key string) time.Duration {
	if g := w.groups[key]; g != nil {
		return g.period
	}
	return 0
}

func (w *Watch) periodOr(p time.Duration) time.Duration {
	if p <= 0 {
		return w.period
	}
	return max(p, time.Millisecond)
}

// Open is the number of counters held.
func (w *Watch) Open() int { return w.open }

// Has reports whether key has counters.
func (w *Watch) Has(key string) bool { return w.groups[key] != nil }

// Keys returns the keys with counters, sorted.
func (w *Watch) Keys() []string {
	keys := make([]string, 0, len(w.groups))
	for k := range w.groups {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// SetTasks replaces key's counters with one task-clock counter per task
// that list returns (thread ids, as in /proc/PID/task or a cgroup's tasks
// file), inherited by what they create from now on, signalling every period
// of CPU time (0: the Watch's).
//
// A thread created between the listing and its creator's counter is not
// inherited (perf_event_init_task copies only the counters its creator
// already has), so list is called again after each round of counters until
// it names no task not yet tried, at most maxListRounds times: from then on
// every task list names, and every one they create, is counted. Tasks that
// exited in between (ESRCH) are skipped. It returns the number of counters
// opened; list's error; an error when none could be opened while some task
// exists (the kernel's refusal: EACCES or EPERM without the privilege,
// ENOENT or ENOSYS without perf events); or ErrLimit. On error key has no
// counters.
func (w *Watch) SetTasks(key string, list func() ([]int, error), period time.Duration) (int, error) {
	w.Remove(key)
	period = w.periodOr(period)
	attr := w.attr(unix.PERF_COUNT_SW_TASK_CLOCK, true, period)
	g := &group{what: "tasks", period: period}
	tried := map[int]bool{}
	var firstErr error
	for round := 0; round < maxListRounds; round++ {
		tids, err := list()
		if err != nil {
			closeAll(g.fds)
			return 0, err
		}
		var fresh []int
		for _, tid := range tids {
			if !tried[tid] {
				tried[tid] = true
				fresh = append(fresh, tid)
			}
		}
		if len(fresh) == 0 {
			break
		}
		if len(g.fds)+len(fresh) > w.max-w.open {
			closeAll(g.fds)
			return 0, fmt.Errorf("%d tasks: %w (%d held, at most %d)", len(g.fds)+len(fresh), ErrLimit, w.open, w.max)
		}
		for _, tid := range fresh {
			fd, err := w.openCounter(&attr, tid, -1, 0)
			if err != nil {
				if !errors.Is(err, unix.ESRCH) && firstErr == nil {
					firstErr = fmt.Errorf("task %d: %w", tid, err)
				}
				continue
			}
			g.fds = append(g.fds, fd)
		}
		if len(g.fds) == 0 && firstErr != nil {
			return 0, firstErr
		}
	}
	w.add(key, g) // with no counters when every task exited: nothing to count
	return len(g.fds), nil
}

// maxListRounds bounds SetTasks' listings: a group creating threads faster
// than they can be counted keeps the counters of the last round (its later
// threads are inherited from those that have counters).
const maxListRounds = 8

// Tasks returns a list for SetTasks that always names tids.
func Tasks(tids ...int) func() ([]int, error) {
	return func() ([]int, error) { return tids, nil }
}

// SetCgroup makes key's counters one CPU-clock counter per CPU in cpus
// filtered by the cgroup v2 directory dir, signalling every period of CPU
// time (0: the Watch's). Counters already counting the same directory and
// CPUs with the same period are kept as they are. It returns the number held;
// an error when dir cannot be opened or the kernel refuses a counter (no
// perf_event controller for dir, no privilege), or ErrLimit. On error key
// has no counters.
func (w *Watch) SetCgroup(key, dir string, cpus []int, period time.Duration) (int, error) {
	period = w.periodOr(period)
	what := fmt.Sprintf("cgroup %s cpus %v period %v", dir, cpus, period)
	if g := w.groups[key]; g != nil && g.what == what {
		return len(g.fds), nil
	}
	w.Remove(key)
	if len(cpus) > w.max-w.open {
		return 0, fmt.Errorf("%d CPUs: %w (%d held, at most %d)", len(cpus), ErrLimit, w.open, w.max)
	}
	cg, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return 0, &os.PathError{Op: "open", Path: dir, Err: err}
	}
	defer unix.Close(cg)
	attr := w.attr(unix.PERF_COUNT_SW_CPU_CLOCK, false, period)
	g := &group{what: what, period: period}
	for _, cpu := range cpus {
		fd, err := w.openCounter(&attr, cg, cpu, unix.PERF_FLAG_PID_CGROUP)
		if err != nil {
			closeAll(g.fds)
			return 0, fmt.Errorf("cgroup %s on CPU %d: %w", dir, cpu, err)
		}
		g.fds = append(g.fds, fd)
	}
	w.add(key, g)
	return len(g.fds), nil
}

func (w *Watch) attr(config uint64, inherit bool, period time.Duration) unix.PerfEventAttr {
	a := unix.PerfEventAttr{
		Type:   unix.PERF_TYPE_SOFTWARE,
		Config: config,
		Sample: uint64(period.Nanoseconds()),
	}
	if inherit {
		a.Bits |= unix.PerfBitInherit
	}
	a.Size = uint32(unsafe.Sizeof(a))
	return a
}

// openCounter opens one counter and has its overflows signal this process.
func (w *Watch) openCounter(attr *unix.PerfEventAttr, pid, cpu int, flags int) (int, error) {
	w.notify()
	fd, err := unix.PerfEventOpen(attr, pid, cpu, -1, flags|unix.PERF_FLAG_FD_CLOEXEC)
	if err != nil {
		return -1, err
	}
	if err := setAsync(fd); err != nil {
		unix.Close(fd)
		return -1, err
	}
	return fd, nil
}

// setAsync has the kernel send SIGIO to this process when fd's counter
// overflows (F_SETOWN, then O_ASYNC).
func setAsync(fd int) error {
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_SETOWN, os.Getpid()); err != nil {
		return fmt.Errorf("F_SETOWN: %w", err)
	}
	fl, err := unix.FcntlInt(uintptr(fd), unix.F_GETFL, 0)
	if err != nil {
		return fmt.Errorf("F_GETFL: %w", err)
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_SETFL, fl|unix.O_ASYNC); err != nil {
		return fmt.Errorf("O_ASYNC: %w", err)
	}
	return nil
}

func (w *Watch) add(key string, g *group) {
	g.markAt = time.Now()
	w.groups[key] = g
	w.open += len(g.fds)
}

// notify starts SIGIO's delivery to C, once, before the first counter is
// opened: a counter may overflow as soon as it is, and the runtime drops a
// SIGIO nobody asked for.
func (w *Watch) notify() {
	if w.sig != nil {
		return
	}
	w.sig = make(chan os.Signal, 1)
	w.quit = make(chan struct{})
	signal.Notify(w.sig, unix.SIGIO)
	go forward(w.sig, w.c, w.quit)
}

func forward(sig <-chan os.Signal, c chan<- struct{}, quit <-chan struct{}) {
	for {
		select {
		case <-sig:
			select {
			case c <- struct{}{}:
			default:
			}
		case <-quit:
			return
		}
	}
}

// Remove closes key's counters, if any.
func (w *Watch) Remove(key string) {
	g := w.groups[key]
	if g == nil {
		return
	}
	closeAll(g.fds)
	w.open -= len(g.fds)
	delete(w.groups, key)
}

func closeAll(fds []int) {
	for _, fd := range fds {
		unix.Close(fd)
	}
}

// Pause stops key's counters (and those their tasks' children inherited)
// from counting and so from signalling; Resume starts them again. Both
// are no-ops for a key without counters or already in that state. Paused
// reports the state.
func (w *Watch) Pause(key string) error { return w.setPaused(key, true) }

// Resume: see Pause.
func (w *Watch) Resume(key string) error { return w.setPaused(key, false) }

// Paused: see Pause.
func (w *Watch) Paused(key string) bool {
	g := w.groups[key]
	return g != nil && g.paused
}

func (w *Watch) setPaused(key string, paused bool) error {
	g := w.groups[key]
	if g == nil || g.paused == paused {
		return nil
	}
	req := uint(unix.PERF_EVENT_IOC_ENABLE)
	if paused {
		req = unix.PERF_EVENT_IOC_DISABLE
	}
	for _, fd := range g.fds {
		if err := unix.IoctlSetInt(fd, req, 0); err != nil {
			return fmt.Errorf("perf ioctl: %w", err)
		}
	}
	g.paused = paused
	if !paused {
		// What it ran before the pause is no evidence of a burst now.
		if sum, err := g.sum(); err == nil {
			g.mark, g.markAt = sum, time.Now()
		}
	}
	return nil
}

// Burst reports what key's tasks ran since its mark (set when its counters
// were opened or resumed, moved by every Burst that reports one): ran, the
// CPU time counted, and wall, the time since the mark; ok only when ran is
// at least one of its period (then the mark moves to now). ran/wall is the
// group's average utilisation over wall, in CPUs. The time is taken just
// after the counters are read: taken before, a reader delayed between the
// two (a busy machine) counts CPU time over a wall time that lacks the
// delay, and reads more than the CPUs the group has.
func (w *Watch) Burst(key string) (ran, wall time.Duration, ok bool) {
	g := w.groups[key]
	if g == nil || g.paused {
		return 0, 0, false
	}
	sum, err := g.sum()
	now := time.Now()
	if err != nil || sum-g.mark < g.period {
		return 0, 0, false
	}
	ran, wall = sum-g.mark, now.Sub(g.markAt)
	g.mark, g.markAt = sum, now
	return ran, wall, true
}

// sum reads the group's counters (an inherited counter's value includes
// its children's, live and exited).
func (g *group) sum() (time.Duration, error) {
	var b [8]byte
	var sum uint64
	for _, fd := range g.fds {
		n, err := unix.Read(fd, b[:])
		if err != nil {
			return 0, err
		}
		if n == 8 {
			sum += binary.NativeEndian.Uint64(b[:])
		}
	}
	return time.Duration(sum), nil
}

// Close closes every counter and stops the signal's delivery to C.
func (w *Watch) Close() {
	for k := range w.groups {
		w.Remove(k)
	}
	if w.sig != nil {
		signal.Stop(w.sig)
		close(w.quit)
		w.sig = nil
	}
}
