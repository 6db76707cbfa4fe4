package daemon

// Bad input on the tree: the daemon's real handler behind a real
// FUSE mount, one write(2) per row, and what the writer sees.

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"

	"github.com/schedpolicyd/schedpolicyd/daemon/statefile"
	"github.com/schedpolicyd/schedpolicyd/internal/testutil"
	"github.com/schedpolicyd/schedpolicyd/policy"
)

func needFUSE(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount FUSE")
	}
	testutil.NeedFUSE(t)
}

// writeOnce opens path for writing and makes exactly one write(2).
func writeOnce(path string, data []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = f.Write(data)
	return err
}

func TestTreeBadInput(t *testing.T) {
	needFUSE(t)
	m := newMockLaptop(t)
	d := m.startWith(t, func(c *Config) { c.TreeBackend = "fuse" })
	dir := filepath.Join(m.tree, TreePrefix)
	stateBefore, _ := os.ReadFile(filepath.Join(m.state, statefile.StateFile))

	for _, c := range []struct {
		file string
		data []byte
		want error // nil, or the errno the writer sees
	}{
		// Refused: nothing may change.
		{fileCurrent, []byte("bogus\n"), syscall.EINVAL},
		{fileCurrent, []byte("Performance\n"), syscall.EINVAL},          // case-sensitive
		{fileCurrent, []byte("powersavingXXXXX\n"), syscall.EINVAL},     // 16 bytes: longer than %15s
		{fileCurrent, []byte("\n"), syscall.EINVAL},                     // empty
		{fileCurrent, []byte("\x00\xff\xfe garbage"), syscall.EINVAL},   // binary
		{fileCurrent, []byte("power\x00saving"), syscall.EINVAL},        // NUL inside
		{fileCurrent, bytes.Repeat([]byte("a"), 4096), syscall.EINVAL},  // a page of garbage
		{fileCurrent, bytes.Repeat([]byte("a "), 2500), syscall.EINVAL}, // more than a page
		{filePowerAware, []byte("3\n"), syscall.EINVAL},                 // out of range
		{filePowerAware, []byte("-1\n"), syscall.EINVAL},                //
		{filePowerAware, []byte("01\n"), syscall.EINVAL},                // not the kernel's spelling
		{filePowerAware, []byte("1.0\n"), syscall.EINVAL},               //
		{filePowerAwarePolicy, []byte("performance\n"), syscall.EINVAL}, // not a power-aware policy
		{fileAvailable, []byte("performance\n"), syscall.EACCES},        // 0444
		{filePowerSource, []byte("battery\n"), syscall.EACCES},          // 0444
		{fileBoost, []byte("0\n"), syscall.EACCES},                      // 0444
	} {
		err := writeOnce(filepath.Join(dir, c.file), c.data)
		if !errors.Is(err, c.want) {
			t.Errorf("%s ← %.30q: %v, want %v", c.file, c.data, err, c.want)
		}
	}
	if s := d.Snapshot(); s.Knob != policy.DefaultKnob() || s.Policy != policy.Performance {
		t.Errorf("refused writes changed the state: %+v", s)
	}
	if after, _ := os.ReadFile(filepath.Join(m.state, statefile.StateFile)); !bytes.Equal(after, stateBefore) {
		t.Errorf("refused writes changed state.json: %q → %q", stateBefore, after)
	}

	// A value split over two write(2) calls is two values, each judged on
	// its own (sysfs ignores the offset): "power" then "saving" both fail.
	f, err := os.OpenFile(filepath.Join(dir, fileCurrent), os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, part := range []string{"power", "saving\n"} {
		if _, err := f.Write([]byte(part)); !errors.Is(err, syscall.EINVAL) {
			t.Errorf("partial write %q: %v, want EINVAL", part, err)
		}
	}
	f.Close()

	// Accepted: surrounding whitespace and trailing words, like sscanf.
	for _, c := range []struct{ file, data, want string }{
		{fileCurrent, "  balance  and more words\n", "balance"},
		{filePowerAware, "\t1", "1"},
		{filePowerAwarePolicy, "powersaving", "powersaving"},
	} {
		if err := writeOnce(filepath.Join(dir, c.file), []byte(c.data)); err != nil {
			t.Errorf("%s ← %q: %v", c.file, c.data, err)
		}
		if got := testutil.ReadTrim(t, filepath.Join(dir, c.file)); got != c.want {
			t.Errorf("%s after %q reads %q, want %q", c.file, c.data, got, c.want)
		}
	}

	// Concurrent writers: 8 goroutines × 25 valid writes to two files.
	// Every write succeeds; the tree, the snapshot and state.json agree
	// at the end.
	var wg sync.WaitGroup
	var failed sync.Map
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 25 {
				file, v := filePowerAware, fmt.Sprint((g+i)%3)
				if (g+i)%2 == 0 {
					file, v = filePowerAwarePolicy, []string{"balance", "powersaving"}[(g+i)%4/2]
				}
				if err := writeOnce(filepath.Join(dir, file), []byte(v+"\n")); err != nil {
					failed.Store(fmt.Sprintf("%s ← %s", file, v), err)
				}
			}
		}()
	}
	wg.Wait()
	failed.Range(func(k, v any) bool { t.Errorf("concurrent write %v: %v", k, v); return true })
	s := d.Snapshot()
	st, err := statefile.LoadState(m.state)
	if err != nil || st.Knob != s.Knob {
		t.Errorf("after concurrent writes state.json knob %+v (%v), snapshot %+v", st.Knob, err, s.Knob)
	}
	if got := testutil.ReadTrim(t, filepath.Join(dir, filePowerAware)); got != fmt.Sprint(int(s.Knob.PowerAware)) {
		t.Errorf("tree power_aware %s, snapshot %d", got, s.Knob.PowerAware)
	}
}
