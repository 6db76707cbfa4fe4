package main

import (
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/sirupsen/logrus"
	"golang.org/x/sys/unix"
)

// journalFormatter prefixes every line with its syslog priority in the
// "<N>" form that systemd's stream logging reads (SyslogLevelPrefix=, on
// by default: systemd.exec(5)), so that journald stores a warning as a
// warning and `journalctl -p warning` shows it; without the prefix every
// line of a service's stderr is stored at the unit's SyslogLevel=, info.
type journalFormatter struct{ inner logrus.Formatter }

func (f journalFormatter) Format(e *logrus.Entry) ([]byte, error) {
	b, err := f.inner.Format(e)
	if err != nil {
		return nil, err
	}
	return append([]byte(fmt.Sprintf("<%d>", syslogPriority(e.Level))), b...), nil
}

// syslogPriority maps a logrus level to syslog(3)'s: error 3, warning 4,
// info 6, debug and trace 7; panic and fatal are critical (2), which ends
// the process, not the machine (emergency).
func syslogPriority(l logrus.Level) int {
	switch l {
	case logrus.PanicLevel, logrus.FatalLevel:
		return 2
	case logrus.ErrorLevel:
		return 3
	case logrus.WarnLevel:
		return 4
	case logrus.InfoLevel:
		return 6
	}
	return 7
}

// journalStream reports whether w is connected to the journal: systemd
// sets JOURNAL_STREAM to "DEVICE:INODE" of the stream it gave the service,
// and only while w is that very stream (not a redirection of it) are lines
// journald's (systemd.exec(5), "Environment variables in spawned
// processes").
func journalStream(w io.Writer, env string) bool {
	f, ok := w.(*os.File)
	if !ok || env == "" {
		return false
	}
	devS, inoS, ok := strings.Cut(env, ":")
	if !ok {
		return false
	}
	dev, err1 := strconv.ParseUint(devS, 10, 64)
	ino, err2 := strconv.ParseUint(inoS, 10, 64)
	if err1 != nil || err2 != nil {
		return false
	}
	var st unix.Stat_t
	if unix.Fstat(int(f.Fd()), &st) != nil {
		return false
	}
	return uint64(st.Dev) == dev && st.Ino == ino
}

// daemonLogger is the daemon's logger on w: under journald (journalStream)
// without timestamps (journald stamps every line) and with each line's
// priority; elsewhere logrus's text format.
func daemonLogger(w io.Writer) *logrus.Logger {
	log := logrus.New()
	log.Out = w
	if journalStream(w, os.Getenv("JOURNAL_STREAM")) {
		log.SetFormatter(journalFormatter{&logrus.TextFormatter{DisableTimestamp: true}})
	}
	return log
}
