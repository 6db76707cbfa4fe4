package tree

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/schedpolicyd/schedpolicyd/internal/testutil"
	"github.com/schedpolicyd/schedpolicyd/internal/trustedpath"
)

// Trusted paths (issue 32, item 7): a symlink, or a directory, that a user
// other than root could change is never gone through, so the tree is
// never mounted or written where such a user points it
// (internal/trustedpath).

// TestServeTreeSymlinkInUserDirRefused (issue 32, item 7): a tree
// directory that is a symlink in a directory a user controls, pointing to
// root's directory, is refused by both backends with an error naming the
// symlink; nothing is mounted on the target nor written in it.
func TestServeTreeSymlinkInUserDirRefused(t *testing.T) {
	testutil.NeedUserDirs(t)
	for _, backend := range []Backend{BackendFUSE, BackendPlain} {
		for _, c := range testutil.UserDirCases {
			t.Run(string(backend)+"/"+c.Name, func(t *testing.T) {
				base := t.TempDir()
				victim, before := testutil.VictimDir(t, base)
				link := testutil.UserDir(t, base, "tree", victim, c.Mode, c.Owner, c.LinkOwner)
				tree, err := ServeTree(TreeOptions{Dir: link, Files: testTreeFiles, Handler: newFakeTreeHandler(), Backend: backend})
				if err == nil {
					tree.Close()
					t.Fatalf("ServeTree on %s succeeded (backend %s, dir %s)", link, tree.Backend(), tree.Dir())
				}
				if !errors.Is(err, trustedpath.ErrUntrustedPath) || !strings.Contains(err.Error(), link+" is a symbolic link") {
					t.Errorf("ServeTree = %v; want a refusal naming the symlink %s", err, link)
				}
				if mountedAt(t, victim) {
					unix.Unmount(victim, unix.MNT_DETACH)
					t.Errorf("the tree was mounted on %s", victim)
				}
				if after := testutil.Listing(t, filepath.Dir(victim)); after != before {
					t.Errorf("the target changed:\n%s\nwas:\n%s", after, before)
				}
			})
		}
	}
}

// TestTreeFUSEMountsTheCheckedDir: the mount is made on the directory the
// trusted walk opened, not on whatever the path names at mount time: root
// renaming the directory away and making another in its place between the
// two (the beforeTreeMount hook) leaves the new one alone, and Close
// unmounts what was mounted.
func TestTreeFUSEMountsTheCheckedDir(t *testing.T) {
	base := t.TempDir()
	dir := filepath.Join(base, "tree")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	moved := dir + ".checked"
	beforeTreeMount = func() {
		beforeTreeMount = nil
		if err := os.Rename(dir, moved); err != nil {
			t.Error(err)
		}
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Error(err)
		}
	}
	t.Cleanup(func() { beforeTreeMount = nil })
	tree := serveTestFUSEAt(t, dir, newFakeTreeHandler())
	if !mountedAt(t, moved) || mountedAt(t, dir) {
		t.Errorf("mounted at %s: %v, at %s: %v; want the directory checked (now %s) only", moved, mountedAt(t, moved), dir, mountedAt(t, dir), moved)
	}
	if got := readString(t, filepath.Join(moved, testCurrent)); got != "balance\n" {
		t.Errorf("read = %q", got)
	}
	if err := tree.Close(); err != nil {
		t.Fatal(err)
	}
	if mountedAt(t, moved) {
		unix.Unmount(moved, unix.MNT_DETACH)
		t.Errorf("%s still mounted after Close", moved)
	}
}
