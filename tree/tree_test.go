package tree

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/schedpolicyd/schedpolicyd/internal/testutil"
)

const (
	testCurrent   = "devices/system/cpu/sched_policy/current_sched_policy"
	testAvailable = "devices/system/cpu/sched_policy/available_sched_policy"
)

var testTreeFiles = []TreeFile{
	{Path: testCurrent, Mode: 0o644},
	{Path: testAvailable, Mode: 0o444},
}

// fakeTreeHandler is an in-memory handler whose Write accepts only the three
// policies, parsed like sscanf("%15s") (the store of the 2013 patch 10,
// docs/SOURCES.md §1).
type fakeTreeHandler struct {
	mu     sync.Mutex
	vals   map[string]string
	writes []string // raw data of accepted writes
}

func newFakeTreeHandler() *fakeTreeHandler {
	return &fakeTreeHandler{vals: map[string]string{
		testCurrent:   "balance",
		testAvailable: "performance balance powersaving",
	}}
}

func (h *fakeTreeHandler) Read(path string) []byte {
	h.mu.Lock()
	defer h.mu.Unlock()
	return []byte(h.vals[path] + "\n")
}

func (h *fakeTreeHandler) Write(path string, data []byte) error {
	if path != testCurrent {
		return syscall.EACCES
	}
	fields := strings.Fields(string(data))
	if len(fields) == 0 {
		return syscall.EINVAL
	}
	tok := fields[0]
	if len(tok) > 15 {
		tok = tok[:15]
	}
	switch tok {
	case "performance", "balance", "powersaving":
	default:
		return syscall.EINVAL
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.vals[path] = tok
	h.writes = append(h.writes, string(data))
	return nil
}

func (h *fakeTreeHandler) set(path, v string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.vals[path] = v
}

func (h *fakeTreeHandler) get(path string) string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.vals[path]
}

func (h *fakeTreeHandler) nwrites() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.writes)
}

// serveTestFUSE mounts the test tree with the FUSE backend in a temporary
// directory, skipping the test if FUSE cannot be used here.
func serveTestFUSE(t *testing.T, h TreeHandler) Tree {
	t.Helper()
	return serveTestFUSEAt(t, filepath.Join(t.TempDir(), "tree"), h)
}

func serveTestFUSEAt(t *testing.T, dir string, h TreeHandler) Tree {
	t.Helper()
	testutil.NeedFUSE(t)
	tree, err := ServeTree(TreeOptions{Dir: dir, Files: testTreeFiles, Handler: h, Backend: BackendFUSE})
	if errors.Is(err, syscall.EPERM) {
		t.Skipf("FUSE mount not permitted: %v", err)
	}
	if err != nil {
		t.Fatalf("ServeTree: %v", err)
	}
	t.Cleanup(func() { tree.Close() })
	if tree.Backend() != BackendFUSE {
		t.Fatalf("Backend() = %q, want fuse", tree.Backend())
	}
	return tree
}

// bash runs script with bash (never sh: dash reports every write error as
// "I/O error", docs/SOURCES.md §10) and returns its stderr.
func bash(t *testing.T, script string) (string, error) {
	t.Helper()
	var stderr bytes.Buffer
	cmd := exec.Command("bash", "-c", script)
	cmd.Stderr = &stderr
	err := cmd.Run()
	return stderr.String(), err
}

func needBash(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skipf("bash not found: %v", err)
	}
}

func readString(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read %s: %v", path, err)
	}
	return string(b)
}

// mountedAt reports whether dir is a mount point in /proc/self/mountinfo.
func mountedAt(t *testing.T, dir string) bool {
	t.Helper()
	_, mounted, err := mountAt(dir)
	if err != nil {
		t.Fatal(err)
	}
	return mounted
}

func TestTreeFUSERead(t *testing.T) {
	h := newFakeTreeHandler()
	tree := serveTestFUSE(t, h)
	cur := filepath.Join(tree.Dir(), testCurrent)

	if got := readString(t, cur); got != "balance\n" {
		t.Errorf("read = %q, want %q", got, "balance\n")
	}
	if got := readString(t, filepath.Join(tree.Dir(), testAvailable)); got != "performance balance powersaving\n" {
		t.Errorf("read available = %q", got)
	}
	// The handler's value changes behind the tree's back: the very next
	// read must show it (direct I/O, zero timeouts, size 4096 vs 12 bytes).
	for _, v := range []string{"performance", "powersaving", "balance"} {
		h.set(testCurrent, v)
		if err := tree.Changed(); err != nil {
			t.Fatal(err)
		}
		if got := readString(t, cur); got != v+"\n" {
			t.Errorf("after change to %s: read = %q", v, got)
		}
	}
	// cat, through the real kernel path.
	needBash(t)
	out, err := exec.Command("cat", cur).Output()
	if err != nil || string(out) != "balance\n" {
		t.Errorf("cat = %q, %v", out, err)
	}
}

