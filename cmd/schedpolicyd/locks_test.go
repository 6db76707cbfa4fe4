package main

// With the real binary: one daemon per managed
// parent cgroup, lock files and directories that cannot be turned against
// root, and one daemon per tree mount point whatever path names it.

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/schedpolicyd/schedpolicyd/daemon"
	"github.com/schedpolicyd/schedpolicyd/daemon/statefile"
	"github.com/schedpolicyd/schedpolicyd/internal/testutil"
)

// startOrRefused runs bin with args (testutil.StartProc) until it either
// exits before READY=1 — a refused start: started is false and p.exited
// holds the exit error — or sends READY=1: started is true and p is a
// running daemon (testutil.Proc.WaitReady). Either way the process is
// killed at cleanup and its log printed on failure. There is no time
// limit: a daemon that does neither is the test binary's -timeout to
// catch.
func startOrRefused(t *testing.T, bin string, args ...string) (p *daemonProc, started bool) {
	t.Helper()
	tp := testutil.StartProc(t, bin, args...)
	started = tp.WaitReady()
	return procOf(tp), started
}

// wantRefused checks that p's start was refused: exit status 1 and a log
// naming every string in want.
func wantRefused(t *testing.T, what string, p *daemonProc, started bool, want ...string) {
	t.Helper()
	if started {
		t.Errorf("%s: the daemon started (READY=1) instead of refusing", what)
		return
	}
	err := <-p.exited
	p.exited <- err
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 {
		t.Errorf("%s: exit %v, want status 1", what, err)
	}
	for _, w := range want {
		if !strings.Contains(p.log.String(), w) {
			t.Errorf("%s: the refusal does not name %q:\n%s", what, w, p.log.String())
		}
	}
}

// TestSecondDaemonOnOneCgroupParent: a second daemon with
// its own state directory, tree and bus but the same --cgroup-root as a
// running one that has packed the workloads must not adopt the packed
// cpusets as originals: it exits with status 1 naming the first daemon's
// pid, and once the first stops every workload has its original cpuset.
func TestSecondDaemonOnOneCgroupParent(t *testing.T) {
	requireMachine(t)
	bin := buildDaemon(t)
	sys := mockMachine(t, "ac-offline-battery-unknown")
	cg := newV1Parent(t)
	last := cg.cpus[strings.LastIndexAny(cg.cpus, ",-")+1:]
	orig := map[string]string{"w1": last, "w2": cg.cpus, "w3": cg.cpus}
	for _, w := range []string{"w1", "w2", "w3"} {
		cg.child(t, w, orig[w])
		cg.spin(t, w)
	}
	tmp := t.TempDir()
	args := func(n, addr string) []string {
		return []string{"--sysfs-root", sys, "--cgroup-root", cg.dir, "--tree-dir", filepath.Join(tmp, "tree"+n), "--tree-backend", "fuse",
			"--state-dir", filepath.Join(tmp, "state"+n), "--bus", addr, "--events", "fsnotify", "--debounce", "50ms",
			"--sample-interval", "200ms", "--log-level", "debug", "--config", emptyConf(t)}
	}
	p1 := startDaemonProc(t, bin, args("1", testutil.StartBus(t, testutil.BusOptions{}).Addr)...)
	onBattery(t, sys)
	testutil.WaitFor(t, "packed", 15*time.Second, func() (bool, string) {
		a, b, c := cg.cpusOf(t, "w1"), cg.cpusOf(t, "w2"), cg.cpusOf(t, "w3")
		return single(a) && single(b) && single(c), fmt.Sprintf("w1=%s w2=%s w3=%s", a, b, c)
	})

	p2, started := startOrRefused(t, bin, args("2", testutil.StartBus(t, testutil.BusOptions{}).Addr)...)
	wantRefused(t, "second daemon on the same parent", p2, started,
		"pid "+strconv.Itoa(p1.cmd.Process.Pid), "manages the cgroup "+cg.dir)
	if b, err := os.ReadFile(filepath.Join(tmp, "state2", statefile.StateFile)); err == nil && strings.Contains(string(b), cg.dir) {
		t.Errorf("the second daemon saved records of the first's cgroups: %s", b)
	}

	p1.stop(t)
	if started {
		p2.stop(t) // without the lock: the second restores the packed sets it adopted
	}
	for _, w := range []string{"w1", "w2", "w3"} {
		if got := cg.cpusOf(t, w); got != orig[w] {
			t.Errorf("after the daemons stopped: %s = %s, want its original %s", w, got, orig[w])
		}
	}
}

