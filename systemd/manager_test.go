package systemd

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/godbus/dbus/v5"
)

func TestCPUMask(t *testing.T) {
	for _, tc := range []struct {
		cpus []int
		mask []byte
		list string
	}{
		{nil, []byte{}, ""},
		{[]int{0}, []byte{0x01}, "0"},
		{[]int{0, 1, 2, 3}, []byte{0x0f}, "0-3"},
		{[]int{7, 8}, []byte{0x80, 0x01}, "7-8"},
		{[]int{0, 2, 3, 9}, []byte{0x0d, 0x02}, "0,2-3,9"},
		{[]int{63}, []byte{0, 0, 0, 0, 0, 0, 0, 0x80}, "63"},
	} {
		if got := EncodeCPUMask(tc.cpus); !reflect.DeepEqual(got, tc.mask) {
			t.Errorf("EncodeCPUMask(%v) = %#v, want %#v", tc.cpus, got, tc.mask)
		}
		if got, err := DecodeCPUMask(tc.mask, 64); err != nil || !reflect.DeepEqual(got, tc.cpus) {
			t.Errorf("DecodeCPUMask(%#v, 64) = %v, %v, want %v", tc.mask, got, err, tc.cpus)
		}
		if got := FormatCPUList(tc.cpus); got != tc.list {
			t.Errorf("FormatCPUList(%v) = %q, want %q", tc.cpus, got, tc.list)
		}
	}
	// systemd's own encoding of AllowedCPUs=0, as busctl showed it for
	// systemd 252 ("ay 8 1 0 0 0 0 0 0 0", docs/SOURCES.md §10) decodes
	// the same: trailing zero bytes are allowed.
	if got, err := DecodeCPUMask([]byte{1, 0, 0, 0, 0, 0, 0, 0}, 2); err != nil || !reflect.DeepEqual(got, []int{0}) {
		t.Errorf("DecodeCPUMask(systemd's AllowedCPUs=0, 2 CPUs) = %v, %v", got, err)
	}
	if got := UnitType("app-firefox-1.scope") + UnitType("a.service") + UnitType("b.slice") + UnitType("c.timer") + UnitType("noext"); got != "ScopeServiceSlice" {
		t.Errorf("UnitType: %q", got)
	}
}

// needManager skips unless the test runs where make systemd-test runs it:
// in its container or VM, as root, with systemd as PID 1. Never on the
// machine running make test: starting units there would change its state.
func needManager(t *testing.T) {
	t.Helper()
	if os.Getenv("SCHEDPOLICYD_TEST_SYSTEMD") != "1" {
		t.Skip("needs systemd as PID 1: make systemd-test runs this in its container (cgroup v1) and VM (cgroup v2) with SCHEDPOLICYD_TEST_SYSTEMD=1")
	}
	if _, err := os.Stat("/run/systemd/system"); err != nil || os.Geteuid() != 0 {
		t.Fatalf("SCHEDPOLICYD_TEST_SYSTEMD=1 but systemd is not PID 1 here or not root: %v", err)
	}
}

func unified() bool {
	var st syscall.Statfs_t
	return syscall.Statfs("/sys/fs/cgroup", &st) == nil && st.Type == 0x63677270 // CGROUP2_SUPER_MAGIC
}

