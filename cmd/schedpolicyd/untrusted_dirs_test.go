package main

// Issue 32, item 7: a symlink as the tree or state directory, planted in a
// directory a user other than root controls, never makes root mount,
// lock, write or remove anything where it points — neither the daemon nor
// `schedpolicyd cleanup` (the unit's ExecStopPost=, as root).

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/schedpolicyd/schedpolicyd/internal/testutil"
)

// TestCleanupRefusesSymlinkInUserDir: `schedpolicyd cleanup --tree-dir
// USER/tree`, where USER is a directory a user controls and tree a symlink
// to root's empty directory TARGET beside root's TARGET.lock, exits 1
// naming the symlink and saying nothing changed; TARGET and TARGET.lock
// stay.
func TestCleanupRefusesSymlinkInUserDir(t *testing.T) {
	for _, c := range testutil.UserDirCases {
		t.Run(c.Name, func(t *testing.T) {
			base := t.TempDir()
			target, before := testutil.VictimTreeDir(t, base)
			link := testutil.UserDir(t, base, "tree", target, c.Mode, c.Owner, c.LinkOwner)
			var stdout, stderr bytes.Buffer
			code := cleanupMain([]string{"--tree-dir", link, "--config", emptyConf(t)}, &stdout, &stderr)
			if code != 1 || !strings.Contains(stderr.String(), link+" is a symbolic link") || !strings.Contains(stderr.String(), "nothing changed") {
				t.Errorf("cleanup: exit %d, stdout %q, stderr %q; want exit 1 naming the symlink %s, nothing changed", code, stdout.String(), stderr.String(), link)
			}
			if after := testutil.Listing(t, filepath.Dir(target)); after != before {
				t.Errorf("root's directory after cleanup:\n%s\nbefore:\n%s", after, before)
			}
		})
	}
}

// TestDaemonRefusesSymlinkedDirsInUserDir: the daemon started with a
// --tree-dir or --state-dir that is such a symlink to root's directory
// exits 1 naming the symlink; nothing is mounted on the target, and no
// lock file or state.json is put beside or in it.
func TestDaemonRefusesSymlinkedDirsInUserDir(t *testing.T) {
	testutil.NeedUserDirs(t)
	bin := buildDaemon(t)
	sys := mockMachine(t, "ac-offline-battery-unknown")
	backend := "plain"
	if f, err := os.OpenFile("/dev/fuse", os.O_RDWR, 0); err == nil {
		f.Close()
		backend = "fuse"
	}
	for _, which := range []string{"tree", "state"} {
		for _, c := range testutil.UserDirCases {
			t.Run(which+"/"+c.Name, func(t *testing.T) {
				base := t.TempDir()
				target, before := testutil.VictimTreeDir(t, base)
				link := testutil.UserDir(t, base, which, target, c.Mode, c.Owner, c.LinkOwner)
				tree, state := filepath.Join(base, "run", "tree"), filepath.Join(base, "state")
				if which == "tree" {
					tree = link
				} else {
					state = link
				}
				p, started := startOrRefused(t, bin, "--sysfs-root", sys, "--cgroup-root", "none", "--tree-dir", tree, "--tree-backend", backend,
					"--state-dir", state, "--bus", "none", "--events", "none", "--config", emptyConf(t))
				if started {
					p.stop(t)
				}
				wantRefused(t, which+" dir a planted symlink", p, started, link+" is a symbolic link")
				if topMountAt(t, target) != "" {
					syscall.Unmount(target, syscall.MNT_DETACH)
					t.Errorf("the tree was mounted on %s", target)
				}
				if after := testutil.Listing(t, filepath.Dir(target)); after != before {
					t.Errorf("root's directory after the refused start:\n%s\nbefore:\n%s", after, before)
				}
			})
		}
	}
}
