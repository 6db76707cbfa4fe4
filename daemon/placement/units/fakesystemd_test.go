package units

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/godbus/dbus/v5"

	"github.com/schedpolicyd/schedpolicyd/internal/testutil"
	"github.com/schedpolicyd/schedpolicyd/systemd"
)

// fakeSystemd is the units tests' fake manager (memManager, the same
// model their in-memory tests drive) served as the system manager on a
// private bus with the system bus's policy, for the real D-Bus path
// (systemd.ConnectSystem follows DBUS_SYSTEM_BUS_ADDRESS there): it
// answers Subscribe, ListUnitsByPatterns, GetUnit, SetUnitProperties
// (AllowedCPUs=), the manager's Version and the units' properties from
// the model, and sends each of the model's events as the manager's
// signal from the connection owning org.freedesktop.systemd1 (UnitNew,
// UnitRemoved, JobRemoved, Reloading). Its drop-ins are below a
// temporary directory that runtimeRoot points into, as memManager lays
// them out.
type fakeSystemd struct {
	*memManager
	t    *testing.T
	addr string
	conn *dbus.Conn // the connection owning org.freedesktop.systemd1
	// journal: the model's "set NAME=CPUS" for each SetUnitProperties
	// through the bus, and "start NAME"; under memManager.mu.
	journal []string
}

// newFakeSystemd starts a bus with the system bus's policy, points
// DBUS_SYSTEM_BUS_ADDRESS at it and serves a new memManager there as the
// system manager.
func newFakeSystemd(t *testing.T) *fakeSystemd {
	t.Helper()
	bus := testutil.StartSystemPolicyBus(t)
	t.Setenv("DBUS_SYSTEM_BUS_ADDRESS", bus.Addr)
	dir := t.TempDir()
	was := runtimeRoot
	runtimeRoot = dir + "/run/"
	t.Cleanup(func() { runtimeRoot = was })
	f := &fakeSystemd{t: t, addr: bus.Addr}
	f.memManager = newMemManager(t, -1, dir, &f.journal)
	f.memManager.served = f.signal
	f.conn = f.serve(dbus.NameFlagDoNotQueue)
	return f
}

