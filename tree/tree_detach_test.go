package tree

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
	"golang.org/x/sys/unix"

	"github.com/schedpolicyd/schedpolicyd/internal/testutil"
)

// waitClosed waits for c, failing the test with what if
// testutil.DefaultBound passes first (a bound against hanging only: the
// waits take milliseconds, and no assertion depends on it).
func waitClosed(t *testing.T, c <-chan struct{}, what string) {
	t.Helper()
	timer := time.NewTimer(testutil.DefaultBound)
	defer timer.Stop()
	select {
	case <-c:
	case <-timer.C:
		t.Fatalf("timed out after %v waiting for %s", testutil.DefaultBound, what)
	}
}

// mountsAt counts the mounts whose mount point is the absolute path dir in
// /proc/self/mountinfo (stacked mounts count one each).
func mountsAt(t *testing.T, dir string) int {
	t.Helper()
	n := 0
	err := scanMountinfo(func(fields []string) bool {
		if unescapeMountinfo(fields[4]) == dir {
			n++
		}
		return true
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// treeFDs counts this process's open files of the kinds a FUSE tree holds:
// /dev/fuse (the connection), /proc/<pid>/mountinfo and eventfds (its mount
// watch; the Go runtime's own eventfd is counted too, and stays).
func treeFDs(t *testing.T) string {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	var fuse, mountinfo, eventfd int
	for _, e := range ents {
		target, err := os.Readlink(filepath.Join("/proc/self/fd", e.Name()))
		switch {
		case err != nil:
		case target == "/dev/fuse":
			fuse++
		case strings.HasSuffix(target, "/mountinfo"):
			mountinfo++
		case target == "anon_inode:[eventfd]":
			eventfd++
		}
	}
	return fmt.Sprintf("/dev/fuse=%d mountinfo=%d eventfd=%d", fuse, mountinfo, eventfd)
}

// holdTree starts a holder of dir's testCurrent (testutil.HoldFile): a
// process other than this one with it open ("open file") or its cwd in
// its directory ("cwd"), keeping the tree alive after a lazy unmount.
func holdTree(t *testing.T, dir, how string) *testutil.Holder {
	t.Helper()
	needBash(t)
	return testutil.HoldFile(t, filepath.Join(dir, testCurrent), how)
}

// TestTreeFUSELazyUnmountWhileHeld: umount -l of the tree
// while a file of it is held open, or a process has its cwd in it. The loss
// is seen at once from the mount table, not when the holder lets go: Gone
// closes while the holder still holds, and a new tree served with the lost
// one as Previous is the only mount at the directory; a fresh open reads the
// new tree, while the holder still reads its old file, live, from the
// detached tree. When the holder lets go the detached tree ends by itself:
// its server exits and its files are closed, with the new tree still
// serving; once that is closed too, no goroutine is left.
func TestTreeFUSELazyUnmountWhileHeld(t *testing.T) {
	// Skip before the goroutine snapshot if FUSE cannot be used here.
	probe := serveTestFUSE(t, newFakeTreeHandler())
	probe.Close()

	for _, how := range []string{"open file", "cwd"} {
		t.Run(how, func(t *testing.T) { lazyUnmountWhileHeld(t, how) })
	}
}

func lazyUnmountWhileHeld(t *testing.T, how string) {
	// Registered first, so it runs after every other cleanup.
	ignore := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, ignore) })

	dir := filepath.Join(t.TempDir(), "tree")
	h1 := newFakeTreeHandler()
	old := serveTestFUSEAt(t, dir, h1).(*fuseTree)
	mntDir := old.mntDir
	fdsOne := treeFDs(t) // with one tree served

	holder := holdTree(t, dir, how)
	if got, err := holder.Read(); got != "balance\n" {
		t.Fatalf("holder reads %q, %v before the unmount", got, err)
	}

	// umount -l: the mount leaves the table at once, the holder keeps it.
	if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil {
		t.Fatalf("umount -l %s: %v", dir, err)
	}
	waitClosed(t, old.Gone(), "Gone after umount -l while held")
	if old.finished() {
		t.Fatal("the detached tree's server ended although its holder holds it")
	}
	h1.set(testCurrent, "powersaving") // the old tree still reads live

	h2 := newFakeTreeHandler()
	h2.set(testCurrent, "performance")
	nt, err := ServeTree(TreeOptions{Dir: dir, Files: testTreeFiles, Handler: h2, Backend: BackendFUSE, Previous: old})
	if err != nil {
		t.Fatalf("ServeTree after the loss: %v", err)
	}
	cur := nt.(*fuseTree)
	t.Cleanup(func() { cur.Close() })

	if n := mountsAt(t, mntDir); n != 1 {
		t.Errorf("%d mounts at %s after serving again, want 1", n, mntDir)
	}
	if got := readString(t, filepath.Join(dir, testCurrent)); got != "performance\n" {
		t.Errorf("fresh open reads %q, want the new tree's performance", got)
	}
	if got, err := holder.Read(); got != "powersaving\n" || err != nil {
		t.Errorf("holder reads %q, %v after the remount; want the detached tree's live powersaving", got, err)
	}
	if old.finished() {
		t.Fatal("the detached tree's server ended although its holder holds it")
	}

	holder.Release()
	waitClosed(t, old.served, "the detached tree's server exiting after its holder let go")
	if old.watch != nil {
		waitClosed(t, old.watch.done, "the detached tree's mount watch exiting")
	}
	testutil.Eventually(t, "the detached tree's files closed", func() (bool, string) {
		got := treeFDs(t)
		return got == fdsOne, got + ", want " + fdsOne
	})
	if n := mountsAt(t, mntDir); n != 1 {
		t.Errorf("%d mounts at %s after the holder let go, want 1", n, mntDir)
	}
	if got := readString(t, filepath.Join(dir, testCurrent)); got != "performance\n" {
		t.Errorf("after the holder let go: fresh open reads %q, want performance", got)
	}
	if cur.finished() {
		t.Error("the new tree's server ended with the old one")
	}
	select {
	case <-cur.Gone():
		t.Error("the new tree reports itself lost")
	default:
	}

	if err := cur.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if n := mountsAt(t, mntDir); n != 0 {
		t.Errorf("%d mounts at %s after Close, want 0", n, mntDir)
	}
}

