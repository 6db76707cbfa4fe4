package testutil

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Directories a user other than root controls, and root's directory a
// symlink in one of them points to: what the trusted-path walk
// (internal/trustedpath) and the tree (tree) must refuse to go through.

// UserDirCases are directories a user other than root controls, each
// holding what plant puts there: a directory its group and others can
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
// symlink's path.
func UserDir(t testing.TB, base, name, target string, mode os.FileMode, owner, linkOwner int) string {
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

// Listing is what dir holds, recursively, with modes and sizes.
func Listing(t testing.TB, dir string) string {
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
