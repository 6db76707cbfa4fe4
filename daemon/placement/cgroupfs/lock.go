package cgroupfs

// One manager per managed parent cgroup. The parent is
// locked with a flock on its directory itself, which cgroupfs (v1 and v2)
// supports: no file is added to the cgroup, the lock follows the directory
// (its inode) whatever path names it — a symlink to it is followed, as
// OpenCgroup follows it — and the kernel lists the holder in /proc/locks,
// which is how a refusal names it (statefile.FlockHolder).

import (
	"errors"
	"fmt"
	"io/fs"
	"os"

	"golang.org/x/sys/unix"

	"github.com/schedpolicyd/schedpolicyd/daemon/statefile"
)

// lockHolder returns the pid that holds a flock write lock on the file
// open as f, from /proc/locks (pid as seen in our pid namespace), or 0 when
// it cannot tell.
func lockHolder(f *os.File) int {
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return 0
	}
	return statefile.FlockHolder(uint64(st.Dev), st.Ino)
}

// lockCgroupDir takes an exclusive flock on the directory at path itself —
// the managed parent cgroup — and returns it open: the lock lasts as long
// as the file stays open, and dies with the process. cgroupfs (v1 and v2)
// and ordinary filesystems (a mock tree) support it; nothing is written.
// Errors: ErrAlreadyRunning naming the holder's pid (from /proc/locks) when
// another process holds it, or the open/flock error.
func lockCgroupDir(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("lock cgroup %s: %w", path, err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		defer f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, fmt.Errorf("%w: %s manages the cgroup %s (it holds a flock on the directory)", statefile.ErrAlreadyRunning, statefile.HeldBy(lockHolder(f)), path)
		}
		return nil, fmt.Errorf("lock cgroup %s: %w", path, err)
	}
	return f, nil
}

// cgroupLock is placement's lock on the managed parent cgroup, taken each
// time the parent is opened (placement.open) and held while it is managed,
// until after the restore (placement.close). Loop-owned.
type cgroupLock struct {
	f        *os.File
	dev, ino uint64
}

// acquire makes l hold the directory at path. If l already holds that very
// directory (same device and inode) it is kept; otherwise a new lock is
// taken and the old one (a vanished or replaced parent's) dropped. Errors:
// as lockCgroupDir; l then holds nothing.
func (l *cgroupLock) acquire(path string) error {
	var st unix.Stat_t
	if l.f != nil && unix.Stat(path, &st) == nil && uint64(st.Dev) == l.dev && st.Ino == l.ino {
		return nil
	}
	f, err := lockCgroupDir(path)
	l.release()
	if err != nil {
		return err
	}
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		f.Close()
		return fmt.Errorf("lock cgroup %s: %w", path, err)
	}
	l.f, l.dev, l.ino = f, uint64(st.Dev), st.Ino
	return nil
}

// stale returns an error for which cgroup.IsGone is true when path no longer
// names the directory l holds (it was removed, or removed and made again
// between two scans, or another directory was renamed over it): the
// managed parent must then be opened and locked again. nil while it does,
// or when l holds nothing.
func (l *cgroupLock) stale(path string) error {
	if l.f == nil {
		return nil
	}
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return &fs.PathError{Op: "stat", Path: path, Err: err}
	}
	if uint64(st.Dev) != l.dev || st.Ino != l.ino {
		return &fs.PathError{Op: "lock", Path: path, Err: fmt.Errorf("replaced by another directory: %w", fs.ErrNotExist)}
	}
	return nil
}

// release drops the lock (at exit, after the restore).
func (l *cgroupLock) release() {
	if l.f != nil {
		l.f.Close()
		l.f = nil
	}
}