// TestTreeDirSymlinkToRunningTree: a second daemon whose
// --tree-dir is a symlink to a running daemon's FUSE tree exits with status
// 1 naming the first's pid; the first's mount stays, serves, and is gone
// once the first stops.
func TestTreeDirSymlinkToRunningTree(t *testing.T) {
	requireMachine(t)
	bin := buildDaemon(t)
	sys := mockMachine(t, "ac-offline-battery-unknown")
	tmp := t.TempDir()
	tree := filepath.Join(tmp, "tree")
	args := func(tree, state, addr string) []string {
		return []string{"--sysfs-root", sys, "--cgroup-root", "none", "--tree-dir", tree, "--tree-backend", "fuse",
			"--state-dir", state, "--bus", addr, "--events", "fsnotify", "--log-level", "debug", "--config", emptyConf(t)}
	}
	p1 := startDaemonProc(t, bin, args(tree, filepath.Join(tmp, "state1"), testutil.StartBus(t, testutil.BusOptions{}).Addr)...)
	knob := filepath.Join(tree, daemon.TreePrefix, "current_sched_policy")
	link := filepath.Join(t.TempDir(), "link")
	if err := os.Symlink(tree, link); err != nil {
		t.Fatal(err)
	}

	p2, started := startOrRefused(t, bin, args(link, filepath.Join(tmp, "state2"), testutil.StartBus(t, testutil.BusOptions{}).Addr)...)
	wantRefused(t, "second daemon on a symlink to the tree", p2, started, "pid "+strconv.Itoa(p1.cmd.Process.Pid), tree+".lock")
	if fstype := topMountAt(t, tree); !strings.HasPrefix(fstype, "fuse") {
		t.Errorf("first daemon's tree after the second start: mounted type %q, want its FUSE mount", fstype)
	}
	if b, err := os.ReadFile(knob); err != nil || strings.TrimSpace(string(b)) != "performance" {
		t.Errorf("first daemon's tree reads %q, %v", b, err)
	}
	p1.alive(t)

	p1.stop(t)
	if started {
		p2.stop(t)
	}
	if topMountAt(t, tree) != "" {
		exec.Command("umount", "-l", tree).Run()
		t.Errorf("a mount is left at %s after both daemons stopped", tree)
	}
}

// TestUnsafeLockRefusedRealBinary: with a lock file that
// is a symlink to a victim file, or a state directory others can write, the
// binary exits with status 1 and a message saying why, and the victim file
// is untouched.
func TestUnsafeLockRefusedRealBinary(t *testing.T) {
	bin := buildDaemon(t)
	sys := mockMachine(t, "ac-offline-battery-unknown")
	tmp := t.TempDir()
	victim := filepath.Join(tmp, "victim")
	const precious = "root:precious:0:0\n"
	if err := os.WriteFile(victim, []byte(precious), 0o644); err != nil {
		t.Fatal(err)
	}
	args := func(dir string) []string {
		return []string{"--sysfs-root", sys, "--cgroup-root", "none", "--tree-dir", filepath.Join(dir, "run", "tree"), "--tree-backend", "plain",
			"--state-dir", filepath.Join(dir, "state"), "--bus", "none", "--events", "none", "--config", emptyConf(t)}
	}

	dir := t.TempDir()
	os.MkdirAll(filepath.Join(dir, "state"), 0o755)
	if err := os.Symlink(victim, filepath.Join(dir, "state", "lock")); err != nil {
		t.Fatal(err)
	}
	p, started := startOrRefused(t, bin, args(dir)...)
	if started {
		p.stop(t)
	}
	wantRefused(t, "state lock a symlink", p, started, filepath.Join(dir, "state", "lock"), "symbolic link")

	dir = t.TempDir()
	os.MkdirAll(filepath.Join(dir, "run"), 0o755)
	if err := os.Symlink(victim, filepath.Join(dir, "run", "tree.lock")); err != nil {
		t.Fatal(err)
	}
	p, started = startOrRefused(t, bin, args(dir)...)
	if started {
		p.stop(t)
	}
	wantRefused(t, "tree lock a symlink", p, started, filepath.Join(dir, "run", "tree.lock"), "symbolic link")
	if b, _ := os.ReadFile(victim); string(b) != precious {
		t.Errorf("the victim file now holds %q", b)
	}

	dir = t.TempDir()
	os.MkdirAll(filepath.Join(dir, "state"), 0o755)
	if err := os.Chmod(filepath.Join(dir, "state"), 0o777); err != nil {
		t.Fatal(err)
	}
	p, started = startOrRefused(t, bin, args(dir)...)
	if started {
		p.stop(t)
	}
	wantRefused(t, "state dir 0777", p, started, filepath.Join(dir, "state"), "writable by its group or by others")
}
