package cgroup

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/schedpolicyd/schedpolicyd/internal/testutil"
	"github.com/schedpolicyd/schedpolicyd/sysfs"
)

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// mockV2 builds a cgroup v2 tree in a temp dir: <dir>/root is a delegated
// cgroup with cpuset available but not yet enabled for its children, and
// <dir>/root/managed the parent schedpolicyd manages, with workloads "a"
// and "b" and a stray file.
func mockV2(t *testing.T) (root string) {
	t.Helper()
	root = filepath.Join(t.TempDir(), "root")
	testutil.WriteTree(t, root, map[string]string{
		"cgroup.controllers":     "cpuset cpu\n",
		"cgroup.subtree_control": "cpu\n",
		"cpuset.cpus.effective":  "0-7\n",

		"managed/cgroup.controllers":     "cpuset cpu\n",
		"managed/cgroup.subtree_control": "\n",
		"managed/cpuset.cpus":            "\n",
		"managed/cpuset.cpus.effective":  "0-7\n",
		"managed/cgroup.procs":           "",
		"managed/cpu.stat":               "usage_usec 9000000\nuser_usec 1\nsystem_usec 2\n",

		"managed/a/cpuset.cpus":           "0-3\n",
		"managed/a/cpuset.cpus.effective": "0-3\n",
		"managed/a/cgroup.procs":          "100\n200\n",
		"managed/a/cpu.stat":              "usage_usec 1500000\nuser_usec 1000000\nsystem_usec 500000\nnr_periods 0\n",
		"managed/a/cpu.pressure":          "some avg10=12.50 avg60=1.00 avg300=0.00 total=123\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n",
		"managed/b/cpu.pressure":          "some total=1\n",

		"managed/b/cpuset.cpus":           "\n",
		"managed/b/cpuset.cpus.effective": "0-7\n",
		"managed/b/cgroup.procs":          "\n",
		"managed/b/cpu.stat":              "user_usec 1\n", // broken: no usage_usec
	})
	return root
}

