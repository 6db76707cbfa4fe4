package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/schedpolicyd/schedpolicyd/daemon"
	"github.com/schedpolicyd/schedpolicyd/internal/testutil"
)

// mountsAt lists the file system types of the mounts whose mount point is
// dir in /proc/self/mountinfo (the daemon runs in our mount namespace), in
// its order: the topmost last. It fails t when the file cannot be read.
func mountsAt(t *testing.T, dir string) []string {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	var types []string
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 7 || f[4] != dir {
			continue
		}
		for i := 6; i < len(f)-1; i++ {
			if f[i] == "-" {
				types = append(types, f[i+1])
				break
			}
		}
	}
	return types
}

// fuseMountsAt counts the tree's mounts (fuse.schedpolicyd) at dir.
func fuseMountsAt(t *testing.T, dir string) int {
	t.Helper()
	n := 0
	for _, fstype := range mountsAt(t, dir) {
		if fstype == "fuse.schedpolicyd" {
			n++
		}
	}
	return n
}

// fuseMountedAt reports whether the tree is mounted at dir.
func fuseMountedAt(t *testing.T, dir string) bool {
	t.Helper()
	return fuseMountsAt(t, dir) > 0
}

// topMountAt is the file system type of the topmost mount at dir, "" when
// nothing is mounted there.
func topMountAt(t *testing.T, dir string) string {
	t.Helper()
	types := mountsAt(t, dir)
	if len(types) == 0 {
		return ""
	}
	return types[len(types)-1]
}

// fuseConns counts the /dev/fuse files the process pid holds: one per FUSE
// connection it serves.
func fuseConns(pid int) (int, error) {
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	ents, err := os.ReadDir(dir)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, e := range ents {
		if target, _ := os.Readlink(filepath.Join(dir, e.Name())); target == "/dev/fuse" {
			n++
		}
	}
	return n, nil
}

// TestTreeLazyUnmountWhileHeld, on the real binary with a
// real FUSE mount: umount -l of the tree while one process holds power_aware
// open and another has its cwd in the knob directory. The tree is back at
// once, while both still hold the old one: the tree directory is one
// fuse.schedpolicyd mount again and a fresh open reads the knob. The holders
// still reach the old, detached tree, which goes on serving them live (a
// write through the new tree reads back through the old, and a write
// through the old one reaches the daemon). When they let go, the detached
// tree's connection is closed (the daemon holds one /dev/fuse again), one
// mount is left, and SIGTERM leaves none.
func TestTreeLazyUnmountWhileHeld(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: mounts FUSE")
	}
	testutil.NeedFUSE(t)
	for _, tool := range []string{"umount", "bash"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("needs %s: %v", tool, err)
		}
	}
	bin := buildDaemon(t)
	sys := mockMachine(t, "ac-offline-battery-unknown")
	tmp, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	stateDir, treeDir := filepath.Join(tmp, "state"), filepath.Join(tmp, "tree")
	knob := filepath.Join(treeDir, daemon.TreePrefix)
	p := startDaemonProc(t, bin, "--sysfs-root", sys, "--cgroup-root", "none", "--tree-dir", treeDir, "--tree-backend", "fuse",
		"--state-dir", stateDir, "--bus", "none", "--events", "fsnotify", "--log-level", "debug", "--config", emptyConf(t))
	pid := p.cmd.Process.Pid
	if n := fuseMountsAt(t, treeDir); n != 1 {
		t.Fatalf("%d tree mounts at start, want 1", n)
	}
	if n, err := fuseConns(pid); n != 1 || err != nil {
		t.Fatalf("daemon holds %d /dev/fuse (%v) at start, want 1", n, err)
	}

	file := testutil.HoldFile(t, knob+"/power_aware", "open file")
	cwd := testutil.HoldFile(t, knob+"/power_aware", "cwd")
	if out, err := exec.Command("umount", "-l", treeDir).CombinedOutput(); err != nil {
		t.Fatalf("umount -l: %v %s", err, out)
	}

	// The bound only keeps a failing run from hanging: before the fix
	// the tree stayed missing until the last holder let go.
	testutil.Eventually(t, "tree back while held", func() (bool, string) {
		n := fuseMountsAt(t, treeDir)
		b, err := os.ReadFile(knob + "/power_aware")
		return n == 1 && err == nil && string(b) == "1\n", fmt.Sprintf("%d mounts, read %q %v", n, b, err)
	})
	p.logHas(t, "remount logged", "the tree was unmounted from outside; mounted it again")
	for _, h := range []*testutil.Holder{file, cwd} {
		if got, err := h.Read(); got != "1\n" || err != nil {
			t.Errorf("through %s: %q %v, want the old tree still serving 1", h.Path, got, err)
		}
	}
	if n, err := fuseConns(pid); n != 2 || err != nil {
		t.Errorf("daemon holds %d /dev/fuse (%v) while the old tree is held, want 2", n, err)
	}

	// Both trees serve the same knob.
	testutil.Write(t, knob+"/power_aware", "2")
	for _, h := range []*testutil.Holder{file, cwd} {
		if got, err := h.Read(); got != "2\n" || err != nil {
			t.Errorf("through %s after a write to the new tree: %q %v, want 2", h.Path, got, err)
		}
	}
	testutil.Write(t, cwd.Path, "0")
	if got := testutil.ReadTrim(t, knob+"/power_aware"); got != "0" {
		t.Errorf("new tree after a write through the old one: %s, want 0", got)
	}

	file.Release()
	cwd.Release()
	testutil.Eventually(t, "the detached tree's connection closed", func() (bool, string) {
		n, err := fuseConns(pid)
		return n == 1 && err == nil, fmt.Sprintf("%d /dev/fuse %v", n, err)
	})
	if n := fuseMountsAt(t, treeDir); n != 1 {
		t.Errorf("%d tree mounts after the holders let go, want 1", n)
	}
	if got := testutil.ReadTrim(t, knob+"/power_aware"); got != "0" {
		t.Errorf("power_aware after the holders let go = %s, want 0", got)
	}
	if strings.Count(p.log.String(), "the tree was unmounted from outside") != 1 {
		t.Errorf("the tree was served again more than once:\n%s", p.log.String())
	}
	p.alive(t)

	p.stop(t)
	if n := fuseMountsAt(t, treeDir); n != 0 {
		t.Errorf("%d tree mounts after SIGTERM, want 0", n)
	}
}
