package tree

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/schedpolicyd/schedpolicyd/internal/testutil"
)

// What users other than root can hold open in a FUSE tree (issue 32, item
// 4): an open file keeps no copy of its content, one uid holds at most
// MaxOpenPerUID opens (EMFILE beyond) and all of them MaxOpenNonRoot
// (ENFILE), root is not bounded, and a closed open — also one of a process
// that is killed — frees its slot. The opens are made by a holder process
// (this test binary re-executed) from threads whose credentials alone are
// changed, so the kernel checks the permissions and sends the FUSE
// requests as that uid.

const testBig = "devices/system/cpu/sched_policy/workloads"

// bigContent is testBig's content: 64 KiB, like the workloads file of a
// few thousand workloads.
var bigContent = bytes.Repeat([]byte("workload-0123456789abcdef 0-3,8\n"), 2048)

// bigTreeHandler is fakeTreeHandler with testBig, whose content it makes
// afresh at every read (as the daemon's handler does); gen, when not 0,
// is written at its start, so that a test can tell generations apart.
type bigTreeHandler struct {
	*fakeTreeHandler
	mu  sync.Mutex
	gen int
}

func (h *bigTreeHandler) Read(path string) []byte {
	if path != testBig {
		return h.fakeTreeHandler.Read(path)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	b := append([]byte(nil), bigContent...)
	if h.gen != 0 {
		copy(b, fmt.Sprintf("gen-%06d", h.gen))
	}
	return b
}

func (h *bigTreeHandler) setGen(g int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.gen = g
}

var bigTreeFiles = append([]TreeFile{{Path: testBig, Mode: 0o444}}, testTreeFiles...)

// serveBigTree mounts a FUSE tree with testBig in a directory every uid
// may reach, skipping the test where FUSE or root is missing. opts may set
// the bounds.
func serveBigTree(t *testing.T, h TreeHandler, opts TreeOptions) *fuseTree {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: opens the tree as other uids")
	}
	testutil.NeedFUSE(t)
	base := t.TempDir()
	if err := os.Chmod(filepath.Dir(base), 0o755); err != nil { // t.TempDir's own 0700 parent
		t.Fatal(err)
	}
	opts.Dir, opts.Files, opts.Handler, opts.Backend = filepath.Join(base, "tree"), bigTreeFiles, h, BackendFUSE
	tree, err := ServeTree(opts)
	if errors.Is(err, syscall.EPERM) {
		t.Skipf("FUSE mount not permitted: %v", err)
	}
	if err != nil {
		t.Fatalf("ServeTree: %v", err)
	}
	t.Cleanup(func() { tree.Close() })
	return tree.(*fuseTree)
}

// nodeAt is the tree's file node at path.
func nodeAt(t *testing.T, tree *fuseTree, path string) *fileNode {
	t.Helper()
	in := &tree.root.Inode
	for _, name := range strings.Split(path, "/") {
		if in = in.GetChild(name); in == nil {
			t.Fatalf("no %s in the tree", path)
		}
	}
	return in.Operations().(*fileNode)
}

// holder is a process holding opens of tree files, as the uids it is told.
type holder struct {
	cmd *exec.Cmd
	in  io.WriteCloser
	out *bufio.Reader
}

// startHolder starts the holder process (TestTreeOpenHolderProcess); it is
// killed at cleanup.
func startHolder(t *testing.T) *holder {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestTreeOpenHolderProcess$")
	cmd.Env = append(os.Environ(), "SCHEDPOLICYD_TREE_HOLDER=1")
	cmd.Stderr = testutil.LogWriter(t)
	in, out := testutil.StartPiped(t, cmd)
	return &holder{cmd: cmd, in: in, out: out}
}

// kill ends the holder with SIGKILL (no close of its own) and reaps it.
func (h *holder) kill() {
	if h.cmd.ProcessState == nil {
		h.cmd.Process.Kill()
		h.cmd.Wait()
	}
}

