package trustedpath

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// Trusted paths: the directories the daemon writes in as root (its state
// directory, the tree directory and the one that holds the tree's lock)
// are reached by walking their path from / one component at a time,
// relative to the directory reached so far and never following a symlink
// implicitly (openat(2) O_PATH|O_NOFOLLOW, as systemd's chase() does), so
// that no user but root can redirect them:
//
//   - every directory on the way (those whose entries are looked up, and
//     the one a missing component is made in) must be owned by root or by
//     our euid and not writable by its group or others unless it is sticky
//     (like /tmp, where nobody else can rename or remove what root owns);
//   - a symlink on the way is followed, by hand, only when such a
//     directory holds it and root or our euid owns it, so the path stays
//     whatever its owner made it; its target is walked by the same rules.
//
// A path that passes keeps its meaning while the daemon runs: only root
// (or our euid) can change any component of it. The last component itself
// (the directory the caller uses) is the caller's to judge, since callers
// differ in what they require of it.

// ErrUntrustedPath is wrapped by every refusal of ResolveTrustedPath and
// OpenTrustedDir: a directory on the way that another user owns or that
// its group or others can write without the sticky bit, or a symlink that
// such a directory holds or that another user owns.
var ErrUntrustedPath = errors.New("untrusted path")

// maxSymlinks bounds the symlinks one walk follows, as the kernel's 40.
const maxSymlinks = 40

// walkDir is one directory reached by a walk: its O_PATH descriptor, its
// absolute path and its owner and mode.
type walkDir struct {
	fd   int
	path string
	uid  uint32
	mode uint32
}

// trustedWalk is one walk of ResolveTrustedPath or OpenTrustedDir.
type trustedWalk struct {
	create bool     // make missing directories (0755)
	made   []string // directories made, in the order made (parents first)
	stack  []walkDir
}

// trustedOwner reports whether uid may own what a trusted path goes
// through: root, or our euid.
func trustedOwner(uid uint32) bool { return uid == 0 || uid == uint32(os.Geteuid()) }

// untrustedDir says why d may not hold a component of a trusted path, as
// a predicate ("is owned by uid 4242, not by root"), or returns "" if it
// may.
func untrustedDir(d walkDir) string {
	switch {
	case !trustedOwner(d.uid):
		return fmt.Sprintf("is owned by uid %d, not by root", d.uid)
	case d.mode&0o022 != 0 && d.mode&unix.S_ISVTX == 0:
		return fmt.Sprintf("is writable by its group or by others (mode %04o) and not sticky", d.mode&0o7777)
	}
	return ""
}

func (w *trustedWalk) top() walkDir { return w.stack[len(w.stack)-1] }

func (w *trustedWalk) close() {
	for _, d := range w.stack {
		unix.Close(d.fd)
	}
	w.stack = nil
}

// popTo closes the directories above depth n.
func (w *trustedWalk) popTo(n int) {
	for len(w.stack) > n {
		unix.Close(w.top().fd)
		w.stack = w.stack[:len(w.stack)-1]
	}
}

// lstatAt is lstat of name in dirfd (of dirfd itself when name is "")
// without asking a FUSE server (AT_STATX_DONT_SYNC: on a tree this
// process serves, a GETATTR would be answered by this very process, see
// mountIdentity).
func lstatAt(dirfd int, name string) (unix.Statx_t, error) {
	flags := unix.AT_SYMLINK_NOFOLLOW | unix.AT_STATX_DONT_SYNC
	if name == "" {
		flags |= unix.AT_EMPTY_PATH
	}
	var stx unix.Statx_t
	err := unix.Statx(dirfd, name, flags, unix.STATX_TYPE|unix.STATX_MODE|unix.STATX_UID|unix.STATX_INO, &stx)
	return stx, err
}

// walkResult is what a walk ends with.
type walkResult struct {
	dir     walkDir  // the last directory reached (fd owned by the caller when open)
	missing []string // the components below dir that do not exist
	stale   bool     // the last component exists but cannot be stat'ed (ENOTCONN)
	made    []string
}

