package testutil

import (
	"bytes"
	"io"
	"strings"
	"sync"
	"testing"

	"github.com/sirupsen/logrus"
)

// Logger returns a logrus logger at debug level that writes every entry to
// t.Log (shown for a failing test, or with -v), without the trailing
// newline. Like t.Log itself it must not be used once the test and its
// cleanups have finished: stop whatever logs to it in a t.Cleanup.
func Logger(t testing.TB) *logrus.Logger {
	l := logrus.New()
	l.SetOutput(LogWriter(t))
	l.SetLevel(logrus.DebugLevel)
	return l
}

// LogWriter returns an io.Writer that passes every write to t.Log,
// without its trailing newline: for a child process's output or a
// logger. It never fails, and has the same limit as Logger.
func LogWriter(t testing.TB) io.Writer { return tWriter{t} }

type tWriter struct{ t testing.TB }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// WantEq reports (t.Errorf) got differing from want, saying what was
// compared; the test goes on.
func WantEq(t testing.TB, what, got, want string) {
	t.Helper()
	if got != want {
		t.Errorf("%s:\n got %q\nwant %q", what, got, want)
	}
}

// LockedBuffer collects what a logger or a child process writes while the
// test reads it: exec's copying goroutine or the daemon's goroutines write
// while the test calls String. The zero value is ready to use.
type LockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write appends p; it never fails.
func (l *LockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// String is everything written so far.
func (l *LockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
