package main

// Taking a real CPU offline in tests (cgroup v1 trims every cpuset then,
// for good): the helpers that bring it back in every path, the guard that
// keeps it from trimming other tests' cpusets, and the regression test of
// the daemon's handling of such a trim.

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/schedpolicyd/schedpolicyd/internal/testutil"
	"github.com/schedpolicyd/schedpolicyd/sysfs"
)

// faultCPUOffline is set while this process has a real CPU offline, for
// the cleanup and signal paths.
var faultCPUOffline atomic.Int32 // CPU number + 1; 0: none

func faultPutCPUBack() {
	if c := faultCPUOffline.Load(); c > 0 {
		p := fmt.Sprintf("/sys/devices/system/cpu/cpu%d/online", c-1)
		if err := os.WriteFile(p, []byte("1"), 0o644); err == nil {
			faultCPUOffline.Store(0)
		} else {
			fmt.Fprintf(os.Stderr, "fault model: cannot bring CPU %d back online: %v\n", c-1, err)
		}
	}
}

// faultHotplugMode is SCHEDPOLICYD_FAULT_HOTPLUG: "real" takes the real
// CPU offline at offline steps (the mock topology follows), "mock" only
// the daemon's view. Unset, it is "real" in make test's serial hotplug run
// (testutil.HotplugEnv) and "mock" elsewhere: offlining a CPU trims every
// v1 cpuset of the machine, other tests' too, so it never happens beside
// them.
func faultHotplugMode() string {
	switch v := os.Getenv("SCHEDPOLICYD_FAULT_HOTPLUG"); v {
	case "real", "mock":
		return v
	}
	if os.Getenv(testutil.HotplugEnv) == "1" {
		return "real"
	}
	return "mock"
}

func faultRead(p string) string {
	b, err := os.ReadFile(p)
	if err != nil {
		return "error: " + err.Error()
	}
	return strings.TrimSpace(string(b))
}

// TestRealHotplugTrimKeepsOriginal: a workload the
// daemon never wrote, trimmed by the kernel when a CPU goes offline (cgroup
// v1), gets its original back on stop once the CPU is online again. The
// daemon used to take the trimmed value for the original at its next
// write, and restore that: "0-1" came back as "0". A workload it wrote
// and the trim emptied ("last") must come back too.
func TestRealHotplugTrimKeepsOriginal(t *testing.T) {
	if faultHotplugMode() != "real" {
		testutil.NeedRealHotplug(t)
	}
	requireMachine(t)
	cg := newV1Parent(t)
	set, _ := sysfs.ParseCPUList(cg.cpus)
	hp := set.List()[len(set.List())-1]
	online := fmt.Sprintf("/sys/devices/system/cpu/cpu%d/online", hp)
	if _, err := os.Stat(online); err != nil {
		t.Skipf("CPU %d cannot go offline: %v", hp, err)
	}
	rest := set.Difference(sysfs.NewCPUSet(hp)).String()
	last := strconv.Itoa(hp)
	cg.child(t, "all", cg.cpus) // performance: never written
	cg.child(t, "last", last)   // written at once, then emptied by the trim
	bin := buildDaemon(t)
	sys := mockMachine(t, "ac-offline-battery-unknown")
	tmp := t.TempDir()
	p := startDaemonProc(t, bin, "--sysfs-root", sys, "--cgroup-root", cg.dir, "--tree-dir", filepath.Join(tmp, "tree"),
		"--tree-backend", "fuse", "--state-dir", filepath.Join(tmp, "state"), "--bus", "none", "--events", "fsnotify",
		"--debounce", "50ms", "--log-level", "debug", "--config", emptyConf(t))
	testutil.WaitFor(t, "last spread", 10*time.Second, func() (bool, string) {
		got := cg.cpusOf(t, "last")
		return got == cg.cpus, got
	})

	t.Cleanup(faultPutCPUBack)
	faultCPUOffline.Store(int32(hp + 1))
	testutil.Write(t, online, "0")
	testutil.WaitFor(t, "the kernel's trim", 10*time.Second, func() (bool, string) {
		a, l := cg.cpusOf(t, "all"), cg.cpusOf(t, "last")
		return a == rest, a + " / " + l
	})
	mockCPUs := filepath.Join(sys, "devices/system/cpu/online")
	testutil.Write(t, mockCPUs, rest)
	p.logHas(t, "offline seen", `msg="online CPUs changed" from=`+cg.cpus+" to="+rest)
	testutil.Write(t, online, "1")
	faultCPUOffline.Store(0)
	testutil.Write(t, mockCPUs, cg.cpus)
	testutil.WaitFor(t, "every CPU given back", 10*time.Second, func() (bool, string) {
		a, l := cg.cpusOf(t, "all"), cg.cpusOf(t, "last")
		return a == cg.cpus && l == cg.cpus, a + " / " + l
	})
	p.stop(t)
	if a, l := cg.cpusOf(t, "all"), cg.cpusOf(t, "last"); a != cg.cpus || l != last {
		t.Errorf("after SIGTERM: all=%q (want %q), last=%q (want %q)", a, cg.cpus, l, last)
	}
}
