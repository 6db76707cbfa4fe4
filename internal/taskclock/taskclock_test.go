package taskclock

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/schedpolicyd/schedpolicyd/internal/testutil"
)

// The helper process: each line on stdin is a number of CPU-bound threads
// to run from then on; it answers "ok" once they were started. The line
// "child" starts a CPU-bound child process instead and answers its pid.
const helperEnv = "TASKCLOCK_TEST_HELPER"

func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) == "1" {
		var stop *atomic.Bool
		sc := bufio.NewScanner(os.Stdin)
		for sc.Scan() {
			if sc.Text() == "child" {
				c := exec.Command("sh", "-c", "while :; do :; done")
				c.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
				if err := c.Start(); err != nil {
					fmt.Println("error", err)
					continue
				}
				fmt.Println(c.Process.Pid)
				continue
			}
			n, _ := strconv.Atoi(sc.Text())
			if stop != nil {
				stop.Store(true)
			}
			stop = &atomic.Bool{}
			runtime.GOMAXPROCS(n + 1)
			for range n {
				go func(s *atomic.Bool) {
					runtime.LockOSThread()
					for !s.Load() {
					}
				}(stop)
			}
			fmt.Println("ok")
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

type helper struct {
	cmd *exec.Cmd
	in  io.WriteCloser
	out *bufio.Reader
}

func startHelper(t *testing.T) *helper {
	t.Helper()
	h := &helper{cmd: exec.Command(os.Args[0], "-test.run=^$")}
	h.cmd.Env = append(os.Environ(), helperEnv+"=1")
	h.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	h.in, h.out = testutil.StartPiped(t, h.cmd)
	return h
}

func (h *helper) spin(t *testing.T, n int) {
	t.Helper()
	fmt.Fprintln(h.in, n)
	if l, err := h.out.ReadString('\n'); err != nil || l != "ok\n" {
		t.Fatalf("helper: %q %v", l, err)
	}
}

// startChild has the helper start a CPU-bound child process and returns
// its pid; it is killed at the test's end.
func (h *helper) startChild(t *testing.T) int {
	t.Helper()
	fmt.Fprintln(h.in, "child")
	l, err := h.out.ReadString('\n')
	child, perr := strconv.Atoi(strings.TrimSpace(l))
	if err != nil || perr != nil {
		t.Fatalf("helper: %q %v", l, err)
	}
	t.Cleanup(func() { syscall.Kill(child, syscall.SIGKILL) })
	return child
}

func (h *helper) tids(t *testing.T) []int {
	t.Helper()
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", h.cmd.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	var tids []int
	for _, e := range ents {
		if id, err := strconv.Atoi(e.Name()); err == nil {
			tids = append(tids, id)
		}
	}
	return tids
}

// skipWithoutPerf skips when this machine refuses software counters (a
// seccomp filter, perf_event_paranoid without the privilege).
func skipWithoutPerf(t *testing.T, err error) {
	t.Helper()
	if errors.Is(err, unix.EACCES) || errors.Is(err, unix.EPERM) || errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.ENOENT) {
		t.Skipf("perf_event_open refused here, cannot test counters: %v", err)
	}
}

// waitBurst waits (up to a generous bound: this checks that a signal comes,
// not how soon) for C and a Burst of key.
func waitBurst(t *testing.T, w *Watch, key string) (ran, wall time.Duration) {
	t.Helper()
	deadline := time.After(20 * time.Second)
	for {
		select {
		case <-w.C():
			if ran, wall, ok := w.Burst(key); ok {
				return ran, wall
			}
		case <-deadline:
			t.Fatal("no overflow signal in 20 s")
		}
	}
}

// cpuTime is the CPU time the threads of pid ran so far (the first field
// of each /proc/PID/task/TID/schedstat, in ns).
func cpuTime(t *testing.T, pid int) time.Duration {
	t.Helper()
	dirs, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/schedstat", pid))
	if err != nil || len(dirs) == 0 {
		t.Fatalf("schedstat of %d: %v", pid, err)
	}
	var sum time.Duration
	for _, f := range dirs {
		b, err := os.ReadFile(f)
		if err != nil {
			continue // the thread exited
		}
		if ns, err := strconv.ParseInt(strings.Fields(string(b))[0], 10, 64); err == nil {
			sum += time.Duration(ns)
		}
	}
	return sum
}

// TestTasksCountChildren: counters opened on a process's threads count a
// process it starts later (inherit): the burst comes from the child, whose
// pid had no counter, while the helper itself stays idle.
func TestTasksCountChildren(t *testing.T) {
	h := startHelper(t)
	h.spin(t, 0) // the runtime has started its threads
	w := New(20*time.Millisecond, 64)
	defer w.Close()
	tids := h.tids(t)
	n, err := w.SetTasks("h", Tasks(tids...), 0)
	skipWithoutPerf(t, err)
	if err != nil || n == 0 {
		t.Fatalf("SetTasks: %d, %v", n, err)
	}
	if w.Open() != n || !w.Has("h") || strings.Join(w.Keys(), ",") != "h" {
		t.Fatalf("Open %d Has %v Keys %v after %d counters", w.Open(), w.Has("h"), w.Keys(), n)
	}
	own := cpuTime(t, h.cmd.Process.Pid)
	child := h.startChild(t)
	if slices.Contains(tids, child) {
		t.Fatalf("the child %d had a counter of its own", child)
	}
	ran, wall := waitBurst(t, w, "h")
	if ran < w.Period() || wall <= 0 {
		t.Fatalf("Burst: ran %v over %v, want at least one period (%v)", ran, wall, w.Period())
	}
	if byHelper := cpuTime(t, h.cmd.Process.Pid) - own; byHelper >= ran {
		t.Fatalf("the helper itself ran %v of the %v counted: the child's CPU was not counted", byHelper, ran)
	}
}

func TestPauseStopsCounting(t *testing.T) {
	h := startHelper(t)
	h.spin(t, 1)
	w := New(10*time.Millisecond, 64)
	defer w.Close()
	_, err := w.SetTasks("h", Tasks(h.tids(t)...), 0)
	skipWithoutPerf(t, err)
	if err != nil {
		t.Fatal(err)
	}
	waitBurst(t, w, "h")
	if err := w.Pause("h"); err != nil || !w.Paused("h") {
		t.Fatalf("Pause: %v, paused %v", err, w.Paused("h"))
	}
	g := w.groups["h"]
	a, err := g.sum()
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond) // the thread spins on meanwhile
	b, _ := g.sum()
	if a != b {
		t.Fatalf("a paused group counted %v", b-a)
	}
	if _, _, ok := w.Burst("h"); ok {
		t.Fatal("Burst of a paused group reported one")
	}
	if err := w.Resume("h"); err != nil || w.Paused("h") {
		t.Fatalf("Resume: %v", err)
	}
	ran, _ := waitBurst(t, w, "h")
	if ran < w.Period() {
		t.Fatalf("after Resume: ran %v", ran)
	}
}

