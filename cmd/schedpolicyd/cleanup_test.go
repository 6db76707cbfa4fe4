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

// TestCleanupAfterKill9: `schedpolicyd cleanup` (the unit's ExecStopPost=)
// changes nothing while a daemon serves the tree (exit 1); after the
// daemon's kill -9 it detaches the dead FUSE mount and removes the tree
// directory, the lock file and the directory above that the daemon made
// (its lock file names it), leaving the state directory; run again, it
// finds nothing left (exit 0).
func TestCleanupAfterKill9(t *testing.T) {
	r := newTreeRun(t)
	bin, run, treeDir, stateDir, conf := r.bin, r.run, r.treeDir, r.stateDir, r.conf
	p := startDaemonProc(t, bin, r.args...)
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
	r.wantGone(t, "")
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
	r := newTreeRun(t)
	startDaemonProc(t, r.bin, r.args...).kill9(t)
	if !fuseMountedAt(t, r.treeDir) {
		t.Fatal("the test assumes kill -9 leaves the tree mounted")
	}
	p := startDaemonProc(t, r.bin, r.args...)
	if _, err := os.ReadFile(filepath.Join(r.treeDir, daemon.TreePrefix, "current_sched_policy")); err != nil {
		t.Fatalf("the second run's tree: %v", err)
	}
	p.stop(t)
	if fuseMountedAt(t, r.treeDir) {
		t.Error("the tree is still mounted")
	}
	r.wantGone(t, " after kill -9, a restart and a clean stop")
}

// treeRun is the daemon of the tree-cleanup tests: bin with args, on a
// mock machine, no cgroups and no bus, its FUSE tree at
// TMP/run/schedpolicyd/sysfs (treeDir: the two directories above it are
// the daemon's to make, run the lower) and its state in TMP/state.
type treeRun struct {
	bin, run, treeDir, stateDir, conf string
	args                              []string
}

// newTreeRun builds the binary and the machine; it skips t where the
// machine cannot run the daemon (requireMachine).
func newTreeRun(t *testing.T) treeRun {
	t.Helper()
	requireMachine(t)
	r := treeRun{bin: buildDaemon(t), conf: emptyConf(t)}
	sys := mockMachine(t, "ac-offline-battery-unknown")
	tmp := t.TempDir()
	r.run = filepath.Join(tmp, "run", "schedpolicyd")
	r.treeDir, r.stateDir = filepath.Join(r.run, "sysfs"), filepath.Join(tmp, "state")
	r.args = []string{"--sysfs-root", sys, "--cgroup-root", "none", "--tree-dir", r.treeDir, "--tree-backend", "fuse",
		"--state-dir", r.stateDir, "--bus", "none", "--events", "fsnotify", "--log-level", "debug", "--config", r.conf}
	return r
}

// wantGone checks that nothing of the tree is left: the tree directory,
// its lock file and the two directories made for it; when says when in
// the failure message.
func (r treeRun) wantGone(t *testing.T, when string) {
	t.Helper()
	for _, gone := range []string{r.treeDir, r.treeDir + ".lock", r.run, filepath.Dir(r.run)} {
		if _, err := os.Lstat(gone); !os.IsNotExist(err) {
			t.Errorf("%s left%s: %v", gone, when, err)
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
