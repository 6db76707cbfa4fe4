package cgroupfs

import (
	"testing"

	"github.com/sirupsen/logrus"
)

// fieldLogger is a FieldLogger that is neither a Logger nor an Entry.
type fieldLogger struct{ logrus.FieldLogger }

func TestEnabled(t *testing.T) {
	l := logrus.New()
	l.SetLevel(logrus.InfoLevel)
	e := l.WithField("component", "x")
	for _, c := range []struct {
		name string
		log  logrus.FieldLogger
		lvl  logrus.Level
		want bool
	}{
		{"logger, debug at info", l, logrus.DebugLevel, false},
		{"logger, warn at info", l, logrus.WarnLevel, true},
		{"entry, debug at info", e, logrus.DebugLevel, false},
		{"entry, info at info", e, logrus.InfoLevel, true},
		{"another FieldLogger", fieldLogger{l}, logrus.DebugLevel, true},
	} {
		if got := enabled(c.log, c.lvl); got != c.want {
			t.Errorf("%s: enabled = %v, want %v", c.name, got, c.want)
		}
	}
	l.SetLevel(logrus.DebugLevel)
	if !enabled(e, logrus.DebugLevel) {
		t.Error("entry, debug at debug: enabled = false")
	}
}
