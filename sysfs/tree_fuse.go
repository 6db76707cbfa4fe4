package sysfs

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

// The FUSE backend of the tree (DESIGN §4, platform.md §7.2). Every setting
// below answers one of the experiments recorded there:
//   - Open returns FOPEN_DIRECT_IO, so the kernel forwards every read and a
//     reader never sees stale or size-truncated content;
//   - fileNode implements NodeSetattrer, or the shell's O_TRUNC (SETATTR
//     size=0) fails with ENOTSUP before Write runs;
//   - Setattr and Getattr fill the mode, which bridge.go would otherwise
//     report as 0000;
//   - entry and attribute timeouts are 0, so nothing is cached;
//   - default_permissions makes the kernel enforce the modes for non-root
//     users, and Open refuses write-opens of read-only files with EACCES
//     for everybody, like sysfs.

// fuseFsType is the file system type the mount shows in /proc/self/mountinfo
// ("fuse." + MountOptions.Name); stale mounts of this type are cleared.
const fuseFsType = "fuse.schedpolicyd"

// fuseCloseWait bounds how long Close waits for the server after unmounting.
const fuseCloseWait = 2 * time.Second

type fuseTree struct {
	dir     string
	mntDir  string // dir as /proc/self/mountinfo shows it (symlinks resolved)
	handler TreeHandler
	server  *fuse.Server
	served  chan struct{} // closed when the server has exited
	mnt     mountID       // the mount at dir when it was made
	watch   *mountWatch   // nil when the mount table cannot be watched

	gone     chan struct{} // closed when the tree is lost (see Gone)
	goneOnce sync.Once

	replaced replacedTrees // earlier trees at dir still serving their holders

	// mu guards closed. Operations hold it for reading while they call the
	// handler, so Close, which takes it for writing, waits for them.
	mu     sync.RWMutex
	closed bool

	closeOnce sync.Once
	closeErr  error
}

func serveFUSE(opts TreeOptions) (*fuseTree, error) {
	// Opening /dev/fuse first gives a clear errno (ENOENT, EACCES, EPERM)
	// instead of the mount's.
	f, err := os.OpenFile("/dev/fuse", os.O_RDWR, 0)
	if err != nil {
		return nil, fmt.Errorf("sysfs: tree: fuse: %w", err)
	}
	f.Close()
	report := opts.OnStaleMount
	if opts.Previous != nil {
		report = nil // the previous tree's own mount is no news
	}
	if err := clearStaleMount(opts.Dir, report); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(opts.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("sysfs: tree: %w", err)
	}

	// Resolved before mounting, so that the walk does not go through our
	// own mount.
	t := &fuseTree{dir: opts.Dir, mntDir: resolveExisting(opts.Dir), handler: opts.Handler, gone: make(chan struct{})}
	root := &dirNode{mtime: time.Now()}
	var zero time.Duration
	discard := log.New(io.Discard, "", 0)
	fopts := &fs.Options{
		MountOptions: fuse.MountOptions{
			DirectMount: true,
			// Strict: report the real mount(2) errno (e.g. EPERM) rather
			// than falling back to the fusermount helper, which is absent.
			DirectMountStrict: true,
			AllowOther:        true,
			FsName:            "schedpolicyd",
			Name:              "schedpolicyd",
			Options:           []string{"default_permissions"},
			Logger:            discard,
		},
		EntryTimeout:    &zero,
		AttrTimeout:     &zero,
		NegativeTimeout: &zero,
		Logger:          discard,
		OnAdd: func(ctx context.Context) {
			t.build(ctx, &root.Inode, opts.Files)
		},
	}
	// fs.Mount, but for the poll hack: NewServer mounts and answers the
	// kernel's INIT before it returns, and WaitMount only adds go-fuse's
	// poll hack, an open and poll of a file on the mount by the serving
	// process itself (see TreeOptions.NoPollHack).
	server, err := fuse.NewServer(fs.NewNodeFS(root, fopts), opts.Dir, &fopts.MountOptions)
	if err == nil {
		go server.Serve()
		if !opts.NoPollHack {
			err = server.WaitMount()
		}
	}
	if err != nil {
		return nil, fmt.Errorf("sysfs: tree: fuse mount %s: %w", opts.Dir, err)
	}
	t.server = server
	t.served = make(chan struct{})
	t.mnt, _ = mountIdentity(opts.Dir)
	if t.mnt.dev != 0 {
		// Without a watch (no procfs) the tree is lost only when its
		// server ends: after umount -l, once the last holder lets go.
		t.watch, _ = watchMount(t.mntDir, t.mnt.dev, t.markGone)
	}
	go func() {
		server.Wait()
		close(t.served)
		t.markGone()
		if t.watch != nil {
			t.watch.Close()
		}
	}()
	return t, nil
}

