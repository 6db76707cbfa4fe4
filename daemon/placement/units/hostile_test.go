package units

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/sirupsen/logrus"
	logtest "github.com/sirupsen/logrus/hooks/test"

	"github.com/schedpolicyd/schedpolicyd/daemon/placement"
	"github.com/schedpolicyd/schedpolicyd/internal/testutil"
	"github.com/schedpolicyd/schedpolicyd/policy"
)

// A user's manager as a hostile user runs one: the system manager is a
// fake on a private bus with the system bus's policy (user@4242.service
// delegated cpuset, its MainPID this process), the user's manager a fake
// on RUNROOT/user/4242/systemd/private, in a directory owned by uid 4242
// and listened on as that uid (testutil.FakeManager), and the cgroup
// tree a mock v2 one. The placement's methods are called on the test's
// goroutine as the loop calls them; none may wait on the user's manager.

const hostile = 4242

// userCgroup is user@4242.service's cgroup.
const userCgroup = "/user.slice/user-4242.slice/user@4242.service"

type hostileUnits struct {
	t        *testing.T
	sys, usr *testutil.FakeManager
	u        *Placement
	root     string // the mock sysfs root
	log      *logtest.Hook
	msgs     int // link messages taken
}

// newHostile sets it all up, user units in app.slice, background.slice
// and session.slice managed; the user's manager is served only once
// serve is called (so that a test can make it misbehave first). Link
// deadlines are shorter than the daemon's, so that a misbehaving manager
// is dropped within the test's patience; none is a speed claim.
func newHostile(t *testing.T) *hostileUnits {
	t.Helper()
	bus := testutil.StartSystemPolicyBus(t)
	t.Setenv("DBUS_SYSTEM_BUS_ADDRESS", bus.Addr)
	root := t.TempDir()
	testutil.WriteFile(t, root+"/devices/system/cpu/possible", "0-1\n")
	testutil.WriteFile(t, root+"/devices/system/cpu/kernel_max", "99\n")
	testutil.WriteFile(t, root+"/fs/cgroup/cgroup.controllers", "cpuset cpu io memory pids\n")
	testutil.WriteFile(t, root+"/fs/cgroup"+userCgroup+"/cgroup.controllers", "cpuset cpu memory pids\n")
	h := &hostileUnits{t: t, root: root}
	h.sys = testutil.NewFakeManager(t)
	h.sys.Put("user@4242.service", testutil.FakeUnit{Slice: "user-4242.slice", ControlGroup: userCgroup, MainPID: uint32(os.Getpid()),
		Delegate: true, DelegateControllers: []string{"cpu", "cpuset", "memory", "pids"}})
	h.sys.ServeBus(bus.Addr)
	h.usr = testutil.NewFakeManager(t)
	log := logrus.New()
	log.SetOutput(testutil.LogWriter(t))
	h.log = logtest.NewLocal(log)
	cfg := &placement.Config{Manage: []string{"app.slice", "background.slice", "session.slice"}, SysfsRoot: root, RunRoot: root + "/run", Bus: "system",
		SampleInterval: time.Second, UtilHalfLife: policy.DefaultHalfLife, NoTaskClock: true, ProcRoot: root + "/proc", Log: log}
	h.u = New(placement.NewEngine(cfg, log, &placement.Counters{}, nil))
	// Deadlines long enough for an honest fake on a loaded machine (a
	// spurious drop would break the tests' sequences), short enough that
	// the tests that wait for one do not wait long.
	h.u.linkTiming = linkTiming{connect: 2 * time.Second, call: 2 * time.Second, list: 3 * time.Second,
		backoffMin: 20 * time.Millisecond, backoffMax: 100 * time.Millisecond, restore: 4 * time.Second}
	h.u.e.Save = func() error { return nil }
	if !h.u.unified {
		t.Fatal("the mock cgroup tree does not read as cgroup v2")
	}
	return h
}

// serve starts serving the user's manager and opens the placement.
func (h *hostileUnits) serve() {
	h.t.Helper()
	h.usr.ServeUser(h.root+"/run/user/4242", hostile)
	if err := h.u.Open(); err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(h.u.Close)
	h.u.Scan()
}

