package units

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	logtest "github.com/sirupsen/logrus/hooks/test"
	"golang.org/x/sys/unix"

	"github.com/schedpolicyd/schedpolicyd/daemon/placement"
	"github.com/schedpolicyd/schedpolicyd/daemon/statefile"
	"github.com/schedpolicyd/schedpolicyd/internal/testutil"
	"github.com/schedpolicyd/schedpolicyd/policy"
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
// keep their slice's class. While no app of the user carries the
// attribute (a desktop that writes none) every app of theirs is
// app-nofocus, and the log says so once; once one carries it, the others
// are apps, and the log says that once.
func TestFocusXattrFollowed(t *testing.T) {
	dir := testutil.CpusetV1Dir(t, "sp-focus")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	dir2 := testutil.CpusetV1Dir(t, "sp-focus2")
	if err := os.Mkdir(dir2, 0o755); err != nil {
		t.Fatal(err)
	}
	u := newTestUnits(t, "app.slice", "background.slice", "session.slice")
	hook := logtest.NewLocal(u.e.Log.(*logrus.Entry).Logger)
	if err := u.startFocus(); err != nil {
		t.Fatal(err)
	}
	app := &unitWorkload{name: "app-test-1.scope", slice: "app.slice", uid: 1000, cgroup: dir, rec: &statefile.UnitRecord{Manager: "user:1000", Unit: "app-test-1.scope"}}
	other := &unitWorkload{name: "app-test-2.scope", slice: "app.slice", uid: 1000, cgroup: dir2, rec: &statefile.UnitRecord{Manager: "user:1000", Unit: "app-test-2.scope"}}
	bg := &unitWorkload{name: "bg.scope", slice: "background.slice", uid: 1000, cgroup: filepath.Join(dir, "nonexistent"), rec: &statefile.UnitRecord{}}
	ses := &unitWorkload{name: "s.service", slice: "session.slice", uid: 1000, cgroup: filepath.Join(dir, "nonexistent"), rec: &statefile.UnitRecord{}}
	for _, w := range []*unitWorkload{app, other, bg, ses} {
		u.workloads[workloadKey(w.uid, w.name)] = w
		u.watchFocus(w)
	}
	if len(u.focus.byDir) != 2 || u.focus.byDir[dir] != "user:1000/app-test-1.scope" || u.focus.byDir[dir2] != "user:1000/app-test-2.scope" {
		t.Fatalf("watched %v, want only the apps' cgroups", u.focus.byDir)
	}
	classes := func() string { return u.class(app) + " " + u.class(other) + " " + u.class(bg) + " " + u.class(ses) }
	if got := classes(); got != "app-nofocus app-nofocus background session" {
		t.Fatalf("classes before any xattr: %q", got)
	}
	said := func(want ...string) {
		t.Helper()
		var got []string
		for _, e := range hook.AllEntries() {
			if strings.HasPrefix(e.Message, "the user's desktop says") {
				got = append(got, e.Message)
			}
		}
		hook.Reset()
		if len(got) != len(want) {
			t.Fatalf("said %q, want %d messages starting %q", got, len(want), want)
		}
		for i := range want {
			if !strings.HasPrefix(got[i], want[i]) {
				t.Fatalf("said %q, want %q", got[i], want[i])
			}
		}
	}
	u.sayFocus(nil)
	u.sayFocus([]int{1000})
	said("the user's desktop says nothing of the focus")
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
		if got := u.class(app); got != wantClass {
			t.Fatalf("value %q: class %q, want %q", v, got, wantClass)
		}
	}
	set("-1", true, "focused")
	said("the user's desktop says which app has the focus")
	if got := classes(); got != "focused app background session" {
		t.Fatalf("classes with the first app focused: %q", got)
	}
	for _, s := range u.Status() {
		if s.Name == "app-test-1.scope" && s.Class != "focused" {
			t.Fatalf("status class %q", s.Class)
		}
	}
	set("1234567890", true, "app")
	set("1234567891", false, "app")
	if got := classes(); got != "app app background session" {
		t.Fatalf("classes with the first app unfocused: %q", got)
	}
	said()
	// The attribute gone from the only app that had it: the desktop
	// says nothing again.
	if err := unix.Removexattr(dir, FocusXattr); err != nil {
		t.Fatal(err)
	}
	select {
	case ev := <-u.msgs:
		if !u.onFocus(ev.(unitMsg)) {
			t.Fatal("removexattr: no change")
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("no IN_ATTRIB event for removexattr on %s", dir)
	}
	if got := classes(); got != "app-nofocus app-nofocus background session" {
		t.Fatalf("classes after removexattr: %q", got)
	}
	said("the user's desktop says nothing of the focus")
	set("-1", true, "focused")
	said("the user's desktop says which app has the focus")
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
	for u.class(app) != "focused" {
		select {
		case ev := <-u.msgs:
			msgs++
			u.onFocus(ev.(unitMsg))
		case <-time.After(10 * time.Second):
			t.Fatalf("after 50 writes: class %s after %d messages", u.class(app), msgs)
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
	if !u.onFocus(unitMsg{focusOverflow: true}) || u.class(app) != "app" {
		t.Fatalf("after an overflow: class %q", u.class(app))
	}
	u.forget("user:1000/app-test-1.scope")
	if got := u.class(other); got != "app-nofocus" {
		t.Fatalf("the marked app gone: the other is %q", got)
	}
	u.forget("user:1000/app-test-2.scope")
	if len(u.focus.byDir) != 0 || len(u.focus.perUID) != 0 || len(u.focus.marked) != 0 {
		t.Fatalf("still watched after forget: %v %v %v", u.focus.byDir, u.focus.perUID, u.focus.marked)
	}
}

func TestReadFocused(t *testing.T) {
	dir := testutil.CpusetV1Dir(t, "sp-focusval")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	readFocused := func(dir string) bool {
		v, err := focusValue(dir)
		return err == nil && v == "-1"
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

// TestProbeUserManagers: on a mock cgroup v2 tree below a sysfs root
// (transcribed from the shape of the systemd test VM's: user.slice/
// user-UID.slice/user@UID.service), probe reads each user's manager's
// cgroup.controllers (delegated now) and cgroup.subtree_control (in use),
// and counts its app.slice services and scopes carrying the focus
// attribute; a directory that is not user-UID.slice/user@UID.service, an
// app sub-slice and cgroup files are left out; cgroup v1 (no
// cgroup.controllers at the root) lists nothing.
func TestProbeUserManagers(t *testing.T) {
	root := t.TempDir()
	cg := filepath.Join(root, "fs/cgroup")
	mk := func(rel string, files map[string]string) string {
		t.Helper()
		d := filepath.Join(cg, rel)
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		for n, v := range files {
			if err := os.WriteFile(filepath.Join(d, n), []byte(v+"\n"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		return d
	}
	if got := ProbeUserManagers(root); got != nil {
		t.Fatalf("cgroup v1: %+v", got)
	}
	mk("", map[string]string{"cgroup.controllers": "cpuset cpu io memory pids"})
	u1 := "user.slice/user-1000.slice/user@1000.service"
	mk(u1, map[string]string{"cgroup.controllers": "cpuset cpu memory pids", "cgroup.subtree_control": "cpu cpuset memory pids"})
	a := mk(u1+"/app.slice/app-gnome-firefox-1.scope", nil)
	b := mk(u1+"/app.slice/app-gnome-editor-2.scope", nil)
	mk(u1+"/app.slice/app-org.gnome.Terminal.slice", nil)
	mk(u1+"/app.slice", map[string]string{"cgroup.procs": ""})
	if err := unix.Setxattr(a, FocusXattr, []byte("-1"), 0); err != nil {
		t.Skipf("the test directory's file system takes no user.* xattr (%v): the focus count cannot be checked here", err)
	}
	if err := unix.Setxattr(b, FocusXattr, []byte("1733050000000000"), 0); err != nil {
		t.Fatal(err)
	}
	u2 := "user.slice/user-1001.slice/user@1001.service"
	mk(u2, map[string]string{"cgroup.controllers": "cpu memory pids", "cgroup.subtree_control": "cpu memory"})
	mk(u2+"/app.slice/app-kde-konsole-3.scope", nil)
	mk(u2+"/app.slice/app-kde-dolphin-4.service", nil)
	mk("user.slice/user-1002.slice/user@1003.service", map[string]string{"cgroup.controllers": "cpuset"})
	got := ProbeUserManagers(root)
	want := []UserManagerProbe{
		{Unit: "user@1000.service", Delegated: true, InUse: true, Apps: 2, FocusMarked: 2},
		{Unit: "user@1001.service", Why: "cpuset is not delegated to it now (its cgroup.controllers: cpu memory pids); the package's user@.service drop-in delegates it from the user's next login (schedpolicyd(8), USERS' UNITS)", Apps: 2},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got  %+v\nwant %+v", got, want)
	}
}

// TestUserManagerInert: a user's manager that stores AllowedCPUs= but
// never applies it (one already running when cpuset reached its cgroup:
// the unit's cgroup gets no cpuset.cpus) is found so two samples after
// the write, its units leave the plan and get their originals back, and
// it stays so; a manager that applies it (cpuset.cpus there) is looked at
// once. A new main process is looked at anew.
func TestUserManagerInert(t *testing.T) {
	for _, applies := range []bool{false, true} {
		t.Run(fmt.Sprintf("applies=%v", applies), func(t *testing.T) {
			h := newHostile(t)
			h.unit("app-a.scope", "background.slice", testutil.FakeUnit{})
			if !applies {
				cg := h.root + "/fs/cgroup" + userCgroup + "/background.slice/app-a.scope"
				if err := os.Remove(cg + "/cpuset.cpus"); err != nil {
					t.Fatal(err)
				}
			}
			h.serve()
			h.pump("the unit", policy.Powersaving, func() bool { return h.workloads() == "app-a.scope" })
			h.apply(policy.Powersaving)
			h.pump("the unit placed", policy.Powersaving, func() bool {
				return strings.Join(h.usr.Sets(), " ") == "app-a.scope=01" && !h.u.people[hostile].writing
			})
			p := h.u.people[hostile]
			if p.check != workloadKey(hostile, "app-a.scope") {
				t.Fatalf("after the write: check %q", p.check)
			}
			if changed, _ := h.u.Refresh(); changed || p.inert || p.applies {
				t.Fatalf("the sample right after the write judged the manager (changed %v, inert %v, applies %v)", changed, p.inert, p.applies)
			}
			changed, _ := h.u.Refresh()
			testutil.WantEq(t, "judged two samples after the write: changed, inert, applies", fmt.Sprint(changed, p.inert, p.applies),
				fmt.Sprint(!applies, !applies, applies))
			h.apply(policy.Powersaving)
			want := "app-a.scope=01"
			if !applies {
				// Its original (unset) back, through every possible CPU
				// (cgroup v2's widening step).
				want += " app-a.scope=03 app-a.scope="
			}
			h.pump("the next plan written", policy.Powersaving, func() bool {
				return strings.Join(h.usr.Sets(), " ") == want && !h.u.people[hostile].writing
			})
			s := h.u.Status()
			if len(s) != 1 || s[0].Confined == !applies || (s[0].Policy == "") == applies {
				t.Errorf("status %+v", s)
			}
			if !applies && !h.warned("does not apply it") {
				t.Error("nothing said of the inert manager")
			}
			// Nothing more is looked at, and an inert manager is not
			// written to again.
			h.u.Refresh()
			h.u.Refresh()
			h.apply(policy.Powersaving)
			if p.check != "" || strings.Join(h.usr.Sets(), " ") != want {
				t.Errorf("after more samples: check %q, writes %v", p.check, h.usr.Sets())
			}

			// A new manager process is judged anew.
			info := systemd.UnitInfo{Name: "user@4242.service", Slice: "user-4242.slice", ControlGroup: userCgroup, ActiveState: "active",
				MainPID: p.mainPID + 1, Delegate: true, DelegateControllers: []string{"cpu", "cpuset", "memory", "pids"}}
			h.u.userUnit(info)
			if p.inert || p.applies {
				t.Errorf("a new main process kept the old one's judgement: inert %v, applies %v", p.inert, p.applies)
			}
		})
	}
}
