package statefile

// One daemon per state directory and per tree.
//
// The state directory and the tree are locked with a flock on a lock file
// (<state-dir>/lock, <resolved tree-dir>.lock) that holds our pid (and,
// for the tree, the directories above it the daemon made: lockFile). Those
// files are opened as root in directories an administrator chose, so the
// paths are walked from / as trusted paths (trustedpath.ResolveTrustedPath,
// trustedpath.OpenTrustedDir, as systemd's chase() walks them): every directory
// on the way must be owned by root (or by the daemon's own euid when it
// does not run as root) and not writable by its group or others unless it
// is sticky (a sticky world-writable ancestor such as /tmp is fine, as for
// t.TempDir()), and a symlink on the way is followed only when such a
// directory holds it and root (or that euid) owns it — so nobody else can
// point the state directory, the tree or its lock somewhere else. Like
// sshd's StrictModes for ~/.ssh, the directory that holds a lock file (and
// the state and tree directories themselves) must moreover be writable by
// nobody but its owner, sticky or not. The lock file is opened relative to
// that directory without following a symlink and is truncated only when it
// is a regular file of ours with a single link; a clean stop removes the
// tree's lock file and directory relative to the directory checked.
//
// The managed parent cgroup has its own lock (daemon/placement/cgroupfs/lock.go).

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/schedpolicyd/schedpolicyd/internal/trustedpath"
)

// LockFile, in the state directory, is held (flock) by the running daemon.
const LockFile = "lock"

// openTrustedDir opens the directory at path as a trusted path
// (trustedpath.OpenTrustedDir, O_PATH; with create, missing directories are
// made 0755) and checks that only we can change what it holds: it must be
// owned by root or by our euid and not writable by its group or others
// (trustedpath.CheckTrustedDir). what names it in errors ("state dir",
// ...). made lists the directories made, parents first. Errors: the open or
// mkdir error ("state dir: mkdir P: permission denied"), a refusal of a
// directory or symlink on the way (wrapping trustedpath.ErrUntrustedPath,
// naming it and why), or a refusal of the directory that says how to fix
// it.
func openTrustedDir(what, path string, create bool) (dir *os.File, made []string, err error) {
	f, _, made, err := trustedpath.OpenTrustedDir(path, create)
	if errors.Is(err, trustedpath.ErrUntrustedPath) {
		return nil, made, fmt.Errorf("%s %s: %w", what, path, err)
	}
	if err != nil {
		return nil, made, fmt.Errorf("%s: %w", what, err)
	}
	if err := trustedpath.CheckTrustedDir(what, path, f); err != nil {
		f.Close()
		return nil, made, err
	}
	return f, made, nil
}

// acquireLock takes an exclusive flock on the lock file name in the
// directory dir (created 0644) and writes our pid into it. dir must pass
// openTrustedDir; the file is opened relative to it without following a
// symlink (and without blocking on a FIFO or device), and it is truncated
// only if it is a regular file owned by our euid with one link, so a
// planted symlink or hard link can never make the daemon overwrite
// another file. The lock lives as long as the returned file stays open;
// the kernel drops it when the process dies, so a crash never leaves a
// stale lock. A lock file may be removed by its holder on a clean stop
// (removeLock): a lock taken on a file that is no longer at its path is
// let go and taken again on the file there now, so two daemons never hold
// locks on two files of one name. Errors: ErrAlreadyRunning (naming the
// holder's pid) when another process holds it, a refusal of the directory
// or of the file (saying what to remove or fix), or the open/flock error.
func acquireLock(what, dir, name string) (*os.File, error) {
	d, _, err := openTrustedDir(what, dir, false)
	if err != nil {
		return nil, err
	}
	defer d.Close()
	return lockIn(d, filepath.Join(dir, name), name)
}

// lockIn is acquireLock in the open trusted directory d; path is the lock
// file's path, for messages.
func lockIn(d *os.File, path, name string) (*os.File, error) {
	f, _, err := lockInPrev(d, path, name)
	return f, err
}

// lockInPrev is lockIn that also returns what the lock file held before
// it was taken (at most maxLockFile bytes; nil for a file just made): a
// daemon that did not stop cleanly left its pid and, for the tree, the
// directories it made (lockContent).
func lockInPrev(d *os.File, path, name string) (*os.File, []byte, error) {
	for range 16 {
		f, prev, err := lockAt(d, path, name)
		if !errors.Is(err, errLockFileGone) {
			return f, prev, err
		}
	}
	return nil, nil, fmt.Errorf("lock %s: removed again and again while being locked", path)
}