func TestSetTasksSkipsExited(t *testing.T) {
	w := New(20*time.Millisecond, 4)
	defer w.Close()
	// A tid no task has (above pid_max).
	n, err := w.SetTasks("gone", Tasks(1<<30), 0)
	skipWithoutPerf(t, err)
	if n != 0 || err != nil {
		t.Fatalf("SetTasks of a gone task: %d, %v; want 0, nil", n, err)
	}
	if _, _, ok := w.Burst("gone"); ok {
		t.Fatal("Burst of an empty group")
	}
	if _, err := w.SetTasks("many", Tasks(1, 2, 3, 4, 5), 0); !errors.Is(err, ErrLimit) {
		t.Fatalf("5 tasks with room for 4: %v, want ErrLimit", err)
	}
	if w.Has("many") || w.Open() != 0 {
		t.Fatalf("a refused group left counters: Has %v Open %d", w.Has("many"), w.Open())
	}
}

// cgroup2Mount returns where a cgroup v2 hierarchy is mounted ("" if none).
func cgroup2Mount(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mounts")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) > 2 && f[2] == "cgroup2" {
			return f[1]
		}
	}
	return ""
}

func TestCgroupCountsItsTasks(t *testing.T) {
	root := cgroup2Mount(t)
	if root == "" || os.Geteuid() != 0 {
		t.Skip("needs root and a cgroup v2 mount to make a child cgroup in")
	}
	dir := filepath.Join(root, fmt.Sprintf("taskclock-test-%d", os.Getpid()))
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Skipf("cannot make a cgroup v2 child here: %v", err)
	}
	t.Cleanup(func() {
		// Its task back to the root before removal.
		os.Remove(dir)
	})
	h := startHelper(t)
	h.spin(t, 0)
	if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(h.cmd.Process.Pid)), 0); err != nil {
		t.Skipf("cannot move a task into a cgroup v2 child here (a v1 controller may own it): %v", err)
	}
	t.Cleanup(func() {
		h.in.Close()
		h.cmd.Process.Kill()
		h.cmd.Wait()
		os.Remove(dir)
	})
	w := New(20*time.Millisecond, 64)
	defer w.Close()
	cpus := make([]int, runtime.NumCPU())
	for i := range cpus {
		cpus[i] = i
	}
	n, err := w.SetCgroup("cg", dir, cpus, 0)
	skipWithoutPerf(t, err)
	if err != nil || n != len(cpus) {
		t.Fatalf("SetCgroup: %d, %v", n, err)
	}
	// The same directory and CPUs keep the counters.
	fds := append([]int(nil), w.groups["cg"].fds...)
	if _, err := w.SetCgroup("cg", dir, cpus, 0); err != nil || fmt.Sprint(w.groups["cg"].fds) != fmt.Sprint(fds) {
		t.Fatalf("SetCgroup again reopened: %v", err)
	}
	if got := w.GroupPeriod("cg"); got != w.Period() {
		t.Fatalf("GroupPeriod %v, want the Watch's %v", got, w.Period())
	}
	// Another period reopens them.
	if _, err := w.SetCgroup("cg", dir, cpus, 50*time.Millisecond); err != nil || w.GroupPeriod("cg") != 50*time.Millisecond || w.Open() != len(cpus) {
		t.Fatalf("SetCgroup at 50ms: %v, period %v, %d open", err, w.GroupPeriod("cg"), w.Open())
	}
	if _, err := w.SetCgroup("cg", dir, cpus, 0); err != nil {
		t.Fatal(err)
	}
	// Idle, the cgroup runs far less than a period in 300 ms.
	time.Sleep(300 * time.Millisecond)
	if r, _, ok := w.Burst("cg"); ok {
		t.Fatalf("an idle cgroup reported a burst of %v", r)
	}
	h.spin(t, 1)
	ran, _ := waitBurst(t, w, "cg")
	if ran < w.Period() {
		t.Fatalf("ran %v", ran)
	}
	if _, err := w.SetCgroup("bad", filepath.Join(dir, "nope"), cpus, 0); err == nil || w.Has("bad") {
		t.Fatal("SetCgroup of a missing directory succeeded")
	}
}

