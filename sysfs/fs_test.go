package sysfs

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestKernelFileChecks: a path another process chose (a unit's
// ControlGroup from a user's manager) may end in anything; the readers of
// kernel files take regular files only, never follow a symbolic link as
// the last component, never block on a FIFO and never read more than
// MaxKernelFile. Before, a FIFO as cpu.stat hung the daemon's loop for
// good and a symbolic link to /dev/zero grew it until it ran out of
// memory.
func TestKernelFileChecks(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo", "cpu.stat")
	zero := filepath.Join(dir, "zero", "cpu.stat")
	big := filepath.Join(dir, "big", "cpu.stat")
	good := filepath.Join(dir, "good", "cpu.stat")
	for _, p := range []string{fifo, zero, big, good} {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/dev/zero", zero); err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(big)
	if err != nil {
		t.Fatal(err)
	}
	// A sparse file one byte over the bound: reads as zeros.
	if err := f.Truncate(MaxKernelFile + 1); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if err := os.WriteFile(good, []byte("usage_usec 1500\nuser_usec 1000\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		path string
		want error
		text string
	}{
		{fifo, ErrNotRegular, "not a regular file"},
		{zero, syscall.ELOOP, "too many levels"},
		{big, nil, "more than 33554432 bytes"},
	} {
		if _, err := ReadFileRaw(tc.path); err == nil || tc.want != nil && !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.text) {
			t.Errorf("ReadFileRaw(%s) = %v, want %q", tc.path, err, tc.text)
		}
		if _, err := ReadAttr(tc.path); tc.want != nil && !errors.Is(err, tc.want) {
			t.Errorf("ReadAttr(%s) = %v, want %v", tc.path, err, tc.want)
		}
		// A FIFO without a reader: ENXIO at once (O_NONBLOCK), not a wait.
		if err := WriteAttr(tc.path, "1"); err == nil && tc.want != nil {
			t.Errorf("WriteAttr(%s) wrote", tc.path)
		}
	}
	// The cgroup package's TestDirUsageKernelFileChecks reads these files
	// through DirUsage; here the regular one is read as it is.
	if b, err := ReadFileRaw(good); err != nil || string(b) != "usage_usec 1500\nuser_usec 1000\n" {
		t.Fatalf("ReadFileRaw of a regular cpu.stat = %q, %v", b, err)
	}
}
