package testutil

import (
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// CpusetRoot is where the tests expect the cgroup v1 cpuset hierarchy
// (Debian's and CI's mount point).
const CpusetRoot = "/sys/fs/cgroup/cpuset"

// NeedCpusetV1 skips t unless it runs as root on a machine with the cgroup
// v1 cpuset controller mounted at CpusetRoot.
func NeedCpusetV1(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to create cgroups")
	}
	if _, err := os.Stat(filepath.Join(CpusetRoot, "cpuset.cpus")); err != nil {
		t.Skipf("needs the cgroup v1 cpuset controller at %s: %v", CpusetRoot, err)
	}
}

// CpusetV1Dir returns a path for a cgroup of the test's own directly below
// CpusetRoot, named prefix-<pid>-<random>, without creating it (for code
// under test that creates its parent itself). At cleanup that cgroup and
// every cgroup below it are removed, deepest first, retrying for a moment
// while a killed task leaves (rmdir fails with EBUSY until then); one that
// still cannot be removed fails t (t.Errorf, with its path): a cgroup left
// in the machine's real hierarchy is a fault, not noise. It skips t as
// NeedCpusetV1 does. Stopping the tasks in it is the caller's job, in a
// cleanup registered later (cleanups run last first).
func CpusetV1Dir(t testing.TB, prefix string) string {
	t.Helper()
	NeedCpusetV1(t)
	dir := filepath.Join(CpusetRoot, fmt.Sprintf("%s-%d-%08x", prefix, os.Getpid(), rand.Uint32()))
	t.Cleanup(func() { removeCgroupTree(t, dir) })
	return dir
}

// CpusetV1Parent creates the cgroup CpusetV1Dir names, gives it every CPU
// (cpuset.effective_cpus) and memory node (cpuset.mems) of the root
// cpuset, so children can be made and tasks attached, and returns its
// path. It skips t as NeedCpusetV1 does and fails t when the cgroup cannot
// be made or filled in.
func CpusetV1Parent(t testing.TB, prefix string) string {
	t.Helper()
	dir := CpusetV1Dir(t, prefix)
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	Write(t, filepath.Join(dir, "cpuset.cpus"), ReadTrim(t, filepath.Join(CpusetRoot, "cpuset.effective_cpus")))
	Write(t, filepath.Join(dir, "cpuset.mems"), ReadTrim(t, filepath.Join(CpusetRoot, "cpuset.mems")))
	return dir
}

func removeCgroupTree(t testing.TB, dir string) {
	var dirs []string
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			dirs = append(dirs, p)
		}
		return nil
	})
	slices.Reverse(dirs)
	for _, d := range dirs {
		var err error
		for range 50 {
			if err = syscall.Rmdir(d); err == nil || errors.Is(err, syscall.ENOENT) {
				err = nil
				break
			}
			if !errors.Is(err, syscall.EBUSY) {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		if err != nil {
			t.Errorf("cleanup: rmdir %s: %v (remove it by hand)", d, err)
		}
	}
}

// HotplugEnv is the environment variable that lets a test take a real CPU
// offline: `make test` sets it for a second, serial `go test` run of those
// tests only (HOTPLUG_TESTS in the Makefile).
const HotplugEnv = "SCHEDPOLICYD_TEST_HOTPLUG"

// NeedRealHotplug skips unless HotplugEnv is 1. Taking a CPU offline
// trims it from every cgroup v1 cpuset on the machine for good, which
// would break any real-cgroup test running beside it (`go test ./...`
// runs packages in parallel), so such tests run alone.
func NeedRealHotplug(t testing.TB) {
	t.Helper()
	if os.Getenv(HotplugEnv) != "1" {
		t.Skipf("takes a real CPU offline, which trims every v1 cpuset on the machine: runs alone, with %s=1 (make test does)", HotplugEnv)
	}
}

// CgroupV2Dir makes a cgroup of the test's own in the cgroup2 hierarchy
// (the unified one of a hybrid machine, or /sys/fs/cgroup on a v2 one),
// below this process's own cgroup there, named prefix-<pid>-<random>, and
// returns its path; "" where there is none (no cgroup2 mount, not root,
// mkdir refused): the caller then does without. Its cpu.pressure is a
// kernel PSI file that counts only the tasks the test moves into it, so a
// PSI trigger on it fires for them alone, whatever else the machine runs.
// At cleanup it is removed as CpusetV1Dir's is; stopping its tasks is the
// caller's job, in a cleanup registered later.
func CgroupV2Dir(t testing.TB, prefix string) string {
	t.Helper()
	if os.Geteuid() != 0 {
		return ""
	}
	mount := ""
	for _, line := range strings.Split(readOr("/proc/self/mountinfo"), "\n") {
		// ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTS ... - FSTYPE SOURCE SUPEROPTS
		if pre, post, ok := strings.Cut(line, " - "); ok && strings.HasPrefix(post, "cgroup2 ") {
			if f := strings.Fields(pre); len(f) >= 5 && f[3] == "/" {
				mount = f[4]
				break
			}
		}
	}
	own := ""
	for _, line := range strings.Split(readOr("/proc/self/cgroup"), "\n") {
		if p, ok := strings.CutPrefix(line, "0::"); ok {
			own = p
		}
	}
	if mount == "" || own == "" {
		return ""
	}
	dir := filepath.Join(mount, own, fmt.Sprintf("%s-%d-%08x", prefix, os.Getpid(), rand.Uint32()))
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Logf("no cgroup2 directory of the test's own (%v)", err)
		return ""
	}
	t.Cleanup(func() { removeCgroupTree(t, dir) })
	return dir
}

func readOr(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	return string(b)
}