// markGone closes t.gone once.
func (t *fuseTree) markGone() { t.goneOnce.Do(func() { close(t.gone) }) }

// finished reports whether the server has exited.
func (t *fuseTree) finished() bool {
	select {
	case <-t.served:
		return true
	default:
		return false
	}
}

// mountID identifies the mount at a directory. Device numbers and plain
// mount IDs are recycled as soon as a detached mount dies, so the unique
// mount ID (Linux 6.8+) is preferred.
type mountID struct {
	dev    uint64
	id     uint64
	unique bool
}

// AT_STATX_DONT_SYNC: the device and mount IDs come from the VFS, and a
// FUSE mount is then answered from cached attributes instead of a GETATTR
// request. On our own tree that request would be served by this process,
// and a SIGKILL while it is in flight leaves the process waiting for its
// own answer in D state until the connection is aborted.
func mountIdentity(dir string) (mountID, error) {
	var stx unix.Statx_t
	err := unix.Statx(unix.AT_FDCWD, dir, unix.AT_STATX_DONT_SYNC, unix.STATX_BASIC_STATS|unix.STATX_MNT_ID_UNIQUE|unix.STATX_MNT_ID, &stx)
	if err != nil {
		return mountID{}, err
	}
	return mountID{
		dev:    unix.Mkdev(stx.Dev_major, stx.Dev_minor),
		id:     stx.Mnt_id,
		unique: stx.Mask&unix.STATX_MNT_ID_UNIQUE != 0,
	}, nil
}

// ownsMount reports whether the mount at t.dir is still this tree's: the
// server is running and the mount identity is unchanged (or unknown).
func (t *fuseTree) ownsMount() bool {
	select {
	case <-t.served:
		return false // our connection is gone
	default:
	}
	if t.mnt == (mountID{}) {
		return true
	}
	cur, err := mountIdentity(t.dir)
	if err != nil {
		return true // e.g. ENOTCONN: unmounting is right
	}
	return cur == t.mnt
}

// build adds the directories and files below root.
func (t *fuseTree) build(ctx context.Context, root *fs.Inode, files []TreeFile) {
	now := time.Now()
	for _, f := range files {
		parent := root
		parts := strings.Split(f.Path, "/")
		for _, name := range parts[:len(parts)-1] {
			child := parent.GetChild(name)
			if child == nil {
				child = parent.NewPersistentInode(ctx, &dirNode{mtime: now},
					fs.StableAttr{Mode: syscall.S_IFDIR})
				parent.AddChild(name, child, false)
			}
			parent = child
		}
		node := &fileNode{tree: t, path: f.Path, mode: uint32(f.Mode.Perm()), mtime: now}
		parent.AddChild(parts[len(parts)-1],
			parent.NewPersistentInode(ctx, node, fs.StableAttr{Mode: syscall.S_IFREG}), false)
	}
}

func (t *fuseTree) Backend() Backend { return BackendFUSE }
func (t *fuseTree) Dir() string      { return t.dir }

var _ GoneNotifier = (*fuseTree)(nil)

// Gone is closed when the mount is no longer at Dir or the server has exited
// (see GoneNotifier).
func (t *fuseTree) Gone() <-chan struct{} { return t.gone }

// Changed does nothing: every read from offset 0 asks the handler.
func (t *fuseTree) Changed() error { return nil }

