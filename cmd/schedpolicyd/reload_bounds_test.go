package main

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/schedpolicyd/schedpolicyd/internal/testutil"
)

// TestReloadOutOfBoundsKeepsRunning: the real binary on
// a real cgroup v1 cpuset parent, its configuration file edited to
// sample_interval = "2562047h" and SIGHUP. That value used to be applied,
// and the idle sampling backoff (the period shifted left) overflowed into a
// negative period: "non-positive interval for Ticker.Reset", a panic that
// left the workloads packed. Now the file is refused with its file:line,
// the running configuration stays, the daemon keeps following the power
// source, and SIGTERM restores every workload's original cpuset. The same
// file at start-up is exit 2 with the same message.
//
// The procfs root is an empty directory, as on a kernel without PSI: there
// the daemon cannot stop sampling while every workload is idle and backs
// off instead, the path that overflowed.
func TestReloadOutOfBoundsKeepsRunning(t *testing.T) {
	testutil.NeedCpusetV1(t)
	bin := buildDaemon(t)
	sys := mockMachine(t, "ac-offline-battery-unknown")
	onBattery(t, sys) // powersaving: the workloads get packed
	cg := newV1Parent(t)
	last := cg.cpus[strings.LastIndexAny(cg.cpus, ",-")+1:]
	cg.child(t, "w1", last) // original: the last CPU only
	cg.child(t, "w2", cg.cpus)
	tmp := t.TempDir()
	conf := filepath.Join(tmp, "schedpolicyd.conf")
	const huge = "# schedpolicyd.conf\nsample_interval = \"2562047h\"\n"
	wantErr := conf + `:2: sample_interval: "2562047h": must be at least 10ms and at most 1h`
	args := []string{"--config", conf, "--sysfs-root", sys, "--cgroup-root", cg.dir, "--proc-root", t.TempDir(),
		"--tree-dir", filepath.Join(tmp, "tree"), "--tree-backend", "plain", "--state-dir", filepath.Join(tmp, "state"),
		"--bus", "none", "--events", "fsnotify", "--debounce", "50ms", "--log-level", "debug"}

	// At start-up: a usage error, nothing started.
	testutil.WriteFile(t, conf, huge)
	// The bound only keeps a daemon that wrongly starts from hanging the
	// test.
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, args...).CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 || string(out) != "schedpolicyd: "+wantErr+"\n" {
		t.Fatalf("start with %q: %v, output %q; want exit 2 and %q", huge, err, out, "schedpolicyd: "+wantErr+"\n")
	}
	if a, b := cg.cpusOf(t, "w1"), cg.cpusOf(t, "w2"); a != last || b != cg.cpus {
		t.Fatalf("a refused start changed cpusets: w1=%s w2=%s", a, b)
	}

	testutil.WriteFile(t, conf, "# schedpolicyd.conf\nsample_interval = \"10ms\"\n")
	p := startDaemonProc(t, bin, args...)
	p.logHas(t, "sampling backs off", "no CPU pressure trigger; while every workload is idle, sampling slows down instead of stopping")
	testutil.WaitFor(t, "packed", 15*time.Second, func() (bool, string) {
		a, b := cg.cpusOf(t, "w1"), cg.cpusOf(t, "w2")
		return single(a) && single(b), fmt.Sprintf("w1=%s w2=%s", a, b)
	})
	// Both workloads are idle (no tasks): after three samples (30 ms) the
	// period doubles with each sample. This pause only lets that happen,
	// so that without the bounds the SIGHUP below reaches the overflowing
	// shift; nothing asserted depends on its length.
	time.Sleep(time.Second)

	testutil.WriteFile(t, conf, huge)
	p.cmd.Process.Signal(syscall.SIGHUP)
	p.notify.Expect(t, "RELOADING=1")
	expectReadyStatus(t, p.notify)
	p.logHas(t, "the refused file named with file:line", strings.ReplaceAll(wantErr, `"`, `\"`))
	p.logHas(t, "the running configuration kept", "reload: keeping the running configuration")
	p.alive(t)
	if strings.Contains(p.log.String(), "configuration reloaded") {
		t.Fatal("the out-of-range file was applied")
	}

	// The event loop still runs on the old configuration: AC spreads the
	// workloads, battery packs them again.
	onAC(t, sys)
	testutil.WaitFor(t, "performance on AC after the refused reload", 15*time.Second, func() (bool, string) {
		a, b := cg.cpusOf(t, "w1"), cg.cpusOf(t, "w2")
		return a == cg.cpus && b == cg.cpus, fmt.Sprintf("w1=%s w2=%s", a, b)
	})
	onBattery(t, sys)
	testutil.WaitFor(t, "packed again", 15*time.Second, func() (bool, string) {
		a, b := cg.cpusOf(t, "w1"), cg.cpusOf(t, "w2")
		return single(a) && single(b), fmt.Sprintf("w1=%s w2=%s", a, b)
	})
	// The largest accepted period is applied, backoff and all.
	testutil.WriteFile(t, conf, "# schedpolicyd.conf\nsample_interval = \"1h\"\n")
	p.cmd.Process.Signal(syscall.SIGHUP)
	p.notify.Expect(t, "RELOADING=1")
	expectReadyStatus(t, p.notify)
	p.logHas(t, "the largest period applied", "configuration reloaded")
	p.alive(t)

	p.stop(t)
	if a, b := cg.cpusOf(t, "w1"), cg.cpusOf(t, "w2"); a != last || b != cg.cpus {
		t.Errorf("after SIGTERM: w1=%s (want %s) w2=%s (want %s)", a, last, b, cg.cpus)
	}
	if strings.Contains(p.log.String(), "panic") {
		t.Errorf("the daemon panicked:\n%s", p.log.String())
	}
}

// expectReadyStatus waits for the READY=1 that ends a reload and checks
// that it carries the policy line as STATUS= again (systemctl status keeps
// showing the policy after a reload, good or refused).
func expectReadyStatus(t *testing.T, n *testutil.NotifySocket) {
	t.Helper()
	m := n.Expect(t, "READY=1")
	if !strings.Contains(m, "STATUS=policy ") {
		t.Errorf("READY=1 after a reload has no policy status: %q", m)
	}
}
