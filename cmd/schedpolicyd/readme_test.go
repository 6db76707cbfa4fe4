package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// readmeBlock returns the first ```sh block after the heading in the
// repository's README.md.
func readmeBlock(t *testing.T, heading string) string {
	t.Helper()
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	i := strings.Index(s, "\n"+heading+"\n")
	if i < 0 {
		t.Fatalf("README.md has no heading %q", heading)
	}
	s = s[i:]
	start := strings.Index(s, "\n```sh\n")
	if start < 0 {
		t.Fatalf("no sh block after %q", heading)
	}
	s = s[start+len("\n```sh\n"):]
	end := strings.Index(s, "\n```\n")
	if end < 0 {
		t.Fatalf("the sh block after %q does not end", heading)
	}
	return s[:end+1]
}

// TestReadmeMockMachine runs the README's mock-machine block as a user
// pastes it: the daemon must be up when the first cat runs, and the cat
// after plugging in must not be stale by the debounce. Only
// its paths move: /tmp/mock and /tmp/spd into the test's directory, the
// checkout's sysfs/ and testdata/ are linked from there, and
// bin/schedpolicyd is this package built (the block's `make build` is not
// run). Every `cat` line's comment names what it must print, in order, and
// the script must leave no daemon and no mount behind.
func TestReadmeMockMachine(t *testing.T) {
	for _, tool := range []string{"bash", "timeout", "grep"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("needs %s", tool)
		}
	}
	block := readmeBlock(t, "### Running against a mock machine")
	var want []string
	for _, l := range strings.Split(block, "\n") {
		if cmd, comment, ok := strings.Cut(l, "#"); ok && strings.HasPrefix(cmd, "cat ") {
			want = append(want, strings.Fields(comment)[0])
		}
	}
	if len(want) != 2 {
		t.Fatalf("the block has %d cat lines with an expected value (%q), want 2:\n%s", len(want), want, block)
	}
	if !strings.HasPrefix(block, "make build\n") {
		t.Fatalf("the block does not start with make build:\n%s", block)
	}

	tmp := t.TempDir()
	work := filepath.Join(tmp, "checkout")
	bin := filepath.Join(work, "bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("go", "build", "-o", filepath.Join(bin, "schedpolicyd"), ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	for _, dir := range []string{"sysfs", "testdata"} { // the block copies fixtures from both
		abs, err := filepath.Abs(filepath.Join("../..", dir))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(abs, filepath.Join(work, dir)); err != nil {
			t.Fatal(err)
		}
	}
	script := strings.TrimPrefix(block, "make build\n")
	script = strings.NewReplacer("/tmp/mock", tmp+"/mock", "/tmp/spd", tmp+"/spd").Replace(script)

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-c", script)
	cmd.Dir = work
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("the block did not finish within 60s\nstdout:\n%s\nstderr:\n%s", stdout.String(), stderr.String())
	}
	lines := strings.Split(strings.TrimRight(stdout.String(), "\n"), "\n")
	if len(lines) < len(want) || strings.Join(lines[len(lines)-len(want):], " ") != strings.Join(want, " ") {
		t.Errorf("the cat lines printed %q, want %q (exit %v)\nstdout:\n%s\nstderr:\n%s", lines, want, err, stdout.String(), stderr.String())
	}
	if !strings.Contains(stdout.String(), "policy:        powersaving\n") {
		t.Errorf("probe did not say powersaving:\n%s", stdout.String())
	}
	for _, bad := range []string{"No such file", "cat:", "command not found", "level=error"} {
		if strings.Contains(stderr.String(), bad) {
			t.Errorf("stderr has %q:\n%s", bad, stderr.String())
		}
	}
	mi, _ := os.ReadFile("/proc/self/mountinfo")
	if strings.Contains(string(mi), " "+tmp+"/spd/tree ") {
		t.Errorf("the tree is still mounted at %s/spd/tree after the block", tmp)
	}
}

// TestMakeRunPassesArgs: `make run ARGS="..."` hands the flags to the
// daemon. make -n only prints the
// commands.
func TestMakeRunPassesArgs(t *testing.T) {
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("needs make")
	}
	out, err := exec.Command("make", "-s", "-n", "-C", "../..", "run", `ARGS=--bus none --log-level debug`).Output()
	if err != nil {
		t.Fatalf("make -n run: %v\n%s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if got := lines[len(lines)-1]; got != "./bin/schedpolicyd --bus none --log-level debug" {
		t.Errorf("make run ARGS=... runs %q, want the flags passed", got)
	}
}
