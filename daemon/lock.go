package daemon

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// ErrAlreadyRunning is returned by Run when another daemon holds the lock
// of the same state directory or tree directory.
var ErrAlreadyRunning = errors.New("another schedpolicyd is running")

// acquireLock takes an exclusive flock on path (created 0644) and writes
// our pid into it. The lock lives as long as the returned file stays open;
// the kernel drops it when the process dies, so a crash never leaves a
// stale lock. Errors: ErrAlreadyRunning (naming the holder's pid) when
// another process holds it, or the open/flock error.
func acquireLock(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|unix.O_CLOEXEC, 0o644)
	if err != nil {
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		b := make([]byte, 32)
		n, _ := f.ReadAt(b, 0)
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			pid, _ := strconv.Atoi(strings.TrimSpace(string(b[:n])))
			return nil, fmt.Errorf("%w: pid %d holds %s", ErrAlreadyRunning, pid, path)
		}
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	f.Truncate(0)
	f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	return f, nil
}

// prepareStateDir makes sure the state directory is usable before the
// daemon starts: it exists (created 0755), we hold its lock, and state.json
// is a regular file if present. A daemon that would fail every choice with
// EIO later refuses to start instead.
func prepareStateDir(dir string) (*os.File, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("state dir: %w", err)
	}
	lock, err := acquireLock(filepath.Join(dir, lockFile))
	if err != nil {
		return nil, err
	}
	if st, err := os.Lstat(filepath.Join(dir, StateFile)); err == nil && !st.Mode().IsRegular() {
		lock.Close()
		return nil, fmt.Errorf("state dir: %s is not a regular file; remove it", filepath.Join(dir, StateFile))
	}
	return lock, nil
}