func TestTreeFUSEShellWrite(t *testing.T) {
	needBash(t)
	h := newFakeTreeHandler()
	tree := serveTestFUSE(t, h)
	cur := filepath.Join(tree.Dir(), testCurrent)

	if stderr, err := bash(t, "echo powersaving > "+cur); err != nil {
		t.Fatalf("echo powersaving: %v, stderr %q", err, stderr)
	}
	if got := h.get(testCurrent); got != "powersaving" {
		t.Errorf("handler value = %q, want powersaving", got)
	}
	if got := readString(t, cur); got != "powersaving\n" {
		t.Errorf("read back = %q", got)
	}

	stderr, err := bash(t, "echo bogus > "+cur)
	if err == nil {
		t.Fatal("echo bogus succeeded")
	}
	t.Logf("bash stderr for bogus: %q", stderr)
	if !strings.Contains(stderr, "Invalid argument") {
		t.Errorf("stderr = %q, want it to contain %q", stderr, "Invalid argument")
	}
	if got := readString(t, cur); got != "powersaving\n" {
		t.Errorf("after bogus write: read = %q", got)
	}

	// %15s: surrounding whitespace and trailing tokens are accepted.
	if stderr, err := bash(t, "printf '  performance junk\\n' > "+cur); err != nil {
		t.Fatalf("printf: %v, stderr %q", err, stderr)
	}
	if got := readString(t, cur); got != "performance\n" {
		t.Errorf("after padded write: read = %q", got)
	}
	if n := h.nwrites(); n != 2 {
		t.Errorf("handler accepted %d writes, want 2", n)
	}
}

