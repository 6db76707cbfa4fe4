package testutil

import (
	"bytes"
	"os/exec"
	"testing"
)

// CheckMetrics runs the Prometheus reference checker, `promtool check
// metrics`, on text (the exposition format, as a node_exporter textfile
// holds it) and returns its output and whether it accepted the text: no
// parse error and no lint problem (promtool exits non-zero for either).
// It skips t when promtool is not installed (Debian package prometheus,
// which `make deps` installs).
func CheckMetrics(t testing.TB, text []byte) (output string, ok bool) {
	t.Helper()
	bin, err := exec.LookPath("promtool")
	if err != nil {
		t.Skip("needs promtool (Debian package prometheus; make deps installs it) to check the metrics format")
	}
	cmd := exec.Command(bin, "check", "metrics")
	cmd.Stdin = bytes.NewReader(text)
	out, err := cmd.CombinedOutput()
	if err != nil {
		if _, exit := err.(*exec.ExitError); !exit {
			t.Fatalf("promtool: %v", err)
		}
		return string(out), false
	}
	return string(out), true
}
