package cgroup

import (
	"path/filepath"
	"testing"

	"github.com/schedpolicyd/schedpolicyd/internal/testutil"
	"github.com/schedpolicyd/schedpolicyd/sysfs"
)

// TestParseError: a cgroup file that is there but malformed gives a
// *sysfs.ParseError naming that file, whose cause stays reachable with
// errors.Is, and whose text is "parse <file>: <cause>" (sysfs's own
// readers have the same test).
func TestParseError(t *testing.T) {
	dir := t.TempDir()
	testutil.WriteTree(t, dir, map[string]string{
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
	testutil.CheckParseErrors(t, dir, func(e *sysfs.ParseError) string { return e.Path }, []testutil.ParseErrorCase{
		{Name: "Procs", Read: func() error { _, err := cg.Procs("a"); return err },
			Path: "managed/a/cgroup.procs", Cause: nil, Text: `parse ` + filepath.Join(dir, "managed/a/cgroup.procs") + `: bad ID "abc"`},
		{Name: "Procs zero", Read: func() error { _, err := cg.Procs("b"); return err },
			Path: "managed/b/cgroup.procs", Cause: nil, Text: `parse ` + filepath.Join(dir, "managed/b/cgroup.procs") + `: bad ID "0"`},
		{Name: "ReadCPUs", Read: func() error { _, err := cg.ReadCPUs("a"); return err },
			Path: "managed/a/cpuset.cpus", Cause: sysfs.ErrCPUList, Text: `parse ` + filepath.Join(dir, "managed/a/cpuset.cpus") + `: invalid cpulist "3-1": range 3-1 is reversed`},
		{Name: "Usage negative", Read: func() error { _, err := cg.Usage("a"); return err },
			Path: "managed/a/cpu.stat", Cause: nil, Text: `parse ` + filepath.Join(dir, "managed/a/cpu.stat") + `: bad usage_usec "-5"`},
		{Name: "Usage missing", Read: func() error { _, err := cg.Usage("b"); return err },
			Path: "managed/b/cpu.stat", Cause: nil, Text: `parse ` + filepath.Join(dir, "managed/b/cpu.stat") + `: no usage_usec line`},
	})
}