// unit puts unit name of slice in the user's manager, with a cgroup in
// the mock tree (cpu.stat, and cpuset.cpus: the manager applies
// AllowedCPUs=) unless cg is given.
func (h *hostileUnits) unit(name, slice string, u testutil.FakeUnit) {
	if u.ControlGroup == "" {
		u.ControlGroup = userCgroup + "/" + slice + "/" + name
		testutil.WriteFile(h.t, h.root+"/fs/cgroup"+u.ControlGroup+"/cpu.stat", "usage_usec 0\n")
		testutil.WriteFile(h.t, h.root+"/fs/cgroup"+u.ControlGroup+"/cpuset.cpus", "")
	}
	u.Slice = slice
	h.usr.Put(name, u)
}

// pump hands messages to OnMsg, as the loop does (a change applies pol),
// until cond holds; the bound is a hang guard.
func (h *hostileUnits) pump(what string, pol policy.Policy, cond func() bool) {
	h.t.Helper()
	guard := time.After(time.Minute)
	for !cond() {
		select {
		case m := <-h.u.EventsC():
			if _, ok := m.(linkMsg); ok {
				h.msgs++
			}
			h.u.OnMsg(m).Do(func(string, bool) { h.apply(pol) })
		case <-guard:
			h.t.Fatalf("no %s within a minute", what)
		}
	}
}

func (h *hostileUnits) apply(pol policy.Policy) {
	h.u.e.Apply(pol, twoCPUTopology(h.t), twoCPUs, true)
}

// linkUp reports whether the user's link is up.
func (h *hostileUnits) linkUp() bool {
	p := h.u.people[hostile]
	return p != nil && p.up
}

// workloads lists the user's workloads.
func (h *hostileUnits) workloads() string {
	var out []string
	for _, n := range h.u.Names() {
		if w := h.u.workloads[n]; w.uid == hostile {
			out = append(out, w.name)
		}
	}
	return strings.Join(out, " ")
}

// warned reports whether a warning naming the user has msg in it.
func (h *hostileUnits) warned(msg string) bool {
	for _, e := range h.log.AllEntries() {
		if e.Level <= logrus.WarnLevel && strings.Contains(e.Message, msg) && fmt.Sprint(e.Data["uid"]) == fmt.Sprint(hostile) {
			return true
		}
	}
	return false
}

// TestUserManagerSilentNeverBlocks: a user's socket that accepts and says
// nothing, and then one that never answers AddMatch: the placement's
// start, scan, plans and status return while the link is stuck on it; the
// link drops the manager after its deadline, says so once, and connects
// again after a back-off; once the manager answers, its units are placed.
// Before, the connection was made on the loop with no deadline on
// godbus's Auth or go-systemd's AddMatch: the daemon froze for good.
func TestUserManagerSilentNeverBlocks(t *testing.T) {
	for _, mode := range []string{"silent", "no AddMatch"} {
		t.Run(mode, func(t *testing.T) {
			h := newHostile(t)
			h.unit("app-a.scope", "app.slice", testutil.FakeUnit{})
			if mode == "silent" {
				h.usr.SetSilent(true)
			} else {
				h.usr.Hold("AddMatch", true)
			}
			h.serve()
			// The loop's calls return while the link is stuck (the test
			// would hang here otherwise).
			testutil.WaitFor(t, "the link to reach the socket", time.Minute, func() (bool, string) {
				return h.usr.Accepted() > 0, fmt.Sprint(h.usr.Accepted())
			})
			h.u.Scan()
			h.apply(policy.Powersaving)
			h.u.Status()
			h.pump("the link's failure", policy.Powersaving, func() bool { return h.warned("does not answer as systemd does") })
			if h.workloads() != "" {
				t.Fatalf("workloads %q of a manager that never answered", h.workloads())
			}
			h.usr.SetSilent(false)
			h.usr.Hold("AddMatch", false)
			h.usr.DropConnections()
			h.pump("the user's units", policy.Powersaving, func() bool { return h.workloads() == "app-a.scope" })
		})
	}
}

