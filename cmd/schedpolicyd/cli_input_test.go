package main

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"

	"github.com/schedpolicyd/schedpolicyd/internal/testutil"
)

// TestCLIBadInput: every usage error exits 2 with a message on stderr that
// names the flag or value; help and version exit 0 on stdout. No row
// starts a daemon (each fails before Run).
func TestCLIBadInput(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "missing.conf")
	bad := filepath.Join(t.TempDir(), "bad.conf")
	testutil.WriteFile(t, bad, "power_aware = 1\ndebounce = \"soon\"\n")
	mock := t.TempDir()
	safe := []string{"--sysfs-root", mock, "--cgroup-root", "none", "--tree-dir", filepath.Join(mock, "tree"), "--tree-backend", "plain",
		"--state-dir", filepath.Join(mock, "state"), "--bus", "none", "--events", "none", "--logind=false", "--config", emptyConf(t)}
	for _, c := range []struct {
		args   []string
		code   int
		stderr string // substring; "" for success rows
		stdout string
	}{
		// Usage errors: exit 2.
		{[]string{"--no-such-flag"}, 2, "flag provided but not defined: -no-such-flag", ""},
		{[]string{"extra-arg"}, 2, `unexpected argument "extra-arg"`, ""},
		{[]string{"--bus", "nonsense"}, 2, `--bus "nonsense"`, ""},
		{append([]string{"--upower", "on"}, safe...), 2, `upower "on" needs D-Bus, and bus is "none"`, ""},
		{[]string{"--debounce", "-1s"}, 2, "--debounce -1s: must be at least 0s and at most 1m", ""},
		{[]string{"--debounce", "soon"}, 2, `invalid value "soon" for flag -debounce`, ""},
		{[]string{"--sample-interval", "1ms"}, 2, "--sample-interval 1ms: must be at least 10ms", ""},
		{[]string{"--recheck-interval", "10ms"}, 2, "--recheck-interval 10ms: must be at least 1s", ""},
		// Mock paths only: were the bound lost, the daemon started would
		// touch nothing of this machine's.
		{append([]string{"--settle", "2m"}, safe...), 2, "--settle 2m0s: must be at least 1ms and at most 1m (0: the default 1s, negative: off)", ""},
		{append([]string{"--sample-interval", "2562047h"}, safe...), 2, "--sample-interval 2562047h0m0s: must be at least 10ms and at most 1h", ""},
		{[]string{"--tree-dir", ""}, 2, "--tree-dir must not be empty", ""},
		{[]string{"--state-dir", ""}, 2, "--state-dir must not be empty", ""},
		{[]string{"--log-level", "loud", "--config", missing + ".none"}, 2, "missing.conf.none", ""},
		{[]string{"--config", missing}, 2, missing, ""},
		{[]string{"--log-level", "loud", "--config", emptyConf(t)}, 2, "--log-level", ""},
		{[]string{"--config", bad}, 2, bad + ":2: debounce", ""},
		{[]string{"--tree-backend", "nfs", "--config", emptyConf(t)}, 2, `tree backend "nfs"`, ""},
		{[]string{"--events", "poll", "--config", emptyConf(t)}, 2, `events "poll"`, ""},
		{[]string{"--boost-on-battery", "maybe", "--config", emptyConf(t)}, 2, `boost_on_battery "maybe"`, ""},
		{[]string{"--sysfs-root", missing, "--config", emptyConf(t)}, 2, missing, ""},
		{[]string{"probe", "--no-such-flag"}, 2, "flag provided but not defined", ""},
		{[]string{"soak", "--duration", "0s"}, 2, "positive --duration", ""},
		{[]string{"soak", "stray"}, 2, "unexpected argument \"stray\"", ""},
		// Help and version: exit 0 on stdout.
		{[]string{"--help"}, 0, "", "Usage:"},
		{[]string{"soak", "--help"}, 0, "", "Usage: schedpolicyd soak"},
		{[]string{"version"}, 0, "", "schedpolicyd "},
	} {
		var out, errb bytes.Buffer
		code := run(c.args, &out, &errb)
		if code != c.code {
			t.Errorf("%q: exit %d, want %d (stderr %q)", c.args, code, c.code, errb.String())
			continue
		}
		if c.stderr != "" && !strings.Contains(errb.String(), c.stderr) {
			t.Errorf("%q: stderr %q lacks %q", c.args, errb.String(), c.stderr)
		}
		if c.stdout != "" && !strings.Contains(out.String(), c.stdout) {
			t.Errorf("%q: stdout %q lacks %q", c.args, out.String(), c.stdout)
		}
	}
}
