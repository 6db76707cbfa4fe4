package testutil

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// CPUStatGood is the content of CPUStatCases.Good: 1500 µs of CPU time,
// 1000 of them in user mode.
const CPUStatGood = "usage_usec 1500\nuser_usec 1000\n"

// CPUStatCases are cpu.stat files of the kinds a path another process
// chose (a unit's ControlGroup from a user's manager) may end in, each
// the cpu.stat of a directory of its own: FIFO a named pipe nobody opens
// for writing, Zero a symbolic link to /dev/zero, Big a sparse regular
// file (zeros) of the size asked for, and Good a regular file holding
// CPUStatGood.
type CPUStatCases struct {
	FIFO, Zero, Big, Good string
}

// NewCPUStatCases makes them below a new temporary directory, Big big
// bytes long (one byte over a reader's bound, say).
func NewCPUStatCases(t testing.TB, big int64) CPUStatCases {
	t.Helper()
	dir := t.TempDir()
	c := CPUStatCases{
		FIFO: filepath.Join(dir, "fifo", "cpu.stat"),
		Zero: filepath.Join(dir, "zero", "cpu.stat"),
		Big:  filepath.Join(dir, "big", "cpu.stat"),
		Good: filepath.Join(dir, "good", "cpu.stat"),
	}
	for _, p := range []string{c.FIFO, c.Zero, c.Big, c.Good} {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := syscall.Mkfifo(c.FIFO, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/dev/zero", c.Zero); err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(c.Big)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Truncate(big); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(c.Good, []byte(CPUStatGood), 0o644); err != nil {
		t.Fatal(err)
	}
	return c
}

// ParseErrorCase is one reader of a malformed file and the parse error it
// must give.
type ParseErrorCase struct {
	Name string
	Read func() error
	// Path is the malformed file's path relative to the directory the
	// check is given.
	Path string
	// Cause is an errors.Is target the error must reach; nil: none
	// beyond the parse error itself.
	Cause error
	// Text is the error's whole text.
	Text string
}

// CheckParseErrors runs each case as a subtest of t: its Read's error
// must be an E (errors.As: *sysfs.ParseError, say) whose path (pathOf) is
// dir joined with the case's Path, reach the case's Cause when it has
// one, and read its Text exactly.
func CheckParseErrors[E error](t *testing.T, dir string, pathOf func(E) string, cases []ParseErrorCase) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.Name, func(t *testing.T) { checkParseError(t, c.Read(), dir, pathOf, c) })
	}
}

// checkParseError is one case of CheckParseErrors, err its Read's error.
func checkParseError[E error](t testing.TB, err error, dir string, pathOf func(E) string, c ParseErrorCase) {
	t.Helper()
	var pe E
	if !errors.As(err, &pe) {
		t.Fatalf("err = %v (%T), want a %T", err, err, pe)
	}
	if want := filepath.Join(dir, c.Path); pathOf(pe) != want {
		t.Errorf("Path = %q, want %q", pathOf(pe), want)
	}
	if c.Cause != nil && !errors.Is(err, c.Cause) {
		t.Errorf("err = %v, want errors.Is %v", err, c.Cause)
	}
	if err.Error() != c.Text {
		t.Errorf("err = %q, want %q", err.Error(), c.Text)
	}
}