// serve connects, exports the manager and asks for its name (flags 0:
// queued behind the owner, as a re-executed systemd's new connection).
func (f *fakeSystemd) serve(flags dbus.RequestNameFlags) *dbus.Conn {
	t := f.t
	c := testutil.Connect(t, f.addr)
	if err := c.Export(servedManager{f.memManager}, testutil.SystemdPath, testutil.SystemdManager); err != nil {
		t.Fatal(err)
	}
	if err := c.Export(servedManagerProps{f.memManager}, testutil.SystemdPath, "org.freedesktop.DBus.Properties"); err != nil {
		t.Fatal(err)
	}
	if err := c.ExportSubtree(testutil.FakeUnitProps(f.unitProps), testutil.SystemdUnitPath, "org.freedesktop.DBus.Properties"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.RequestName(testutil.SystemdName, flags); err != nil {
		t.Fatal(err)
	}
	return c
}

// signal sends one of the model's events as systemd's signal (called
// with the model's mu held, from the test's goroutine).
func (f *fakeSystemd) signal(ev systemd.UnitEvent) {
	switch ev.Kind {
	case systemd.UnitLoaded:
		f.send("UnitNew", ev.Name, testutil.FakeUnitPath(ev.Name))
	case systemd.UnitDropped:
		f.send("UnitRemoved", ev.Name, testutil.FakeUnitPath(ev.Name))
	case systemd.JobFinished:
		f.send("JobRemoved", uint32(1), dbus.ObjectPath("/org/freedesktop/systemd1/job/1"), ev.Name, "done")
	case systemd.ReloadStarted:
		f.send("Reloading", true)
	case systemd.ReloadFinished:
		f.send("Reloading", false)
	}
}

// send emits member with body from the connection owning the name.
func (f *fakeSystemd) send(member string, body ...any) {
	if err := f.conn.Emit(testutil.SystemdPath, testutil.SystemdManager+"."+member, body...); err != nil {
		f.t.Error(err)
	}
}

// reexec plays `systemctl daemon-reexec`: Reloading(true) and UnitRemoved
// for every unit from the old connection, a new connection queued for
// the name takes it over as the old one closes, Reloading(false) from the
// new one, and no UnitNew. The units stay as they are.
func (f *fakeSystemd) reexec() {
	f.send("Reloading", true)
	for _, n := range f.unitNames() {
		f.send("UnitRemoved", n, testutil.FakeUnitPath(n))
	}
	next := f.serve(0)
	f.conn.Close()
	testutil.WaitFor(f.t, "the re-executed manager to own its name", testutil.DefaultBound, func() (bool, string) {
		var owner string
		err := next.BusObject().Call("org.freedesktop.DBus.GetNameOwner", 0, testutil.SystemdName).Store(&owner)
		return err == nil && owner == next.Names()[0], owner
	})
	f.conn = next
	f.send("Reloading", false)
}

// reload plays `systemctl daemon-reload` (memManager.reloadBegin and
// reloadEnd).
func (f *fakeSystemd) reload() {
	f.reloadBegin()
	f.reloadEnd()
}

// admin calls SetUnitProperties on the bus as `systemctl set-property
// --runtime` would; the call is not the daemon's (writes).
func (f *fakeSystemd) admin(name string, cpus ...int) {
	f.t.Helper()
	c, err := dbus.Connect(f.addr)
	if err != nil {
		f.t.Fatal(err)
	}
	defer c.Close()
	props := []struct {
		Name  string
		Value dbus.Variant
	}{{"AllowedCPUs", dbus.MakeVariant(systemd.EncodeCPUMask(cpus))}}
	if err := c.Object(testutil.SystemdName, testutil.SystemdPath).Call(testutil.SystemdManager+".SetUnitProperties", 0, name, true, props).Err; err != nil {
		f.t.Fatal(err)
	}
	f.mu.Lock()
	f.journal = f.journal[:len(f.journal)-1] // not the daemon's
	f.mu.Unlock()
}

// allowed is a unit's AllowedCPUs= as a cpulist (memManager.allowedOf).
func (f *fakeSystemd) allowed(name string) string { return f.allowedOf(name) }

// writes is the daemon's SetUnitProperties calls so far, "NAME=CPUS".
func (f *fakeSystemd) writes() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for _, j := range f.journal {
		if w, ok := strings.CutPrefix(j, "set "); ok {
			out = append(out, w)
		}
	}
	return out
}

// unitNames are the loaded units' names, sorted.
func (f *fakeSystemd) unitNames() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.names()
}

// servedManager is the manager's object on the bus, answered from the
// model under its mu.
type servedManager struct{ m *memManager }

func (o servedManager) Subscribe() *dbus.Error {
	o.m.mu.Lock()
	defer o.m.mu.Unlock()
	o.m.calls["Subscribe"]++
	o.m.subscribed = true
	return nil
}

// ListUnitsByPatterns is not testutil.FakeManager's: the units are the
// model's, whose active state gives the sub state (running, or dead as
// systemd says of an inactive unit), no pattern matches nothing (the
// daemon always names its patterns), and the call is counted as the
// model counts its in-memory Units.
func (o servedManager) ListUnitsByPatterns(states, patterns []string) ([]testutil.FakeUnitStatus, *dbus.Error) {
	o.m.mu.Lock()
	defer o.m.mu.Unlock()
	o.m.calls["Units"]++
	var out []testutil.FakeUnitStatus
	for _, n := range o.m.names() {
		for _, p := range patterns {
			if ok, _ := filepath.Match(p, n); ok {
				sub := "running"
				if o.m.units[n].active != "active" {
					sub = "dead"
				}
				out = append(out, testutil.FakeUnitStatus{Name: n, LoadState: "loaded", ActiveState: o.m.units[n].active, SubState: sub, Path: testutil.FakeUnitPath(n), JobPath: "/"})
				break
			}
		}
	}
	return out, nil
}