func systemctlShow(t *testing.T, user int, unit, prop string) string {
	t.Helper()
	args := []string{"show", "-p", prop, "--value", unit}
	cmd := exec.Command("systemctl", args...)
	if user >= 0 {
		// What the user sees: systemctl --user as that user (systemctl
		// refuses --user to root).
		id := strconv.Itoa(user)
		cmd = exec.Command("setpriv", append([]string{"--reuid=" + id, "--regid=" + id, "--clear-groups", "systemctl", "--user"}, args...)...)
		cmd.Env = append(os.Environ(), "XDG_RUNTIME_DIR=/run/user/"+id)
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("systemctl %s: %v %s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}

func waitEvent(t *testing.T, ch <-chan UnitEvent, name string, kind EventKind) {
	t.Helper()
	deadline := time.After(30 * time.Second)
	for {
		select {
		case ev, ok := <-ch:
			if !ok {
				t.Fatalf("events closed before %s kind %d", name, kind)
			}
			if ev.Name == name && ev.Kind == kind {
				return
			}
		case <-deadline:
			t.Fatalf("no event of kind %d for %s within 30 s", kind, name)
		}
	}
}

func taskCPUs(t *testing.T, pid int) string {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "Cpus_allowed_list:"); ok {
			return strings.TrimSpace(v)
		}
	}
	t.Fatalf("no Cpus_allowed_list for %d", pid)
	return ""
}

// delegated reports whether controller is enabled for uid's user manager
// (in its cgroup.controllers), i.e. whether that manager can apply it.
func delegated(t *testing.T, uid int, controller string) bool {
	t.Helper()
	f := fmt.Sprintf("/sys/fs/cgroup/user.slice/user-%d.slice/user@%d.service/cgroup.controllers", uid, uid)
	for _, c := range strings.Fields(readTrim(t, f)) {
		if c == controller {
			return true
		}
	}
	return false
}

func readTrim(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// TestManagerSystemScope drives the real system manager: a transient
// scope started in a slice, found by SliceUnits and the UnitNew signal,
// AllowedCPUs set and reset at runtime (on cgroup v2 also applied: the
// scope's cpuset.cpus.effective and its task's affinity), and the
// UnitRemoved signal once its process exits.
func TestManagerSystemScope(t *testing.T) {
	needManager(t)
	testScope(t, -1)
}

// TestManagerUserScope does the same on a user's manager, reached as root
// through its private socket: the way placement changes units under
// user@UID.service/app.slice without writing the cgroups systemd delegated
// to that manager. SCHEDPOLICYD_TEST_USER_UID names a user whose manager
// runs (the guest enables lingering for it).
func TestManagerUserScope(t *testing.T) {
	needManager(t)
	uid, err := strconv.Atoi(os.Getenv("SCHEDPOLICYD_TEST_USER_UID"))
	if err != nil {
		t.Skip("SCHEDPOLICYD_TEST_USER_UID names no user with a running user manager")
	}
	testScope(t, uid)
}

func testScope(t *testing.T, uid int) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var m *Manager
	var err error
	if uid < 0 {
		m, err = ConnectSystem(ctx)
	} else {
		userManagerState(t, ctx, uid, true)
		m, err = ConnectUser(ctx, uid, UserOptions{})
	}
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	v, err := m.Version(ctx)
	if err != nil || v == "" || v[0] < '0' || v[0] > '9' {
		t.Fatalf("Version = %q, %v", v, err)
	}
	t.Logf("%s manager, systemd %s, cgroup v2: %v", m, v, unified())
	events, err := m.Events(ctx)
	if err != nil {
		t.Fatal(err)
	}

	// Not "schedpolicyd-test.slice": a dash nests a slice in the one its
	// prefix names (systemd.slice(5)), here schedpolicyd.slice.
	slice := "sptest.slice"
	if uid >= 0 {
		slice = "app.slice"
	}
	sleep := exec.Command("sleep", "300")
	if uid >= 0 {
		sleep.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(uid)}}
	}
	if err := sleep.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { sleep.Wait(); close(exited) }()
	defer func() { sleep.Process.Kill(); <-exited }()
	pid := sleep.Process.Pid
	name := fmt.Sprintf("schedpolicyd-test-%d.scope", pid)

	if err := m.StartScope(ctx, name, slice, "schedpolicyd manager test", uint32(pid)); err != nil {
		t.Fatal(err)
	}
	waitEvent(t, events, name, UnitLoaded)
	waitEvent(t, events, name, JobFinished)
	u, err := m.UnitInfo(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	if u.Slice != slice || u.ActiveState != "active" || !strings.HasSuffix(u.ControlGroup, "/"+slice+"/"+name) || u.AllowedCPUs != nil {
		t.Fatalf("UnitInfo(%s) = %+v", name, u)
	}
	if uid >= 0 && !strings.Contains(u.ControlGroup, fmt.Sprintf("/user@%d.service/", uid)) {
		t.Fatalf("a user's scope outside user@%d.service: %s", uid, u.ControlGroup)
	}
	list, err := m.SliceUnits(ctx, slice)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, l := range list {
		found = found || l.Name == name
		if l.Slice != slice {
			t.Errorf("SliceUnits(%s) lists %s of slice %s", slice, l.Name, l.Slice)
		}
	}
	if !found {
		t.Fatalf("SliceUnits(%s) = %+v, no %s", slice, list, name)
	}
	if err := m.StartScope(ctx, name, slice, "again", uint32(pid)); err == nil {
		t.Fatal("a second scope of the same name was started")
	} else {
		var e dbus.Error
		if !errors.As(err, &e) || e.Name != "org.freedesktop.systemd1.UnitExists" {
			t.Errorf("second StartScope: %v (want UnitExists)", err)
		}
	}

	all := readTrim(t, "/sys/devices/system/cpu/online")
	for _, set := range [][]int{{0}, nil} {
		if err := m.SetAllowedCPUs(ctx, name, set); err != nil {
			t.Fatal(err)
		}
		want := FormatCPUList(set)
		if got := systemctlShow(t, uid, name, "AllowedCPUs"); got != want {
			t.Errorf("after SetAllowedCPUs(%v): systemctl show AllowedCPUs = %q, want %q", set, got, want)
		}
		u, err := m.UnitInfo(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(u.AllowedCPUs, set) {
			t.Errorf("after SetAllowedCPUs(%v): UnitInfo.AllowedCPUs = %v", set, u.AllowedCPUs)
		}
		applies := unified() && (uid < 0 || delegated(t, uid, "cpuset"))
		if !applies {
			// cgroup v1, or a user manager without the cpuset
			// controller (Debian 12's user@.service delegates "pids
			// memory cpu"): systemd stores AllowedCPUs= and applies
			// nothing.
			if u.EffectiveCPUs != nil {
				t.Errorf("AllowedCPUs= cannot apply here, yet EffectiveCPUs = %v", u.EffectiveCPUs)
			}
			if got := taskCPUs(t, pid); got != all {
				t.Errorf("AllowedCPUs= cannot apply here, yet the task's Cpus_allowed_list = %q (all: %q)", got, all)
			}
			if set != nil {
				t.Logf("AllowedCPUs=%s stored by the %s manager, not applied (cgroup v2: %v)", want, m, unified())
			}
			continue
		}
		eff, file := want, filepath.Join("/sys/fs/cgroup", u.ControlGroup, "cpuset.cpus.effective")
		if set == nil {
			// Reset: no unit below needs the controller any more, so
			// systemd may switch it off there (the file goes).
			eff = all
			if _, err := os.Stat(file); os.IsNotExist(err) && u.EffectiveCPUs == nil {
				file = ""
			}
		}
		if file != "" {
			if got := FormatCPUList(u.EffectiveCPUs); got != eff {
				t.Errorf("after SetAllowedCPUs(%v): EffectiveCPUs = %q, want %q", set, got, eff)
			}
			if got := readTrim(t, file); got != eff {
				t.Errorf("after SetAllowedCPUs(%v): cpuset.cpus.effective = %q, want %q", set, got, eff)
			}
		}
		if got := taskCPUs(t, pid); got != eff {
			t.Errorf("after SetAllowedCPUs(%v): the task's Cpus_allowed_list = %q, want %q", set, got, eff)
		}
	}
	if err := m.SetAllowedCPUs(ctx, "schedpolicyd-test-no-such.scope", []int{0}); err == nil {
		t.Error("SetAllowedCPUs on a unit that does not exist succeeded")
	}

	sleep.Process.Kill()
	<-exited
	waitEvent(t, events, name, UnitDropped)
}

// TestManagerReexec re-executes the real managers (`daemon-reexec`):
// the system manager's connection through the bus sees ReloadStarted and
// ReloadFinished and keeps receiving signals from the new connection that
// took the name over; a user's manager closes every connection of its
// private socket (the Events channel closes), and a connection made right
// after works and receives its signals. SCHEDPOLICYD_TEST_USER_UID names
// a user whose manager runs.
func TestManagerReexec(t *testing.T) {
	needManager(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	m, err := ConnectSystem(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	events, err := m.Events(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("systemctl", "daemon-reexec").CombinedOutput(); err != nil {
		t.Fatalf("systemctl daemon-reexec: %v %s", err, out)
	}
	waitEvent(t, events, "", ReloadStarted)
	waitEvent(t, events, "", ReloadFinished)
	scopeEvents(t, ctx, m, events, -1)

	uid, err := strconv.Atoi(os.Getenv("SCHEDPOLICYD_TEST_USER_UID"))
	if err != nil {
		t.Skip("SCHEDPOLICYD_TEST_USER_UID names no user with a running user manager")
	}
	um, err := ConnectUser(ctx, uid, UserOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer um.Close()
	uevents, err := um.Events(ctx)
	if err != nil {
		t.Fatal(err)
	}
	id := strconv.Itoa(uid)
	cmd := exec.Command("setpriv", "--reuid="+id, "--regid="+id, "--clear-groups", "systemctl", "--user", "daemon-reexec")
	cmd.Env = append(os.Environ(), "XDG_RUNTIME_DIR=/run/user/"+id)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("systemctl --user daemon-reexec: %v %s", err, out)
	}
	closed := time.After(30 * time.Second)
	for open := true; open; {
		select {
		case _, open = <-uevents:
		case <-closed:
			t.Fatal("the user manager's connection did not close within 30 s of its re-execution")
		}
	}
	t.Logf("user %d's manager closed the connection when it re-executed", uid)
	um2, err := ConnectUser(ctx, uid, UserOptions{})
	if err != nil {
		t.Fatalf("connecting again right after the re-execution: %v", err)
	}
	defer um2.Close()
	uevents2, err := um2.Events(ctx)
	if err != nil {
		t.Fatal(err)
	}
	scopeEvents(t, ctx, um2, uevents2, uid)
}

// scopeEvents starts a transient scope on m and waits for its UnitNew and
// JobRemoved.
func scopeEvents(t *testing.T, ctx context.Context, m *Manager, events <-chan UnitEvent, uid int) {
	t.Helper()
	sleep := exec.Command("sleep", "300")
	slice := "sptest.slice"
	if uid >= 0 {
		slice = "app.slice"
		sleep.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(uid)}}
	}
	if err := sleep.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { sleep.Wait(); close(exited) }()
	defer func() { sleep.Process.Kill(); <-exited }()
	name := fmt.Sprintf("schedpolicyd-reexec-%d.scope", sleep.Process.Pid)
	if err := m.StartScope(ctx, name, slice, "schedpolicyd reexec test", uint32(sleep.Process.Pid)); err != nil {
		t.Fatal(err)
	}
	waitEvent(t, events, name, UnitLoaded)
	waitEvent(t, events, name, JobFinished)
}
