package trustedpath

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/schedpolicyd/schedpolicyd/internal/testutil"
)

// Trusted paths (issue 32, item 7): a symlink, or a directory, that a user
// other than root could change is never gone through, so the tree is
// never mounted or written where such a user points it.

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

// TestTrustedPathRefusesWhatUsersControl: a symlink in a directory that a
// user other than root controls (see testutil.UserDirCases) is refused with
// an error naming the symlink, and so is a directory below such a
// directory; a root's symlink or directory in a sticky 1777 directory is
// fine.
func TestTrustedPathRefusesWhatUsersControl(t *testing.T) {
	testutil.NeedUserDirs(t)
	for _, c := range testutil.UserDirCases {
		t.Run(c.Name, func(t *testing.T) {
			base := t.TempDir()
			victim, _ := testutil.VictimDir(t, base)
			link := testutil.UserDir(t, base, "tree", victim, c.Mode, c.Owner, c.LinkOwner)
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
		victim, _ := testutil.VictimDir(t, base)
		link := testutil.UserDir(t, base, "tree", victim, 0o777|os.ModeSticky, 0, 0)
		if got, err := ResolveTrustedPath(link); err != nil || got != victim {
			t.Errorf("ResolveTrustedPath(%s) = %q, %v; want %s", link, got, err, victim)
		}
	})
}
