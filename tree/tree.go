package tree

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"

	"github.com/schedpolicyd/schedpolicyd/internal/trustedpath"
)

// This file defines the served virtual sched_policy tree (docs/USAGE.md, "The
// tree") and chooses its backend: tree_fuse.go serves it through FUSE,
// tree_plain.go as plain files watched with fsnotify. The attribute
// semantics mimicked are those of kernel sysfs
// (Documentation/filesystems/sysfs.rst, fs/kernfs/file.c).

// Backend is how the tree is served: BackendAuto, BackendFUSE or
// BackendPlain, as accepted in TreeOptions.Backend and (FUSE or plain)
// returned by Tree.Backend.
type Backend string

// Tree backends.
const (
	BackendAuto  Backend = "auto"
	BackendFUSE  Backend = "fuse"
	BackendPlain Backend = "plain"
)

// Backends are the words ParseBackend accepts, in the order its error
// names them.
var Backends = []Backend{BackendAuto, BackendFUSE, BackendPlain}

// ParseBackend returns the backend named s (the tree_backend key and
// --tree-backend), or an error naming the words it accepts.
func ParseBackend(s string) (Backend, error) {
	if b := Backend(s); slices.Contains(Backends, b) {
		return b, nil
	}
	return "", fmt.Errorf("tree backend %q: want auto, fuse or plain", s)
}

// maxAttrWrite is the largest single write(2) an attribute accepts, PAGE_SIZE
// on x86 (the buffer of Documentation/filesystems/sysfs.rst). Longer writes
// fail with EINVAL before the handler sees them, as such writes to a real
// sysfs enum file did (docs/SOURCES.md §10).
const maxAttrWrite = 4096

// TreeFile is one attribute file of the tree, relative to the tree directory,
// e.g. {Path: "devices/system/cpu/sched_policy/current_sched_policy", Mode: 0644}.
//
// Only the permission bits of Mode are used. A file without any write bit is
// read-only: opening it for writing fails with EACCES, even for root, as on
// sysfs (FUSE backend only; see TreeOptions.Backend).
type TreeFile struct {
	Path string
	Mode os.FileMode
}

// TreeHandler produces and consumes file contents. Called from FUSE serving goroutines
// (concurrently) or from the plain backend's watcher goroutine. Must not touch the mount.
type TreeHandler interface {
	// Read returns the full current content of the file (newline-terminated by the handler).
	// The tree keeps the slice returned and shares it between the open files that read it
	// (FUSE): the handler must not change it afterwards.
	Read(path string) []byte
	// Write is called with the raw bytes of one write(2) (at most 4096 bytes; longer writes are
	// rejected with EINVAL before Write is called). A returned error that wraps a syscall.Errno
	// is passed to the writer as that errno (EINVAL for a bad value); any other error → EIO.
	Write(path string, data []byte) error
}

// TreeOptions configures ServeTree.
type TreeOptions struct {
	// Dir is the mount point / directory, created if missing (0755, with
	// its missing parents). It must not lie inside /sys (see treeDir),
	// and it must be a trusted path (trustedpath.ResolveTrustedPath): every
	// directory on the way from / owned by root or our euid and not
	// writable by its group or others unless sticky, every symlink on the
	// way owned by root or our euid and held by such a directory; Dir
	// itself must be owned by root or our euid and writable by nobody else
	// (sticky or not). The tree is mounted on (plain: written in) the
	// directory that walk checked, never on where a symlink changed
	// afterwards would lead.
	Dir string
	// Files lists the attribute files. Paths are relative to Dir and are
	// cleaned like filepath.Clean("/"+path); directories are implied.
	Files []TreeFile
	// Handler produces and consumes the contents.
	Handler TreeHandler
	// Backend is "auto" (FUSE if /dev/fuse can be opened and the mount
	// succeeds, else plain; "" means auto), "fuse" or "plain".
	//
	// The FUSE backend behaves like sysfs: content generated per read (direct
	// I/O, never cached), one write(2) is one Handler.Write whose error the
	// writer sees, modes enforced (default_permissions) and write-opens of
	// read-only files refused with EACCES even for root. Each uid other
	// than root may hold at most MaxOpenPerUID (128) open files and
	// directories of the tree at once, and all of them together
	// MaxOpenNonRoot (4096); an open beyond fails with EMFILE (the uid's
	// bound) or ENFILE (everybody's), and a closed one (also by a process
	// that dies) frees its slot. An open file holds no copy of its content:
	// the files that read one generation of a content share it.
	//
	// The plain backend writes regular files and watches them with fsnotify.
	// It cannot refuse a write: the writer always succeeds, and an invalid
	// value is reverted afterwards (see OnPlainRejected). Root can write the
	// 0444 files; such writes are reverted with EACCES.
	Backend Backend
	// NoPollHack, for a process that never opens or polls the tree's
	// files itself (the daemon binary), skips go-fuse's poll hack: the
	// serving process opens and polls a file of its own mount once at
	// mount time, so that the kernel stops sending FUSE_POLL for files the
	// process opens through Go's netpoller. The serving process is then
	// its own client: killed (SIGKILL) while that request is in flight,
	// it waits in D state for its own answer (request_wait_answer in
	// fs/fuse/dev.c waits uninterruptibly for a request already sent)
	// until the connection is aborted. FUSE backend only.
	NoPollHack bool
	// OnPlainRejected, if set, is called when the plain backend reverted an invalid write.
	// It runs on the watcher goroutine and may call Tree.Changed but not Tree.Close.
	OnPlainRejected func(path string, data []byte, err error)
	// OnStaleMount, if set, is called for each stale mount the FUSE
	// backend detaches from Dir before mounting (what an instance that
	// died left there), with what it was: "a dead FUSE mount (transport
	// endpoint not connected)" or "a fuse.schedpolicyd mount of an
	// instance that is gone".
	OnStaleMount func(what string)
	// maxOpenPerUID and maxOpenNonRoot, if above 0, replace MaxOpenPerUID
	// and MaxOpenNonRoot (tests). FUSE backend only.
	maxOpenPerUID, maxOpenNonRoot int
	// Previous, if set, is the tree the new one replaces at Dir: one whose
	// Gone channel was closed. A FUSE tree is left serving the processes
	// that still hold files or directories in it (its handler is still
	// called for them) until they let go, and then ends by itself; should
	// its mount still be the topmost at Dir, it is detached first, like any
	// fuse.schedpolicyd mount there, so that Dir never holds two. The new
	// tree takes it over: the new tree's Close closes it (with the trees it
	// had taken over), and the caller must not use it any more. A plain
	// tree is closed before the new one is served. If ServeTree fails, a
	// FUSE Previous is left as it was, still the caller's.
	Previous Tree
}

