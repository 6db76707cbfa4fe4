package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sirupsen/logrus"
	"golang.org/x/sys/unix"
)

// TestJournalPriorities: under journald every line starts with its syslog
// priority, which systemd's stream logging turns into the journal entry's
// PRIORITY (SyslogLevelPrefix=): error 3, warning 4, info 6, debug 7.
func TestJournalPriorities(t *testing.T) {
	var b bytes.Buffer
	log := logrus.New()
	log.Out = &b
	log.SetLevel(logrus.DebugLevel)
	log.SetFormatter(journalFormatter{&logrus.TextFormatter{DisableTimestamp: true}})
	log.Error("e")
	log.Warn("w")
	log.Info("i")
	log.WithField("k", "v").Debug("d")
	want := "<3>level=error msg=e\n<4>level=warning msg=w\n<6>level=info msg=i\n<7>level=debug msg=d k=v\n"
	if b.String() != want {
		t.Fatalf("journal lines:\n%s\nwant\n%s", b.String(), want)
	}
}

// TestJournalStream: lines get priorities only on the very stream
// JOURNAL_STREAM names (its device and inode), not on another file, not
// with a malformed value, not on a writer that is no file.
func TestJournalStream(t *testing.T) {
	dir := t.TempDir()
	f, err := os.Create(filepath.Join(dir, "stream"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	g, err := os.Create(filepath.Join(dir, "other"))
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		t.Fatal(err)
	}
	env := fmt.Sprintf("%d:%d", st.Dev, st.Ino)
	for _, c := range []struct {
		name string
		w    any
		env  string
		want bool
	}{
		{"the stream", f, env, true},
		{"another file", g, env, false},
		{"no variable", f, "", false},
		{"malformed", f, "12", false},
		{"not numbers", f, "a:b", false},
		{"not a file", &bytes.Buffer{}, env, false},
	} {
		w, _ := c.w.(interface{ Write([]byte) (int, error) })
		if got := journalStream(w, c.env); got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
	t.Setenv("JOURNAL_STREAM", env)
	log := daemonLogger(f)
	log.Warn("x")
	b, _ := os.ReadFile(f.Name())
	if !strings.HasPrefix(string(b), "<4>level=warning msg=x") {
		t.Fatalf("daemonLogger on the journal's stream wrote %q", b)
	}
}
