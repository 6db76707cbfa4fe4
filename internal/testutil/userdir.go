package testutil

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Directories a user other than root controls, and root's directory a
// symlink in one of them points to: what the trusted-path walk
// (internal/trustedpath) and the tree (tree) must refuse to go through.

// NeedUserDirs skips t unless the test runs as root, which giving a
// directory or a symlink to another user (UserDir) takes.
func NeedUserDirs(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to give a directory or symlink to another user")
	}
}

// UserDirCases are directories a user other than root controls, each
// holding what UserDir puts there: a directory its group and others can
// write (not sticky), one owned by uid 4242, and a sticky world-writable
// one (like /tmp) where the symlink itself is uid 4242's.
var UserDirCases = []struct {
	Name      string
	Mode      os.FileMode
	Owner     int
	LinkOwner int
}{
	{"a 0777 directory", 0o777, 0, 0},
	{"a directory of uid 4242", 0o755, 4242, 4242},
	{"a sticky 1777 directory, the symlink uid 4242's", 0o777 | os.ModeSticky, 0, 4242},
}

// UserDir makes base/user with mode and owner (one of UserDirCases'),
// holding a symlink name -> target owned by linkOwner; it returns the
// symlink's path. It skips t unless the test runs as root
// (NeedUserDirs).
func UserDir(t testing.TB, base, name, target string, mode os.FileMode, owner, linkOwner int) string {
	t.Helper()
	NeedUserDirs(t)
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

// VictimDir makes base/root/victim, root's, holding a file, and returns it
// and a listing to compare with later.
func VictimDir(t testing.TB, base string) (string, string) {
	t.Helper()
	victim := filepath.Join(base, "root", "victim")
	if err := os.MkdirAll(victim, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(victim, "precious"), []byte("root's\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return victim, Listing(t, filepath.Dir(victim))
}

// VictimTreeDir makes base/root/target, root's and empty, beside root's
// base/root/target.lock holding "1\n" (a tree directory as a daemon with
// pid 1 leaves it), and returns the directory and a listing of base/root
// to compare with later.
func VictimTreeDir(t testing.TB, base string) (string, string) {
	t.Helper()
	dir := filepath.Join(base, "root", "target")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dir+".lock", []byte("1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir, Listing(t, filepath.Dir(dir))
}

// Listing is what dir holds, recursively: a line for each path below dir
// (dir's own first, in lexical order) with its mode, and a regular file's
// content, quoted; a path that cannot be read gives a line with its
// error instead.
func Listing(t testing.TB, dir string) string {
	t.Helper()
	var b strings.Builder
	filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			fmt.Fprintf(&b, "%s: %v\n", p, err)
			return nil
		}
		if !fi.Mode().IsRegular() {
			fmt.Fprintf(&b, "%s %v\n", p, fi.Mode())
			return nil
		}
		c, err := os.ReadFile(p)
		if err != nil {
			fmt.Fprintf(&b, "%s %v: %v\n", p, fi.Mode(), err)
			return nil
		}
		fmt.Fprintf(&b, "%s %v %q\n", p, fi.Mode(), c)
		return nil
	})
	return b.String()
}
