package tree

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

// The FUSE backend of the tree (docs/USAGE.md, "The tree"). Every setting
// below answers a go-fuse v2 behaviour (fs/api.go, fs/bridge.go) or an
// experiment with it (docs/SOURCES.md §8, §10):
//   - Open returns FOPEN_DIRECT_IO, so the kernel forwards every read and a
//     reader never sees stale or size-truncated content;
//   - fileNode implements NodeSetattrer, or the shell's O_TRUNC (SETATTR
//     size=0) fails with ENOTSUP before Write runs;
//   - Setattr and Getattr fill the mode, which bridge.go would otherwise
//     report as 0000;
//   - entry and attribute timeouts are 0, so nothing is cached;
//   - default_permissions makes the kernel enforce the modes for non-root
//     users, and Open refuses write-opens of read-only files with EACCES
//     for everybody, like sysfs;
//   - an open file or directory holds no copy of anything (the open files
//     that read one content share it, a directory's listing is the
//     tree's), and each takes a slot of its opener's uid (openSlots), so
//     what users other than root can pin in the daemon is bounded;
//   - the mount is made on the descriptor of the directory the trusted
//     walk opened (tree_path.go), through /proc/self/fd/N.

// fuseFsType is the file system type the mount shows in /proc/self/mountinfo
// ("fuse." + MountOptions.Name); stale mounts of this type are cleared.
const fuseFsType = "fuse.schedpolicyd"

// fuseCloseWait bounds how long Close waits for the server after unmounting.
const fuseCloseWait = 2 * time.Second

// The bounds on what users other than root hold open in a FUSE tree (files
// and directories together; each open costs the daemon memory for as long
// as it is held): an open beyond MaxOpenPerUID of the caller's uid fails
// with EMFILE, one beyond MaxOpenNonRoot of all such uids together with
// ENFILE. Root (uid 0) is not bounded. A slot is freed when the kernel
// releases the open file (RELEASE, RELEASEDIR: its last descriptor is
// closed, also when the process holding it dies).
const (
	MaxOpenPerUID  = 128
	MaxOpenNonRoot = 4096
)

// openSlots counts a tree's open files and directories by the uid that
// opened them (the FUSE request's, i.e. the opener's fsuid) and enforces
// the bounds above.
type openSlots struct {
	perUID, nonRootMax int // the bounds

	mu      sync.Mutex
	byUID   map[uint32]int // uids with opens held, root too
	nonRoot int            // all opens of uids other than root
}

// init sets the bounds; 0 or less means the default.
func (s *openSlots) init(perUID, nonRoot int) {
	s.perUID, s.nonRootMax = MaxOpenPerUID, MaxOpenNonRoot
	if perUID > 0 {
		s.perUID = perUID
	}
	if nonRoot > 0 {
		s.nonRootMax = nonRoot
	}
	s.byUID = make(map[uint32]int)
}

// take takes a slot for the caller of the request ctx: it returns the
// caller's uid, or EMFILE (the uid holds its bound) or ENFILE (all
// non-root uids together hold theirs). A request without a caller counts
// as uid 65534 (nobody), bounded.
func (s *openSlots) take(ctx context.Context) (uint32, syscall.Errno) {
	uid := uint32(65534)
	if c, ok := fuse.FromContext(ctx); ok {
		uid = c.Uid
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if uid != 0 {
		if s.byUID[uid] >= s.perUID {
			return 0, syscall.EMFILE
		}
		if s.nonRoot >= s.nonRootMax {
			return 0, syscall.ENFILE
		}
		s.nonRoot++
	}
	s.byUID[uid]++
	return uid, 0
}

// give frees a slot of uid's.
func (s *openSlots) give(uid uint32) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.byUID[uid] <= 0 {
		return
	}
	if uid != 0 {
		s.nonRoot--
	}
	if s.byUID[uid]--; s.byUID[uid] == 0 {
		delete(s.byUID, uid)
	}
}

// held reports how many opens uid holds.
func (s *openSlots) held(uid uint32) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.byUID[uid]
}