// TestTreeFUSECloseTakesDetachedHolder: a tree that took over a detached
// one still held (TreeOptions.Previous) closes it with itself: the handler is
// not called again for the holder, who gets an error instead of content.
func TestTreeFUSECloseTakesDetachedHolder(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "tree")
	h1 := newFakeTreeHandler()
	old := serveTestFUSEAt(t, dir, h1).(*fuseTree)
	holder := holdTree(t, dir, "open file")
	if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil {
		t.Fatal(err)
	}
	waitClosed(t, old.Gone(), "Gone after umount -l while held")
	nt, err := ServeTree(TreeOptions{Dir: dir, Files: testTreeFiles, Handler: newFakeTreeHandler(), Backend: BackendFUSE, Previous: old})
	if err != nil {
		t.Fatal(err)
	}
	if err := nt.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	h1.set(testCurrent, "powersaving")
	if got, err := holder.Read(); err == nil || got != "" {
		t.Errorf("holder reads %q, %v after the new tree's Close; want an error (ENODEV, or ENOTCONN once aborted)", got, err)
	} else if !errors.Is(err, syscall.ENODEV) && !errors.Is(err, syscall.ENOTCONN) {
		t.Errorf("holder's read error %v, want ENODEV or ENOTCONN", err)
	}
}

// TestTreeFUSEStillMountedUnderAnother: a file system mounted on top of the
// tree hides it but does not detach it, so it is not lost (serving it again
// would stack a second tree at the directory); unmounting both is.
func TestTreeFUSEStillMountedUnderAnother(t *testing.T) {
	tree := serveTestFUSE(t, newFakeTreeHandler()).(*fuseTree)
	dir := tree.mntDir
	if err := unix.Mount("schedpolicyd-test", dir, "tmpfs", 0, "size=64k"); err != nil {
		t.Skipf("cannot mount a tmpfs over the tree: %v", err)
	}
	if present, err := devMountedAt(dir, tree.mnt.dev); !present || err != nil {
		t.Errorf("tree under a tmpfs: present=%v err=%v, want present", present, err)
	}
	if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil { // the tmpfs
		t.Fatal(err)
	}
	if present, err := devMountedAt(dir, tree.mnt.dev); !present || err != nil {
		t.Errorf("tmpfs gone: present=%v err=%v, want present", present, err)
	}
	select {
	case <-tree.Gone():
		t.Error("Gone closed by a mount stacked on the tree and removed again")
	default:
	}
	if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil { // the tree
		t.Fatal(err)
	}
	if present, err := devMountedAt(dir, tree.mnt.dev); present || err != nil {
		t.Errorf("tree unmounted: present=%v err=%v, want absent", present, err)
	}
	waitClosed(t, tree.Gone(), "Gone after umount -l")
}
