package statefile

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/schedpolicyd/schedpolicyd/internal/testutil"
	"github.com/schedpolicyd/schedpolicyd/internal/trustedpath"
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
				removeLockAt(t, dir, "tree.lock", f)
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
		removeLockAt(t, dir, "tree.lock", a)
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

// removeLockAt is removeLock of the lock file name in dir.
func removeLockAt(t *testing.T, dir, name string, f *os.File) {
	d, err := os.OpenFile(dir, os.O_RDONLY|unix.O_DIRECTORY|unix.O_PATH, 0)
	if err != nil {
		t.Error(err)
		f.Close()
		return
	}
	defer d.Close()
	removeLock(d, name, f)
}

// TestStateDirSymlinkInUserDirRefused (issue 32, item 7): a state
// directory that is a symlink, in a directory a user controls, to root's
// directory is refused with an error naming the symlink, and the target
// gets no lock file (nor state.json later).
func TestStateDirSymlinkInUserDirRefused(t *testing.T) {
	for _, c := range testutil.UserDirCases {
		t.Run(c.Name, func(t *testing.T) {
			base := t.TempDir()
			victim, before := testutil.VictimDir(t, base)
			link := testutil.UserDir(t, base, "state", victim, c.Mode, c.Owner, c.LinkOwner)
			lock, err := PrepareStateDir(link)
			if err == nil {
				lock.Close()
				t.Fatalf("PrepareStateDir(%s) succeeded", link)
			}
			if !errors.Is(err, trustedpath.ErrUntrustedPath) || !strings.Contains(err.Error(), link+" is a symbolic link") {
				t.Errorf("PrepareStateDir = %v; want a refusal naming the symlink %s", err, link)
			}
			if after := testutil.Listing(t, filepath.Dir(victim)); after != before {
				t.Errorf("the target changed:\n%s\nwas:\n%s", after, before)
			}
		})
	}
}

// TestTreeDirSymlinkInUserDirRefused (issue 32, item 7): a tree directory
// that is a symlink, in a directory a user controls, to root's empty
// directory TARGET beside root's TARGET.lock is refused by PrepareTreeDir,
// LockTreeDir and ResolveTreeDir (what the daemon and `schedpolicyd
// cleanup` use) with an error naming the symlink, and TARGET and
// TARGET.lock stay.
func TestTreeDirSymlinkInUserDirRefused(t *testing.T) {
	for _, c := range testutil.UserDirCases {
		t.Run(c.Name, func(t *testing.T) {
			base := t.TempDir()
			target, before := testutil.VictimTreeDir(t, base)
			link := testutil.UserDir(t, base, "tree", target, c.Mode, c.Owner, c.LinkOwner)
			refused := func(what string, err error) {
				t.Helper()
				if !errors.Is(err, trustedpath.ErrUntrustedPath) || !strings.Contains(err.Error(), link+" is a symbolic link") {
					t.Errorf("%s = %v; want a refusal naming the symlink %s", what, err, link)
				}
			}
			if l, err := PrepareTreeDir(link); err == nil {
				l.Release()
				t.Errorf("PrepareTreeDir(%s) succeeded", link)
			} else {
				refused("PrepareTreeDir", err)
			}
			if l, err := LockTreeDir(link); err == nil {
				l.Release()
				t.Errorf("LockTreeDir(%s) succeeded", link)
			} else {
				refused("LockTreeDir", err)
			}
			_, err := ResolveTreeDir(link)
			refused("ResolveTreeDir", err)
			if after := testutil.Listing(t, filepath.Dir(target)); after != before {
				t.Errorf("the target changed:\n%s\nwas:\n%s", after, before)
			}
		})
	}
}

// TestTreeLockThroughRootsSymlink: a symlink root owns in a directory only
// root can change is followed: the directory above its target is made,
// the lock is <target>.lock, and Release removes it, the tree directory
// and the directory made above it, and nothing else.
func TestTreeLockThroughRootsSymlink(t *testing.T) {
	base := t.TempDir()
	link, target := filepath.Join(base, "link"), filepath.Join(base, "run", "tree")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	l, err := PrepareTreeDir(link)
	if err != nil {
		t.Fatal(err)
	}
	if l.Dir() != target || !l.OwnDir() {
		t.Errorf("Dir() = %s, OwnDir() = %v; want %s, true", l.Dir(), l.OwnDir(), target)
	}
	if got, want := testutil.ReadTrim(t, target+".lock"), strconv.Itoa(os.Getpid())+"\nmade "+filepath.Dir(target); got != want {
		t.Errorf("lock file holds %q, want %q", got, want)
	}
	os.Mkdir(target, 0o755) // as the tree makes it
	l.Release()
	for _, gone := range []string{target, target + ".lock", filepath.Dir(target)} {
		if _, err := os.Lstat(gone); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s after Release: %v", gone, err)
		}
	}
	if _, err := os.Lstat(link); err != nil {
		t.Errorf("the symlink after Release: %v", err)
	}
}

