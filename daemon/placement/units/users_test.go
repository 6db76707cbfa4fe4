package units

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	"golang.org/x/sys/unix"

	"github.com/schedpolicyd/schedpolicyd/daemon/placement"
	"github.com/schedpolicyd/schedpolicyd/daemon/statefile"
	"github.com/schedpolicyd/schedpolicyd/internal/testutil"
	"github.com/schedpolicyd/schedpolicyd/systemd"
)

func newTestUnits(t *testing.T, manage ...string) *Placement {
	t.Helper()
	log := logrus.New()
	log.SetOutput(io.Discard)
	u := New(placement.NewEngine(&placement.Config{Manage: manage}, log, &placement.Counters{}, nil))
	u.msgs, u.done = make(chan placement.Event, 16), make(chan struct{})
	t.Cleanup(func() {
		close(u.done)
		if u.focus != nil {
			u.focus.w.Close()
		}
	})
	return u
}

// TestFocusXattrFollowed: on a real cgroup (the v1 cpuset hierarchy
// here; the systemd test VM checks v2), setxattr of
// user.xdg.inactive-since raises an event on the focus watch, without
// polling, and the app's class follows the value Mutter writes: "-1"
// focused, a timestamp not. Units of other slices are not watched and
// keep their slice's class.
func TestFocusXattrFollowed(t *testing.T) {
	dir := testutil.CpusetV1Dir(t, "sp-focus")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	u := newTestUnits(t, "app.slice", "background.slice", "session.slice")
	if err := u.startFocus(); err != nil {
		t.Fatal(err)
	}
	app := &unitWorkload{name: "app-test-1.scope", slice: "app.slice", uid: 1000, cgroup: dir, rec: &statefile.UnitRecord{Manager: "user:1000", Unit: "app-test-1.scope"}}
	bg := &unitWorkload{name: "bg.scope", slice: "background.slice", uid: 1000, cgroup: filepath.Join(dir, "nonexistent"), rec: &statefile.UnitRecord{}}
	ses := &unitWorkload{name: "s.service", slice: "session.slice", uid: 1000, cgroup: filepath.Join(dir, "nonexistent"), rec: &statefile.UnitRecord{}}
	for _, w := range []*unitWorkload{app, bg, ses} {
		u.workloads[workloadKey(w.uid, w.name)] = w
		u.watchFocus(w)
	}
	if len(u.focus.byDir) != 1 || u.focus.byDir[dir] != "user:1000/app-test-1.scope" {
		t.Fatalf("watched %v, want only the app's cgroup", u.focus.byDir)
	}
	if got := app.class() + " " + bg.class() + " " + ses.class(); got != "app background session" {
		t.Fatalf("classes before any xattr: %q", got)
	}
	set := func(v string, wantChange bool, wantClass string) {
		t.Helper()
		if err := unix.Setxattr(dir, FocusXattr, []byte(v), 0); err != nil {
			t.Fatalf("setxattr %s=%s: %v", FocusXattr, v, err)
		}
		select {
		case ev := <-u.msgs:
			m := ev.(unitMsg)
			if len(m.focus) != 1 || m.focus[0] != dir {
				t.Fatalf("event %+v, want focus %s", m, dir)
			}
			if got := u.onFocus(m); got != wantChange {
				t.Fatalf("value %q: onFocus changed=%v, want %v", v, got, wantChange)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("no IN_ATTRIB event for setxattr %s on %s", FocusXattr, dir)
		}
		if got := app.class(); got != wantClass {
			t.Fatalf("value %q: class %q, want %q", v, got, wantClass)
		}
	}
	set("-1", true, "focused")
	for _, s := range u.Status() {
		if s.Name == "app-test-1.scope" && s.Class != "focused" {
			t.Fatalf("status class %q", s.Class)
		}
	}
	set("1234567890", true, "app")
	set("1234567891", false, "app")
	set("-1", true, "focused")
	// Written in a loop (the xattr is the user's to write), the changes
	// reach the loop coalesced: the first at once, the rest in one
	// message at most every focusEvery, which says what the last write
	// left.
	if err := unix.Setxattr(dir, FocusXattr, []byte("1"), 0); err != nil {
		t.Fatal(err)
	}
	<-u.msgs // the next message
	u.onFocus(unitMsg{focusOverflow: true})
	for i := 0; i < 50; i++ {
		v := "-1"
		if i%2 == 0 {
			v = strconv.Itoa(1234567900 + i)
		}
		if err := unix.Setxattr(dir, FocusXattr, []byte(v), 0); err != nil {
			t.Fatal(err)
		}
	}
	msgs := 0
	for app.class() != "focused" {
		select {
		case ev := <-u.msgs:
			msgs++
			u.onFocus(ev.(unitMsg))
		case <-time.After(10 * time.Second):
			t.Fatalf("after 50 writes: class %s after %d messages", app.class(), msgs)
		}
		if msgs > 3 {
			t.Fatalf("50 writes made %d messages", msgs)
		}
	}
	// After lost events every watched app is read again.
	if err := unix.Setxattr(dir, FocusXattr, []byte("42"), 0); err != nil {
		t.Fatal(err)
	}
	<-u.msgs
	if !u.onFocus(unitMsg{focusOverflow: true}) || app.class() != "app" {
		t.Fatalf("after an overflow: class %q", app.class())
	}
	u.forget("user:1000/app-test-1.scope")
	if len(u.focus.byDir) != 0 {
		t.Fatalf("still watched after forget: %v", u.focus.byDir)
	}
}

func TestReadFocused(t *testing.T) {
	dir := testutil.CpusetV1Dir(t, "sp-focusval")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if readFocused(dir) {
		t.Fatal("no attribute: focused")
	}
	for v, want := range map[string]bool{"-1": true, "-1\x00": true, " -1\n": true, "0": false, "-10": false, "1733050000000000": false, "": false} {
		if err := unix.Setxattr(dir, FocusXattr, []byte(v), 0); err != nil {
			t.Fatal(err)
		}
		if got := readFocused(dir); got != want {
			t.Errorf("readFocused(%q) = %v, want %v", v, got, want)
		}
	}
}

// TestUserLoggedOutForgetsRecords: logind's UserRemoved forgets the
// user's units and every record of its manager (their runtime values
// went with it), and nothing of another manager.
func TestUserLoggedOutForgetsRecords(t *testing.T) {
	const uid = 424242
	if _, err := os.Stat(systemd.UserSocket(uid)); !errors.Is(err, os.ErrNotExist) {
		t.Skipf("%s exists here", systemd.UserSocket(uid))
	}
	u := newTestUnits(t, "app.slice")
	recs := []*statefile.UnitRecord{
		{Manager: "user:424242", Unit: "app-a.scope", Values: statefile.Values{Applied: "0"}},
		{Manager: "user:424242", Unit: "app-b.scope", Values: statefile.Values{Pending: "1"}},
		{Manager: "system", Unit: "user@424242.service", Values: statefile.Values{Applied: "0"}},
		{Manager: "user:7", Unit: "app-a.scope", Values: statefile.Values{Applied: "0"}},
	}
	for _, r := range recs {
		u.records[r.Key()] = r
	}
	u.people[uid] = &userManager{uid: uid, delegated: true}
	u.workloads[workloadKey(uid, "app-a.scope")] = &unitWorkload{name: "app-a.scope", slice: "app.slice", uid: uid, rec: recs[0]}
	if !u.onUser(systemd.UserEvent{UID: uid}) {
		t.Fatal("UserRemoved with a workload of the user: no change")
	}
	var left []string
	for k := range u.records {
		left = append(left, k)
	}
	if len(u.records) != 2 || u.records["system/user@424242.service"] == nil || u.records["user:7/app-a.scope"] == nil {
		t.Fatalf("records left: %v", left)
	}
	if len(u.workloads) != 0 || u.people[uid] != nil {
		t.Fatalf("workloads %v, people %v", u.workloads, u.people)
	}
}

// TestUserLinkStale: a message of a link the daemon dropped (the user's
// manager stopped, the user logged out) that reaches the loop after a new
// link was made (logged in again, or the manager restarted) changes
// nothing: before, the end of the old connection dropped the new one,
// and the user's units were no longer placed.
func TestUserLinkStale(t *testing.T) {
	const uid = 424243
	u := newTestUnits(t, "app.slice")
	old, cur := &userLink{uid: uid}, &userLink{uid: uid}
	u.people[uid] = &userManager{uid: uid, delegated: true, link: cur, up: true}
	u.workloads[workloadKey(uid, "app-a.scope")] = &unitWorkload{name: "app-a.scope", slice: "app.slice", uid: uid, rec: &statefile.UnitRecord{Manager: managerName(uid), Unit: "app-a.scope"}}
	for _, m := range []linkMsg{{uid: uid, link: old, down: true, err: errors.New("closed")}, {uid: uid, link: old, list: true, complete: true}, {uid: uid + 1, link: cur, down: true, err: errors.New("closed")}} {
		if u.onLink(m) || u.people[uid].link != cur || !u.people[uid].up || len(u.workloads) != 1 {
			t.Fatalf("%+v changed something: link kept %v, up %v, %d workloads", m, u.people[uid].link == cur, u.people[uid].up, len(u.workloads))
		}
	}
}

func TestCpusetDelegated(t *testing.T) {
	u := newTestUnits(t, "app.slice")
	u.unified = false
	info := systemd.UnitInfo{Name: "user@1000.service", Delegate: true, DelegateControllers: []string{"cpu", "memory", "pids"}, ControlGroup: "/user.slice/user-1000.slice/user@1000.service"}
	if ok, why := u.cpusetDelegated(info); ok || !strings.Contains(why, "does not name cpuset") || !strings.Contains(why, "cpu memory pids") {
		t.Fatalf("Debian 12's user@.service: %v %q", ok, why)
	}
	info.DelegateControllers = append(info.DelegateControllers, "cpuset")
	if ok, why := u.cpusetDelegated(info); ok || !strings.Contains(why, "cgroup v1") {
		t.Fatalf("cpuset named, cgroup v1: %v %q", ok, why)
	}
	for uid, want := range map[int]string{-1: "system", 0: "user:0", 1000: "user:1000"} {
		if got := managerName(uid); got != want || recordUID(got) != uid {
			t.Errorf("managerName(%d) = %q, recordUID = %d", uid, got, recordUID(got))
		}
	}
	if workloadKey(-1, "a.service") != "a.service" || workloadKey(5, "a.scope") != "user:5/a.scope" {
		t.Error("workloadKey")
	}
}
