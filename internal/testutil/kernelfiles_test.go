package testutil

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"testing"
)

// TestCPUStatCases: a FIFO, a symbolic link to /dev/zero, a sparse file
// of the size asked for and a regular file holding CPUStatGood, each the
// cpu.stat of a directory of its own.
func TestCPUStatCases(t *testing.T) {
	c := NewCPUStatCases(t, 1<<20)
	for _, f := range []struct {
		path string
		mode fs.FileMode
		size int64 // -1: not checked
	}{{c.FIFO, fs.ModeNamedPipe, 0}, {c.Zero, fs.ModeSymlink, -1}, {c.Big, 0, 1 << 20}, {c.Good, 0, int64(len(CPUStatGood))}} {
		st, err := os.Lstat(f.path)
		if err != nil || filepath.Base(f.path) != "cpu.stat" || st.Mode().Type() != f.mode || f.size >= 0 && st.Size() != f.size {
			t.Errorf("%s: %v, %v; want type %v, size %d", f.path, st, err, f.mode, f.size)
		}
	}
	if l, err := os.Readlink(c.Zero); l != "/dev/zero" || err != nil {
		t.Errorf("Zero links to %q, %v", l, err)
	}
	if got := Read(t, c.Good); got != CPUStatGood {
		t.Errorf("Good holds %q", got)
	}
	if dirs := map[string]bool{filepath.Dir(c.FIFO): true, filepath.Dir(c.Zero): true, filepath.Dir(c.Big): true, filepath.Dir(c.Good): true}; len(dirs) != 4 {
		t.Errorf("the four share directories: %v", dirs)
	}
}

// pathError is a parse error of the shape sysfs.ParseError has.
type pathError struct {
	Path string
	Err  error
}

func (e *pathError) Error() string { return "parse " + e.Path + ": " + e.Err.Error() }
func (e *pathError) Unwrap() error { return e.Err }

// TestCheckParseError: each of the checks fails on its own mismatch, and
// none on a match.
func TestCheckParseError(t *testing.T) {
	pathOf := func(e *pathError) string { return e.Path }
	want := ParseErrorCase{Path: "x/y", Cause: strconv.ErrSyntax, Text: "parse /d/x/y: bad: " + strconv.ErrSyntax.Error()}
	good := &pathError{"/d/x/y", fmtErr{"bad: " + strconv.ErrSyntax.Error(), strconv.ErrSyntax}}
	for _, c := range []struct {
		name   string
		err    error
		fatal  string
		errors int
	}{
		{"a match", good, "", 0},
		{"another path", &pathError{"/d/x/z", good.Err}, "", 2}, // the path, and the text naming it
		{"no cause", &pathError{"/d/x/y", errors.New("bad: " + strconv.ErrSyntax.Error())}, "", 1},
		{"other text", &pathError{"/d/x/y", fmtErr{"worse", strconv.ErrSyntax}}, "", 1},
		{"not a parse error", errors.New("parse /d/x/y: bad"), "err = parse /d/x/y: bad (*errors.errorString), want a *testutil.pathError", 0},
	} {
		f := &fakeT{TB: t}
		f.catch(func() { checkParseError(f, c.err, "/d", pathOf, want) })
		if f.fatal != c.fatal || len(f.errors) != c.errors {
			t.Errorf("%s: fatal %q, errors %q; want fatal %q, %d errors", c.name, f.fatal, f.errors, c.fatal, c.errors)
		}
	}
}

// fmtErr is an error with a text of its own that wraps cause.
type fmtErr struct {
	text  string
	cause error
}

func (e fmtErr) Error() string { return e.text }
func (e fmtErr) Unwrap() error { return e.cause }
