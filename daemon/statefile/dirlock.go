package statefile

// One daemon per state directory and per tree.
//
// The state directory and the tree are locked with a flock on a lock file
// (<state-dir>/lock, <resolved tree-dir>.lock) that holds our pid. Those
// files are opened as root in directories an administrator chose, so they
// are handled like sshd's StrictModes handles ~/.ssh: the directory that
// holds a lock file (and the state and tree directories themselves) must be
// owned by root (or by the daemon's own euid when it does not run as root)
// and must not be writable by its group or by others; the lock file is
// opened without following a symlink and is truncated only when it is a
// regular file of ours with a single link. Ancestors are not checked — a
// sticky world-writable ancestor such as /tmp is fine, as for
// t.TempDir() — so choose paths whose ancestors only root can change (the
// defaults below /run and /var/lib are).
//
// The managed parent cgroup has its own lock (daemon/placement/cgroupfs/lock.go).

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// LockFile, in the state directory, is held (flock) by the running daemon.
const LockFile = "lock"

// openTrustedDir opens the directory at path (following symlinks) and
// checks that only we can change what it holds: it must be owned by root or
// by our euid and not writable by its group or others. what names it in
// errors ("state dir", ...). Errors: the open error, or a refusal that says
// how to fix the directory.
func openTrustedDir(what, path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		f.Close()
		return nil, fmt.Errorf("%s %s: %w", what, path, err)
	}
	if err := checkTrusted(what, path, &st); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// checkTrusted refuses a directory that is not owned by root or our euid,
// or that its group or others can write (sticky or not).
func checkTrusted(what, path string, st *unix.Stat_t) error {
	if euid := uint32(os.Geteuid()); st.Uid != 0 && st.Uid != euid {
		return fmt.Errorf("%s %s is owned by uid %d, not by root: refusing it (others could plant files the daemon writes); use a directory owned by root", what, path, st.Uid)
	}
	if perm := st.Mode & 0o7777; perm&0o022 != 0 {
		return fmt.Errorf("%s %s is writable by its group or by others (mode %04o): refusing it (they could plant files the daemon writes); run chmod go-w %s", what, path, perm, path)
	}
	return nil
}

// acquireLock takes an exclusive flock on the lock file name in the
// directory dir (created 0644) and writes our pid into it. dir must pass
// openTrustedDir; the file is opened without following a symlink (and
// without blocking on a FIFO or device), and it is truncated only if it is
// a regular file owned by our euid with one link, so a planted symlink or
// hard link can never make the daemon overwrite another file. The lock
// lives as long as the returned file stays open; the kernel drops it when
// the process dies, so a crash never leaves a stale lock. A lock file may
// be removed by its holder on a clean stop (removeLock): a lock taken on a
// file that is no longer at its path is let go and taken again on the
// file there now, so two daemons never hold locks on two files of one
// name. Errors: ErrAlreadyRunning (naming the holder's pid) when another
// process holds it, a refusal of the directory or of the file (saying what
// to remove or fix), or the open/flock error.
func acquireLock(what, dir, name string) (*os.File, error) {
	d, err := openTrustedDir(what, dir)
	if err != nil {
		return nil, err
	}
	defer d.Close()
	for range 16 {
		f, err := lockAt(d, filepath.Join(dir, name), name)
		if !errors.Is(err, errLockFileGone) {
			return f, err
		}
	}
	return nil, fmt.Errorf("lock %s: removed again and again while being locked", filepath.Join(dir, name))
}

// beforeFlock, when set (tests only), runs in lockAt between opening the
// lock file and locking it: where a holder's removeLock can come between.
var beforeFlock func()

// errLockFileGone is lockAt's: the file locked is no longer at its path.
var errLockFileGone = errors.New("lock file removed while being locked")

// removeLock removes the lock file f holds, while still holding it, then
// closes f: on a clean stop nothing is left beside the tree. A file that
// is no longer f's (removed, or another daemon's after all) is left alone.
func removeLock(f *os.File) {
	var held, cur unix.Stat_t
	if unix.Fstat(int(f.Fd()), &held) == nil && unix.Lstat(f.Name(), &cur) == nil && held.Dev == cur.Dev && held.Ino == cur.Ino {
		os.Remove(f.Name())
	}
	f.Close()
}