// TestSetTasksListsAgain: a task the first listing missed (here a running
// child, as one created between a listing and its creator's counter would
// be) is counted because SetTasks lists again until nothing is new; and a
// later listing over the limit leaves no counters.
func TestSetTasksListsAgain(t *testing.T) {
	h := startHelper(t)
	h.spin(t, 0)
	child := h.startChild(t)
	tids := h.tids(t)
	var calls int
	list := func() ([]int, error) {
		calls++
		if calls == 1 {
			return tids, nil
		}
		return append(slices.Clone(tids), child), nil
	}
	w := New(20*time.Millisecond, 64)
	defer w.Close()
	own := cpuTime(t, h.cmd.Process.Pid)
	n, err := w.SetTasks("h", list, 0)
	skipWithoutPerf(t, err)
	if err != nil || n != len(tids)+1 || w.Open() != n {
		t.Fatalf("SetTasks: %d, %v (Open %d); want %d counters", n, err, w.Open(), len(tids)+1)
	}
	if calls != 3 {
		t.Fatalf("list called %d times; want 3 (the last naming nothing new)", calls)
	}
	ran, _ := waitBurst(t, w, "h")
	if byHelper := cpuTime(t, h.cmd.Process.Pid) - own; ran < w.Period() || byHelper >= ran {
		t.Fatalf("ran %v, the helper itself %v: the child listed second was not counted", ran, byHelper)
	}

	small := New(20*time.Millisecond, len(tids))
	defer small.Close()
	calls = 0
	if _, err := small.SetTasks("h", list, 0); !errors.Is(err, ErrLimit) {
		t.Fatalf("a second listing over the limit: %v, want ErrLimit", err)
	}
	if small.Has("h") || small.Open() != 0 {
		t.Fatalf("a refused group left counters: Has %v Open %d", small.Has("h"), small.Open())
	}
}