// Tree is a served tree.
type Tree interface {
	Backend() Backend // BackendFUSE or BackendPlain
	Dir() string
	// Changed tells the tree that the handler's content changed. FUSE: nothing to do (reads are
	// generated per read, direct I/O). Plain: rewrite the files whose content differs (without
	// mistaking its own writes for user writes).
	Changed() error
	// Close is idempotent. FUSE: unmount (lazy unmount if busy) and wait for
	// the server; plain: stop watching and remove the files it created. After
	// Close returns the handler is not called again.
	Close() error
}

// GoneNotifier is implemented by trees that can be lost from outside. The
// FUSE backend's Gone channel is closed as soon as its mount is no longer at
// Dir (unmounted by someone else, also lazily with umount -l while processes
// still hold files or a cwd in it, or moved away), when its server exits
// (the connection was aborted), or after Close. The loss is seen from the
// mount table without a timer (see mountWatch); where /proc/self/mountinfo
// cannot be watched, only the server's exit closes it, which after umount -l
// waits for the last holder. The owner then serves the tree again, passing
// the lost one as TreeOptions.Previous, or Closes it.
type GoneNotifier interface {
	Gone() <-chan struct{}
}

// ServeTree serves opts.Files below opts.Dir with the chosen backend.
//
// Before mounting, a stale mount left at Dir by a crashed instance (stat gives
// ENOTCONN, or Dir is a "fuse.schedpolicyd" mount point in
// /proc/self/mountinfo) is lazily unmounted. opts.Previous is taken over as
// its documentation says.
//
// Errors: invalid options (no Dir or Handler, Dir inside /sys, an empty,
// duplicate or conflicting file path, an unknown backend); a Dir that is
// not a trusted path (wrapping trustedpath.ErrUntrustedPath, naming the
// directory or symlink and why) or that others can write or own; with
// "fuse", the mount failure (an errno such as EPERM when /dev/fuse or
// mount(2) is not allowed); with "auto", only a plain backend failure,
// since a FUSE failure falls back to plain.
func ServeTree(opts TreeOptions) (Tree, error) {
	if opts.Handler == nil {
		return nil, errors.New("tree: no handler")
	}
	dir, resolved, err := treeDir(opts.Dir)
	if err != nil {
		return nil, err
	}
	files, err := cleanTreeFiles(opts.Files)
	if err != nil {
		return nil, err
	}
	opts.Dir = dir
	opts.Files = files
	switch opts.Backend {
	case BackendFUSE, BackendAuto, "", BackendPlain:
	default:
		return nil, fmt.Errorf("tree: unknown backend %q", opts.Backend)
	}
	prev, _ := opts.Previous.(*fuseTree)
	if opts.Previous != nil && prev == nil {
		if err := opts.Previous.Close(); err != nil {
			return nil, fmt.Errorf("tree: closing the previous tree: %w", err)
		}
	}

	// Typed nil pointers must not escape as non-nil Tree values.
	switch opts.Backend {
	case BackendFUSE, BackendAuto, "":
		t, err := serveFUSE(opts, resolved)
		if err == nil {
			t.replaced.adopt(prev)
			return t, nil
		}
		if opts.Backend == BackendFUSE {
			return nil, err
		}
	}
	t, err := servePlain(opts, resolved)
	if err != nil {
		return nil, err
	}
	t.replaced.adopt(prev)
	return t, nil
}