func TestCgroupV2Mock(t *testing.T) {
	root := mockV2(t)
	cg, err := OpenCgroup(filepath.Join(root, "managed")+"/", CgroupOptions{Create: true})
	if err != nil {
		t.Fatal(err)
	}
	if cg.Version() != CgroupV2 {
		t.Errorf("Version = %v, want v2", cg.Version())
	}
	if cg.Path() != filepath.Join(root, "managed") {
		t.Errorf("Path = %q, want it cleaned", cg.Path())
	}
	// Create enabled cpuset in the grandparent (it had only cpu) and in the
	// parent. A plain file keeps only the last write; the kernel would list
	// "cpuset cpu".
	if got := readFile(t, filepath.Join(root, "cgroup.subtree_control")); got != "+cpuset" {
		t.Errorf("root cgroup.subtree_control = %q, want %q written", got, "+cpuset")
	}
	if got := readFile(t, filepath.Join(root, "managed/cgroup.subtree_control")); got != "+cpuset" {
		t.Errorf("managed cgroup.subtree_control = %q, want %q written", got, "+cpuset")
	}

	if v, err := cg.CPUPressure("a"); err != nil || v.Avg10 != 12.5 {
		t.Errorf("CPUPressure(a) = %v, %v; want 12.5", v, err)
	}
	if _, err := cg.CPUPressure("b"); !errors.Is(err, sysfs.ErrPSIFormat) {
		t.Errorf("CPUPressure(b) err = %v, want ErrPSIFormat", err)
	}
	allowed, err := cg.Allowed()
	if err != nil || allowed.String() != "0-7" {
		t.Errorf("Allowed = %q, %v; want 0-7", allowed, err)
	}
	kids, err := cg.Children()
	if err != nil || !slices.Equal(kids, []string{"a", "b"}) {
		t.Errorf("Children = %q, %v; want [a b]", kids, err)
	}
	if err := cg.PrepareChild("a"); err != nil {
		t.Errorf("PrepareChild(a): %v", err)
	}
	if cpus, err := cg.ReadCPUs("a"); err != nil || cpus.String() != "0-3" {
		t.Errorf("ReadCPUs(a) = %q, %v; want 0-3", cpus, err)
	}
	if cpus, err := cg.ReadCPUs("b"); err != nil || !cpus.IsEmpty() {
		t.Errorf("ReadCPUs(b) = %q, %v; want empty (inherit)", cpus, err)
	}
	if cpus, err := cg.EffectiveCPUs("b"); err != nil || cpus.String() != "0-7" {
		t.Errorf("EffectiveCPUs(b) = %q, %v; want 0-7", cpus, err)
	}
	if err := cg.WriteCPUs("a", sysfs.MustParseCPUList("2,3,6")); err != nil {
		t.Fatal(err)
	}
	if got := readFile(t, filepath.Join(root, "managed/a/cpuset.cpus")); got != "2-3,6" {
		t.Errorf("a/cpuset.cpus = %q after WriteCPUs, want 2-3,6", got)
	}
	if cpus, err := cg.ReadCPUs("a"); err != nil || cpus.String() != "2-3,6" {
		t.Errorf("ReadCPUs(a) = %q, %v after write; want 2-3,6", cpus, err)
	}
	if err := cg.WriteCPUs("a", sysfs.CPUSet{}); err != nil {
		t.Fatal(err)
	}
	if got := readFile(t, filepath.Join(root, "managed/a/cpuset.cpus")); got != "\n" {
		t.Errorf("a/cpuset.cpus = %q after writing the empty set, want a newline", got)
	}
	if procs, err := cg.Procs("a"); err != nil || !slices.Equal(procs, []int{100, 200}) {
		t.Errorf("Procs(a) = %v, %v; want [100 200]", procs, err)
	}
	if err := cg.Attach("b", 300); err != nil {
		t.Fatal(err)
	}
	if got := readFile(t, filepath.Join(root, "managed/b/cgroup.procs")); got != "300" {
		t.Errorf("b/cgroup.procs = %q after Attach, want 300", got)
	}
	if err := cg.Attach("b", 0); err == nil {
		t.Error("Attach(b, 0) succeeded")
	}
	testutil.WriteTree(t, root, map[string]string{"managed/b/cgroup.procs": "\n"})
	if procs, err := cg.Procs("b"); err != nil || len(procs) != 0 {
		t.Errorf("Procs(b) = %v, %v; want none", procs, err)
	}
	if u, err := cg.Usage("a"); err != nil || u != 1500*time.Millisecond {
		t.Errorf("Usage(a) = %v, %v; want 1.5s (usage_usec 1500000)", u, err)
	}
	if _, err := cg.Usage("b"); err == nil {
		t.Error("Usage(b) without usage_usec succeeded")
	}

	// A workload that went away.
	if err := os.RemoveAll(filepath.Join(root, "managed/a")); err != nil {
		t.Fatal(err)
	}
	for what, err := range map[string]error{
		"WriteCPUs":    cg.WriteCPUs("a", sysfs.NewCPUSet(0)),
		"ReadCPUs":     func() error { _, err := cg.ReadCPUs("a"); return err }(),
		"Usage":        func() error { _, err := cg.Usage("a"); return err }(),
		"Procs":        func() error { _, err := cg.Procs("a"); return err }(),
		"PrepareChild": cg.PrepareChild("a"),
	} {
		if !IsGone(err) {
			t.Errorf("%s on a removed child: err = %v, want IsGone", what, err)
		}
	}
}

func TestCgroupV2MockNoCpuset(t *testing.T) {
	// Without Create, a parent that does not enable cpuset for its
	// children is refused (children would have no cpuset.cpus).
	root := mockV2(t)
	_, err := OpenCgroup(filepath.Join(root, "managed"), CgroupOptions{})
	if !errors.Is(err, ErrNoCpuset) {
		t.Errorf("OpenCgroup without cpuset in subtree_control: err = %v, want ErrNoCpuset", err)
	}

	// cpuset bound to v1: not in the grandparent's cgroup.controllers.
	root = mockV2(t)
	testutil.WriteTree(t, root, map[string]string{"cgroup.controllers": "cpu io memory\n"})
	path := filepath.Join(root, "new")
	_, err = OpenCgroup(path, CgroupOptions{Create: true})
	if !errors.Is(err, ErrNoCpuset) || !strings.Contains(err.Error(), "v1") {
		t.Errorf("OpenCgroup(Create) with cpuset unavailable: err = %v, want ErrNoCpuset mentioning v1", err)
	}
	if _, statErr := os.Stat(path); !errors.Is(statErr, fs.ErrNotExist) {
		t.Errorf("OpenCgroup created %s although it failed", path)
	}
}