// Close marks the tree closed (operations still arriving get ENODEV, as on a
// removed sysfs node, and the handler is not called again), unmounts it if it
// is still this tree's mount at Dir, and waits for the server to exit. Then it
// closes the trees this one replaced (TreeOptions.Previous).
//
// If the mount is busy (a shell has its cwd inside), it is detached lazily
// (umount(2) MNT_DETACH): it disappears from the namespace at once, and the
// kernel keeps the connection until the last reference goes. Close then waits
// up to 2s and, if the server is still running, aborts the connection through
// fusectl (/sys/fs/fuse/connections/N/abort, Documentation/filesystems/fuse.rst
// "Aborting a filesystem connection") when that is mounted; otherwise the
// serving goroutines linger, answering ENODEV, until the reference is dropped.
// A tree already detached from Dir (umount -l from outside, or replaced) is
// aborted at once if its server still runs: nobody can unmount it any more.
//
// Errors: the unmount(2) error other than EINVAL (no longer mounted).
func (t *fuseTree) Close() error {
	t.closeOnce.Do(func() {
		t.mu.Lock()
		t.closed = true
		t.mu.Unlock()
		if t.watch != nil {
			t.watch.Close() // our own unmount is no loss
		}
		t.closeErr = t.unmount()
		t.replaced.closeAll()
	})
	return t.closeErr
}

// unmount unmounts the tree if its mount is still at Dir and waits for the
// server, aborting the connection if it does not end.
func (t *fuseTree) unmount() error {
	// Unmount only our own mount: a later instance may have replaced it
	// (clearStaleMount) and mounted its own at dir.
	if t.ownsMount() {
		err := unix.Unmount(t.dir, 0)
		if errors.Is(err, unix.EBUSY) {
			err = unix.Unmount(t.dir, unix.MNT_DETACH)
		}
		if err != nil && !errors.Is(err, unix.EINVAL) { // EINVAL: no longer mounted
			return fmt.Errorf("sysfs: tree: unmount %s: %w", t.dir, err)
		}
		if t.waitServed(fuseCloseWait) {
			return nil
		}
	} else if t.finished() {
		return nil
	}
	if t.abort() {
		t.waitServed(fuseCloseWait)
	}
	return nil
}

// abort aborts the FUSE connection through fusectl, which makes the kernel
// fail every pending and later request with ENOTCONN and the server's reads
// with ENODEV. It reports whether the abort file could be written (fusectl
// is often not mounted).
func (t *fuseTree) abort() bool {
	if t.mnt.dev == 0 {
		return false
	}
	// The connection's directory is named by the kernel dev_t encoding
	// of the superblock's device; it is ours while the server runs.
	conn := unix.Major(t.mnt.dev)<<20 | unix.Minor(t.mnt.dev)
	abort := filepath.Join("/sys/fs/fuse/connections", strconv.FormatUint(uint64(conn), 10), "abort")
	return os.WriteFile(abort, []byte("1"), 0) == nil
}

// waitServed reports whether the server exits within d.
func (t *fuseTree) waitServed(d time.Duration) bool {
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-t.served:
		return true
	case <-timer.C:
		return false
	}
}

// enter reports whether the tree is open; if so the caller must call
// t.mu.RUnlock when done with the handler.
func (t *fuseTree) enter() bool {
	t.mu.RLock()
	if t.closed {
		t.mu.RUnlock()
		return false
	}
	return true
}

// dirNode is a directory: mode 0755, owned by root. Lookup and Readdir come
// from the persistent children added in build.
type dirNode struct {
	fs.Inode
	mtime time.Time
}

var _ fs.NodeGetattrer = (*dirNode)(nil)

func (d *dirNode) Getattr(ctx context.Context, fh fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	out.Mode = syscall.S_IFDIR | 0o755
	out.Nlink = 2
	out.Size = 0
	out.Owner = fuse.Owner{Uid: 0, Gid: 0}
	out.SetTimes(nil, &d.mtime, &d.mtime)
	return 0
}

// The tree's shape is fixed, as in sysfs: creating, removing, linking or
// renaming anything fails with EPERM (what sysfs answers for mkdir and
// unlink) and changes nothing. go-fuse's default for Unlink and Rmdir is
// success, which would silently drop a knob file until restart.
var (
	_ fs.NodeUnlinker  = (*dirNode)(nil)
	_ fs.NodeRmdirer   = (*dirNode)(nil)
	_ fs.NodeMkdirer   = (*dirNode)(nil)
	_ fs.NodeCreater   = (*dirNode)(nil)
	_ fs.NodeMknoder   = (*dirNode)(nil)
	_ fs.NodeLinker    = (*dirNode)(nil)
	_ fs.NodeSymlinker = (*dirNode)(nil)
	_ fs.NodeRenamer   = (*dirNode)(nil)
)

