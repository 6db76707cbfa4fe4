package tree

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

type rejection struct {
	path string
	data string
	err  error
}

func servePlainTest(t *testing.T, h TreeHandler) (Tree, <-chan rejection) {
	t.Helper()
	rejected := make(chan rejection, 16)
	tree, err := ServeTree(TreeOptions{
		Dir:     filepath.Join(t.TempDir(), "run", "tree"),
		Files:   testTreeFiles,
		Handler: h,
		Backend: BackendPlain,
		OnPlainRejected: func(path string, data []byte, err error) {
			rejected <- rejection{path, string(data), err}
		},
	})
	if err != nil {
		t.Fatalf("ServeTree: %v", err)
	}
	t.Cleanup(func() { tree.Close() })
	if tree.Backend() != BackendPlain {
		t.Fatalf("Backend() = %q, want plain", tree.Backend())
	}
	return tree, rejected
}

// waitContent polls path for up to 2s until it holds want.
func waitContent(t *testing.T, path, want string) {
	t.Helper()
	deadline := time.After(2 * time.Second)
	for {
		b, err := os.ReadFile(path)
		if err == nil && string(b) == want {
			return
		}
		select {
		case <-deadline:
			t.Fatalf("%s = %q, %v; want %q within 2s", path, b, err, want)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

func waitRejection(t *testing.T, rejected <-chan rejection) rejection {
	t.Helper()
	select {
	case r := <-rejected:
		return r
	case <-time.After(2 * time.Second):
		t.Fatal("OnPlainRejected not called within 2s")
		return rejection{}
	}
}

func TestTreePlainFiles(t *testing.T) {
	tree, _ := servePlainTest(t, newFakeTreeHandler())
	for _, tc := range []struct {
		path, content string
		mode          os.FileMode
	}{
		{testCurrent, "balance\n", 0o644},
		{testAvailable, "performance balance powersaving\n", 0o444},
	} {
		full := filepath.Join(tree.Dir(), tc.path)
		if got := readString(t, full); got != tc.content {
			t.Errorf("%s = %q, want %q", tc.path, got, tc.content)
		}
		if fi, err := os.Stat(full); err != nil || fi.Mode() != tc.mode {
			t.Errorf("stat %s: %v, %v; want mode %v", tc.path, fi.Mode(), err, tc.mode)
		}
	}
	if fi, err := os.Stat(filepath.Join(tree.Dir(), "devices")); err != nil || fi.Mode() != os.ModeDir|0o755 {
		t.Errorf("stat devices: %v, %v", fi.Mode(), err)
	}
}

func TestTreePlainWrite(t *testing.T) {
	needBash(t)
	h := newFakeTreeHandler()
	tree, rejected := servePlainTest(t, h)
	cur := filepath.Join(tree.Dir(), testCurrent)

	if stderr, err := bash(t, "echo powersaving > "+cur); err != nil {
		t.Fatalf("echo: %v, %q", err, stderr)
	}
	deadline := time.After(2 * time.Second)
	for h.get(testCurrent) != "powersaving" {
		select {
		case <-deadline:
			t.Fatalf("handler value = %q, want powersaving", h.get(testCurrent))
		case <-time.After(10 * time.Millisecond):
		}
	}
	waitContent(t, cur, "powersaving\n")

	// Padded input is normalised to the handler's content.
	if _, err := bash(t, "printf '  performance junk' > "+cur); err != nil {
		t.Fatal(err)
	}
	waitContent(t, cur, "performance\n")

	// A same-content write still reaches the handler (sysfs calls store()).
	n := h.nwrites()
	if _, err := bash(t, "echo performance > "+cur); err != nil {
		t.Fatal(err)
	}
	deadline = time.After(2 * time.Second)
	for h.nwrites() == n {
		select {
		case <-deadline:
			t.Fatal("same-content write did not reach the handler")
		case <-time.After(10 * time.Millisecond):
		}
	}
	select {
	case r := <-rejected:
		t.Errorf("unexpected rejection %+v", r)
	default:
	}
}

func TestTreePlainRevert(t *testing.T) {
	needBash(t)
	h := newFakeTreeHandler()
	tree, rejected := servePlainTest(t, h)
	cur := filepath.Join(tree.Dir(), testCurrent)

	// Plain files cannot refuse: bash succeeds, the tree reverts.
	if stderr, err := bash(t, "echo bogus > "+cur); err != nil {
		t.Fatalf("echo: %v, %q", err, stderr)
	}
	r := waitRejection(t, rejected)
	if r.path != testCurrent || r.data != "bogus\n" || !errors.Is(r.err, syscall.EINVAL) {
		t.Errorf("rejection = %+v, want %s \"bogus\\n\" EINVAL", r, testCurrent)
	}
	waitContent(t, cur, "balance\n")
	if got := h.get(testCurrent); got != "balance" {
		t.Errorf("handler value = %q after bogus write", got)
	}

	// An emptied file is an empty write: rejected after the grace period.
	if err := os.Truncate(cur, 0); err != nil {
		t.Fatal(err)
	}
	r = waitRejection(t, rejected)
	if r.data != "" || !errors.Is(r.err, syscall.EINVAL) {
		t.Errorf("rejection = %+v, want empty EINVAL", r)
	}
	waitContent(t, cur, "balance\n")

	// Root can write the 0444 file; the tree reverts it with EACCES.
	avail := filepath.Join(tree.Dir(), testAvailable)
	if _, err := bash(t, "echo balance > "+avail); err != nil {
		t.Fatal(err)
	}
	r = waitRejection(t, rejected)
	if r.path != testAvailable || !errors.Is(r.err, syscall.EACCES) {
		t.Errorf("rejection = %+v, want %s EACCES", r, testAvailable)
	}
	waitContent(t, avail, "performance balance powersaving\n")

	// A removed file is put back.
	if err := os.Remove(cur); err != nil {
		t.Fatal(err)
	}
	waitContent(t, cur, "balance\n")
	if n := h.nwrites(); n != 0 {
		t.Errorf("handler accepted %d writes, want 0", n)
	}
}

func TestTreePlainChanged(t *testing.T) {
	h := newFakeTreeHandler()
	tree, rejected := servePlainTest(t, h)
	cur := filepath.Join(tree.Dir(), testCurrent)

	for _, v := range []string{"performance", "powersaving", "balance"} {
		h.set(testCurrent, v)
		if err := tree.Changed(); err != nil {
			t.Fatal(err)
		}
		if got := readString(t, cur); got != v+"\n" {
			t.Errorf("after Changed: %q, want %q", got, v+"\n")
		}
	}
	// The tree's own writes must not come back as user writes.
	time.Sleep(300 * time.Millisecond)
	if n := h.nwrites(); n != 0 {
		t.Errorf("own writes reached the handler %d times", n)
	}
	select {
	case r := <-rejected:
		t.Errorf("own write rejected: %+v", r)
	default:
	}
	if got := readString(t, cur); got != "balance\n" {
		t.Errorf("final content %q", got)
	}
}

func TestTreePlainClose(t *testing.T) {
	parent := t.TempDir()
	dir := filepath.Join(parent, "run", "tree")
	tree, err := ServeTree(TreeOptions{Dir: dir, Files: testTreeFiles, Handler: newFakeTreeHandler(), Backend: BackendPlain})
	if err != nil {
		t.Fatal(err)
	}
	if err := tree.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := tree.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if err := tree.Changed(); err != nil {
		t.Errorf("Changed after Close: %v", err)
	}
	if _, err := os.Stat(filepath.Join(parent, "run")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("created directories left behind: %v", err)
	}
}

// TestTreeAuto checks that "auto" picks FUSE where it works and that the
// result is usable either way.
func TestTreeAuto(t *testing.T) {
	tree, err := ServeTree(TreeOptions{Dir: filepath.Join(t.TempDir(), "tree"), Files: testTreeFiles, Handler: newFakeTreeHandler()})
	if err != nil {
		t.Fatal(err)
	}
	defer tree.Close()
	t.Logf("auto chose %s", tree.Backend())
	if got := readString(t, filepath.Join(tree.Dir(), testCurrent)); got != "balance\n" {
		t.Errorf("read = %q", got)
	}
	if f, err := os.OpenFile("/dev/fuse", os.O_RDWR, 0); err == nil && os.Geteuid() == 0 {
		f.Close()
		if tree.Backend() != BackendFUSE {
			t.Errorf("auto chose %s although /dev/fuse opens", tree.Backend())
		}
	}
}