// TestUserManagerHeldCalls: a manager that stops answering once connected.
// The apply that sends it writes returns at once and the loop goes on; the
// link drops the manager after its deadline and the user's units are
// forgotten until it answers again. What the records keep follows what
// was sent: with the unit's read held, no SetUnitProperties went out, so
// the pending value is cleared; with SetUnitProperties itself held, the
// value may be set (it is, once the manager answers), so it stays
// recorded, and the unit is adopted back with it as the daemon's.
func TestUserManagerHeldCalls(t *testing.T) {
	h := newHostile(t)
	h.unit("app-a.scope", "background.slice", testutil.FakeUnit{Mask: []byte{3}})
	h.serve()
	h.pump("the unit", policy.Performance, func() bool { return h.workloads() == "app-a.scope" })
	const key = "user:4242/app-a.scope"

	// The read before the write held: nothing is sent.
	h.usr.Hold("GetAll", true)
	h.apply(policy.Powersaving)
	if r := h.u.records[key]; r == nil || r.Pending == "" {
		t.Fatalf("record %+v: the write was not recorded before it was sent", r)
	}
	h.pump("the dropped manager", policy.Powersaving, func() bool { return !h.linkUp() })
	if r := h.u.records[key]; h.workloads() != "" || r != nil && (r.Pending != "" || r.Applied != "") || len(h.usr.Sets()) != 0 {
		t.Fatalf("after the drop: workloads %q, record %+v, sets %v; want none, no value of ours, nothing sent", h.workloads(), r, h.usr.Sets())
	}
	h.usr.Hold("GetAll", false)
	h.pump("the unit back", policy.Performance, func() bool { return h.workloads() == "app-a.scope" })

	// The write itself held: its outcome is unknown. The manager sets it
	// when released, after the daemon gave up on it.
	h.usr.StaleWrites(true)
	h.usr.Hold("SetUnitProperties", true)
	h.apply(policy.Powersaving)
	h.pump("the dropped manager", policy.Powersaving, func() bool { return !h.linkUp() })
	r := h.u.records[key]
	if h.workloads() != "" || r == nil || r.Pending == "" {
		t.Fatalf("after the drop: workloads %q, record %+v; want none, the record with its pending value", h.workloads(), r)
	}
	pending := r.Pending
	h.usr.Hold("SetUnitProperties", false)
	testutil.WaitFor(t, "the held write made", time.Minute, func() (bool, string) {
		return len(h.usr.Sets()) == 1, strings.Join(h.usr.Sets(), " ")
	})
	h.usr.DropConnections()
	h.pump("the unit back with the daemon's value", policy.Powersaving, func() bool {
		r := h.u.records[key]
		return h.workloads() == "app-a.scope" && r != nil && r.Applied == pending && r.Pending == ""
	})
	if !h.u.Restore() {
		t.Fatal("restore failed")
	}
	if sets := h.usr.Sets(); sets[len(sets)-1] != "app-a.scope=03" {
		t.Fatalf("sets %v: the original 0-1 was not put back last", sets)
	}
}

