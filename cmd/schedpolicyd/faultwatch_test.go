package main

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/schedpolicyd/schedpolicyd/internal/testutil"
)

// faultStall is how long one step of the fault model (with the invariant
// check after it) may take before the watchdog ends the test. Every wait
// of a step is bounded by faultBound, and a step has a few of them: a
// step this long is stuck somewhere unbounded, and go test's own timeout
// would only say so after minutes more, with the stuck goroutine's stack
// lost among the others at the top of a long dump.
const faultStall = 4 * time.Minute

// faultWatch is what the watchdog reports on a stalled step: the step and
// when it began, the steps before it, and the running daemon.
var faultWatch struct {
	mu      sync.Mutex
	since   time.Time
	current string
	trace   []string // the sequence's steps so far
	pid     int      // the running daemon, 0 when none
	log     *testutil.LockedBuffer
	// The sequence's files and cgroups, removed at a stall's exit.
	dir, parent, other string
}

// watchStep records that a step began (the watchdog's clock restarts).
func watchStep(s string) {
	faultWatch.mu.Lock()
	defer faultWatch.mu.Unlock()
	faultWatch.since, faultWatch.current = time.Now(), s
	faultWatch.trace = append(faultWatch.trace, s)
	if len(faultWatch.trace) > 40 {
		faultWatch.trace = faultWatch.trace[len(faultWatch.trace)-40:]
	}
}

// watchSequence starts a sequence's record afresh: its temporary
// directory (FUSE trees are mounted under it) and its cgroups.
func watchSequence(dir, parent, other string) {
	faultWatch.mu.Lock()
	defer faultWatch.mu.Unlock()
	faultWatch.since, faultWatch.current, faultWatch.trace = time.Now(), "setup", nil
	faultWatch.dir, faultWatch.parent, faultWatch.other = dir, parent, other
}

// watchDaemon records the running daemon (pid 0: none).
func watchDaemon(pid int, log *testutil.LockedBuffer) {
	faultWatch.mu.Lock()
	defer faultWatch.mu.Unlock()
	faultWatch.pid, faultWatch.log = pid, log
}

// watchDaemonGone forgets the daemon pid once it has exited.
func watchDaemonGone(pid int) {
	faultWatch.mu.Lock()
	defer faultWatch.mu.Unlock()
	if faultWatch.pid == pid {
		faultWatch.pid, faultWatch.log = 0, nil
	}
}

// startFaultWatchdog checks every few seconds that the current step has
// not run for faultStall. On a stall it writes, last (so that a log cut to
// its tail keeps them): every goroutine of the test, the daemon's threads'
// kernel stacks and its log's tail, and the steps; then it brings the CPU
// back online, kills the daemon and exits with status 2.
func startFaultWatchdog() (stop func()) {
	watchSequence("", "", "")
	quit := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(5 * time.Second)
		defer tick.Stop()
		for {
			select {
			case <-quit:
				return
			case <-tick.C:
			}
			faultWatch.mu.Lock()
			stalled := time.Since(faultWatch.since)
			faultWatch.mu.Unlock()
			if stalled > faultStall {
				faultStalled(stalled)
			}
		}
	}()
	return func() { close(quit); <-done }
}

func faultStalled(stalled time.Duration) {
	buf := make([]byte, 8<<20)
	buf = buf[:runtime.Stack(buf, true)]
	faultWatch.mu.Lock()
	defer faultWatch.mu.Unlock()
	var b strings.Builder
	fmt.Fprintf(&b, "%s\n", buf)
	if pid := faultWatch.pid; pid > 0 {
		fmt.Fprintf(&b, "the daemon (pid %d), its threads:\n", pid)
		ids, _ := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
		for _, id := range ids {
			dir := fmt.Sprintf("/proc/%d/task/%s", pid, id.Name())
			fmt.Fprintf(&b, "  task %s: %s\n    %s\n", id.Name(), strings.TrimSpace(faultRead(dir+"/stat")),
				strings.ReplaceAll(strings.TrimSpace(faultRead(dir+"/stack")), "\n", "\n    "))
		}
		if faultWatch.log != nil {
			l := faultWatch.log.String()
			if len(l) > 20000 {
				l = "…" + l[len(l)-20000:]
			}
			fmt.Fprintf(&b, "the daemon's log (its tail):\n%s\n", l)
		}
	}
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "(*faultModel).") && !strings.Contains(g, "(*faultModel).spawn.func") {
			fmt.Fprintf(&b, "the model's goroutine (again):\n%s\n\n", g)
		}
	}
	fmt.Fprintf(&b, "fault model: the steps of the sequence (the last ones):\n  %s\n", strings.Join(faultWatch.trace, "\n  "))
	fmt.Fprintf(&b, "fault model: STALLED: %q has run for %v (bound %v): the test goroutine's stack is above, under \"goroutine\" with testing.tRunner and TestFaultModel\n",
		faultWatch.current, stalled.Round(time.Second), faultStall)
	os.Stderr.WriteString(b.String())
	faultPutCPUBack()
	if faultWatch.pid > 0 {
		syscall.Kill(faultWatch.pid, syscall.SIGKILL)
	}
	// What the sequence's teardown would have removed: the FUSE mounts
	// under its directory and its cgroups (the running daemon is gone
	// with its mount's detach).
	if dir := faultWatch.dir; dir != "" {
		for _, line := range strings.Split(faultRead("/proc/self/mountinfo"), "\n") {
			if f := strings.Fields(line); len(f) > 4 && strings.HasPrefix(f[4], dir+"/") {
				syscall.Unmount(f[4], syscall.MNT_DETACH)
			}
		}
	}
	for _, root := range []string{faultWatch.parent, faultWatch.other} {
		if root != "" {
			removeCgroupTree(root)
		}
	}
	os.Exit(2)
}

// removeCgroupTree removes the cgroup directory root and every directory
// below it, deepest first (rmdir: a cgroup with tasks stays).
func removeCgroupTree(root string) {
	var dirs []string
	filepath.WalkDir(root, func(p string, e fs.DirEntry, err error) error {
		if err == nil && e.IsDir() {
			dirs = append(dirs, p)
		}
		return nil
	})
	for i := len(dirs) - 1; i >= 0; i-- {
		syscall.Rmdir(dirs[i])
	}
}