func (d *dirNode) Unlink(ctx context.Context, name string) syscall.Errno { return syscall.EPERM }
func (d *dirNode) Rmdir(ctx context.Context, name string) syscall.Errno  { return syscall.EPERM }
func (d *dirNode) Mkdir(ctx context.Context, name string, mode uint32, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	return nil, syscall.EPERM
}
func (d *dirNode) Create(ctx context.Context, name string, flags, mode uint32, out *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	return nil, nil, 0, syscall.EPERM
}
func (d *dirNode) Mknod(ctx context.Context, name string, mode, dev uint32, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	return nil, syscall.EPERM
}
func (d *dirNode) Link(ctx context.Context, target fs.InodeEmbedder, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	return nil, syscall.EPERM
}
func (d *dirNode) Symlink(ctx context.Context, target, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	return nil, syscall.EPERM
}
func (d *dirNode) Rename(ctx context.Context, name string, newParent fs.InodeEmbedder, newName string, flags uint32) syscall.Errno {
	return syscall.EPERM
}

// fileNode is one attribute file.
type fileNode struct {
	fs.Inode
	tree  *fuseTree
	path  string
	mode  uint32 // permission bits
	mtime time.Time
}

var (
	_ fs.NodeGetattrer = (*fileNode)(nil)
	_ fs.NodeSetattrer = (*fileNode)(nil)
	_ fs.NodeOpener    = (*fileNode)(nil)
)

// Getattr reports the mode, owner root and size 4096 like sysfs
// (platform.md §7.1); with direct I/O the size does not limit reads.
func (n *fileNode) Getattr(ctx context.Context, fh fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	n.fill(out)
	return 0
}

func (n *fileNode) fill(out *fuse.AttrOut) {
	out.Mode = syscall.S_IFREG | n.mode
	out.Nlink = 1
	out.Size = maxAttrWrite
	out.Blksize = maxAttrWrite
	out.Owner = fuse.Owner{Uid: 0, Gid: 0}
	out.SetTimes(nil, &n.mtime, &n.mtime)
}

// Setattr accepts truncation (the shell's O_TRUNC arrives as SETATTR size=0
// before the write) and time updates, both ignored as kernfs does with the
// size; changing mode or owner fails with EPERM.
func (n *fileNode) Setattr(ctx context.Context, fh fs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	if _, ok := in.GetMode(); ok {
		return syscall.EPERM
	}
	if _, ok := in.GetUID(); ok {
		return syscall.EPERM
	}
	if _, ok := in.GetGID(); ok {
		return syscall.EPERM
	}
	n.fill(out)
	return 0
}

// Open refuses write-opens of a file without write bits with EACCES, even for
// root, as sysfs does, and returns FOPEN_DIRECT_IO so no read is cached.
func (n *fileNode) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	if flags&syscall.O_ACCMODE != syscall.O_RDONLY && n.mode&0o222 == 0 {
		return nil, 0, syscall.EACCES
	}
	return &fileHandle{node: n}, fuse.FOPEN_DIRECT_IO, 0
}

// fileHandle is one open file. Like a kernfs open file it keeps the content
// generated by the last read at offset 0 and serves later offsets from it.
type fileHandle struct {
	node    *fileNode
	mu      sync.Mutex
	content []byte
	valid   bool
}

var (
	_ fs.FileReader = (*fileHandle)(nil)
	_ fs.FileWriter = (*fileHandle)(nil)
)

func (h *fileHandle) Read(ctx context.Context, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	t := h.node.tree
	if !t.enter() {
		return nil, syscall.ENODEV
	}
	defer t.mu.RUnlock()
	h.mu.Lock()
	defer h.mu.Unlock()
	if off == 0 || !h.valid {
		h.content = t.handler.Read(h.node.path)
		h.valid = true
	}
	if off >= int64(len(h.content)) {
		return fuse.ReadResultData(nil), 0
	}
	end := min(off+int64(len(dest)), int64(len(h.content)))
	return fuse.ReadResultData(h.content[off:end]), 0
}