func (o servedManager) GetUnit(name string) (dbus.ObjectPath, *dbus.Error) {
	o.m.mu.Lock()
	defer o.m.mu.Unlock()
	if o.m.units[name] == nil {
		return "", testutil.NoSuchUnit(name)
	}
	return testutil.FakeUnitPath(name), nil
}

// SetUnitProperties is not testutil.FakeManager's either: it sets the
// model's AllowedCPUs= (as a cpulist, its drop-ins written as systemd
// writes them) and answers the model's refusals, where FakeManager keeps
// the mask as sent and refuses by the test's rule.
func (o servedManager) SetUnitProperties(name string, runtime bool, props []struct {
	Name  string
	Value dbus.Variant
}) *dbus.Error {
	for _, p := range props {
		if p.Name != "AllowedCPUs" {
			continue
		}
		b, _ := p.Value.Value().([]byte)
		cpus, err := systemd.DecodeCPUMask(b, 0)
		if err != nil {
			return dbus.MakeFailedError(err)
		}
		o.m.mu.Lock()
		defer o.m.mu.Unlock()
		o.m.calls["SetAllowedCPUs"]++
		if err := o.m.set(name, runtime, cpus...); err != nil {
			var de dbus.Error
			if errors.As(err, &de) {
				return &de
			}
			return dbus.MakeFailedError(err)
		}
		o.m.note("set " + name + "=" + systemd.FormatCPUList(cpus))
		return nil
	}
	return nil
}

type servedManagerProps struct{ m *memManager }

func (p servedManagerProps) Get(iface, prop string) (dbus.Variant, *dbus.Error) {
	v, _ := p.m.Version(context.Background())
	return dbus.MakeVariant(v), nil
}

// unitProps are the model's unit name's properties on iface
// (memManager.info), for testutil.FakeUnitProps.
func (f *fakeSystemd) unitProps(name, iface string) (map[string]dbus.Variant, *dbus.Error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	info, u := f.info(name), f.units[name]
	dropins := append([]string{}, info.DropInPaths...)
	if strings.HasSuffix(iface, ".Unit") {
		all := map[string]dbus.Variant{"LoadState": dbus.MakeVariant(info.LoadState), "ActiveState": dbus.MakeVariant(info.ActiveState), "DropInPaths": dbus.MakeVariant(dropins)}
		if u != nil {
			all["Transient"] = dbus.MakeVariant(u.transient)
		}
		return all, nil
	}
	all := map[string]dbus.Variant{"AllowedCPUs": dbus.MakeVariant(systemd.EncodeCPUMask(info.AllowedCPUs)), "Slice": dbus.MakeVariant(info.Slice), "ControlGroup": dbus.MakeVariant(info.ControlGroup)}
	if u != nil {
		all["EffectiveCPUs"] = dbus.MakeVariant([]byte{})
		all["Delegate"] = dbus.MakeVariant(false)
		all["DelegateControllers"] = dbus.MakeVariant([]string{})
	}
	return all, nil
}

// pump hands the unit messages that arrived to onEvent, as the daemon's
// loop does, until the fake manager's UnitNew for a sentinel unit comes
// through (every signal sent before it has then been followed); each
// onEvent that reports a change is followed by apply(), as recompute does.
// each, when not nil, is called after every message.
func pump(t *testing.T, f *fakeSystemd, u *Placement, apply func(), each func()) {
	t.Helper()
	sentinel := fmt.Sprintf("sentinel-%d.service", time.Now().UnixNano())
	f.send("UnitNew", sentinel, testutil.FakeUnitPath(sentinel))
	deadline := time.After(time.Minute)
	for {
		select {
		case m := <-u.EventsC():
			msg := m.(unitMsg)
			if u.onEvent(msg) {
				apply()
			}
			if each != nil {
				each()
			}
			if msg.ev.Name == sentinel {
				return
			}
		case <-deadline:
			t.Fatal("the sentinel's UnitNew did not come through within a minute")
		}
	}
}