func TestTreeFUSEWriteErrors(t *testing.T) {
	h := newFakeTreeHandler()
	tree := serveTestFUSE(t, h)
	cur := filepath.Join(tree.Dir(), testCurrent)
	avail := filepath.Join(tree.Dir(), testAvailable)

	// Read-only: EACCES at open, even for root (like sysfs).
	for _, flag := range []int{os.O_WRONLY, os.O_RDWR, os.O_WRONLY | os.O_TRUNC} {
		f, err := os.OpenFile(avail, flag, 0)
		if err == nil {
			f.Close()
			t.Errorf("OpenFile(%#x) of 0444 file succeeded", flag)
		} else if !errors.Is(err, syscall.EACCES) {
			t.Errorf("OpenFile(%#x) of 0444 file: %v, want EACCES", flag, err)
		}
	}
	if got := readString(t, avail); got != "performance balance powersaving\n" {
		t.Errorf("available after failed opens = %q", got)
	}

	f, err := os.OpenFile(cur, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	// More than 4096 bytes: EINVAL before the handler.
	long := bytes.Repeat([]byte("performance "), 417)[:5000]
	if _, err := f.Write(long); !errors.Is(err, syscall.EINVAL) {
		t.Errorf("5000-byte write: %v, want EINVAL", err)
	}
	// Exactly 4096 bytes of garbage reaches the handler, which says EINVAL.
	if _, err := f.Write(bytes.Repeat([]byte("x"), 4096)); !errors.Is(err, syscall.EINVAL) {
		t.Errorf("4096-byte garbage write: %v, want EINVAL", err)
	}
	// Empty token.
	if _, err := f.Write([]byte(" \n")); !errors.Is(err, syscall.EINVAL) {
		t.Errorf("blank write: %v, want EINVAL", err)
	}
	// The offset is ignored: two successive writes are two values.
	for _, v := range []string{"performance\n", "powersaving\n"} {
		if n, err := f.Write([]byte(v)); err != nil || n != len(v) {
			t.Errorf("write %q = %d, %v", v, n, err)
		}
		if got := h.get(testCurrent) + "\n"; got != v {
			t.Errorf("handler value = %q, want %q", got, v)
		}
	}
	if n := h.nwrites(); n != 2 {
		t.Errorf("handler accepted %d writes, want 2", n)
	}

	// A non-errno handler error becomes EIO.
	tree2 := serveTestFUSE(t, errTreeHandler{errors.New("boom")})
	f2, err := os.OpenFile(filepath.Join(tree2.Dir(), testCurrent), os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f2.Close()
	if _, err := f2.Write([]byte("balance\n")); !errors.Is(err, syscall.EIO) {
		t.Errorf("write with plain handler error: %v, want EIO", err)
	}
}

type errTreeHandler struct{ err error }

func (h errTreeHandler) Read(string) []byte         { return []byte("x\n") }
func (h errTreeHandler) Write(string, []byte) error { return h.err }

func TestTreeFUSEShellReadOnly(t *testing.T) {
	needBash(t)
	tree := serveTestFUSE(t, newFakeTreeHandler())
	stderr, err := bash(t, "echo balance > "+filepath.Join(tree.Dir(), testAvailable))
	if err == nil {
		t.Fatal("echo to 0444 file succeeded")
	}
	t.Logf("bash stderr for 0444 file: %q", stderr)
	if !strings.Contains(stderr, "Permission denied") {
		t.Errorf("stderr = %q, want Permission denied", stderr)
	}
}

func TestTreeFUSEStatAndList(t *testing.T) {
	tree := serveTestFUSE(t, newFakeTreeHandler())
	for _, tc := range []struct {
		path string
		mode os.FileMode
		size int64
	}{
		{"", os.ModeDir | 0o755, -1},
		{"devices", os.ModeDir | 0o755, -1},
		{"devices/system/cpu/sched_policy", os.ModeDir | 0o755, -1},
		{testCurrent, 0o644, 4096},
		{testAvailable, 0o444, 4096},
	} {
		fi, err := os.Stat(filepath.Join(tree.Dir(), tc.path))
		if err != nil {
			t.Errorf("stat %q: %v", tc.path, err)
			continue
		}
		if fi.Mode() != tc.mode {
			t.Errorf("stat %q: mode %v, want %v", tc.path, fi.Mode(), tc.mode)
		}
		if tc.size >= 0 && fi.Size() != tc.size {
			t.Errorf("stat %q: size %d, want %d", tc.path, fi.Size(), tc.size)
		}
		if st := fi.Sys().(*syscall.Stat_t); st.Uid != 0 || st.Gid != 0 {
			t.Errorf("stat %q: owner %d:%d, want 0:0", tc.path, st.Uid, st.Gid)
		}
	}

	out, err := exec.Command("ls", filepath.Join(tree.Dir(), "devices/system/cpu/sched_policy")).Output()
	if err != nil {
		t.Fatalf("ls: %v", err)
	}
	if got, want := strings.Fields(string(out)), []string{"available_sched_policy", "current_sched_policy"}; strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("ls = %q, want %q", got, want)
	}
	if _, err := os.Stat(filepath.Join(tree.Dir(), "devices/nope")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("stat of a missing name: %v, want ENOENT", err)
	}
	if err := os.Mkdir(filepath.Join(tree.Dir(), "devices/new"), 0o755); err == nil {
		t.Error("mkdir inside the tree succeeded")
	}
	if err := os.Chmod(filepath.Join(tree.Dir(), testAvailable), 0o666); err == nil {
		t.Error("chmod of an attribute succeeded")
	}
}

func TestTreeFUSEClose(t *testing.T) {
	h := newFakeTreeHandler()
	tree := serveTestFUSE(t, h)
	dir := tree.Dir()
	if !mountedAt(t, dir) {
		t.Fatalf("%s not in /proc/self/mountinfo after ServeTree", dir)
	}
	if err := tree.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if mountedAt(t, dir) {
		t.Errorf("%s still mounted after Close", dir)
	}
	if err := tree.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if ents, err := os.ReadDir(dir); err != nil || len(ents) != 0 {
		t.Errorf("mount point after Close: %v, %v; want empty dir", ents, err)
	}
}

// TestTreeFUSECloseBusy unmounts while a shell has its cwd inside the tree:
// Close must fall back to a lazy detach and still return promptly.
func TestTreeFUSECloseBusy(t *testing.T) {
	needBash(t)
	tree := serveTestFUSE(t, newFakeTreeHandler())
	dir := tree.Dir()
	inside := filepath.Join(dir, "devices/system")
	cmd := exec.Command("bash", "-c", "cd "+inside+" && exec sleep 30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		cmd.Process.Kill()
		cmd.Wait()
	}()
	cwdLink := "/proc/" + strconv.Itoa(cmd.Process.Pid) + "/cwd"
	deadline := time.Now().Add(2 * time.Second)
	for {
		if cwd, _ := os.Readlink(cwdLink); cwd == inside {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("shell did not enter the tree")
		}
		time.Sleep(10 * time.Millisecond)
	}

	done := make(chan error, 1)
	go func() { done <- tree.Close() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Close: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not return within 10s")
	}
	if mountedAt(t, dir) {
		t.Errorf("%s still mounted after Close", dir)
	}
}

// TestTreeFUSEReplacesLiveMount serves a second tree on a directory where a
// first one is still mounted (as after a restart racing the old instance):
// the new tree detaches the old mount, and closing the old tree afterwards
// leaves the new mount alone.
func TestTreeFUSEReplacesLiveMount(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "tree")
	h1 := newFakeTreeHandler()
	old := serveTestFUSEAt(t, dir, h1)
	h2 := newFakeTreeHandler()
	h2.set(testCurrent, "performance")
	cur := serveTestFUSEAt(t, dir, h2)
	if got := readString(t, filepath.Join(dir, testCurrent)); got != "performance\n" {
		t.Errorf("read = %q, want the new tree's performance", got)
	}
	if err := old.Close(); err != nil {
		t.Errorf("old Close: %v", err)
	}
	if got := readString(t, filepath.Join(dir, testCurrent)); got != "performance\n" {
		t.Errorf("after closing the old tree: read = %q", got)
	}
	if err := cur.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	if mountedAt(t, dir) {
		t.Errorf("%s still mounted", dir)
	}
}

