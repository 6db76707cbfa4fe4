package testutil

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// TestListing: a listing names each path with its mode and a regular
// file's content, so a file rewritten with the same size, a mode changed
// and a file added each show; VictimTreeDir lists its directory and lock.
func TestListing(t *testing.T) {
	base := t.TempDir()
	dir, before := VictimTreeDir(t, base)
	root := filepath.Dir(dir)
	want := fmt.Sprintf("%s %v\n%s %v\n%s %v %q\n", root, os.ModeDir|0o755, dir, os.ModeDir|0o755, dir+".lock", os.FileMode(0o644), "1\n")
	if before != want {
		t.Fatalf("VictimTreeDir's listing:\n%s\nwant:\n%s", before, want)
	}
	for _, change := range []func() error{
		func() error { return os.WriteFile(dir+".lock", []byte("2\n"), 0o644) },
		func() error { return os.Chmod(dir, 0o700) },
		func() error { return os.WriteFile(filepath.Join(dir, "new"), nil, 0o644) },
	} {
		if err := change(); err != nil {
			t.Fatal(err)
		}
		after := Listing(t, root)
		if after == before {
			t.Errorf("a change left the listing as it was:\n%s", after)
		}
		before = after
	}
	if got, want := Listing(t, filepath.Join(base, "missing")), filepath.Join(base, "missing")+": lstat "+filepath.Join(base, "missing")+": no such file or directory\n"; got != want {
		t.Errorf("Listing of a missing directory = %q, want %q", got, want)
	}
}
