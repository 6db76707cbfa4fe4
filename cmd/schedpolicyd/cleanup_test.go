package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/schedpolicyd/schedpolicyd/daemon"
)

// fuseMountedAt reports whether a fuse.schedpolicyd mount is at dir
// (/proc/self/mountinfo).
func fuseMountedAt(t *testing.T, dir string) bool {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) > 4 && f[4] == dir && strings.Contains(l, " - fuse.schedpolicyd ") {
			return true
		}
	}
	return false
}

// TestCleanupAfterKill9: `schedpolicyd cleanup` (the unit's ExecStopPost=)
// changes nothing while a daemon serves the tree (exit 1); after the
// daemon's kill -9 it detaches the dead FUSE mount and removes the tree
// directory, the lock file and the directory above that the daemon made
// (its lock file names it), leaving the state directory; run again, it
// finds nothing left (exit 0).
func TestCleanupAfterKill9(t *testing.T) {
	requireMachine(t)
	bin := buildDaemon(t)
	sys := mockMachine(t, "ac-offline-battery-unknown")
	tmp := t.TempDir()
	run := filepath.Join(tmp, "run", "schedpolicyd")
	treeDir, stateDir, conf := filepath.Join(run, "sysfs"), filepath.Join(tmp, "state"), emptyConf(t)
	p := startDaemonProc(t, bin, "--sysfs-root", sys, "--cgroup-root", "none", "--tree-dir", treeDir, "--tree-backend", "fuse",
		"--state-dir", stateDir, "--bus", "none", "--events", "fsnotify", "--log-level", "debug", "--config", conf)
	cleanup := func() (int, string) {
		t.Helper()
		cmd := exec.Command(bin, "cleanup", "--tree-dir", treeDir, "--config", conf)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		err := cmd.Run()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return code, out.String()
	}
	if !fuseMountedAt(t, treeDir) {
		t.Fatalf("no tree mounted at %s", treeDir)
	}

	code, out := cleanup()
	if code != 1 || !strings.Contains(out, "nothing changed") || !fuseMountedAt(t, treeDir) {
		t.Fatalf("cleanup beside a running daemon: exit %d, %q; mounted %v; want exit 1, nothing changed", code, out, fuseMountedAt(t, treeDir))
	}
	if _, err := os.ReadFile(filepath.Join(treeDir, daemon.TreePrefix, "current_sched_policy")); err != nil {
		t.Fatalf("the running daemon's tree after cleanup: %v", err)
	}

	p.kill9(t)
	stateBefore := listDir(t, stateDir)
	if !fuseMountedAt(t, treeDir) {
		t.Fatal("the test assumes kill -9 leaves the tree mounted")
	}
	code, out = cleanup()
	want := "schedpolicyd cleanup: " + treeDir + ": removed a fuse.schedpolicyd mount of an instance that is gone\n" +
		"schedpolicyd cleanup: " + treeDir + ": removed the tree directory " + treeDir + "\n" +
		"schedpolicyd cleanup: " + treeDir + ": removed the directory " + run + " made for the tree\n" +
		"schedpolicyd cleanup: " + treeDir + ": removed the directory " + filepath.Dir(run) + " made for the tree\n"
	if code != 0 || out != want {
		t.Fatalf("cleanup after kill -9: exit %d\n%s\nwant exit 0\n%s", code, out, want)
	}
	if fuseMountedAt(t, treeDir) {
		t.Error("the tree is still mounted")
	}
	for _, gone := range []string{treeDir, treeDir + ".lock", run, filepath.Dir(run)} {
		if _, err := os.Lstat(gone); !os.IsNotExist(err) {
			t.Errorf("%s left: %v", gone, err)
		}
	}
	if got := listDir(t, stateDir); got != stateBefore {
		t.Errorf("the state directory after cleanup: %s, before: %s (it is the next start's)", got, stateBefore)
	}

	code, out = cleanup()
	if code != 0 || out != "schedpolicyd cleanup: "+treeDir+": nothing left behind\n" {
		t.Errorf("cleanup with nothing left: exit %d, %q", code, out)
	}
	if _, err := os.Lstat(treeDir + ".lock"); !os.IsNotExist(err) {
		t.Errorf("a cleanup that found nothing left a lock file: %v", err)
	}
}

// TestTreeDirsAfterKill9RestartStop is issue 34's item 6: a daemon
// killed with SIGKILL, started again and stopped cleanly leaves nothing
// of its tree: not the tree directory, its lock file, nor the directories
// above it that the first run made (an empty /run/schedpolicyd stayed,
// since only the run that made it knew it; the lock file now names it and
// the second run adopts it).
func TestTreeDirsAfterKill9RestartStop(t *testing.T) {
	requireMachine(t)
	bin := buildDaemon(t)
	sys := mockMachine(t, "ac-offline-battery-unknown")
	tmp := t.TempDir()
	run := filepath.Join(tmp, "run", "schedpolicyd")
	treeDir, stateDir, conf := filepath.Join(run, "sysfs"), filepath.Join(tmp, "state"), emptyConf(t)
	args := []string{"--sysfs-root", sys, "--cgroup-root", "none", "--tree-dir", treeDir, "--tree-backend", "fuse",
		"--state-dir", stateDir, "--bus", "none", "--events", "fsnotify", "--log-level", "debug", "--config", conf}
	startDaemonProc(t, bin, args...).kill9(t)
	if !fuseMountedAt(t, treeDir) {
		t.Fatal("the test assumes kill -9 leaves the tree mounted")
	}
	p := startDaemonProc(t, bin, args...)
	if _, err := os.ReadFile(filepath.Join(treeDir, daemon.TreePrefix, "current_sched_policy")); err != nil {
		t.Fatalf("the second run's tree: %v", err)
	}
	p.stop(t)
	if fuseMountedAt(t, treeDir) {
		t.Error("the tree is still mounted")
	}
	for _, gone := range []string{treeDir, treeDir + ".lock", run, filepath.Dir(run)} {
		if _, err := os.Lstat(gone); !os.IsNotExist(err) {
			t.Errorf("%s left after kill -9, a restart and a clean stop: %v", gone, err)
		}
	}
}

// listDir is dir's entries with their sizes, one string.
func listDir(t *testing.T, dir string) string {
	t.Helper()
	es, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, e := range es {
		fi, err := e.Info()
		if err != nil {
			t.Fatal(err)
		}
		b.WriteString(e.Name() + ":" + fi.ModTime().String() + " ")
	}
	return b.String()
}
