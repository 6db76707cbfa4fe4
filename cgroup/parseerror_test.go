package cgroup

import (
	"errors"
	"path/filepath"
	"testing"

	"github.com/schedpolicyd/schedpolicyd/sysfs"
)

// TestParseError: a cgroup file that is there but malformed gives a
// *sysfs.ParseError naming that file, whose cause stays reachable with
// errors.Is, and whose text is "parse <file>: <cause>" (sysfs's own
// readers have the same test).
func TestParseError(t *testing.T) {
	dir := t.TempDir()
	writeTree(t, dir, map[string]string{
		"managed/cgroup.controllers":     "cpuset\n",
		"managed/cgroup.subtree_control": "cpuset\n",
		"managed/cpuset.cpus.effective":  "0-3\n",
		"managed/a/cgroup.procs":         "100\nabc\n",
		"managed/a/cpuset.cpus":          "3-1\n",
		"managed/a/cpu.stat":             "usage_usec -5\n",
		"managed/b/cpu.stat":             "user_usec 1\n",
		"managed/b/cgroup.procs":         "0\n",
	})
	cg, err := OpenCgroup(filepath.Join(dir, "managed"), CgroupOptions{})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name  string
		read  func() error
		path  string
		cause error // errors.Is target; nil: none beyond the ParseError
		text  string
	}{
		{"Procs", func() error { _, err := cg.Procs("a"); return err },
			"managed/a/cgroup.procs", nil, `parse ` + filepath.Join(dir, "managed/a/cgroup.procs") + `: bad ID "abc"`},
		{"Procs zero", func() error { _, err := cg.Procs("b"); return err },
			"managed/b/cgroup.procs", nil, `parse ` + filepath.Join(dir, "managed/b/cgroup.procs") + `: bad ID "0"`},
		{"ReadCPUs", func() error { _, err := cg.ReadCPUs("a"); return err },
			"managed/a/cpuset.cpus", sysfs.ErrCPUList, `parse ` + filepath.Join(dir, "managed/a/cpuset.cpus") + `: invalid cpulist "3-1": range 3-1 is reversed`},
		{"Usage negative", func() error { _, err := cg.Usage("a"); return err },
			"managed/a/cpu.stat", nil, `parse ` + filepath.Join(dir, "managed/a/cpu.stat") + `: bad usage_usec "-5"`},
		{"Usage missing", func() error { _, err := cg.Usage("b"); return err },
			"managed/b/cpu.stat", nil, `parse ` + filepath.Join(dir, "managed/b/cpu.stat") + `: no usage_usec line`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.read()
			var pe *sysfs.ParseError
			if !errors.As(err, &pe) {
				t.Fatalf("err = %v (%T), want a *ParseError", err, err)
			}
			if want := filepath.Join(dir, tt.path); pe.Path != want {
				t.Errorf("Path = %q, want %q", pe.Path, want)
			}
			if tt.cause != nil && !errors.Is(err, tt.cause) {
				t.Errorf("err = %v, want errors.Is %v", err, tt.cause)
			}
			if err.Error() != tt.text {
				t.Errorf("err = %q, want %q", err.Error(), tt.text)
			}
		})
	}
}
