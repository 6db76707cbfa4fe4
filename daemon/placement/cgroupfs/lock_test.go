package cgroupfs

import (
	"errors"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/schedpolicyd/schedpolicyd/daemon/statefile"
)

// TestFlockHolderParsesProcLocks: the holder of a flock on a directory is
// found in /proc/locks by device and inode.
func TestFlockHolderParsesProcLocks(t *testing.T) {
	dir := t.TempDir()
	f, err := lockCgroupDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got := holderOf(t, dir); got != os.Getpid() {
		t.Errorf("holder = %d, want %d", got, os.Getpid())
	}
	_, err = lockCgroupDir(dir)
	if !errors.Is(err, statefile.ErrAlreadyRunning) || !strings.Contains(err.Error(), "pid "+strconv.Itoa(os.Getpid())) {
		t.Errorf("second lock: %v, want ErrAlreadyRunning naming our pid", err)
	}
	f.Close()
	if got := holderOf(t, dir); got != 0 {
		t.Errorf("holder after close = %d, want none", got)
	}
	g, err := lockCgroupDir(dir)
	if err != nil {
		t.Fatalf("after release: %v", err)
	}
	g.Close()
}

// holderOf is the pid /proc/locks lists as holding a flock on path, 0
// none (lockHolder, on path opened).
func holderOf(t *testing.T, path string) int {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		return 0
	}
	defer f.Close()
	return lockHolder(f)
}
