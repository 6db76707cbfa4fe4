package testutil

import (
	"bytes"
	"fmt"
	"io"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/sirupsen/logrus"
	logtest "github.com/sirupsen/logrus/hooks/test"
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

// EntryLine is a log entry as one line to compare with: its message, then
// " key=value" for each of its fields, sorted by key (values as %v
// prints them).
func EntryLine(e *logrus.Entry) string {
	keys := make([]string, 0, len(e.Data))
	for k := range e.Data {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	s := e.Message
	for _, k := range keys {
		s += fmt.Sprintf(" %s=%v", k, e.Data[k])
	}
	return s
}

// EntriesAt returns the entries h caught at level lvl whose message
// contains msg ("": any) and whose fields hold each of fields' values
// (compared with ==; nil: any fields), in order.
func EntriesAt(h *logtest.Hook, lvl logrus.Level, msg string, fields logrus.Fields) []logrus.Entry {
	var out []logrus.Entry
	for _, e := range h.AllEntries() {
		if e.Level != lvl || !strings.Contains(e.Message, msg) {
			continue
		}
		match := true
		for k, v := range fields {
			if e.Data[k] != v {
				match = false
			}
		}
		if match {
			out = append(out, *e)
		}
	}
	return out
}

// DescribeEntries is es for a failure message: LEVEL "message" ERROR (the
// error field's value) for each, joined by "; ".
func DescribeEntries(es []logrus.Entry) string {
	var b []string
	for _, e := range es {
		b = append(b, fmt.Sprintf("%s %q %v", e.Level, e.Message, e.Data["error"]))
	}
	return strings.Join(b, "; ")
}