// maxLockFile bounds what is read of a lock file left behind: a pid and
// at most maxMadeDirs directories of at most PATH_MAX bytes.
const (
	maxMadeDirs = 16
	maxLockFile = 64 << 10
)

// beforeFlock, when set (tests only), runs in lockAt between opening the
// lock file and locking it: where a holder's removeLock can come between.
var beforeFlock func()

// errLockFileGone is lockAt's: the file locked is no longer at its path.
var errLockFileGone = errors.New("lock file removed while being locked")

// removeLock removes the lock file name in the directory d that f holds,
// while still holding it, then closes f: on a clean stop nothing is left
// beside the tree. A file that is no longer f's (removed, or another
// daemon's after all) is left alone. d is not closed.
func removeLock(d *os.File, name string, f *os.File) {
	var held, cur unix.Stat_t
	if unix.Fstat(int(f.Fd()), &held) == nil && unix.Fstatat(int(d.Fd()), name, &cur, unix.AT_SYMLINK_NOFOLLOW) == nil && held.Dev == cur.Dev && held.Ino == cur.Ino {
		unix.Unlinkat(int(d.Fd()), name, 0)
	}
	f.Close()
}

// lockAt is one attempt of acquireLock in the open directory d; path is
// d's name joined with name, for messages. prev is what the file held
// before (lockInPrev).
func lockAt(d *os.File, path, name string) (*os.File, []byte, error) {
	fd, err := unix.Openat(int(d.Fd()), name, unix.O_RDWR|unix.O_CREAT|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_NOCTTY|unix.O_CLOEXEC, 0o644)
	if errors.Is(err, unix.ELOOP) {
		return nil, nil, fmt.Errorf("lock %s: is a symbolic link; refusing to follow it (remove it)", path)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("lock %s: %w", path, err)
	}
	f := os.NewFile(uintptr(fd), path)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		f.Close()
		return nil, nil, fmt.Errorf("lock %s: %w", path, err)
	}
	switch {
	case st.Nlink == 0 && st.Mode&unix.S_IFMT == unix.S_IFREG:
		// Removed by a holder that let go (removeLock) since we opened it.
		f.Close()
		return nil, nil, errLockFileGone
	case st.Mode&unix.S_IFMT != unix.S_IFREG:
		err = fmt.Errorf("lock %s: not a regular file; refusing it (remove it)", path)
	case st.Uid != uint32(os.Geteuid()):
		err = fmt.Errorf("lock %s: owned by uid %d, not by us; refusing it (remove it)", path, st.Uid)
	case st.Nlink != 1:
		err = fmt.Errorf("lock %s: has %d hard links; refusing it (remove it)", path, st.Nlink)
	}
	if err != nil {
		f.Close()
		return nil, nil, err
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
				pid = lockContent(b[:n]).pid
			}
			return nil, nil, fmt.Errorf("%w: %s holds %s", ErrAlreadyRunning, HeldBy(pid), path)
		}
		return nil, nil, fmt.Errorf("lock %s: %w", path, err)
	}
	// A holder that has just let go may have removed the file first
	// (removeLock): then this lock is on a file nobody else will open.
	var cur unix.Stat_t
	if err := unix.Fstatat(int(d.Fd()), name, &cur, unix.AT_SYMLINK_NOFOLLOW); err != nil || cur.Dev != st.Dev || cur.Ino != st.Ino {
		f.Close()
		return nil, nil, errLockFileGone
	}
	var prev []byte
	if st.Size > 0 {
		prev = make([]byte, min(st.Size, maxLockFile))
		n, _ := f.ReadAt(prev, 0)
		prev = prev[:n]
	}
	f.Truncate(0)
	f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	return f, prev, nil
}

// lockFile is what a lock file holds: the holder's pid on the first line
// and, for the tree's lock, one line "made PATH" for each directory above
// the tree the holder made (writeMade), which a daemon that takes over the
// lock after a crash adopts (adoptMade).
type lockFile struct {
	pid  int
	made []string
}

// lockContent parses b as a lock file (lockFile); what does not parse is
// left out (pid 0: none).
func lockContent(b []byte) lockFile {
	var lf lockFile
	for i, line := range strings.Split(string(b), "\n") {
		if i == 0 {
			lf.pid, _ = strconv.Atoi(strings.TrimSpace(line))
			continue
		}
		if p, ok := strings.CutPrefix(line, "made "); ok && len(lf.made) < maxMadeDirs {
			lf.made = append(lf.made, p)
		}
	}
	return lf
}