// TestTreeFUSEStaleMount kills a process serving the tree (SIGKILL, no
// cleanup), checks that the mount is left stale (ENOTCONN), and serves the
// tree again on the same directory.
func TestTreeFUSEStaleMount(t *testing.T) {
	// Make sure FUSE works here before spawning the helper.
	probe := serveTestFUSE(t, newFakeTreeHandler())
	probe.Close()

	dir := filepath.Join(t.TempDir(), "tree")
	cmd := exec.Command(os.Args[0], "-test.run=^TestTreeHelperProcess$", "-test.v")
	cmd.Env = append(os.Environ(), "SCHEDPOLICYD_TREE_HELPER_DIR="+dir)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ready := make(chan string, 1)
	go func() {
		var out []byte
		buf := make([]byte, 256)
		for {
			n, err := stdout.Read(buf)
			out = append(out, buf[:n]...)
			if bytes.Contains(out, []byte("TREE-READY")) || bytes.Contains(out, []byte("TREE-FAILED")) || err != nil {
				ready <- string(out)
				return
			}
		}
	}()
	select {
	case out := <-ready:
		if !strings.Contains(out, "TREE-READY") {
			cmd.Process.Kill()
			cmd.Wait()
			t.Fatalf("helper failed: %s", out)
		}
	case <-time.After(20 * time.Second):
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatal("helper did not mount within 20s")
	}
	cmd.Process.Kill()
	cmd.Wait()

	var st syscall.Stat_t
	if err := syscall.Stat(dir, &st); !errors.Is(err, syscall.ENOTCONN) {
		t.Errorf("stat of the orphaned mount: %v, want ENOTCONN", err)
	}
	t.Cleanup(func() { syscall.Unmount(dir, syscall.MNT_DETACH) })

	h := newFakeTreeHandler()
	tree := serveTestFUSEAt(t, dir, h)
	if got := readString(t, filepath.Join(dir, testCurrent)); got != "balance\n" {
		t.Errorf("read after recovery = %q", got)
	}
	if err := tree.Close(); err != nil {
		t.Fatal(err)
	}
	if mountedAt(t, dir) {
		t.Errorf("%s still mounted after Close", dir)
	}
}

// TestTreeHelperProcess is the crashing server of TestTreeFUSEStaleMount; it
// does nothing unless run as that helper.
func TestTreeHelperProcess(t *testing.T) {
	dir := os.Getenv("SCHEDPOLICYD_TREE_HELPER_DIR")
	if dir == "" {
		return
	}
	_, err := ServeTree(TreeOptions{Dir: dir, Files: testTreeFiles, Handler: newFakeTreeHandler(), Backend: BackendFUSE})
	if err != nil {
		os.Stdout.WriteString("TREE-FAILED " + err.Error() + "\n")
		os.Exit(1)
	}
	os.Stdout.WriteString("TREE-READY\n")
	time.Sleep(time.Minute)
	os.Exit(1)
}