// ask sends one command and returns the holder's answer's fields.
func (h *holder) ask(t *testing.T, cmd string) []string {
	t.Helper()
	if _, err := fmt.Fprintln(h.in, cmd); err != nil {
		t.Fatalf("holder: %s: %v", cmd, err)
	}
	line, err := h.out.ReadString('\n')
	if err != nil {
		t.Fatalf("holder: %s: no answer: %v", cmd, err)
	}
	f := strings.Fields(line)
	if len(f) == 0 || f[0] == "error" {
		t.Fatalf("holder: %s: %s", cmd, line)
	}
	return f
}

// open makes the holder open path n times as uid (gid uid), reading each
// open file to its end (a directory: listing it), until an open fails. It
// returns the group the opens held form, how many succeeded and the errno
// of the open that failed (0 if none).
func (h *holder) open(t *testing.T, uid, n int, path string) (group string, opened int, errno syscall.Errno) {
	t.Helper()
	f := h.ask(t, fmt.Sprintf("open %d %d %s", uid, n, path))
	opened, _ = strconv.Atoi(f[2])
	e, _ := strconv.Atoi(f[3])
	return f[1], opened, syscall.Errno(e)
}

// close makes the holder close the descriptors of group.
func (h *holder) close(t *testing.T, group string) {
	t.Helper()
	h.ask(t, "close "+group)
}

// TestTreeOpenHolderProcess is the holder of the tests below; it does
// nothing unless run as that. Commands, one a line on stdin:
//
//	open UID N PATH  -> "opened GROUP K ERRNO"
//	close GROUP      -> "closed GROUP"
//
// Each open is made on a thread of its own whose credentials (euid, egid,
// no supplementary groups) alone are set to UID, and that thread ends with
// it; the descriptors stay the process's. At the end of stdin it exits.
func TestTreeOpenHolderProcess(t *testing.T) {
	if os.Getenv("SCHEDPOLICYD_TREE_HOLDER") == "" {
		return
	}
	groups := map[string][]int{}
	sc := bufio.NewScanner(os.Stdin)
	for n := 0; sc.Scan(); n++ {
		f := strings.Fields(sc.Text())
		switch {
		case len(f) == 4 && f[0] == "open":
			uid, _ := strconv.Atoi(f[1])
			count, _ := strconv.Atoi(f[2])
			fds, errno := openAs(uid, count, f[3])
			g := strconv.Itoa(n)
			groups[g] = fds
			fmt.Printf("opened %s %d %d\n", g, len(fds), int(errno))
		case len(f) == 2 && f[0] == "close":
			for _, fd := range groups[f[1]] {
				unix.Close(fd)
			}
			delete(groups, f[1])
			fmt.Printf("closed %s\n", f[1])
		default:
			fmt.Printf("error: bad command %q\n", sc.Text())
		}
	}
	os.Exit(0)
}