// replacedTrees are the FUSE trees a tree replaced at its directory
// (TreeOptions.Previous) whose servers may still serve processes holding
// files in them. Each ends by itself when its last holder lets go; Close of
// the tree that holds them closes those still running.
type replacedTrees struct {
	mu    sync.Mutex // guards trees
	trees []*fuseTree
}

// adopt takes over prev, if not nil, and the trees prev had taken over,
// dropping those whose server has ended.
func (r *replacedTrees) adopt(prev *fuseTree) {
	if prev == nil {
		return
	}
	cands := append(prev.replaced.take(), prev)
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, t := range cands {
		if !t.finished() {
			r.trees = append(r.trees, t)
		}
	}
}

// take removes and returns the trees held.
func (r *replacedTrees) take() []*fuseTree {
	r.mu.Lock()
	defer r.mu.Unlock()
	trees := r.trees
	r.trees = nil
	return trees
}

// closeAll closes the trees held (see fuseTree.Close) and forgets them.
func (r *replacedTrees) closeAll() {
	for _, t := range r.take() {
		t.Close()
	}
}

// treeDir makes dir absolute and resolves it as a trusted path
// (trustedpath.ResolveTrustedPath: every directory and symlink on the way
// only root or our euid can change), and rejects places inside sysfs, where
// the tree must never go (mkdir there fails with EPERM, kernfs_iop_mkdir in
// fs/kernfs/dir.c, and a mount would shadow the kernel's attributes). It
// returns the absolute path and the resolved one.
func treeDir(dir string) (abs, resolved string, err error) {
	if dir == "" {
		return "", "", errors.New("tree: no directory")
	}
	abs, err = filepath.Abs(dir)
	if err != nil {
		return "", "", fmt.Errorf("tree: %w", err)
	}
	resolved, err = trustedpath.ResolveTrustedPath(abs)
	if err != nil {
		return "", "", fmt.Errorf("tree: directory %s: %w", dir, err)
	}
	for _, p := range []string{abs, resolved} {
		if p == "/sys" || strings.HasPrefix(p, "/sys/") {
			return "", "", fmt.Errorf("tree: directory %s is inside /sys", dir)
		}
	}
	return abs, resolved, nil
}

// openTreeDir opens the tree directory resolved
// (trustedpath.ResolveTrustedPath's result) as a trusted directory
// (trustedpath.OpenTrustedDir), making it and its missing parents (0755;
// made lists them, parents first), and refuses it unless root or our euid
// owns it and neither its group nor others can write it
// (trustedpath.CheckTrustedDir). The descriptor is O_PATH.
func openTreeDir(resolved string) (dir *os.File, made []string, err error) {
	d, _, made, err := trustedpath.OpenTrustedDir(resolved, true)
	if err != nil {
		return nil, made, fmt.Errorf("tree: directory %s: %w", resolved, err)
	}
	if err := trustedpath.CheckTrustedDir("tree: directory", resolved, d); err != nil {
		d.Close()
		return nil, made, err
	}
	return d, made, nil
}

// resolveExisting resolves symlinks in the longest existing prefix of the
// absolute path p and appends the rest unchanged.
func resolveExisting(p string) string {
	rest := ""
	for cur := p; ; {
		if r, err := filepath.EvalSymlinks(cur); err == nil {
			return filepath.Join(r, rest)
		}
		parent := filepath.Dir(cur)
		if parent == cur {
			return p
		}
		rest = filepath.Join(filepath.Base(cur), rest)
		cur = parent
	}
}

// cleanTreeFiles cleans each path as filepath.Clean("/"+path) (a name is
// made safe before it is used) and rejects empty paths, duplicates and a file that is also a
// directory of another.
func cleanTreeFiles(in []TreeFile) ([]TreeFile, error) {
	if len(in) == 0 {
		return nil, errors.New("tree: no files")
	}
	out := make([]TreeFile, 0, len(in))
	seen := make(map[string]bool)
	dirs := make(map[string]bool)
	for _, f := range in {
		p := strings.TrimPrefix(filepath.Clean("/"+f.Path), "/")
		if p == "" {
			return nil, fmt.Errorf("tree: empty file path %q", f.Path)
		}
		if seen[p] {
			return nil, fmt.Errorf("tree: duplicate file %s", p)
		}
		seen[p] = true
		for d := filepath.Dir(p); d != "."; d = filepath.Dir(d) {
			dirs[d] = true
		}
		out = append(out, TreeFile{Path: p, Mode: f.Mode.Perm()})
	}
	for _, f := range out {
		if dirs[f.Path] {
			return nil, fmt.Errorf("tree: %s is both a file and a directory", f.Path)
		}
	}
	return out, nil
}

// writeErrno turns a Handler.Write error into the errno the writer sees: the
// wrapped syscall.Errno if there is one, else EIO.
func writeErrno(err error) syscall.Errno {
	var errno syscall.Errno
	if errors.As(err, &errno) && errno != 0 {
		return errno
	}
	return syscall.EIO
}