// Write hands one write(2) to the handler, ignoring the offset as sysfs
// does. More than 4096 bytes fail with EINVAL; a handler error becomes its
// errno (EIO if it wraps none). On success the whole buffer counts as
// written.
func (h *fileHandle) Write(ctx context.Context, data []byte, off int64) (uint32, syscall.Errno) {
	if len(data) > maxAttrWrite {
		return 0, syscall.EINVAL
	}
	t := h.node.tree
	if !t.enter() {
		return 0, syscall.ENODEV
	}
	defer t.mu.RUnlock()
	if err := t.handler.Write(h.node.path, append([]byte(nil), data...)); err != nil {
		return 0, writeErrno(err)
	}
	return uint32(len(data)), 0
}

// clearStaleMount lazily unmounts what a crashed instance left at dir: a
// mount whose stat gives ENOTCONN ("Transport endpoint is not connected"), or
// any fuse.schedpolicyd mount point at dir (platform.md §7.2). Other file
// systems mounted at dir are left alone. Stacked mounts are peeled one at a
// time, each reported to report (if not nil) once it is detached.
func clearStaleMount(dir string, report func(what string)) error {
	for range 16 {
		// Without a GETATTR request (mountIdentity): the mount may be a
		// previous tree this process still serves. A dead server's
		// ENOTCONN comes from the path walk; its mount is found by type
		// below in any case.
		var stx unix.Statx_t
		statErr := unix.Statx(unix.AT_FDCWD, dir, unix.AT_STATX_DONT_SYNC, unix.STATX_TYPE, &stx)
		stale := errors.Is(statErr, unix.ENOTCONN)
		if !stale {
			fstype, mounted, err := mountAt(resolveExisting(dir))
			if err != nil {
				return err
			}
			stale = mounted && fstype == fuseFsType
		}
		if !stale {
			return nil
		}
		if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil {
			return fmt.Errorf("sysfs: tree: unmount stale mount %s: %w", dir, err)
		}
		if report != nil {
			// The tree directory is locked by the caller: a
			// fuse.schedpolicyd mount there is an instance's that is gone.
			what := "a fuse.schedpolicyd mount of an instance that is gone"
			if errors.Is(statErr, unix.ENOTCONN) {
				what = "a dead FUSE mount (transport endpoint not connected)"
			}
			report(what)
		}
	}
	return fmt.Errorf("sysfs: tree: too many stale mounts at %s", dir)
}

// mountAt reports the file system type of the topmost mount at the absolute
// path dir, from /proc/self/mountinfo.
func mountAt(dir string) (fstype string, mounted bool, err error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return "", false, fmt.Errorf("sysfs: tree: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64*1024), 1024*1024)
	for sc.Scan() {
		// 36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw
		fields := strings.Fields(sc.Text())
		if len(fields) < 7 || unescapeMountinfo(fields[4]) != dir {
			continue
		}
		for i := 6; i < len(fields)-1; i++ {
			if fields[i] == "-" {
				fstype, mounted = fields[i+1], true // later lines are mounted on top
				break
			}
		}
	}
	if err := sc.Err(); err != nil {
		return "", false, fmt.Errorf("sysfs: tree: reading mountinfo: %w", err)
	}
	return fstype, mounted, nil
}

// unescapeMountinfo undoes the octal escapes (\040 for space, \011, \012,
// \134) the kernel applies to paths in mountinfo.
func unescapeMountinfo(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// ClearStaleMount detaches (MNT_DETACH) what an instance that is gone left
// mounted at dir: a dead FUSE mount (ENOTCONN) or any fuse.schedpolicyd
// mount, peeling stacked ones; other file systems are left alone. The
// caller must hold dir's tree lock (no live instance serves it). report,
// if not nil, is called with what each detached mount was. Errors: reading
// /proc/self/mountinfo, or the unmount's.
func ClearStaleMount(dir string, report func(what string)) error {
	return clearStaleMount(dir, report)
}