// openAs opens path up to n times as uid (see TestTreeOpenHolderProcess),
// reading each file to its end or listing each directory, and stops at
// the first failure, whose errno it returns.
func openAs(uid, n int, path string) (fds []int, errno syscall.Errno) {
	open := func() error {
		buf := make([]byte, 128*1024)
		for range n {
			fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
			if err != nil {
				return err
			}
			fds = append(fds, fd)
			var st unix.Stat_t
			if unix.Fstat(fd, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFDIR {
				if _, err := unix.Getdents(fd, buf); err != nil {
					return err
				}
				continue
			}
			for {
				m, err := unix.Read(fd, buf)
				if err != nil {
					return err
				}
				if m == 0 {
					break
				}
			}
		}
		return nil
	}
	// Root keeps its groups; another uid opens from a thread of its own
	// with that uid's credentials alone.
	var err error
	if uid == 0 {
		err = open()
	} else {
		err = testutil.AsUID(uid, open)
	}
	if err != nil {
		errno = err.(syscall.Errno)
	}
	return fds, errno
}

// heapInUse is the live heap after a full collection, in bytes.
func heapInUse() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// waitHeld waits (a hang guard, not a timing claim) until uid holds want
// opens of tree: the kernel's RELEASE comes after close(2) returns.
func waitHeld(t *testing.T, tree *fuseTree, uid uint32, want int) {
	t.Helper()
	testutil.Eventually(t, fmt.Sprintf("uid %d to hold %d opens", uid, want), func() (bool, string) {
		got := tree.opens.held(uid)
		return got == want, fmt.Sprintf("%d held", got)
	})
}

// TestTreeFUSEOpenBoundPerUID: uid 65534 holds MaxOpenPerUID (128) opens
// of a 64 KiB file, each read to its end, and the next open fails with
// EMFILE, of the file and of a directory; meanwhile root (beyond 128) and
// another uid still open it. The 128 open files share one copy of the
// content: the file made one generation, and the daemon's heap grew by
// far less than a copy each. Closed opens free their slots, and so do
// those of a holder killed with SIGKILL.
func TestTreeFUSEOpenBoundPerUID(t *testing.T) {
	tree := serveBigTree(t, &bigTreeHandler{fakeTreeHandler: newFakeTreeHandler()}, TreeOptions{})
	big := filepath.Join(tree.Dir(), testBig)
	h := startHolder(t)
	if _, n, errno := h.open(t, 0, 1, big); n != 1 {
		t.Fatalf("root cannot open %s: %v", big, errno)
	}

	before := heapInUse()
	g, n, errno := h.open(t, 65534, MaxOpenPerUID, big)
	grown := int64(heapInUse()) - int64(before)
	if n != MaxOpenPerUID {
		t.Fatalf("uid 65534 opened %s %d times, then %v; want %d", testBig, n, errno, MaxOpenPerUID)
	}
	node := nodeAt(t, tree, testBig)
	node.genMu.Lock()
	gens := node.generations
	node.genMu.Unlock()
	if gens != 1 {
		t.Errorf("%d open files that read one content made %d copies of it, want 1 shared", n+1, gens)
	}
	perOpen := grown / int64(n)
	t.Logf("heap grew %d bytes for %d open files of %d bytes each: %d a file", grown, n, len(bigContent), perOpen)
	if perOpen > int64(len(bigContent))/8 {
		t.Errorf("each open file costs the daemon %d bytes of heap, for a content of %d bytes: want far less than a copy", perOpen, len(bigContent))
	}
	if _, n, errno := h.open(t, 65534, 8, big); n != 0 || errno != syscall.EMFILE {
		t.Errorf("uid 65534 holding %d opens opened %d more, then %v; want none, EMFILE", MaxOpenPerUID, n, errno)
	}
	if got := tree.opens.held(65534); got != MaxOpenPerUID {
		t.Errorf("the tree counts %d opens of uid 65534, want %d", got, MaxOpenPerUID)
	}
	if _, n, errno := h.open(t, 65534, 1, filepath.Dir(big)); n != 0 || errno != syscall.EMFILE {
		t.Errorf("uid 65534 at its bound opened a directory: %d, %v; want EMFILE", n, errno)
	}

	if _, n, errno := h.open(t, 0, MaxOpenPerUID+72, big); n != MaxOpenPerUID+72 {
		t.Errorf("root opened %d times (%v), want %d: root is not bounded", n, errno, MaxOpenPerUID+72)
	}
	other, n, errno := h.open(t, 4242, 2, big)
	if n != 2 {
		t.Errorf("uid 4242 opened %d times (%v) while uid 65534 is at its bound, want 2", n, errno)
	}
	if _, n, errno := h.open(t, 4242, 1, filepath.Dir(big)); n != 1 {
		t.Errorf("uid 4242 cannot open a directory: %v", errno)
	}

	// Closed: the slots are free again.
	h.close(t, g)
	h.close(t, other)
	waitHeld(t, tree, 65534, 0)
	waitHeld(t, tree, 4242, 1)
	if _, n, errno := h.open(t, 65534, MaxOpenPerUID, big); n != MaxOpenPerUID {
		t.Errorf("uid 65534 opened %d times (%v) after closing its opens, want %d", n, errno, MaxOpenPerUID)
	}

	// Killed with its opens held: the kernel releases them all.
	h.kill()
	waitHeld(t, tree, 65534, 0)
	waitHeld(t, tree, 4242, 0)
	waitHeld(t, tree, 0, 0)
	h2 := startHolder(t)
	if _, n, errno := h2.open(t, 65534, MaxOpenPerUID, big); n != MaxOpenPerUID {
		t.Errorf("uid 65534 opened %d times (%v) after its holder was killed, want %d", n, errno, MaxOpenPerUID)
	}
}

// TestTreeFUSEOpenBoundAllUsers: with bounds of 4 a uid and 10 for all
// uids other than root, uids 5001 and 5002 hold 4 each, uid 5003 gets 2
// and then ENFILE; root still opens. A closed open gives the slot back.
func TestTreeFUSEOpenBoundAllUsers(t *testing.T) {
	tree := serveBigTree(t, newFakeTreeHandler(), TreeOptions{maxOpenPerUID: 4, maxOpenNonRoot: 10})
	cur := filepath.Join(tree.Dir(), testCurrent)
	h := startHolder(t)
	for _, uid := range []int{5001, 5002} {
		if _, n, errno := h.open(t, uid, 5, cur); n != 4 || errno != syscall.EMFILE {
			t.Fatalf("uid %d: %d opens, then %v; want 4, then EMFILE", uid, n, errno)
		}
	}
	g, n, errno := h.open(t, 5003, 4, cur)
	if n != 2 || errno != syscall.ENFILE {
		t.Fatalf("uid 5003: %d opens, then %v; want 2, then ENFILE (10 held by uids other than root)", n, errno)
	}
	if _, n, errno := h.open(t, 0, 3, cur); n != 3 {
		t.Errorf("root: %d opens (%v), want 3", n, errno)
	}
	h.close(t, g)
	waitHeld(t, tree, 5003, 0)
	if _, n, errno := h.open(t, 5004, 2, cur); n != 2 {
		t.Errorf("uid 5004 after uid 5003 closed 2: %d opens (%v), want 2", n, errno)
	}
}

// TestTreeFUSEReadIsOneGeneration: the content of an open file is made at
// its read at offset 0 and later offsets read that same generation, even
// after the handler's content changed and another open file read the new
// one (shared copies are never changed); the first file's next read at 0
// sees the new content.
func TestTreeFUSEReadIsOneGeneration(t *testing.T) {
	h := &bigTreeHandler{fakeTreeHandler: newFakeTreeHandler(), gen: 1}
	tree := serveBigTree(t, h, TreeOptions{})
	big := filepath.Join(tree.Dir(), testBig)
	a, err := os.Open(big)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	head := make([]byte, 10)
	if _, err := io.ReadFull(a, head); err != nil || string(head) != "gen-000001" {
		t.Fatalf("first read: %q, %v", head, err)
	}
	h.setGen(2)
	b, err := os.ReadFile(big)
	if err != nil || !bytes.HasPrefix(b, []byte("gen-000002")) {
		t.Fatalf("another open file after the change: %.10q, %v; want gen-000002", b, err)
	}
	rest, err := io.ReadAll(a)
	if err != nil {
		t.Fatal(err)
	}
	if want := bigContent[10:]; !bytes.Equal(rest, want) {
		t.Errorf("the rest of the first open file (%d bytes) is not its own generation's (%d bytes)", len(rest), len(want))
	}
	again := make([]byte, 10)
	if _, err := a.ReadAt(again, 0); err != nil || string(again) != "gen-000002" {
		t.Errorf("the first open file read again at 0: %q, %v; want gen-000002", again, err)
	}
}

// TestOpenSlotsBounds: the defaults are MaxOpenPerUID and MaxOpenNonRoot,
// and a release without a matching open (never sent by the kernel) changes
// no count.
func TestOpenSlotsBounds(t *testing.T) {
	var s openSlots
	s.init(0, 0)
	if s.perUID != MaxOpenPerUID || s.nonRootMax != MaxOpenNonRoot || MaxOpenPerUID != 128 || MaxOpenNonRoot != 4096 {
		t.Errorf("default bounds %d, %d; want 128 and 4096, as documented", s.perUID, s.nonRootMax)
	}
	s.give(7)
	if s.held(7) != 0 || s.nonRoot != 0 {
		t.Errorf("a release without an open changed the counts: %d, %d", s.held(7), s.nonRoot)
	}
}