func TestTreeRejectsBadOptions(t *testing.T) {
	h := newFakeTreeHandler()
	for name, opts := range map[string]TreeOptions{
		"sys":        {Dir: "/sys/devices/system/cpu/sched_policy", Files: testTreeFiles, Handler: h},
		"sys root":   {Dir: "/sys", Files: testTreeFiles, Handler: h},
		"sys dotdot": {Dir: "/tmp/../sys/x", Files: testTreeFiles, Handler: h},
		"no dir":     {Files: testTreeFiles, Handler: h},
		"no handler": {Dir: t.TempDir(), Files: testTreeFiles},
		"no files":   {Dir: t.TempDir(), Handler: h},
		"duplicate":  {Dir: t.TempDir(), Files: []TreeFile{{"a", 0o644}, {"./a", 0o644}}, Handler: h},
		"file/dir":   {Dir: t.TempDir(), Files: []TreeFile{{"a", 0o644}, {"a/b", 0o644}}, Handler: h},
		"empty path": {Dir: t.TempDir(), Files: []TreeFile{{"/", 0o644}}, Handler: h},
		"backend":    {Dir: t.TempDir(), Files: testTreeFiles, Handler: h, Backend: "nfs"},
	} {
		if tree, err := ServeTree(opts); err == nil {
			tree.Close()
			t.Errorf("%s: ServeTree succeeded", name)
		} else if tree != nil {
			t.Errorf("%s: non-nil Tree with error %v", name, err)
		}
	}
	// Paths are cleaned: "../x" stays inside the tree.
	if _, err := cleanTreeFiles([]TreeFile{{"../../x", 0o644}}); err != nil {
		t.Errorf("cleanTreeFiles(../../x): %v", err)
	} else if got, _ := cleanTreeFiles([]TreeFile{{"../../x", 0o644}}); got[0].Path != "x" {
		t.Errorf("cleanTreeFiles(../../x) = %q, want x", got[0].Path)
	}
}

func TestTreeUnescapeMountinfo(t *testing.T) {
	for in, want := range map[string]string{
		`/run/a\040b`: "/run/a b",
		`/x\134y`:     `/x\y`,
		`/plain`:      "/plain",
		`/tail\04`:    `/tail\04`,
	} {
		if got := unescapeMountinfo(in); got != want {
			t.Errorf("unescapeMountinfo(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestTreeFUSEShapeIsFixed: like sysfs, nothing can be removed, created or
// renamed in the tree; each attempt fails with EPERM and every file stays.
func TestTreeFUSEShapeIsFixed(t *testing.T) {
	tree := serveTestFUSE(t, newFakeTreeHandler())
	cur := filepath.Join(tree.Dir(), testCurrent)
	dir := filepath.Dir(cur)
	attempts := map[string]func() error{
		"unlink file":    func() error { return os.Remove(cur) },
		"rmdir dir":      func() error { return syscall.Rmdir(dir) },
		"rmdir top":      func() error { return syscall.Rmdir(filepath.Join(tree.Dir(), "devices")) },
		"mkdir":          func() error { return os.Mkdir(filepath.Join(dir, "new"), 0o755) },
		"create":         func() error { f, err := os.Create(filepath.Join(dir, "new")); f.Close(); return err },
		"rename":         func() error { return os.Rename(cur, filepath.Join(dir, "moved")) },
		"symlink":        func() error { return os.Symlink("x", filepath.Join(dir, "link")) },
		"hard link":      func() error { return os.Link(cur, filepath.Join(dir, "link")) },
		"remove the lot": func() error { return os.RemoveAll(filepath.Join(tree.Dir(), "devices")) },
	}
	for name, try := range attempts {
		if err := try(); !errors.Is(err, syscall.EPERM) {
			t.Errorf("%s: err = %v, want EPERM", name, err)
		}
		if _, err := os.Stat(cur); err != nil {
			t.Fatalf("after %s: %v", name, err)
		}
	}
	entries, err := os.ReadDir(dir)
	if err != nil || len(entries) != len(testTreeFiles) {
		t.Errorf("directory holds %d entries (%v), want the %d tree files", len(entries), err, len(testTreeFiles))
	}
}
