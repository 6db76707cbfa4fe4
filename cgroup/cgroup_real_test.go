package cgroup

import (
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/schedpolicyd/schedpolicyd/internal/testutil"
	"github.com/schedpolicyd/schedpolicyd/sysfs"
)

const realV1Cpuset = "/sys/fs/cgroup/cpuset"

// TestCgroupRealV1 works on this machine's cgroup v1 cpuset hierarchy inside
// a parent of its own, /sys/fs/cgroup/cpuset/schedpolicyd-test-<random>,
// which it removes (with every child) even when it fails.
func TestCgroupRealV1(t *testing.T) {
	path := testutil.CpusetV1Dir(t, "schedpolicyd-test")
	var procs []*exec.Cmd
	t.Cleanup(func() { // before CpusetV1Dir's removal: cleanups run last first
		for _, p := range procs {
			_ = p.Process.Kill()
			_ = p.Wait()
		}
	})
	start := func(name string, args ...string) int {
		t.Helper()
		cmd := exec.Command(name, args...)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		procs = append(procs, cmd)
		return cmd.Process.Pid
	}
	mkdir := func(dir string) {
		t.Helper()
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}

	cg, err := OpenCgroup(path, CgroupOptions{Create: true})
	if err != nil {
		t.Fatal(err)
	}
	if cg.Version() != CgroupV1 {
		t.Fatalf("Version = %v, want v1 (statfs magic of %s)", cg.Version(), realV1Cpuset)
	}
	rootCPUs, err := cgReadCPUs(filepath.Join(realV1Cpuset, "cpuset.cpus"))
	if err != nil {
		t.Fatal(err)
	}
	allowed, err := cg.Allowed()
	if err != nil || !allowed.Equal(rootCPUs) {
		t.Fatalf("Allowed = %q, %v; want the root's %q copied by Create", allowed, err, rootCPUs)
	}
	if mems, err := cgReadString(filepath.Join(path, "cpuset.mems")); err != nil || mems == "" {
		t.Fatalf("parent cpuset.mems = %q, %v; want it copied from the root", mems, err)
	}
	// Opening it again, as after a daemon restart, works without Create.
	if _, err := OpenCgroup(path, CgroupOptions{}); err != nil {
		t.Fatalf("reopen: %v", err)
	}

	// A new child is empty, and attaching to it fails with ENOSPC.
	mkdir(filepath.Join(path, "w1"))
	if kids, err := cg.Children(); err != nil || !slices.Equal(kids, []string{"w1"}) {
		t.Fatalf("Children = %q, %v; want [w1]", kids, err)
	}
	if c, err := cg.ReadCPUs("w1"); err != nil || !c.IsEmpty() {
		t.Fatalf("new child cpus = %q, %v; want empty", c, err)
	}
	sleeper := start("sleep", "30")
	err = cg.Attach("w1", sleeper)
	if !errors.Is(err, syscall.ENOSPC) {
		t.Errorf("attach to an unprepared child: err = %v, want ENOSPC", err)
	}
	t.Logf("attach to unprepared v1 child: %v", err)

	if err := cg.PrepareChild("w1"); err != nil {
		t.Fatal(err)
	}
	if c, err := cg.ReadCPUs("w1"); err != nil || !c.Equal(allowed) {
		t.Fatalf("prepared child cpus = %q, %v; want %q", c, err, allowed)
	}
	if m, err := cgReadString(filepath.Join(path, "w1", "cpuset.mems")); err != nil || m == "" {
		t.Fatalf("prepared child mems = %q, %v; want filled", m, err)
	}

	first := sysfs.NewCPUSet(allowed.First())
	if err := cg.WriteCPUs("w1", first); err != nil {
		t.Fatal(err)
	}
	if c, err := cg.ReadCPUs("w1"); err != nil || !c.Equal(first) {
		t.Errorf("ReadCPUs after WriteCPUs(%q) = %q, %v", first, c, err)
	}
	if c, err := cg.EffectiveCPUs("w1"); err != nil || !c.Equal(first) {
		t.Errorf("EffectiveCPUs = %q, %v; want %q", c, err, first)
	}

	if err := cg.Attach("w1", sleeper); err != nil {
		t.Fatal(err)
	}
	exited := exec.Command("true")
	if err := exited.Run(); err != nil {
		t.Fatal(err)
	}
	err = cg.Attach("w1", exited.Process.Pid)
	if !errors.Is(err, syscall.ESRCH) {
		t.Errorf("attach an exited PID: err = %v, want ESRCH", err)
	}
	t.Logf("attach an exited PID: %v", err)
	if ps, err := cg.Procs("w1"); err != nil || !slices.Equal(ps, []int{sleeper}) {
		t.Errorf("Procs(w1) = %v, %v; want [%d]", ps, err, sleeper)
	}

	// All allowed CPUs, then the last one only: both fine on v1.
	last := sysfs.NewCPUSet(allowed.List()[allowed.Size()-1])
	for _, want := range []sysfs.CPUSet{allowed, last} {
		if err := cg.WriteCPUs("w1", want); err != nil {
			t.Errorf("WriteCPUs(%q): %v", want, err)
		}
		if c, err := cg.ReadCPUs("w1"); err != nil || !c.Equal(want) {
			t.Errorf("ReadCPUs = %q, %v; want %q", c, err, want)
		}
	}
	// Clearing a populated v1 cpuset: ENOSPC.
	err = cg.WriteCPUs("w1", sysfs.CPUSet{})
	if !errors.Is(err, syscall.ENOSPC) {
		t.Errorf("clear populated child: err = %v, want ENOSPC", err)
	}
	t.Logf("clear populated v1 child: %v", err)
	// "0-N" is every possible CPU; v1 takes it when the parent has them
	// all (the root's CPUs, copied by Create, are the online ones).
	if possible, err := cgReadCPUs("/sys/devices/system/cpu/possible"); err == nil && possible.Equal(allowed) {
		if err := cg.WriteAllCPUs("w1"); err != nil {
			t.Errorf("WriteAllCPUs: %v", err)
		}
		if c, err := cg.ReadCPUs("w1"); err != nil || !c.Equal(allowed) {
			t.Errorf("ReadCPUs after WriteAllCPUs = %q, %v; want %q", c, err, allowed)
		}
	}
	// A CPU beyond nr_cpu_ids: ERANGE from the list parser.
	err = cg.WriteCPUs("w1", sysfs.NewCPUSet(sysfs.MaxCPUs-1))
	if !errors.Is(err, syscall.ERANGE) {
		t.Errorf("WriteCPUs(%d): err = %v, want ERANGE", sysfs.MaxCPUs-1, err)
	}
	t.Logf("CPU beyond nr_cpu_ids: %v", err)

	// Nested: a restricted child whose own child asks for a CPU outside it.
	if allowed.Size() >= 2 {
		mkdir(filepath.Join(path, "restricted"))
		if err := cg.PrepareChild("restricted"); err != nil {
			t.Fatal(err)
		}
		if err := cg.WriteCPUs("restricted", last); err != nil {
			t.Fatal(err)
		}
		inner, err := OpenCgroup(filepath.Join(path, "restricted"), CgroupOptions{})
		if err != nil {
			t.Fatal(err)
		}
		mkdir(filepath.Join(path, "restricted", "inner"))
		if err := inner.PrepareChild("inner"); err != nil {
			t.Fatal(err)
		}
		if c, err := inner.ReadCPUs("inner"); err != nil || !c.Equal(last) {
			t.Errorf("inner cpus = %q, %v; want the restricted parent's %q", c, err, last)
		}
		err = inner.WriteCPUs("inner", first)
		if !errors.Is(err, syscall.EACCES) {
			t.Errorf("WriteCPUs outside the parent: err = %v, want EACCES", err)
		}
		t.Logf("CPU outside the v1 parent: %v", err)
		// Shrinking the parent below its child's CPUs: EBUSY.
		err = cg.WriteCPUs("restricted", first)
		if !errors.Is(err, syscall.EBUSY) {
			t.Errorf("shrink parent below child: err = %v, want EBUSY", err)
		}
		t.Logf("shrink v1 parent below its child: %v", err)
	} else {
		t.Log("one allowed CPU: nested EACCES case skipped")
	}

	// Usage of a busy child (the v1 fallback on schedstat unless cpuacct is
	// co-mounted) is ≥ 0 and grows.
	mkdir(filepath.Join(path, "busy"))
	if err := cg.PrepareChild("busy"); err != nil {
		t.Fatal(err)
	}
	busy := start("bash", "-c", "while :; do :; done")
	if err := cg.Attach("busy", busy); err != nil {
		t.Fatal(err)
	}
	u0, err := cg.Usage("busy")
	if err != nil || u0 < 0 {
		t.Fatalf("Usage(busy) = %v, %v", u0, err)
	}
	time.Sleep(300 * time.Millisecond)
	u1, err := cg.Usage("busy")
	if err != nil {
		t.Fatal(err)
	}
	if u1 <= u0 {
		t.Errorf("Usage(busy) did not grow over 300ms of a busy loop: %v then %v", u0, u1)
	}
	t.Logf("busy loop usage over 300ms: %v → %v (+%v)", u0, u1, u1-u0)
	if u, err := cg.Usage("w1"); err != nil || u < 0 {
		t.Errorf("Usage(w1) = %v, %v", u, err)
	}

	// A child removed under an open file: ENODEV; after removal: ENOENT.
	mkdir(filepath.Join(path, "gone"))
	f, err := os.OpenFile(filepath.Join(path, "gone", "cpuset.cpus"), os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(path, "gone")); err != nil {
		t.Fatal(err)
	}
	_, err = f.Write([]byte("0"))
	f.Close()
	if !IsGone(err) || !errors.Is(err, syscall.ENODEV) {
		t.Errorf("write to a removed cgroup's open file: err = %v, want ENODEV", err)
	}
	t.Logf("write on an fd of a removed cgroup: %v", err)
	err = cg.WriteCPUs("gone", first)
	if !IsGone(err) || !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("WriteCPUs on a removed child: err = %v, want ENOENT", err)
	}
	t.Logf("WriteCPUs on a removed child: %v", err)
}
