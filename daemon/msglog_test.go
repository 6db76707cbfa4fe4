package daemon

import (
	"strings"
	"sync"
	"testing"

	"github.com/godbus/dbus/v5"
	"github.com/sirupsen/logrus"

	"github.com/schedpolicyd/schedpolicyd/internal/testutil"
)

// msgLog keeps the daemon's log entries as "message k=v ...", for tests
// that read what the daemon said.
type msgLog struct {
	mu      sync.Mutex
	entries []string
}

func (l *msgLog) Levels() []logrus.Level { return logrus.AllLevels }

func (l *msgLog) Fire(e *logrus.Entry) error {
	s := testutil.EntryLine(e)
	l.mu.Lock()
	l.entries = append(l.entries, s)
	l.mu.Unlock()
	return nil
}

// count is the number of entries whose message starts with prefix.
func (l *msgLog) count(prefix string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, e := range l.entries {
		if strings.HasPrefix(e, prefix) {
			n++
		}
	}
	return n
}

// mentions is the first entry that contains text, "" if none does.
func (l *msgLog) mentions(text string) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, e := range l.entries {
		if strings.Contains(e, text) {
			return e
		}
	}
	return ""
}

// forge sends the signal name on path with body from attacker to every
// other connection on the bus but those in except: unicast, which no match
// rule filters, so each consumer of the daemon's connections receives it.
func forge(t *testing.T, attacker *dbus.Conn, except []string, path dbus.ObjectPath, name string, body ...any) {
	t.Helper()
	for _, dest := range testutil.Peers(t, attacker, except...) {
		testutil.SendSignal(t, attacker, dest, path, name, body...)
	}
}