// lockAt is one attempt of acquireLock in the open directory d; path is
// d's name joined with name, for messages.
func lockAt(d *os.File, path, name string) (*os.File, error) {
	fd, err := unix.Openat(int(d.Fd()), name, unix.O_RDWR|unix.O_CREAT|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_NOCTTY|unix.O_CLOEXEC, 0o644)
	if errors.Is(err, unix.ELOOP) {
		return nil, fmt.Errorf("lock %s: is a symbolic link; refusing to follow it (remove it)", path)
	}
	if err != nil {
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	f := os.NewFile(uintptr(fd), path)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		f.Close()
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	switch {
	case st.Nlink == 0 && st.Mode&unix.S_IFMT == unix.S_IFREG:
		// Removed by a holder that let go (removeLock) since we opened it.
		f.Close()
		return nil, errLockFileGone
	case st.Mode&unix.S_IFMT != unix.S_IFREG:
		err = fmt.Errorf("lock %s: not a regular file; refusing it (remove it)", path)
	case st.Uid != uint32(os.Geteuid()):
		err = fmt.Errorf("lock %s: owned by uid %d, not by us; refusing it (remove it)", path, st.Uid)
	case st.Nlink != 1:
		err = fmt.Errorf("lock %s: has %d hard links; refusing it (remove it)", path, st.Nlink)
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	if beforeFlock != nil {
		beforeFlock()
	}
	if err := unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB); err != nil {
		defer f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			pid := FlockHolder(uint64(st.Dev), st.Ino)
			if pid == 0 {
				b := make([]byte, 32)
				n, _ := f.ReadAt(b, 0)
				pid, _ = strconv.Atoi(strings.TrimSpace(string(b[:n])))
			}
			return nil, fmt.Errorf("%w: %s holds %s", ErrAlreadyRunning, HeldBy(pid), path)
		}
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	// A holder that has just let go may have removed the file first
	// (removeLock): then this lock is on a file nobody else will open.
	var cur unix.Stat_t
	if err := unix.Fstatat(int(d.Fd()), name, &cur, unix.AT_SYMLINK_NOFOLLOW); err != nil || cur.Dev != st.Dev || cur.Ino != st.Ino {
		f.Close()
		return nil, errLockFileGone
	}
	f.Truncate(0)
	f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	return f, nil
}

// PrepareStateDir makes sure the state directory is usable before the
// daemon starts: it exists (created 0755), passes openTrustedDir, we hold
// its lock, and state.json is a regular file if present. A daemon that
// would fail every choice with EIO later refuses to start instead. Errors:
// as acquireLock, or state.json that is not a regular file.
func PrepareStateDir(dir string) (*os.File, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("state dir: %w", err)
	}
	lock, err := acquireLock("state dir", dir, LockFile)
	if err != nil {
		return nil, err
	}
	if st, err := os.Lstat(filepath.Join(dir, StateFile)); err == nil && !st.Mode().IsRegular() {
		lock.Close()
		return nil, fmt.Errorf("state dir: %s is not a regular file; remove it", filepath.Join(dir, StateFile))
	}
	return lock, nil
}

// ResolveTreeDir returns the tree directory with every symlink resolved,
// so that two spellings of one mount point share one lock. The directory
// itself may be missing (it is created when served) or a stale mount that
// cannot be stat'ed (ENOTCONN after a crash); then its parent is resolved
// and a symlink as the last component is followed by hand. Errors: the
// parent cannot be resolved, or too many symlinks.
func ResolveTreeDir(dir string) (string, error) {
	p, err := filepath.Abs(dir)
	if err != nil {
		return "", fmt.Errorf("tree dir: %w", err)
	}
	for range 40 {
		if r, err := filepath.EvalSymlinks(p); err == nil {
			return r, nil
		}
		parent, err := filepath.EvalSymlinks(filepath.Dir(p))
		if err != nil {
			return "", fmt.Errorf("tree dir %s: %w", dir, err)
		}
		p = filepath.Join(parent, filepath.Base(p))
		fi, err := os.Lstat(p)
		if err != nil || fi.Mode()&fs.ModeSymlink == 0 {
			return p, nil
		}
		target, err := os.Readlink(p)
		if err != nil {
			return "", fmt.Errorf("tree dir %s: %w", dir, err)
		}
		if !filepath.IsAbs(target) {
			target = filepath.Join(parent, target)
		}
		p = filepath.Clean(target)
	}
	return "", fmt.Errorf("tree dir %s: %w", dir, unix.ELOOP)
}

