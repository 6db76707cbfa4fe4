package daemon

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/schedpolicyd/schedpolicyd/internal/testutil"
	"github.com/schedpolicyd/schedpolicyd/tree"
)

// listTree lists every path below dir, relative to it, sorted.
func listTree(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	filepath.WalkDir(dir, func(p string, _ os.DirEntry, err error) error {
		if err == nil && p != dir {
			rel, _ := filepath.Rel(dir, p)
			out = append(out, rel)
		}
		return nil
	})
	sort.Strings(out)
	return out
}

// runAndStop starts the daemon on m with the tree at treeDir and stops it
// cleanly.
func runAndStop(t *testing.T, m mockLaptop, treeDir string, backend tree.Backend) {
	t.Helper()
	_, cancel, done := m.startCfg(t, func(c *Config) { c.TreeDir, c.TreeBackend, c.CgroupRoot = treeDir, backend, "" })
	stopRun(t, cancel, done)
}

// TestCleanStopLeavesNothing: a clean stop must not leave an empty tree
// directory (FUSE) or <tree-dir>.lock behind. On
// both backends: what the daemon made for its tree is gone after a clean
// stop; a tree directory and lock file left by a daemon that did not stop
// cleanly go too; a tree directory that was there before without a lock
// file (someone else's) stays, and so do directories above it that were
// there before.
func TestCleanStopLeavesNothing(t *testing.T) {
	for _, backend := range []tree.Backend{tree.BackendPlain, tree.BackendFUSE} {
		t.Run(string(backend), func(t *testing.T) {
			if backend == "fuse" {
				needFUSE(t)
			}
			m := newMockLaptop(t)
			base := t.TempDir()

			// Made by this run: the tree, its lock and run/spd above it.
			runAndStop(t, m, filepath.Join(base, "run", "spd", "tree"), backend)
			if got := listTree(t, base); len(got) != 0 {
				t.Errorf("left behind after a clean stop: %q, want nothing", got)
			}

			// Left by a daemon killed earlier: an empty tree directory and
			// its lock file (with the dead daemon's pid).
			tree := filepath.Join(base, "run", "tree")
			testutil.Put(t, tree+".lock", "999999999")
			if err := os.Mkdir(tree, 0o755); err != nil {
				t.Fatal(err)
			}
			runAndStop(t, m, tree, backend)
			if got := listTree(t, base); len(got) != 1 || got[0] != "run" {
				t.Errorf("left behind after a crash and a clean stop: %q, want only run (there before)", got)
			}

			// Someone else's directory, no lock file: kept, empty.
			if err := os.Mkdir(tree, 0o755); err != nil {
				t.Fatal(err)
			}
			runAndStop(t, m, tree, backend)
			if got := listTree(t, base); strings.Join(got, " ") != "run run/tree" {
				t.Errorf("after a stop with a tree directory that was there: %q, want run and run/tree only", got)
			}
		})
	}
}

// TestSecondDaemonKeepsFirstsLock: a daemon refused because another holds
// the tree removes nothing of the first one's.
func TestSecondDaemonKeepsFirstsLock(t *testing.T) {
	m := newMockLaptop(t)
	m.start(t)
	second := newMockLaptop(t)
	d, err := New(Config{SysfsRoot: second.sys, TreeDir: m.tree, TreeBackend: "plain", StateDir: second.state, Bus: "none",
		Events: "none", RecheckInterval: -1, Log: testutil.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Run(context.Background()); !errors.Is(err, ErrAlreadyRunning) {
		t.Fatalf("second daemon on the same tree: %v, want ErrAlreadyRunning", err)
	}
	if got := testutil.ReadTrim(t, m.tree+".lock"); got != strconv.Itoa(os.Getpid()) {
		t.Errorf("the first daemon's lock file holds %q, want its pid %d", got, os.Getpid())
	}
	if _, err := os.Stat(filepath.Join(m.tree, TreePrefix, fileCurrent)); err != nil {
		t.Errorf("the first daemon's tree: %v", err)
	}
}
