package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/schedpolicyd/schedpolicyd/internal/testutil"
)

// probeDescribes runs `schedpolicyd probe --json` with conf on the bus at
// addr and returns its "describes".
func probeDescribes(t *testing.T, conf, addr string) string {
	t.Helper()
	var out, errb bytes.Buffer
	if code := run([]string{"probe", "--json", "--config", conf, "--bus", addr, "--sysfs-root", mockMachine(t, "ac-offline-battery-unknown")}, &out, &errb); code != 0 {
		t.Fatalf("probe: exit %d: %s", code, errb.String())
	}
	var r struct{ Describes string }
	if err := json.Unmarshal(out.Bytes(), &r); err != nil {
		t.Fatalf("probe --json: %v: %s", err, out.String())
	}
	return r.Describes
}

// TestReloadRestartsForStartSettings is the laptop issue's fifth case: a
// reload whose file changes what only a start reads (here cgroup_root) is
// applied, not only warned about: the daemon restores the workloads of the
// old managed parent, starts again in the same process with the new file,
// and places the new parent's. systemd hears RELOADING=1 and then READY=1
// (from the new start), never STOPPING=1. probe says whether it describes
// the running daemon or a file that changed since it was read.
func TestReloadRestartsForStartSettings(t *testing.T) {
	requireMachine(t)
	bin := buildDaemon(t)
	addr := testutil.StartBus(t, testutil.BusOptions{System: true}).Addr
	sys := mockMachine(t, "ac-offline-battery-unknown")
	a, b := newV1Parent(t), newV1Parent(t)
	a.child(t, "wa", a.cpus)
	a.spin(t, "wa")
	b.child(t, "wb", b.cpus)
	b.spin(t, "wb")
	tmp := t.TempDir()
	conf := filepath.Join(tmp, "schedpolicyd.conf")
	testutil.WriteFile(t, conf, fmt.Sprintf("cgroup_root = %q\n", a.dir))
	p := startDaemonProc(t, bin, "--sysfs-root", sys, "--tree-dir", filepath.Join(tmp, "tree"), "--tree-backend", "plain",
		"--state-dir", filepath.Join(tmp, "state"), "--bus", addr, "--events", "fsnotify", "--debounce", "50ms",
		"--log-level", "debug", "--config", conf)
	onBattery(t, sys)
	testutil.WaitFor(t, "wa packed", 15*time.Second, func() (bool, string) { return single(a.cpusOf(t, "wa")), a.cpusOf(t, "wa") })
	testutil.WaitFor(t, "probe: the running daemon's setup", 15*time.Second, func() (bool, string) {
		d := probeDescribes(t, conf, addr)
		return d == "running", d
	})

	testutil.WriteFile(t, conf, fmt.Sprintf("cgroup_root = %q\n", b.dir))
	if d := probeDescribes(t, conf, addr); d != "file" {
		t.Fatalf("probe after the file changed: %q, want file", d)
	}
	p.cmd.Process.Signal(syscall.SIGHUP)
	var msgs []string
	for !strings.Contains(strings.Join(msgs, "\n"), "READY=1") {
		select {
		case m := <-p.notify.Msgs:
			msgs = append(msgs, m)
		case <-time.After(30 * time.Second):
			t.Fatalf("no READY=1 after the reload; sd_notify said %q", msgs)
		}
	}
	all := strings.Join(msgs, "\n")
	if !strings.Contains(all, "RELOADING=1") || strings.Contains(all, "STOPPING=1") || strings.Index(all, "RELOADING=1") > strings.Index(all, "READY=1") {
		t.Fatalf("sd_notify during the reload: %q, want RELOADING=1, then READY=1, no STOPPING=1", msgs)
	}
	p.logHas(t, "the restart explained", `msg="reload: these settings are read at start: restoring every workload and starting again in this process (holds end)"`)
	testutil.WaitFor(t, "wa restored, wb packed", 15*time.Second, func() (bool, string) {
		wa, wb := a.cpusOf(t, "wa"), b.cpusOf(t, "wb")
		return wa == a.cpus && single(wb), "wa=" + wa + " wb=" + wb
	})
	p.alive(t) // the same process, pid as before
	testutil.WaitFor(t, "probe: the running daemon's setup again", 15*time.Second, func() (bool, string) {
		d := probeDescribes(t, conf, addr)
		return d == "running", d
	})
	if n := strings.Count(p.log.String(), `msg=ready`); n != 2 {
		t.Errorf("%d ready lines, want 2 (the start and the restart)", n)
	}
	p.stop(t)
	if wb := b.cpusOf(t, "wb"); wb != b.cpus {
		t.Errorf("wb = %s after the stop, want %s", wb, b.cpus)
	}
	if _, err := os.Stat(filepath.Join(tmp, "tree")); err == nil {
		t.Errorf("the tree directory is still there after the stop")
	}
}