type fuseTree struct {
	dir     string // as given (absolute), for Dir
	mntDir  string // the trusted directory mounted on, as /proc/self/mountinfo shows it (symlinks resolved)
	handler TreeHandler
	server  *fuse.Server
	served  chan struct{} // closed when the server has exited
	mnt     mountID       // the mount at dir when it was made
	watch   *mountWatch   // nil when the mount table cannot be watched

	gone     chan struct{} // closed when the tree is lost (see Gone)
	goneOnce sync.Once

	replaced replacedTrees // earlier trees at dir still serving their holders

	opens openSlots // the open files and directories, by uid
	root  *dirNode

	// mu guards closed. Operations hold it for reading while they call the
	// handler, so Close, which takes it for writing, waits for them.
	mu     sync.RWMutex
	closed bool

	closeOnce sync.Once
	closeErr  error
}

func serveFUSE(opts TreeOptions, resolved string) (*fuseTree, error) {
	// Opening /dev/fuse first gives a clear errno (ENOENT, EACCES, EPERM)
	// instead of the mount's.
	f, err := os.OpenFile("/dev/fuse", os.O_RDWR, 0)
	if err != nil {
		return nil, fmt.Errorf("tree: fuse: %w", err)
	}
	f.Close()
	report := opts.OnStaleMount
	if opts.Previous != nil {
		report = nil // the previous tree's own mount is no news
	}
	if err := clearStaleMount(resolved, report); err != nil {
		return nil, err
	}
	// The mount is made on this descriptor of the directory the walk
	// checked (mount(2) on /proc/self/fd/N), so no symlink swapped in
	// since can send it elsewhere.
	dirFile, _, err := openTreeDir(resolved)
	if err != nil {
		return nil, err
	}
	defer dirFile.Close()
	mountPoint := "/proc/self/fd/" + strconv.Itoa(int(dirFile.Fd()))
	if _, err := os.Stat(mountPoint); err != nil {
		// No procfs: the path, which only root can change (a trusted
		// path), names the same directory.
		mountPoint = resolved
	}

	t := &fuseTree{dir: opts.Dir, mntDir: resolved, handler: opts.Handler, gone: make(chan struct{})}
	t.opens.init(opts.maxOpenPerUID, opts.maxOpenNonRoot)
	root := &dirNode{tree: t, mtime: time.Now()}
	t.root = root
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
			t.build(ctx, root, opts.Files)
		},
	}
	// fs.Mount, but for the poll hack: NewServer mounts and answers the
	// kernel's INIT before it returns, and WaitMount only adds go-fuse's
	// poll hack, an open and poll of a file on the mount by the serving
	// process itself (see TreeOptions.NoPollHack), made here on the
	// mount's path since go-fuse knows only /proc/self/fd/N.
	if beforeTreeMount != nil {
		beforeTreeMount()
	}
	server, err := fuse.NewServer(fs.NewNodeFS(root, fopts), mountPoint, &fopts.MountOptions)
	if err == nil && mountPoint != resolved {
		// Where the directory mounted on is now (the same unless root
		// moved it meanwhile): what Close unmounts and the watch follows.
		if p, lerr := os.Readlink(mountPoint); lerr == nil && filepath.IsAbs(p) && !strings.HasSuffix(p, " (deleted)") {
			t.mntDir = p
		}
	}
	if err == nil {
		go server.Serve()
		if !opts.NoPollHack {
			err = pollHack(t.mntDir)
		}
	}
	if err != nil {
		if server != nil {
			unix.Unmount(t.mntDir, unix.MNT_DETACH)
		}
		return nil, fmt.Errorf("tree: fuse mount %s: %w", opts.Dir, err)
	}
	t.server = server
	t.served = make(chan struct{})
	t.mnt, _ = mountIdentity(t.mntDir)
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

// beforeTreeMount, when set (tests only), runs in serveFUSE between the
// trusted walk that opened the directory and the mount.
var beforeTreeMount func()