// TestUserManagerLies: units whose properties no systemd sends, or
// that point where a user's unit cannot be, are not placed, and the
// daemon says so naming the user: a ControlGroup that climbs out of the
// cgroup tree (and one below the system's ssh.service, clean but not
// the user's: no file there is ever opened, watched with inotify), an
// AllowedCPUs= of 2 MiB and one naming CPU 100 of a 64-CPU machine, a
// name that is not UTF-8. The honest unit beside them is placed.
func TestUserManagerLies(t *testing.T) {
	h := newHostile(t)
	ssh := h.root + "/fs/cgroup/system.slice/ssh.service"
	testutil.WriteFile(t, ssh+"/cpu.stat", "usage_usec 0\n")
	w, err := fsnotify.NewWatcher()
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if err := w.Add(ssh); err != nil {
		t.Fatal(err)
	}
	h.unit("app-good.scope", "app.slice", testutil.FakeUnit{})
	h.usr.Put("app-climb.scope", testutil.FakeUnit{Slice: "app.slice", ControlGroup: userCgroup + "/app.slice/../../../../system.slice/ssh.service"})
	h.usr.Put("app-ssh.scope", testutil.FakeUnit{Slice: "app.slice", ControlGroup: "/system.slice/ssh.service"})
	h.unit("app-bigmask.scope", "app.slice", testutil.FakeUnit{Mask: make([]byte, 16<<10)})
	h.unit("app-farcpu.scope", "app.slice", testutil.FakeUnit{Mask: []byte{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x10}})
	h.unit("app-caf\x7f.scope", "app.slice", testutil.FakeUnit{})
	h.usr.NotUTF8(true)
	h.serve()
	h.pump("the honest unit", policy.Powersaving, func() bool { return h.workloads() == "app-good.scope" })
	h.u.Sample()
	for _, what := range []string{"refused what a user's manager sent"} {
		if !h.warned(what) {
			t.Errorf("no warning %q naming the user", what)
		}
	}
	var refused []string
	for _, e := range h.log.AllEntries() {
		if err, ok := e.Data[logrus.ErrorKey].(error); ok && e.Message == "refused what a user's manager sent: systemd cannot send it; the unit is not placed" {
			refused = append(refused, err.Error())
		}
	}
	joined := strings.Join(refused, "\n")
	for _, want := range []string{"app-climb.scope\": not a clean path", "app-ssh.scope\": \"/system.slice/ssh.service\" is not below the cgroup of the user's manager", "AllowedCPUs for \"app-bigmask.scope\"", "AllowedCPUs for \"app-farcpu.scope\": CPU 100", "unit name for \"app-caf\\xe9.scope\""} {
		if !strings.Contains(joined, want) {
			t.Errorf("no refusal with %q in:\n%s", want, joined)
		}
	}
	select {
	case ev := <-w.Events:
		t.Fatalf("a file below ssh.service's cgroup was touched: %v", ev)
	default:
	}
}

// TestUserManagerFlood: 20,000 UnitNew signals of units the manager does
// not have: the link reads them off the loop (bounded: past 1,024 a
// listing replaces them), the loop gets a bounded number of messages,
// and the honest unit stays placed.
func TestUserManagerFlood(t *testing.T) {
	h := newHostile(t)
	h.unit("app-a.scope", "app.slice", testutil.FakeUnit{})
	h.serve()
	h.pump("the unit", policy.Performance, func() bool { return h.workloads() == "app-a.scope" })
	h.msgs = 0
	for i := 0; i < 20000; i++ {
		name := fmt.Sprintf("flood-%d.service", i)
		h.usr.Emit("UnitNew", name, testutil.FakeUnitPath(name))
	}
	h.unit("app-b.scope", "app.slice", testutil.FakeUnit{})
	h.usr.Emit("UnitNew", "app-b.scope", testutil.FakeUnitPath("app-b.scope"))
	h.pump("the unit after the flood", policy.Performance, func() bool { return h.workloads() == "app-a.scope app-b.scope" })
	if h.msgs > 200 {
		t.Fatalf("the loop got %d messages for 20,001 signals", h.msgs)
	}
	t.Logf("20,001 signals: %d link messages to the loop", h.msgs)
}

// TestUserRestoreBounded: the reset at stop waits for a user's manager
// that holds every call no longer than the restore timeout, reports that
// not everything is back and keeps the records; with the manager
// answering again, the next reset puts the originals back.
func TestUserRestoreBounded(t *testing.T) {
	h := newHostile(t)
	h.unit("app-a.scope", "background.slice", testutil.FakeUnit{Mask: []byte{3}})
	h.serve()
	h.pump("the unit", policy.Performance, func() bool { return h.workloads() == "app-a.scope" })
	h.apply(policy.Powersaving)
	h.pump("its value applied", policy.Powersaving, func() bool {
		r := h.u.records["user:4242/app-a.scope"]
		return r != nil && r.Applied != "" && r.Pending == ""
	})
	h.usr.Hold("GetAll", true)
	if h.u.Restore() {
		t.Fatal("restore reported everything back through a manager that answered nothing")
	}
	if r := h.u.records["user:4242/app-a.scope"]; r == nil || r.Applied == "" {
		t.Fatalf("record %+v after a failed reset: want it kept", r)
	}
	h.pump("the manager dropped", policy.Powersaving, func() bool { return !h.linkUp() })
	h.usr.Hold("GetAll", false)
	h.pump("the link up again", policy.Powersaving, func() bool { return h.linkUp() && h.workloads() == "app-a.scope" })
	if !h.u.Restore() {
		t.Fatal("restore failed with the manager answering")
	}
	if sets := h.usr.Sets(); len(sets) == 0 || sets[len(sets)-1] != "app-a.scope=03" {
		t.Fatalf("sets %v: want the original 0-1 put back last", sets)
	}
	if r := h.u.records["user:4242/app-a.scope"]; r != nil && r.Written() {
		t.Fatalf("record %+v after the reset", r)
	}
}

