package sysfs

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// Trusted paths (issue 32, item 7): a symlink, or a directory, that a user
// other than root could change is never gone through, so the tree is
// never mounted or written where such a user points it.

// userDirCases are directories a user other than root controls, each
// holding what plant puts there: a directory its group and others can
// write (not sticky), one owned by uid 4242, and a sticky world-writable
// one (like /tmp) where the symlink itself is uid 4242's.
var userDirCases = []struct {
	name      string
	mode      os.FileMode
	owner     int
	linkOwner int
}{
	{"a 0777 directory", 0o777, 0, 0},
	{"a directory of uid 4242", 0o755, 4242, 4242},
	{"a sticky 1777 directory, the symlink uid 4242's", 0o777 | os.ModeSticky, 0, 4242},
}

// userDir makes base/user with c's mode and owner, holding a symlink name
// -> target owned by c.linkOwner; it returns the symlink's path.
func userDir(t *testing.T, base, name, target string, mode os.FileMode, owner, linkOwner int) string {
	t.Helper()
	dir := filepath.Join(base, "user")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, name)
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	if err := os.Lchown(link, linkOwner, linkOwner); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(dir, owner, owner); err != nil {
		t.Fatal(err)
	}
	return link
}

func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to give a directory or symlink to another user")
	}
}

// victimDir makes base/root/victim, root's, holding a file, and returns it
// and a listing to compare with later.
func victimDir(t *testing.T, base string) (string, string) {
	t.Helper()
	victim := filepath.Join(base, "root", "victim")
	if err := os.MkdirAll(victim, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(victim, "precious"), []byte("root's\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return victim, listing(t, filepath.Dir(victim))
}

// listing is what dir holds, recursively, with modes and sizes.
func listing(t *testing.T, dir string) string {
	t.Helper()
	var b strings.Builder
	filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			b.WriteString(p + ": " + err.Error() + "\n")
			return nil
		}
		b.WriteString(p + " " + fi.Mode().String() + " " + strings.Repeat("x", int(min(fi.Size(), 64))) + "\n")
		return nil
	})
	return b.String()
}

// TestResolveTrustedPath: symlinks root owns in directories only root can
// change are followed (absolute, relative, through "..", chained), a
// missing tail is kept, and loops and files on the way are errors.
func TestResolveTrustedPath(t *testing.T) {
	base, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	real := filepath.Join(base, "a", "b")
	os.MkdirAll(real, 0o755)
	os.WriteFile(filepath.Join(base, "file"), nil, 0o644)
	for _, l := range [][2]string{
		{real, "abs"},
		{"a/b", "rel"},
		{"../b", "a/up"}, // a/up -> a/../b... relative to a: a/../b = base/b
		{"rel", "chain"},
		{"loop1", "loop2"},
		{"loop2", "loop1"},
	} {
		if err := os.Symlink(l[0], filepath.Join(base, l[1])); err != nil {
			t.Fatal(err)
		}
	}
	os.Mkdir(filepath.Join(base, "b"), 0o755)
	for in, want := range map[string]string{
		real:                              real,
		filepath.Join(base, "abs"):        real,
		filepath.Join(base, "rel"):        real,
		filepath.Join(base, "chain", "."): real,
		filepath.Join(base, "a", "up"):    filepath.Join(base, "b"),
		filepath.Join(base, "abs", "x/y"): filepath.Join(real, "x/y"),
	} {
		got, err := ResolveTrustedPath(in)
		if err != nil || got != want {
			t.Errorf("ResolveTrustedPath(%s) = %q, %v; want %s", in, got, err, want)
		}
	}
	if _, err := ResolveTrustedPath(filepath.Join(base, "loop1")); !errors.Is(err, syscall.ELOOP) {
		t.Errorf("a symlink loop: %v, want ELOOP", err)
	}
	if _, err := ResolveTrustedPath(filepath.Join(base, "file", "x")); !errors.Is(err, syscall.ENOTDIR) {
		t.Errorf("through a file: %v, want ENOTDIR", err)
	}
	if _, _, _, err := OpenTrustedDir(filepath.Join(base, "nope"), false); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("OpenTrustedDir of a missing directory: %v, want ENOENT", err)
	}
	d, resolved, made, err := OpenTrustedDir(filepath.Join(base, "abs", "m1", "m2"), true)
	if err != nil {
		t.Fatal(err)
	}
	d.Close()
	if want := []string{filepath.Join(real, "m1"), filepath.Join(real, "m1", "m2")}; resolved != want[1] || strings.Join(made, " ") != strings.Join(want, " ") {
		t.Errorf("OpenTrustedDir(create) = %s, made %q; want %s, made %q", resolved, made, want[1], want)
	}
	if fi, err := os.Stat(resolved); err != nil || fi.Mode().Perm() != 0o755 {
		t.Errorf("made %s: %v %v, want mode 0755", resolved, fi, err)
	}
}