// walk resolves the absolute path p by the rules above. It ends at the
// first missing component (unless w.create) or at a last component that
// gives ENOTCONN (a dead FUSE mount); otherwise at the directory p names.
func (w *trustedWalk) walk(p string) (walkResult, error) {
	if !filepath.IsAbs(p) {
		return walkResult{}, fmt.Errorf("%s: not an absolute path", p)
	}
	rootFd, err := unix.Open("/", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return walkResult{}, &fs.PathError{Op: "open", Path: "/", Err: err}
	}
	st, err := lstatAt(rootFd, "")
	if err != nil {
		unix.Close(rootFd)
		return walkResult{}, &fs.PathError{Op: "stat", Path: "/", Err: err}
	}
	w.stack = []walkDir{{fd: rootFd, path: "/", uid: st.Uid, mode: uint32(st.Mode)}}
	todo := splitPath(p)
	links := 0
	for len(todo) > 0 {
		name := todo[0]
		todo = todo[1:]
		switch name {
		case ".":
			continue
		case "..":
			w.popTo(max(len(w.stack)-1, 1))
			continue
		}
		cur := w.top()
		full := filepath.Join(cur.path, name)
		stx, err := lstatAt(cur.fd, name)
		if errors.Is(err, unix.ENOENT) {
			if why := untrustedDir(cur); why != "" {
				w.close()
				return walkResult{}, fmt.Errorf("%w: %s %s: refusing to make or use %s in it (others could put a symlink there first); use a directory that only root can change", ErrUntrustedPath, cur.path, why, full)
			}
			if !w.create {
				w.close()
				cur.fd = -1
				return walkResult{dir: cur, missing: append([]string{name}, todo...), made: w.made}, nil
			}
			if err := unix.Mkdirat(cur.fd, name, 0o755); err != nil && !errors.Is(err, unix.EEXIST) {
				w.close()
				return walkResult{}, &fs.PathError{Op: "mkdir", Path: full, Err: err}
			} else if err == nil {
				w.made = append(w.made, full)
			}
			stx, err = lstatAt(cur.fd, name)
		}
		if errors.Is(err, unix.ENOTCONN) && len(todo) == 0 {
			w.close()
			cur.fd = -1
			return walkResult{dir: cur, missing: []string{name}, stale: true, made: w.made}, nil
		}
		if err != nil {
			w.close()
			return walkResult{}, &fs.PathError{Op: "lstat", Path: full, Err: err}
		}
		if why := untrustedDir(cur); why != "" {
			w.close()
			if uint32(stx.Mode)&unix.S_IFMT == unix.S_IFLNK {
				return walkResult{}, fmt.Errorf("%w: %s is a symbolic link in %s, which %s: refusing to follow it (whoever can change %s can point it anywhere); use a directory that only root can change", ErrUntrustedPath, full, cur.path, why, cur.path)
			}
			return walkResult{}, fmt.Errorf("%w: %s %s: refusing a path through it (others could put a symlink in place of %s); use a directory whose every ancestor only root can change", ErrUntrustedPath, cur.path, why, full)
		}
		switch uint32(stx.Mode) & unix.S_IFMT {
		case unix.S_IFLNK:
			if !trustedOwner(stx.Uid) {
				w.close()
				return walkResult{}, fmt.Errorf("%w: %s is a symbolic link owned by uid %d: refusing to follow it (its owner can point it anywhere); use a path that only root can change", ErrUntrustedPath, full, stx.Uid)
			}
			if links++; links > maxSymlinks {
				w.close()
				return walkResult{}, &fs.PathError{Op: "resolve", Path: p, Err: unix.ELOOP}
			}
			target, err := readlinkAt(cur.fd, name)
			if err != nil {
				w.close()
				return walkResult{}, &fs.PathError{Op: "readlink", Path: full, Err: err}
			}
			if filepath.IsAbs(target) {
				w.popTo(1)
			}
			todo = append(splitPath(target), todo...)
		case unix.S_IFDIR:
			fd, err := unix.Openat(cur.fd, name, unix.O_PATH|unix.O_NOFOLLOW|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
			if err != nil {
				w.close()
				return walkResult{}, &fs.PathError{Op: "open", Path: full, Err: err}
			}
			// The descriptor is what counts from here on: it cannot
			// be swapped (cur only lets root and us change it).
			st, err := lstatAt(fd, "")
			if err != nil {
				unix.Close(fd)
				w.close()
				return walkResult{}, &fs.PathError{Op: "stat", Path: full, Err: err}
			}
			w.stack = append(w.stack, walkDir{fd: fd, path: full, uid: st.Uid, mode: uint32(st.Mode)})
		default:
			w.close()
			return walkResult{}, &fs.PathError{Op: "open", Path: full, Err: unix.ENOTDIR}
		}
	}
	res := walkResult{dir: w.top(), made: w.made}
	w.stack = w.stack[:len(w.stack)-1] // res.dir.fd is the caller's now
	w.close()
	return res, nil
}

// splitPath splits p at its slashes, dropping empty names.
func splitPath(p string) []string {
	var out []string
	for _, s := range strings.Split(p, "/") {
		if s != "" {
			out = append(out, s)
		}
	}
	return out
}

// readlinkAt is readlinkat(2) of name in dirfd, growing its buffer.
func readlinkAt(dirfd int, name string) (string, error) {
	for n := 256; ; n *= 2 {
		b := make([]byte, n)
		m, err := unix.Readlinkat(dirfd, name, b)
		if err != nil {
			return "", err
		}
		if m < n {
			return string(b[:m]), nil
		}
	}
}

// ResolveTrustedPath returns the absolute path p (made absolute and
// cleaned like filepath.Abs) with every symlink resolved, walking it from
// / by the rules of a trusted path (see ErrUntrustedPath): every directory
// on the way is owned by root or our euid and not writable by its group
// or others unless sticky, and a symlink is followed only when such a
// directory holds it and root or our euid owns it. Nothing is made: the
// components that do not exist are appended as given (the directory they
// would be made in must pass the same rule), and so is a last component
// that cannot be stat'ed because it is a dead FUSE mount (ENOTCONN). The
// last component itself is not judged. Errors: a refusal wrapping
// ErrUntrustedPath that names the directory or symlink and why, ELOOP
// after 40 symlinks, ENOTDIR, or a *fs.PathError of the walk.
func ResolveTrustedPath(p string) (string, error) {
	abs, err := filepath.Abs(p)
	if err != nil {
		return "", err
	}
	w := &trustedWalk{}
	res, err := w.walk(abs)
	if err != nil {
		return "", err
	}
	if !res.stale && len(res.missing) == 0 {
		unix.Close(res.dir.fd)
	}
	return filepath.Join(append([]string{res.dir.path}, res.missing...)...), nil
}

// OpenTrustedDir opens the directory p, walking it from / by the rules
// of ResolveTrustedPath, with O_PATH: a descriptor for fstat, for the *at
// calls and, as /proc/self/fd/N, for mount(2), that always names the
// directory the walk checked. With create, missing directories are made
// (mode 0755, as os.MkdirAll) in directories that pass the rules; made
// lists them, parents first. resolved is p with every symlink resolved.
// The directory itself is not judged (see CheckTrustedDir). Errors: as
// ResolveTrustedPath, ENOENT when p is missing and !create, ENOTCONN when
// it is a dead FUSE mount, or the mkdir error (a *fs.PathError, "mkdir
// P: permission denied"); on an error after making directories, made
// still lists them.
func OpenTrustedDir(p string, create bool) (dir *os.File, resolved string, made []string, err error) {
	abs, err := filepath.Abs(p)
	if err != nil {
		return nil, "", nil, err
	}
	w := &trustedWalk{create: create}
	res, err := w.walk(abs)
	if err != nil {
		return nil, "", w.made, err
	}
	if res.stale || len(res.missing) > 0 {
		errno := unix.ENOENT
		if res.stale {
			errno = unix.ENOTCONN
		}
		return nil, "", res.made, &fs.PathError{Op: "open", Path: filepath.Join(res.dir.path, res.missing[0]), Err: errno}
	}
	return os.NewFile(uintptr(res.dir.fd), res.dir.path), res.dir.path, res.made, nil
}

// CheckTrustedDir refuses the directory dir (an open descriptor, path for
// messages) unless it is owned by root or our euid and neither its group
// nor others can write it, sticky or not: the rule for a directory the
// daemon makes or writes files in. what names it ("state dir", ...). The
// owner and mode are read without a FUSE request (AT_STATX_DONT_SYNC).
// Errors: the stat error, or a refusal that says how to fix it.
func CheckTrustedDir(what, path string, dir *os.File) error {
	stx, err := lstatAt(int(dir.Fd()), "")
	if err != nil {
		return fmt.Errorf("%s %s: %w", what, path, err)
	}
	return CheckTrustedStat(what, path, stx.Uid, uint32(stx.Mode))
}

// CheckTrustedStat is CheckTrustedDir on an owner and mode already read.
func CheckTrustedStat(what, path string, uid, mode uint32) error {
	if !trustedOwner(uid) {
		return fmt.Errorf("%s %s is owned by uid %d, not by root: refusing it (others could plant files the daemon writes); use a directory owned by root", what, path, uid)
	}
	if perm := mode & 0o7777; perm&0o022 != 0 {
		return fmt.Errorf("%s %s is writable by its group or by others (mode %04o): refusing it (they could plant files the daemon writes); run chmod go-w %s", what, path, perm, path)
	}
	return nil
}
