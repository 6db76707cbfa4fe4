package statefile

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/schedpolicyd/schedpolicyd/internal/testutil"
)

// TestLockRemovedOnReleaseStaysExclusive: holders that remove the lock
// file as they let go (removeLock, a clean stop) and takers that opened
// the file just before never hold two locks at once — a lock taken on a
// file no longer at its path is taken again on the new file.
func TestLockRemovedOnReleaseStaysExclusive(t *testing.T) {
	dir := t.TempDir()
	var holders, overlaps, taken atomic.Int32
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 400 {
				f, err := acquireLock("dir", dir, "tree.lock")
				if errors.Is(err, ErrAlreadyRunning) {
					continue
				}
				if err != nil {
					t.Error(err)
					return
				}
				taken.Add(1)
				if holders.Add(1) > 1 {
					overlaps.Add(1)
				}
				time.Sleep(50 * time.Microsecond) // hold it a moment
				holders.Add(-1)
				removeLock(f)
			}
		}()
	}
	wg.Wait()
	if overlaps.Load() != 0 || taken.Load() == 0 {
		t.Errorf("%d times two holders at once (%d locks taken), want never", overlaps.Load(), taken.Load())
	}
	if _, err := os.Lstat(filepath.Join(dir, "tree.lock")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("lock file after every holder removed it: %v", err)
	}
}

// TestLockTakenOnRemovedFileRetaken: daemon B opens the tree's lock file
// just as daemon A, stopping cleanly, removes it and lets go (the
// beforeFlock hook puts A's removeLock there). B's flock then succeeds on
// a file no longer at its path; B must take the lock again on a new file,
// so that C, coming next, finds it held.
func TestLockTakenOnRemovedFileRetaken(t *testing.T) {
	dir := t.TempDir()
	a, err := acquireLock("dir", dir, "tree.lock")
	if err != nil {
		t.Fatal(err)
	}
	beforeFlock = func() {
		beforeFlock = nil
		removeLock(a)
	}
	t.Cleanup(func() { beforeFlock = nil })
	b, err := acquireLock("dir", dir, "tree.lock")
	if err != nil {
		t.Fatalf("B: %v", err)
	}
	defer b.Close()
	if c, err := acquireLock("dir", dir, "tree.lock"); !errors.Is(err, ErrAlreadyRunning) {
		if c != nil {
			c.Close()
		}
		t.Fatalf("C while B holds the lock: %v, want ErrAlreadyRunning (B locked the removed file)", err)
	}
	if got := testutil.ReadTrim(t, filepath.Join(dir, "tree.lock")); got != strconv.Itoa(os.Getpid()) {
		t.Errorf("lock file holds %q", got)
	}
}

func TestLockIsExclusive(t *testing.T) {
	dir := t.TempDir()
	first, err := PrepareStateDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := PrepareStateDir(dir); !errors.Is(err, ErrAlreadyRunning) {
		t.Fatalf("second lock: err = %v, want ErrAlreadyRunning", err)
	}
	first.Close() // the holder goes away (as on a crash): the lock is free
	again, err := PrepareStateDir(dir)
	if err != nil {
		t.Fatalf("after release: %v", err)
	}
	again.Close()
}

func TestPrepareStateDirRejectsUnusable(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "afile")
	os.WriteFile(file, nil, 0o644)
	if _, err := PrepareStateDir(file); err == nil {
		t.Error("a regular file was accepted as the state dir")
	}
	os.Mkdir(filepath.Join(dir, "s"), 0o755)
	os.Mkdir(filepath.Join(dir, "s", StateFile), 0o755)
	if _, err := PrepareStateDir(filepath.Join(dir, "s")); err == nil {
		t.Error("state.json as a directory was accepted")
	}
}