// PrepareStateDir makes sure the state directory is usable before the
// daemon starts: it exists (made 0755 with its missing parents, each in a
// directory the walk checked), it is a trusted path and passes
// openTrustedDir, we hold its lock, and state.json is a regular file if
// present. A daemon that would fail every choice with EIO later refuses to
// start instead. Errors: as acquireLock (also a refusal of a directory or
// symlink on the way, wrapping trustedpath.ErrUntrustedPath), or state.json
// that is not a regular file.
func PrepareStateDir(dir string) (*os.File, error) {
	d, _, err := openTrustedDir("state dir", dir, true)
	if err != nil {
		return nil, err
	}
	defer d.Close()
	lock, err := lockIn(d, filepath.Join(dir, LockFile), LockFile)
	if err != nil {
		return nil, err
	}
	var st unix.Stat_t
	if err := unix.Fstatat(int(d.Fd()), StateFile, &st, unix.AT_SYMLINK_NOFOLLOW); err == nil && st.Mode&unix.S_IFMT != unix.S_IFREG {
		lock.Close()
		return nil, fmt.Errorf("state dir: %s is not a regular file; remove it", filepath.Join(dir, StateFile))
	}
	return lock, nil
}

// ResolveTreeDir returns the tree directory with every symlink resolved, so
// that two spellings of one mount point share one lock, walking it from /
// as a trusted path (trustedpath.ResolveTrustedPath): a symlink is followed
// only when a directory that only root (or our euid) can change holds it
// and root (or our euid) owns it. The directory itself may be missing (it
// is created when served) or a stale mount that cannot be stat'ed (ENOTCONN
// after a crash). Errors: a refusal of a directory or symlink on the way
// (wrapping trustedpath.ErrUntrustedPath, naming it and why), too many
// symlinks (ELOOP), or the walk's error.
func ResolveTreeDir(dir string) (string, error) {
	r, err := trustedpath.ResolveTrustedPath(dir)
	if err != nil {
		return "", fmt.Errorf("tree dir %s: %w", dir, err)
	}
	return r, nil
}

// TreeLock is the daemon's hold on its tree directory (LockTreeDir) and
// what a clean stop removes (release).
type TreeLock struct {
	f      *os.File
	parent *os.File // the directory holding the tree and its lock (O_PATH, checked)
	name   string   // the tree directory's name in parent
	dir    string   // the tree directory, symlinks resolved
	// ownDir: the tree directory is the daemon's to remove once empty —
	// this run made it, or a daemon that did not stop cleanly did (its
	// lock file was still there; a clean stop removes it).
	ownDir bool
	// made are the directories above the tree this run made, or a run
	// that did not stop cleanly made (adopted from its lock file:
	// adoptMade), deepest first; the lock file lists them (writeMade).
	made []string
}

// Dir is the tree directory, symlinks resolved.
func (l *TreeLock) Dir() string { return l.dir }

// Made lists the directories above the tree that Release removes if
// empty: made by this run, or adopted from a run that did not stop
// cleanly; deepest first.
func (l *TreeLock) Made() []string { return slices.Clone(l.made) }

// OwnDir reports whether the tree directory is the daemon's to remove
// once empty: this run made it, or a daemon that did not stop cleanly did.
func (l *TreeLock) OwnDir() bool { return l.ownDir }

// PrepareTreeDir makes the directories above the tree directory dir that
// are missing (0755, each in a directory the trusted walk checked; above
// where dir's symlinks lead) and takes its lock (LockTreeDir),
// remembering what release may remove. Errors: as LockTreeDir, or the
// mkdir error.
func PrepareTreeDir(dir string) (*TreeLock, error) {
	r, err := ResolveTreeDir(dir)
	if err != nil {
		return nil, err
	}
	d, _, made, err := trustedpath.OpenTrustedDir(filepath.Dir(r), true)
	slices.Reverse(made) // deepest first
	removeMade := func() {
		for _, p := range made {
			unix.Rmdir(p)
		}
	}
	if errors.Is(err, trustedpath.ErrUntrustedPath) {
		removeMade()
		return nil, fmt.Errorf("tree dir %s: %w", dir, err)
	}
	if err != nil {
		removeMade()
		return nil, fmt.Errorf("tree dir: %w", err)
	}
	d.Close()
	l, err := LockTreeDir(dir)
	if err != nil {
		removeMade()
		return nil, err
	}
	// The directories this run made, and those a run that did not stop
	// cleanly made (LockTreeDir adopted them), deepest first; written
	// into the lock file so that a run taking over after a crash of
	// this one removes them too.
	for _, p := range made {
		if !slices.Contains(l.made, p) {
			l.made = append(l.made, p)
		}
	}
	slices.SortFunc(l.made, func(a, b string) int { return len(b) - len(a) })
	l.writeMade()
	return l, nil
}

