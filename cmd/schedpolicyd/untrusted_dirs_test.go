package main

// Issue 32, item 7: a symlink as the tree or state directory, planted in a
// directory a user other than root controls, never makes root mount,
// lock, write or remove anything where it points — neither the daemon nor
// `schedpolicyd cleanup` (the unit's ExecStopPost=, as root).

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// plantedDirs are the directories a user other than root controls, each
// to hold the symlink: its group and others can write it (not sticky),
// uid 4242 owns it, or it is sticky and world-writable (like /tmp) and the
// symlink is uid 4242's.
var plantedDirs = []struct {
	name      string
	mode      os.FileMode
	owner     int
	linkOwner int
}{
	{"0777 directory", 0o777, 0, 0},
	{"directory of uid 4242", 0o755, 4242, 4242},
	{"sticky 1777 directory, symlink of uid 4242", 0o777 | os.ModeSticky, 0, 4242},
}

// plantSymlink makes base/user (mode, owner) holding name -> target owned
// by linkOwner, and returns the symlink's path. It skips unless root.
func plantSymlink(t *testing.T, base, name, target string, mode os.FileMode, owner, linkOwner int) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to give a directory or symlink to another user")
	}
	dir := filepath.Join(base, "user")
	link := filepath.Join(dir, name)
	for _, err := range []error{
		os.MkdirAll(dir, 0o755), os.Symlink(target, link), os.Lchown(link, linkOwner, linkOwner),
		os.Chmod(dir, mode), os.Chown(dir, owner, owner),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}
	return link
}

// rootsDir makes base/root/NAME, root's and empty, beside root's
// NAME.lock, and returns its path and a listing of base/root.
func rootsDir(t *testing.T, base, name string) (string, string) {
	t.Helper()
	dir := filepath.Join(base, "root", name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dir+".lock", []byte("1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir, listRecursive(t, filepath.Dir(dir))
}

// listRecursive is what dir holds, recursively: names, modes and contents.
func listRecursive(t *testing.T, dir string) string {
	t.Helper()
	var b strings.Builder
	filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			fmt.Fprintf(&b, "%s: %v\n", p, err)
			return nil
		}
		c, _ := os.ReadFile(p)
		fmt.Fprintf(&b, "%s %v %q\n", p, fi.Mode(), c)
		return nil
	})
	return b.String()
}

// TestCleanupRefusesSymlinkInUserDir: `schedpolicyd cleanup --tree-dir
// USER/tree`, where USER is a directory a user controls and tree a symlink
// to root's empty directory TARGET beside root's TARGET.lock, exits 1
// naming the symlink and saying nothing changed; TARGET and TARGET.lock
// stay.
func TestCleanupRefusesSymlinkInUserDir(t *testing.T) {
	for _, c := range plantedDirs {
		t.Run(c.name, func(t *testing.T) {
			base := t.TempDir()
			target, before := rootsDir(t, base, "target")
			link := plantSymlink(t, base, "tree", target, c.mode, c.owner, c.linkOwner)
			var stdout, stderr bytes.Buffer
			code := cleanupMain([]string{"--tree-dir", link, "--config", emptyConf(t)}, &stdout, &stderr)
			if code != 1 || !strings.Contains(stderr.String(), link+" is a symbolic link") || !strings.Contains(stderr.String(), "nothing changed") {
				t.Errorf("cleanup: exit %d, stdout %q, stderr %q; want exit 1 naming the symlink %s, nothing changed", code, stdout.String(), stderr.String(), link)
			}
			if after := listRecursive(t, filepath.Dir(target)); after != before {
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
	if os.Geteuid() != 0 {
		t.Skip("needs root to give a directory or symlink to another user")
	}
	bin := buildDaemon(t)
	sys := mockMachine(t, "ac-offline-battery-unknown")
	backend := "plain"
	if f, err := os.OpenFile("/dev/fuse", os.O_RDWR, 0); err == nil {
		f.Close()
		backend = "fuse"
	}
	for _, which := range []string{"tree", "state"} {
		for _, c := range plantedDirs {
			t.Run(which+"/"+c.name, func(t *testing.T) {
				base := t.TempDir()
				target, before := rootsDir(t, base, "target")
				link := plantSymlink(t, base, which, target, c.mode, c.owner, c.linkOwner)
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
				if _, mounted, _ := mountAtForTest(target); mounted {
					syscall.Unmount(target, syscall.MNT_DETACH)
					t.Errorf("the tree was mounted on %s", target)
				}
				if after := listRecursive(t, filepath.Dir(target)); after != before {
					t.Errorf("root's directory after the refused start:\n%s\nbefore:\n%s", after, before)
				}
			})
		}
	}
}