// TreeLock is the daemon's hold on its tree directory (LockTreeDir) and
// what a clean stop removes (release).
type TreeLock struct {
	f   *os.File
	dir string // the tree directory, symlinks resolved
	// ownDir: the tree directory is the daemon's to remove once empty —
	// this run made it, or a daemon that did not stop cleanly did (its
	// lock file was still there; a clean stop removes it).
	ownDir bool
	made   []string // directories above the tree this run made, deepest first
}

// Dir is the tree directory, symlinks resolved.
func (l *TreeLock) Dir() string { return l.dir }

// OwnDir reports whether the tree directory is the daemon's to remove
// once empty: this run made it, or a daemon that did not stop cleanly did.
func (l *TreeLock) OwnDir() bool { return l.ownDir }

// PrepareTreeDir makes the directories above the tree directory dir that
// are missing (0755) and takes its lock (LockTreeDir), remembering what
// release may remove. Errors: as LockTreeDir, or the mkdir error.
func PrepareTreeDir(dir string) (*TreeLock, error) {
	parent := filepath.Dir(filepath.Clean(dir))
	var made []string
	for p := parent; ; p = filepath.Dir(p) {
		if _, err := os.Lstat(p); !errors.Is(err, fs.ErrNotExist) || filepath.Dir(p) == p {
			break
		}
		made = append(made, p)
	}
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return nil, fmt.Errorf("tree dir: %w", err)
	}
	l, err := LockTreeDir(dir)
	if err != nil {
		for _, p := range made {
			unix.Rmdir(p)
		}
		return nil, err
	}
	l.made = made
	return l, nil
}

// Release removes, after a clean stop (the tree closed), what the daemon
// made for its tree: the tree directory when it is the daemon's and empty
// (rmdir refuses a mount point or a directory with anything in it), the
// lock file while still holding it (removeLock), then the directories
// above it this run made, if empty. Nothing is left behind but what was
// there before. It lets go of the lock.
func (l *TreeLock) Release() {
	if l.ownDir {
		unix.Rmdir(l.dir)
	}
	removeLock(l.f)
	for _, p := range l.made {
		unix.Rmdir(p)
	}
}

// LockTreeDir takes the lock of the tree directory dir:
// <resolved dir>.lock (ResolveTreeDir), in a directory that passes
// openTrustedDir; the tree directory itself, if it exists and can be
// stat'ed, must pass the same check (the plain backend writes files in
// it). Errors: ErrAlreadyRunning naming the holder's pid when another
// daemon serves the same directory under any name, a refusal of a
// directory or of the lock file, or the resolve/open/flock error.
func LockTreeDir(dir string) (*TreeLock, error) {
	r, err := ResolveTreeDir(dir)
	if err != nil {
		return nil, err
	}
	parent := filepath.Dir(r)
	if parent == r {
		return nil, fmt.Errorf("tree dir %s: cannot be the root directory", dir)
	}
	name := filepath.Base(r) + ".lock"
	_, err = os.Lstat(filepath.Join(parent, name))
	leftBehind := err == nil
	_, err = os.Lstat(r)
	missing := errors.Is(err, fs.ErrNotExist)
	lock, err := acquireLock("tree dir's parent", parent, name)
	if err != nil {
		return nil, err
	}
	var st unix.Stat_t
	if err := unix.Stat(r, &st); err == nil && st.Mode&unix.S_IFMT == unix.S_IFDIR {
		if err := checkTrusted("tree dir", r, &st); err != nil {
			lock.Close()
			return nil, err
		}
	}
	return &TreeLock{f: lock, dir: r, ownDir: missing || leftBehind}, nil
}