func TestCgroupOpenErrors(t *testing.T) {
	dir := t.TempDir()
	if _, err := OpenCgroup(filepath.Join(dir, "missing"), CgroupOptions{}); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing path without Create: err = %v, want ErrNotExist", err)
	}
	if _, err := OpenCgroup(dir, CgroupOptions{}); err == nil || !strings.Contains(err.Error(), "not a cgroup") {
		t.Errorf("plain directory: err = %v, want 'not a cgroup'", err)
	}
	if _, err := OpenCgroup(filepath.Join(dir, "new"), CgroupOptions{Create: true}); err == nil {
		t.Error("Create below a plain directory succeeded")
	}
	if _, err := os.Stat(filepath.Join(dir, "new")); err == nil {
		t.Error("Create below a plain directory made the directory")
	}
	if _, err := OpenCgroup("", CgroupOptions{}); err == nil {
		t.Error("empty path accepted")
	}
}

func TestCgroupChildPath(t *testing.T) {
	cg := &Cgroup{path: "/cg/parent", version: CgroupV2}
	for _, name := range []string{"", ".", "..", "a/b", "/a", "a\nb", "a\x00", "tab\there", "del\x7f"} {
		if p, err := cg.ChildPath(name); !errors.Is(err, ErrCgroupName) {
			t.Errorf("ChildPath(%q) = %q, %v; want ErrCgroupName", name, p, err)
		}
		if err := cg.WriteCPUs(name, sysfs.NewCPUSet(0)); !errors.Is(err, ErrCgroupName) {
			t.Errorf("WriteCPUs(%q): err = %v, want ErrCgroupName", name, err)
		}
	}
	for _, name := range []string{"web", "...", "a b", "ünïcode", "x.service"} {
		if p, err := cg.ChildPath(name); err != nil || p != "/cg/parent/"+name {
			t.Errorf("ChildPath(%q) = %q, %v", name, p, err)
		}
	}
}

// mockV1 builds a v1 cpuset tree: <dir>/cpuset is the hierarchy root and
// <dir>/cpuset/managed a pre-made, still empty parent (a plain directory
// cannot grow cgroupfs files on mkdir).
func mockV1(t *testing.T) string {
	t.Helper()
	root := filepath.Join(t.TempDir(), "cpuset")
	testutil.WriteTree(t, root, map[string]string{
		"cpuset.cpus":           "0-7\n",
		"cpuset.mems":           "0\n",
		"cpuset.effective_cpus": "0-7\n",

		"managed/cpuset.cpus":           "\n",
		"managed/cpuset.mems":           "\n",
		"managed/cpuset.effective_cpus": "\n",
		"managed/tasks":                 "",
		"managed/cgroup.procs":          "",

		"managed/w/cpuset.cpus":           "\n",
		"managed/w/cpuset.mems":           "\n",
		"managed/w/cpuset.effective_cpus": "\n",
		"managed/w/tasks":                 "100\n101\n102\n300\n",
		"managed/w/cgroup.procs":          "100\n300\n",

		"managed/acct/cpuset.cpus":   "1\n",
		"managed/acct/cpuacct.usage": "123456789\n",
	})
	return root
}