// TestTreeLockAdoptsDirsOfDeadRun is issue 34's item 6: after a kill -9,
// a restart and a clean stop, the directory the first run made above the
// tree (/run/schedpolicyd) was left behind, since only the run that made
// a directory knew it. The lock file now names the directories made; a
// run that takes over a lock left behind adopts those that are ancestors
// of the tree and its clean stop removes them, and what the dead run made
// for a run after it is adopted again (a second crash). A lock file left
// behind that names anything else (a sibling, the tree itself, "/", a
// relative or unclean path) adopts nothing of it.
func TestTreeLockAdoptsDirsOfDeadRun(t *testing.T) {
	base := t.TempDir()
	run := filepath.Join(base, "run", "schedpolicyd")
	tree := filepath.Join(run, "sysfs")
	crash := func(l *TreeLock) { // as kill -9: the kernel drops the flock, nothing is removed
		l.f.Close()
		l.parent.Close()
	}

	first, err := PrepareTreeDir(tree)
	if err != nil {
		t.Fatal(err)
	}
	wantMade := []string{run, filepath.Join(base, "run")}
	if got := first.Made(); !slices.Equal(got, wantMade) {
		t.Fatalf("first run made %q, want %q", got, wantMade)
	}
	os.Mkdir(tree, 0o755) // as the tree makes it
	crash(first)

	// The second run made nothing itself; it adopts what the first made,
	// and says so in its own lock file for a third.
	second, err := PrepareTreeDir(tree)
	if err != nil {
		t.Fatal(err)
	}
	if got := second.Made(); !slices.Equal(got, wantMade) {
		t.Errorf("second run adopted %q, want %q", got, wantMade)
	}
	if got, want := testutil.ReadTrim(t, tree+".lock"), fmt.Sprintf("%d\nmade %s\nmade %s", os.Getpid(), wantMade[0], wantMade[1]); got != want {
		t.Errorf("lock file holds %q, want %q", got, want)
	}
	crash(second)

	third, err := PrepareTreeDir(tree)
	if err != nil {
		t.Fatal(err)
	}
	third.Release() // a clean stop
	for _, gone := range []string{tree, tree + ".lock", run, filepath.Join(base, "run")} {
		if _, err := os.Lstat(gone); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s after the clean stop: %v", gone, err)
		}
	}

	// A lock file left behind naming directories that are not the
	// tree's ancestors: none is adopted, none removed.
	if err := os.MkdirAll(run, 0o755); err != nil {
		t.Fatal(err)
	}
	sibling, other := filepath.Join(base, "sibling"), filepath.Join(run, "other")
	for _, d := range []string{sibling, other, tree} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	planted := "4242\nmade " + sibling + "\nmade " + other + "\nmade " + tree + "\nmade /\nmade run\nmade " + run + "/../sibling\n"
	if err := os.WriteFile(tree+".lock", []byte(planted), 0o644); err != nil {
		t.Fatal(err)
	}
	l, err := LockTreeDir(tree)
	if err != nil {
		t.Fatal(err)
	}
	if got := l.Made(); len(got) != 0 {
		t.Errorf("adopted %q from a lock file naming no ancestor", got)
	}
	l.Release()
	for _, kept := range []string{sibling, other, run} {
		if _, err := os.Lstat(kept); err != nil {
			t.Errorf("%s after Release: %v", kept, err)
		}
	}
	if _, err := os.Lstat(tree); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the tree directory a dead run left, empty, after Release: %v", err)
	}
}

// TestLockContent: the lock file's pid and "made" lines; garbage is left
// out, and at most maxMadeDirs directories are read.
func TestLockContent(t *testing.T) {
	for _, c := range []struct {
		in   string
		pid  int
		made []string
	}{
		{"", 0, nil},
		{"123\n", 123, nil},
		{"123", 123, nil},
		{"123\nmade /run/x\nbogus\nmade /run\n", 123, []string{"/run/x", "/run"}},
		{"x\nmade /a", 0, []string{"/a"}},
		{"1\n" + strings.Repeat("made /a\n", 40), 1, slices.Repeat([]string{"/a"}, maxMadeDirs)},
	} {
		lf := lockContent([]byte(c.in))
		if lf.pid != c.pid || !slices.Equal(lf.made, c.made) {
			t.Errorf("lockContent(%q) = %d %q, want %d %q", c.in, lf.pid, lf.made, c.pid, c.made)
		}
	}
}
