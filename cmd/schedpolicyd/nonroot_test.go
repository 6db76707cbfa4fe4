package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestNonRootSaysMustRunAsRoot: run as another user the daemon must not
// say only "open /var/lib/schedpolicyd/lock: permission
// denied". It must say that it needs root (or paths that user may write),
// with the cause, and exit 1. The daemon runs as nobody (setpriv) with a
// state directory below a directory only root may write.
func TestNonRootSaysMustRunAsRoot(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to run the daemon as another user")
	}
	if _, err := exec.LookPath("setpriv"); err != nil {
		t.Skip("needs setpriv (Debian package util-linux)")
	}
	// Everything nobody must reach lives below a directory it may enter.
	base, err := os.MkdirTemp("", "spd-nonroot-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	if err := os.Chmod(base, 0o755); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(base, "schedpolicyd")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	conf := filepath.Join(base, "empty.conf")
	if err := os.WriteFile(conf, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	state := filepath.Join(base, "state") // base is root's, 0755: nobody cannot make it
	for _, c := range []struct {
		name  string
		cause string
	}{
		{"no state directory", "state dir: mkdir " + state + ": permission denied"},
		{"root's state directory", "lock " + filepath.Join(state, "lock") + ": permission denied"}, // the case
	} {
		if c.name == "root's state directory" {
			if err := os.Mkdir(state, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		cmd := exec.Command("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", bin,
			"--sysfs-root", "/sys", "--cgroup-root", "none", "--bus", "none", "--events", "none",
			"--tree-dir", filepath.Join(base, "tree"), "--state-dir", state, "--config", conf)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		err = cmd.Run()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 1 {
			t.Fatalf("%s: as nobody: %v, want exit status 1\n%s", c.name, err, stderr.String())
		}
		want := `msg="must run as root (or with --state-dir, --tree-dir and --cgroup-root that this user may write, or --cgroup-root none)" error="` + c.cause + `"`
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("%s: stderr:\n%s\nwant a line with\n%s", c.name, stderr.String(), want)
		}
	}
	if entries, _ := os.ReadDir(state); len(entries) != 0 {
		t.Errorf("%s holds %v; want nothing made", state, entries)
	}
}