// pollHack is go-fuse's (fuse/poll_unix.go): the serving process opens and
// polls the mount's special file once, so that the kernel learns that the
// file system does not implement poll (ENOSYS) and stops sending FUSE_POLL
// for files this process opens through Go's netpoller. go-fuse answers the
// file's LOOKUP, OPEN and POLL itself.
func pollHack(mountDir string) error {
	fd, err := unix.Open(filepath.Join(mountDir, ".go-fuse-epoll-hack"), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN | unix.POLLPRI | unix.POLLOUT}}, 0)
	unix.Close(fd)
	return nil
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
	cur, err := mountIdentity(t.mntDir)
	if err != nil {
		return true // e.g. ENOTCONN: unmounting is right
	}
	return cur == t.mnt
}

// build adds the directories and files below root, then gives each
// directory its listing.
func (t *fuseTree) build(ctx context.Context, root *dirNode, files []TreeFile) {
	now := time.Now()
	dirs := []*dirNode{root}
	for _, f := range files {
		parent := &root.Inode
		parts := strings.Split(f.Path, "/")
		for _, name := range parts[:len(parts)-1] {
			child := parent.GetChild(name)
			if child == nil {
				d := &dirNode{tree: t, mtime: now}
				dirs = append(dirs, d)
				child = parent.NewPersistentInode(ctx, d, fs.StableAttr{Mode: syscall.S_IFDIR})
				parent.AddChild(name, child, false)
			}
			parent = child
		}
		node := &fileNode{tree: t, path: f.Path, mode: uint32(f.Mode.Perm()), mtime: now}
		parent.AddChild(parts[len(parts)-1],
			parent.NewPersistentInode(ctx, node, fs.StableAttr{Mode: syscall.S_IFREG}), false)
	}
	for _, d := range dirs {
		children := d.Children()
		names := make([]string, 0, len(children))
		for name := range children {
			names = append(names, name)
		}
		slices.Sort(names)
		for _, name := range names {
			c := children[name]
			d.entries = append(d.entries, fuse.DirEntry{Name: name, Mode: c.Mode(), Ino: c.StableAttr().Ino})
		}
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
		err := unix.Unmount(t.mntDir, 0)
		if errors.Is(err, unix.EBUSY) {
			err = unix.Unmount(t.mntDir, unix.MNT_DETACH)
		}
		if err != nil && !errors.Is(err, unix.EINVAL) { // EINVAL: no longer mounted
			return fmt.Errorf("tree: unmount %s: %w", t.dir, err)
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

// dirNode is a directory: mode 0755, owned by root. Lookup comes from the
// persistent children added in build, Readdir from entries.
type dirNode struct {
	fs.Inode
	tree    *fuseTree
	mtime   time.Time
	entries []fuse.DirEntry // the children, by name; set in build, then read-only
}

var _ fs.NodeOpendirHandler = (*dirNode)(nil)

// OpendirHandle opens the directory for reading, taking one of the
// caller's open slots (see openSlots): EMFILE or ENFILE when there is
// none. The handle lists the shared entries.
func (d *dirNode) OpendirHandle(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	uid, errno := d.tree.opens.take(ctx)
	if errno != 0 {
		return nil, 0, errno
	}
	return &dirHandle{tree: d.tree, uid: uid, entries: d.entries}, 0, 0
}

// dirHandle is one open directory: a position in the shared entries.
type dirHandle struct {
	tree    *fuseTree
	uid     uint32
	mu      sync.Mutex // guards idx
	idx     int
	entries []fuse.DirEntry
}

var (
	_ fs.FileReaddirenter = (*dirHandle)(nil)
	_ fs.FileSeekdirer    = (*dirHandle)(nil)
	_ fs.FileReleasedirer = (*dirHandle)(nil)
)

func (h *dirHandle) Readdirent(ctx context.Context) (*fuse.DirEntry, syscall.Errno) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.idx >= len(h.entries) {
		return nil, 0
	}
	e := h.entries[h.idx]
	h.idx++
	e.Off = uint64(h.idx)
	return &e, 0
}

// Seekdir goes to the entry after the off'th (0: the start), as the
// offsets Readdirent gives.
func (h *dirHandle) Seekdir(ctx context.Context, off uint64) syscall.Errno {
	h.mu.Lock()
	defer h.mu.Unlock()
	if off > uint64(len(h.entries)) {
		return syscall.EINVAL
	}
	h.idx = int(off)
	return 0
}

// Releasedir frees the handle's slot: the kernel sends RELEASEDIR when the
// last descriptor of the open directory is closed, also by a process that
// dies.
func (h *dirHandle) Releasedir(ctx context.Context, releaseFlags uint32) {
	h.tree.opens.give(h.uid)
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

	genMu       sync.Mutex  // guards latest and generations
	latest      *generation // the content last read at offset 0
	generations int         // how many generations share made (tests)
}

var (
	_ fs.NodeGetattrer = (*fileNode)(nil)
	_ fs.NodeSetattrer = (*fileNode)(nil)
	_ fs.NodeOpener    = (*fileNode)(nil)
)

// Getattr reports the mode, owner root and size 4096 like sysfs
// (PAGE_SIZE, fs/sysfs/file.c); with direct I/O the size does not limit
// reads.
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
// root, as sysfs does, takes one of the caller's open slots (EMFILE or
// ENFILE when there is none, see openSlots), and returns FOPEN_DIRECT_IO
// so no read is cached.
func (n *fileNode) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	if flags&syscall.O_ACCMODE != syscall.O_RDONLY && n.mode&0o222 == 0 {
		return nil, 0, syscall.EACCES
	}
	uid, errno := n.tree.opens.take(ctx)
	if errno != 0 {
		return nil, 0, errno
	}
	return &fileHandle{node: n, uid: uid}, fuse.FOPEN_DIRECT_IO, 0
}

// generation is one content of a file as its handler produced it at a read
// at offset 0. It is never changed, so the open files that read the same
// content share one.
type generation struct {
	data []byte
}

// share returns the generation for content just read from the handler:
// the file's latest one if content equals it (content is dropped), else a
// new one, which becomes the latest.
func (n *fileNode) share(content []byte) *generation {
	n.genMu.Lock()
	defer n.genMu.Unlock()
	if n.latest != nil && bytes.Equal(n.latest.data, content) {
		return n.latest
	}
	n.latest = &generation{data: content}
	n.generations++
	return n.latest
}

// fileHandle is one open file. Like a kernfs open file it serves later
// offsets from the content generated by the last read at offset 0, but
// holds no copy of it: gen is shared with every handle of the file that
// read the same content.
type fileHandle struct {
	node *fileNode
	uid  uint32 // whose slot it holds
	mu   sync.Mutex
	gen  *generation // nil until the first read
}

var (
	_ fs.FileReader   = (*fileHandle)(nil)
	_ fs.FileWriter   = (*fileHandle)(nil)
	_ fs.FileReleaser = (*fileHandle)(nil)
)

func (h *fileHandle) Read(ctx context.Context, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	t := h.node.tree
	if !t.enter() {
		return nil, syscall.ENODEV
	}
	defer t.mu.RUnlock()
	h.mu.Lock()
	defer h.mu.Unlock()
	if off == 0 || h.gen == nil {
		h.gen = h.node.share(t.handler.Read(h.node.path))
	}
	content := h.gen.data
	if off >= int64(len(content)) {
		return fuse.ReadResultData(nil), 0
	}
	end := min(off+int64(len(dest)), int64(len(content)))
	return fuse.ReadResultData(content[off:end]), 0
}

// Release frees the handle's slot: the kernel sends RELEASE when the last
// descriptor of the open file is closed, also by a process that dies.
func (h *fileHandle) Release(ctx context.Context) syscall.Errno {
	h.mu.Lock()
	h.gen = nil
	h.mu.Unlock()
	h.node.tree.opens.give(h.uid)
	return 0
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
// any fuse.schedpolicyd mount point at dir (a dead server's mount stays,
// and the kernel fails its requests with ENOTCONN, fs/fuse/dev.c). Other file
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
			return fmt.Errorf("tree: unmount stale mount %s: %w", dir, err)
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
	return fmt.Errorf("tree: too many stale mounts at %s", dir)
}

// mountAt reports the file system type of the topmost mount at the absolute
// path dir, from /proc/self/mountinfo.
func mountAt(dir string) (fstype string, mounted bool, err error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return "", false, fmt.Errorf("tree: %w", err)
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
		return "", false, fmt.Errorf("tree: reading mountinfo: %w", err)
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