// TestUserManagerReexec: a manager that closes the connection, also in the
// middle of a call of the daemon's (it re-executes: Debian's systemd
// upgrade does it for every user), is reached again at once and said so
// at info level, not taken for one that misbehaves; one that closes every
// connection again at once is reached again after a back-off.
func TestUserManagerReexec(t *testing.T) {
	h := newHostile(t)
	h.u.linkTiming.backoffMin, h.u.linkTiming.backoffMax = time.Hour, time.Hour // a back-off never ends here
	h.unit("app-a.scope", "app.slice", testutil.FakeUnit{})
	h.serve()
	h.pump("the unit", policy.Performance, func() bool { return h.workloads() == "app-a.scope" })
	h.usr.Hold("GetAll", true)
	h.usr.Emit("UnitNew", "app-a.scope", testutil.FakeUnitPath("app-a.scope"))
	testutil.WaitFor(t, "the daemon's read held", time.Minute, func() (bool, string) { return h.usr.Holding() > 0, "" })
	accepted := h.usr.Accepted()
	h.usr.DropConnections()
	h.usr.Hold("GetAll", false)
	h.pump("the link down", policy.Performance, func() bool { return !h.linkUp() })
	h.pump("the link up again", policy.Performance, func() bool { return h.linkUp() && h.workloads() == "app-a.scope" })
	if h.usr.Accepted() <= accepted {
		t.Fatal("no new connection")
	}
	for _, e := range h.log.AllEntries() {
		if strings.Contains(e.Message, "does not answer as systemd does") {
			t.Fatalf("a re-execution was taken for misbehaviour: %s %v", e.Message, e.Data)
		}
	}
	found := false
	for _, e := range h.log.AllEntries() {
		found = found || e.Level == logrus.InfoLevel && strings.Contains(e.Message, "the user's manager closed the connection")
	}
	if !found {
		t.Fatal("no info line about the closed connection")
	}
}

// TestUserRestoreBeforeQueuedWrites: writes the loop asked for while the
// link was busy, and a reset at stop asked after them: the reset comes
// first and the writes are not made after it (else the unit would keep a
// value of ours that no record holds any more: the next start would take
// it for the unit's original).
func TestUserRestoreBeforeQueuedWrites(t *testing.T) {
	h := newHostile(t)
	h.unit("app-a.scope", "background.slice", testutil.FakeUnit{Mask: []byte{3}})
	h.serve()
	h.pump("the unit", policy.Performance, func() bool { return h.workloads() == "app-a.scope" })
	// The link is busy reading a unit whose properties are held.
	h.usr.Hold("GetAll", true)
	h.usr.Emit("UnitNew", "app-a.scope", testutil.FakeUnitPath("app-a.scope"))
	testutil.WaitFor(t, "the link's read held", time.Minute, func() (bool, string) { return h.usr.Holding() > 0, "" })
	h.apply(policy.Powersaving) // queued behind the read
	link := h.u.people[hostile].link
	go func() {
		// Released once the reset is asked for too (the reset waits).
		testutil.Poll(time.Minute, func() (bool, string) {
			link.mu.Lock()
			defer link.mu.Unlock()
			return link.work.restore != nil, ""
		})
		h.usr.Hold("GetAll", false)
	}()
	h.u.Restore()
	// The link answers the writes once it is done with them (made or not).
	guard := time.After(time.Minute)
	for written := false; !written; {
		select {
		case m := <-h.u.EventsC():
			lm, ok := m.(linkMsg)
			written = ok && lm.written
		case <-guard:
			t.Fatal("no answer for the writes")
		}
	}
	for _, s := range h.usr.Sets() {
		if s != "app-a.scope=03" {
			t.Fatalf("sets %v: a value of ours was set around the reset", h.usr.Sets())
		}
	}
}
