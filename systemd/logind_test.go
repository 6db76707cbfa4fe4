package systemd

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/godbus/dbus/v5"

	"github.com/schedpolicyd/schedpolicyd/internal/testutil"
)

// TestConnectLogindNeverActivates: on a bus where nobody owns
// org.freedesktop.login1 but an activation file declares it, ConnectLogind
// answers ErrNoLogind and the file's Exec= never runs; a call without
// NO_AUTO_START on the same bus does run it (so the bus really would
// have started logind).
func TestConnectLogindNeverActivates(t *testing.T) {
	dir := t.TempDir()
	services := filepath.Join(dir, "services")
	if err := os.Mkdir(services, 0o755); err != nil {
		t.Fatal(err)
	}
	marker := filepath.Join(dir, "activated")
	testutil.Write(t, filepath.Join(services, "org.freedesktop.login1.service"),
		"[D-BUS Service]\nName=org.freedesktop.login1\nExec=/usr/bin/touch "+marker+"\n")
	b := testutil.StartBus(t, testutil.BusOptions{ServiceDir: services})
	t.Setenv("DBUS_SYSTEM_BUS_ADDRESS", b.Addr)

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	l, err := ConnectLogind(ctx)
	if !errors.Is(err, ErrNoLogind) {
		if l != nil {
			l.Close()
		}
		t.Fatalf("ConnectLogind = %v, want ErrNoLogind", err)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("ConnectLogind started org.freedesktop.login1 by activation")
	}

	c, err := dbus.Connect(b.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// With auto-start: the bus runs the Exec= line; touch exits without
	// owning the name, so the call gets no answer and only the marker
	// counts (the call is abandoned after a moment).
	actx, acancel := context.WithTimeout(ctx, 3*time.Second)
	_ = c.Object(logindName, logindPath).CallWithContext(actx, logindInterface+".ListUsers", 0).Err
	acancel()
	if _, err := os.Stat(marker); err != nil {
		t.Fatalf("the activation file was not used by a call that allows auto-start: %v", err)
	}
}

// TestLogindUsers, against the real logind of the systemd test VM or
// container: the lingering user SCHEDPOLICYD_TEST_USER_UID is listed;
// disabling linger gives UserRemoved for it, enabling it again UserNew,
// and the user's manager comes back.
func TestLogindUsers(t *testing.T) {
	needManager(t)
	uid, err := strconv.Atoi(os.Getenv("SCHEDPOLICYD_TEST_USER_UID"))
	if err != nil {
		t.Skip("needs SCHEDPOLICYD_TEST_USER_UID, a lingering user (make systemd-test sets it)")
	}
	name := userName(t, uid)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	l, err := ConnectLogind(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	users, err := l.Users(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(users, func(u User) bool { return u.UID == uid && u.Name == name }) {
		t.Fatalf("ListUsers = %+v, want uid %d (%s) among them", users, uid, name)
	}
	want := func(ev UserEvent) {
		t.Helper()
		for {
			select {
			case got, ok := <-l.Events():
				if !ok {
					t.Fatal("logind's signals ended")
				}
				if got == ev {
					return
				}
			case <-ctx.Done():
				t.Fatalf("no %+v from logind", ev)
			}
		}
	}
	run(t, "loginctl", "disable-linger", name)
	want(UserEvent{UID: uid, New: false})
	// The old manager may still be stopping, its socket still there: the
	// next test would dial it as it goes (CI, 2026-12-06: ENOENT on
	// /run/user/1000/systemd/private in TestManagerUserScope).
	userManagerState(t, ctx, uid, false)
	run(t, "loginctl", "enable-linger", name)
	want(UserEvent{UID: uid, New: true})
	userManagerState(t, ctx, uid, true)
}

// userManagerState waits, until ctx ends, for user@UID.service of the
// system manager to be up (active, and its private socket answers
// Version) or, with up false, down (neither active nor on its way down).
// A socket file alone says neither: a stopping manager removes it last.
func userManagerState(t *testing.T, ctx context.Context, uid int, up bool) {
	t.Helper()
	sys, err := ConnectSystem(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer sys.Close()
	unit := "user@" + strconv.Itoa(uid) + ".service"
	var last string
	for {
		info, err := sys.UnitInfo(ctx, unit)
		var noUnit dbus.Error
		switch {
		case !up && errors.As(err, &noUnit) && noUnit.Name == "org.freedesktop.systemd1.NoSuchUnit":
			return
		case err != nil:
			last = err.Error()
		case !up && (info.ActiveState == "inactive" || info.ActiveState == "failed"):
			return
		case up && info.ActiveState == "active":
			m, err := ConnectUser(ctx, uid, UserOptions{})
			if err == nil {
				_, err = m.Version(ctx)
				m.Close()
			}
			if err == nil {
				return
			}
			last = err.Error()
		default:
			last = unit + " " + info.ActiveState
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s not up=%v: %s", unit, up, last)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// TestManagerUserDelegation: the system manager's Delegate and
// DelegateControllers of the lingering user's user@UID.service (UnitInfo)
// say cpuset exactly where its cgroup has cpuset in cgroup.controllers
// (cgroup v2), which is what the daemon's choice rests on.
func TestManagerUserDelegation(t *testing.T) {
	needManager(t)
	uid, err := strconv.Atoi(os.Getenv("SCHEDPOLICYD_TEST_USER_UID"))
	if err != nil {
		t.Skip("needs SCHEDPOLICYD_TEST_USER_UID, a lingering user (make systemd-test sets it)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	m, err := ConnectSystem(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	unit := "user@" + strconv.Itoa(uid) + ".service"
	info, err := m.UnitInfo(ctx, unit)
	if err != nil {
		t.Fatal(err)
	}
	shown := strings.Fields(strings.TrimSpace(systemctlShow(t, -1, unit, "DelegateControllers")))
	if !info.Delegate || !slices.Equal(info.DelegateControllers, shown) {
		t.Fatalf("%s: Delegate=%v DelegateControllers=%v, systemctl show says %v", unit, info.Delegate, info.DelegateControllers, shown)
	}
	if !unified() {
		t.Logf("cgroup v1: %s DelegateControllers=%v", unit, info.DelegateControllers)
		return
	}
	b, err := os.ReadFile(filepath.Join("/sys/fs/cgroup", info.ControlGroup, "cgroup.controllers"))
	if err != nil {
		t.Fatal(err)
	}
	ctl := strings.Fields(string(b))
	if slices.Contains(info.DelegateControllers, "cpuset") != slices.Contains(ctl, "cpuset") {
		t.Fatalf("%s: DelegateControllers=%v but cgroup.controllers is %v", unit, info.DelegateControllers, ctl)
	}
	t.Logf("%s: DelegateControllers=%v, cgroup.controllers %v", unit, info.DelegateControllers, ctl)
}

func userName(t *testing.T, uid int) string {
	t.Helper()
	out, err := exec.Command("id", "-nu", strconv.Itoa(uid)).Output()
	if err != nil {
		t.Fatalf("id -nu %d: %v", uid, err)
	}
	return strings.TrimSpace(string(out))
}

func run(t *testing.T, name string, args ...string) {
	t.Helper()
	if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
		t.Fatalf("%s %v: %v: %s", name, args, err, out)
	}
}