// TestTrustedPathRefusesWhatUsersControl: a symlink in a directory that
// a user other than root controls (see userDirCases) is refused with an
// error naming the symlink, and so is a directory below such a directory;
// a root's symlink or directory in a sticky 1777 directory is fine.
func TestTrustedPathRefusesWhatUsersControl(t *testing.T) {
	needRoot(t)
	for _, c := range userDirCases {
		t.Run(c.name, func(t *testing.T) {
			base := t.TempDir()
			victim, _ := victimDir(t, base)
			link := userDir(t, base, "tree", victim, c.mode, c.owner, c.linkOwner)
			for _, p := range []string{link, filepath.Join(link, "below")} {
				_, err := ResolveTrustedPath(p)
				if !errors.Is(err, ErrUntrustedPath) || !strings.Contains(err.Error(), link+" is a symbolic link") {
					t.Errorf("ResolveTrustedPath(%s) = %v; want a refusal naming the symlink %s", p, err, link)
				}
				if _, _, _, err := OpenTrustedDir(p, true); !errors.Is(err, ErrUntrustedPath) {
					t.Errorf("OpenTrustedDir(%s) = %v; want a refusal", p, err)
				}
			}
			if _, err := os.Lstat(filepath.Join(victim, "below")); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("something was made in the symlink's target: %v", err)
			}
		})
	}
	t.Run("a directory below a user's directory", func(t *testing.T) {
		base := t.TempDir()
		user := filepath.Join(base, "user")
		os.MkdirAll(filepath.Join(user, "state"), 0o755)
		os.Chown(user, 4242, 4242)
		for _, p := range []string{filepath.Join(user, "state"), filepath.Join(user, "new")} {
			_, err := ResolveTrustedPath(p)
			if !errors.Is(err, ErrUntrustedPath) || !strings.Contains(err.Error(), user+" is owned by uid 4242") {
				t.Errorf("ResolveTrustedPath(%s) = %v; want a refusal naming %s", p, err, user)
			}
		}
		if _, _, _, err := OpenTrustedDir(filepath.Join(user, "new"), true); !errors.Is(err, ErrUntrustedPath) {
			t.Errorf("OpenTrustedDir(create) below a user's directory: %v; want a refusal", err)
		}
		if _, err := os.Lstat(filepath.Join(user, "new")); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("a directory was made in a user's directory: %v", err)
		}
	})
	t.Run("root's symlink in a sticky 1777 directory", func(t *testing.T) {
		base := t.TempDir()
		victim, _ := victimDir(t, base)
		link := userDir(t, base, "tree", victim, 0o777|os.ModeSticky, 0, 0)
		if got, err := ResolveTrustedPath(link); err != nil || got != victim {
			t.Errorf("ResolveTrustedPath(%s) = %q, %v; want %s", link, got, err, victim)
		}
	})
}

// TestServeTreeSymlinkInUserDirRefused (issue 32, item 7): a tree
// directory that is a symlink in a directory a user controls, pointing to
// root's directory, is refused by both backends with an error naming the
// symlink; nothing is mounted on the target nor written in it.
func TestServeTreeSymlinkInUserDirRefused(t *testing.T) {
	needRoot(t)
	for _, backend := range []Backend{BackendFUSE, BackendPlain} {
		for _, c := range userDirCases {
			t.Run(string(backend)+"/"+c.name, func(t *testing.T) {
				base := t.TempDir()
				victim, before := victimDir(t, base)
				link := userDir(t, base, "tree", victim, c.mode, c.owner, c.linkOwner)
				tree, err := ServeTree(TreeOptions{Dir: link, Files: testTreeFiles, Handler: newFakeTreeHandler(), Backend: backend})
				if err == nil {
					tree.Close()
					t.Fatalf("ServeTree on %s succeeded (backend %s, dir %s)", link, tree.Backend(), tree.Dir())
				}
				if !errors.Is(err, ErrUntrustedPath) || !strings.Contains(err.Error(), link+" is a symbolic link") {
					t.Errorf("ServeTree = %v; want a refusal naming the symlink %s", err, link)
				}
				if mountedAt(t, victim) {
					unix.Unmount(victim, unix.MNT_DETACH)
					t.Errorf("the tree was mounted on %s", victim)
				}
				if after := listing(t, filepath.Dir(victim)); after != before {
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
