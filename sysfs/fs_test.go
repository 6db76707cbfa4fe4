package sysfs

import (
	"errors"
	"strings"
	"syscall"
	"testing"

	"github.com/schedpolicyd/schedpolicyd/internal/testutil"
)

// TestKernelFileChecks: a path another process chose (a unit's
// ControlGroup from a user's manager) may end in anything; the readers of
// kernel files take regular files only, never follow a symbolic link as
// the last component, never block on a FIFO and never read more than
// MaxKernelFile. Before, a FIFO as cpu.stat hung the daemon's loop for
// good and a symbolic link to /dev/zero grew it until it ran out of
// memory.
func TestKernelFileChecks(t *testing.T) {
	c := testutil.NewCPUStatCases(t, MaxKernelFile+1)
	for _, tc := range []struct {
		path string
		want error
		text string
	}{
		{c.FIFO, ErrNotRegular, "not a regular file"},
		{c.Zero, syscall.ELOOP, "too many levels"},
		{c.Big, nil, "more than 33554432 bytes"},
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
	if b, err := ReadFileRaw(c.Good); err != nil || string(b) != testutil.CPUStatGood {
		t.Fatalf("ReadFileRaw of a regular cpu.stat = %q, %v", b, err)
	}
}