func TestCgroupV1Mock(t *testing.T) {
	root := mockV1(t)
	procRoot := filepath.Join(t.TempDir(), "proc")
	testutil.WriteTree(t, procRoot, map[string]string{
		"100/task/100/schedstat": "1000000 555 10\n",
		"100/task/101/schedstat": "2000000 555 10\n",
		"100/task/103/schedstat": "4000000 0 1\n", // a thread in another cgroup
		// 102 exited: no directory. 300 exited: no process directory.
		// RunDelay reads /proc/<tid> directly.
		"100/schedstat": "1000000 555 10\n",
		"101/schedstat": "2000000 445 10\n",
		"103/schedstat": "4000000 0 1\n",
		"104/schedstat": "bogus\n",
	})
	cg, err := OpenCgroup(filepath.Join(root, "managed"), CgroupOptions{Create: true, ProcRoot: procRoot})
	if err != nil {
		t.Fatal(err)
	}
	if cg.Version() != CgroupV1 {
		t.Errorf("Version = %v, want v1", cg.Version())
	}
	for file, want := range map[string]string{"cpuset.cpus": "0-7", "cpuset.mems": "0"} {
		if got := readFile(t, filepath.Join(root, "managed", file)); got != want {
			t.Errorf("managed/%s = %q after Create, want copied %q", file, got, want)
		}
	}
	// effective_cpus is a kernel-maintained mirror; in the mock it stays
	// empty, so Allowed reads it as such.
	testutil.WriteTree(t, root, map[string]string{"managed/cpuset.effective_cpus": "0-7\n"})
	if a, err := cg.Allowed(); err != nil || a.String() != "0-7" {
		t.Errorf("Allowed = %q, %v; want 0-7", a, err)
	}
	if err := cg.PrepareChild("w"); err != nil {
		t.Fatal(err)
	}
	for file, want := range map[string]string{"cpuset.cpus": "0-7", "cpuset.mems": "0"} {
		if got := readFile(t, filepath.Join(root, "managed/w", file)); got != want {
			t.Errorf("w/%s = %q after PrepareChild, want %q", file, got, want)
		}
	}
	// PrepareChild leaves non-empty values alone.
	if err := cg.WriteCPUs("w", sysfs.NewCPUSet(4)); err != nil {
		t.Fatal(err)
	}
	if err := cg.PrepareChild("w"); err != nil {
		t.Fatal(err)
	}
	if c, err := cg.ReadCPUs("w"); err != nil || c.String() != "4" {
		t.Errorf("ReadCPUs(w) = %q, %v after a second PrepareChild; want 4", c, err)
	}

	// schedstat fallback: threads 100 and 101 count, 102 and 300 are gone,
	// 103 is not in this cgroup.
	if u, err := cg.Usage("w"); err != nil || u != 3*time.Millisecond {
		t.Errorf("Usage(w) = %v, %v; want 3ms from schedstat", u, err)
	}
	// Run and run-queue wait of the threads in tasks: 100 and 101.
	if r, w, err := cg.RunDelay("w"); err != nil || r != 3*time.Millisecond || w != 1000*time.Nanosecond {
		t.Errorf("RunDelay(w) = %v, %v, %v; want 3ms, 1µs", r, w, err)
	}
	testutil.WriteTree(t, root, map[string]string{"managed/w/tasks": "100\n104\n"})
	if _, _, err := cg.RunDelay("w"); err == nil || !strings.Contains(err.Error(), "/proc/104/schedstat") {
		t.Errorf("RunDelay(w) with a malformed schedstat: err %v, want one naming /proc/104/schedstat", err)
	}
	testutil.WriteTree(t, root, map[string]string{"managed/w/tasks": "100\n101\n102\n300\n"})
	// cpuacct co-mounted: cpuacct.usage in ns.
	if u, err := cg.Usage("acct"); err != nil || u != 123456789*time.Nanosecond {
		t.Errorf("Usage(acct) = %v, %v; want 123.456789ms from cpuacct.usage", u, err)
	}

	// Without Create an existing v1 cgroup opens as is.
	if _, err := OpenCgroup(filepath.Join(root, "managed", "w"), CgroupOptions{}); err != nil {
		t.Errorf("OpenCgroup(w): %v", err)
	}
}

func TestCgroupIsGone(t *testing.T) {
	for _, tt := range []struct {
		err  error
		want bool
	}{
		{nil, false},
		{syscall.ENOENT, true},
		{&fs.PathError{Op: "open", Path: "x", Err: syscall.ENOENT}, true},
		{sysfs.WriteAttr("/nonexistent-dir-for-test/cpuset.cpus", "0"), true},
		{errors.Join(errors.New("write"), syscall.ENODEV), true},
		{syscall.EACCES, false},
		{syscall.ENOSPC, false},
		{ErrCgroupName, false},
	} {
		if got := IsGone(tt.err); got != tt.want {
			t.Errorf("IsGone(%v) = %v, want %v", tt.err, got, tt.want)
		}
	}
}

// TestCgroupRealV2NoCpuset checks the error on this kind of hybrid host,
// where cpuset is bound to v1 and the v2 hierarchy lacks it. Nothing is
// created.
func TestCgroupRealV2NoCpuset(t *testing.T) {
	const unified = "/sys/fs/cgroup/unified"
	has, err := cgHasCpuset(filepath.Join(unified, "cgroup.controllers"))
	if err != nil || has {
		t.Skipf("needs cgroup v2 at %s without the cpuset controller", unified)
	}
	path := filepath.Join(unified, "schedpolicyd-test-never-created")
	_, err = OpenCgroup(path, CgroupOptions{Create: true})
	if !errors.Is(err, ErrNoCpuset) || !strings.Contains(err.Error(), "v1") {
		t.Errorf("err = %v, want ErrNoCpuset mentioning v1", err)
	}
	if _, statErr := os.Stat(path); statErr == nil {
		os.Remove(path)
		t.Errorf("%s was created", path)
	}
	t.Logf("error on this host: %v", err)
}