// writeMade writes the lock file anew: our pid, then one "made PATH" line
// for each directory of l.made (lockFile). A failure is not an error: a
// crash of this run would then leave those directories, as before.
func (l *TreeLock) writeMade() {
	var b strings.Builder
	b.WriteString(strconv.Itoa(os.Getpid()) + "\n")
	for _, p := range l.made {
		b.WriteString("made " + p + "\n")
	}
	if l.f.Truncate(0) == nil {
		l.f.WriteAt([]byte(b.String()), 0)
	}
}

// adoptMade returns the directories of made (from a lock file left
// behind) that this run may remove once empty: absolute, clean, not "/",
// without a newline, strict ancestors of the tree directory dir — so a
// lock file that names anything else adopts nothing of it.
func adoptMade(dir string, made []string) []string {
	var out []string
	for _, p := range made {
		if p == "" || p == "/" || !filepath.IsAbs(p) || filepath.Clean(p) != p || strings.ContainsAny(p, "\n\x00") {
			continue
		}
		if strings.HasPrefix(dir, p+"/") && !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	return out
}

// Release removes, after a clean stop (the tree closed), what the daemon
// made for its tree: the tree directory when it is the daemon's and empty
// (rmdir refuses a mount point or a directory with anything in it), the
// lock file while still holding it (removeLock) — both relative to the
// directory LockTreeDir checked, never through a path a symlink could
// redirect — then the directories above it that this run made or adopted
// from a run that did not stop cleanly (Made), if empty.
// Nothing is left behind but what was there before. It lets go of the
// lock.
func (l *TreeLock) Release() {
	if l.ownDir {
		unix.Unlinkat(int(l.parent.Fd()), l.name, unix.AT_REMOVEDIR)
	}
	removeLock(l.parent, l.name+".lock", l.f)
	l.parent.Close()
	for _, p := range l.made {
		unix.Rmdir(p)
	}
}

// LockTreeDir takes the lock of the tree directory dir:
// <resolved dir>.lock (ResolveTreeDir, a trusted path), in a directory
// that passes openTrustedDir; the tree directory itself, if it exists and
// can be stat'ed, must pass the same check (the plain backend writes files
// in it). Errors: ErrAlreadyRunning naming the holder's pid when another
// daemon serves the same directory under any name, a refusal of a
// directory or symlink on the way (wrapping trustedpath.ErrUntrustedPath), a
// refusal of a directory or of the lock file, or the resolve/open/flock
// error. A lock file left behind by a daemon that did not stop cleanly
// names the directories above the tree it made (lockFile): those that
// are ancestors of the tree are adopted (adoptMade), so that Release
// removes them as that daemon's clean stop would have.
func LockTreeDir(dir string) (*TreeLock, error) {
	r, err := ResolveTreeDir(dir)
	if err != nil {
		return nil, err
	}
	parent := filepath.Dir(r)
	if parent == r {
		return nil, fmt.Errorf("tree dir %s: cannot be the root directory", dir)
	}
	base := filepath.Base(r)
	name := base + ".lock"
	d, _, err := openTrustedDir("tree dir's parent", parent, false)
	if err != nil {
		return nil, err
	}
	var st unix.Stat_t
	leftBehind := unix.Fstatat(int(d.Fd()), name, &st, unix.AT_SYMLINK_NOFOLLOW) == nil
	missing := errors.Is(unix.Fstatat(int(d.Fd()), base, &st, unix.AT_SYMLINK_NOFOLLOW), unix.ENOENT)
	lock, prev, err := lockInPrev(d, filepath.Join(parent, name), name)
	if err != nil {
		d.Close()
		return nil, err
	}
	// Without a FUSE request (AT_STATX_DONT_SYNC): it may be a mount.
	var stx unix.Statx_t
	if err := unix.Statx(int(d.Fd()), base, unix.AT_SYMLINK_NOFOLLOW|unix.AT_STATX_DONT_SYNC, unix.STATX_TYPE|unix.STATX_MODE|unix.STATX_UID, &stx); err == nil && uint32(stx.Mode)&unix.S_IFMT == unix.S_IFDIR {
		if err := trustedpath.CheckTrustedStat("tree dir", r, stx.Uid, uint32(stx.Mode)); err != nil {
			lock.Close()
			d.Close()
			return nil, err
		}
	}
	l := &TreeLock{f: lock, parent: d, name: base, dir: r, ownDir: missing || leftBehind}
	if leftBehind {
		// A daemon that did not stop cleanly: the directories above the
		// tree it made are ours to remove now (its clean stop would have).
		l.made = adoptMade(r, lockContent(prev).made)
		slices.SortFunc(l.made, func(a, b string) int { return len(b) - len(a) })
	}
	return l, nil
}
