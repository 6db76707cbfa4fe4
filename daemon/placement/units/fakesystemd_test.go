package units

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/godbus/dbus/v5"

	"github.com/schedpolicyd/schedpolicyd/internal/testutil"
	"github.com/schedpolicyd/schedpolicyd/systemd"
)

// fakeSystemd plays as much of the system manager on a private bus as
// unit placement uses, the way systemd 252 behaves (seen in the systemd
// test container and VM): Subscribe, ListUnitsByPatterns, GetUnit,
// SetUnitProperties and the units' properties (a unit it does not know
// reads as LoadState "not-found", DropInPaths empty). SetUnitProperties
// of AllowedCPUs= writes the drop-in file anew, as systemd does, below
// dir: transient/NAME.d/ for a transient unit, system.control/NAME.d/
// for another, and lists it in the unit's DropInPaths; removing a
// transient unit removes its drop-ins, removing another keeps them.
type fakeSystemd struct {
	t    *testing.T
	addr string
	dir  string
	conn *dbus.Conn // the connection owning org.freedesktop.systemd1

	mu    sync.Mutex
	units map[string]*fakeUnit
	sets  []string // "NAME=CPUS" of each SetUnitProperties, in order
}

type fakeUnit struct {
	slice     string
	active    string
	transient bool
	allowed   []int
	dropins   []string
}

const (
	sdName      = "org.freedesktop.systemd1"
	sdPath      = dbus.ObjectPath("/org/freedesktop/systemd1")
	sdInterface = "org.freedesktop.systemd1.Manager"
	sdUnitPath  = dbus.ObjectPath("/org/freedesktop/systemd1/unit")
)

// newFakeSystemd starts a bus with the system bus's policy, points
// DBUS_SYSTEM_BUS_ADDRESS at it (systemd.ConnectSystem follows it) and
// serves the fake manager there.
func newFakeSystemd(t *testing.T) *fakeSystemd {
	t.Helper()
	bus := testutil.StartSystemPolicyBus(t)
	t.Setenv("DBUS_SYSTEM_BUS_ADDRESS", bus.Addr)
	f := &fakeSystemd{t: t, addr: bus.Addr, dir: t.TempDir(), units: map[string]*fakeUnit{}}
	// The fake's drop-ins are the runtime ones.
	was := runtimeRoot
	runtimeRoot = f.dir + "/"
	t.Cleanup(func() { runtimeRoot = was })
	f.conn = f.serve(dbus.NameFlagDoNotQueue)
	return f
}

// serve connects, exports the manager and asks for its name (flags 0:
// queued behind the owner, as a re-executed systemd's new connection).
func (f *fakeSystemd) serve(flags dbus.RequestNameFlags) *dbus.Conn {
	t := f.t
	c, err := dbus.Connect(f.addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if err := c.Export(fakeManagerObj{f}, sdPath, sdInterface); err != nil {
		t.Fatal(err)
	}
	if err := c.Export(fakeManagerProps{}, sdPath, "org.freedesktop.DBus.Properties"); err != nil {
		t.Fatal(err)
	}
	if err := c.ExportSubtree(fakeUnitProps{f}, sdUnitPath, "org.freedesktop.DBus.Properties"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.RequestName(sdName, flags); err != nil {
		t.Fatal(err)
	}
	return c
}

// reexec plays `systemctl daemon-reexec`: Reloading(true) and UnitRemoved
// for every unit from the old connection, a new connection queued for
// the name takes it over as the old one closes, Reloading(false) from the
// new one, and no UnitNew.
func (f *fakeSystemd) reexec() {
	f.emit("Reloading", true)
	for _, n := range f.names() {
		f.emit("UnitRemoved", n, unitObject(n))
	}
	next := f.serve(0)
	f.conn.Close()
	testutil.WaitFor(f.t, "the re-executed manager to own its name", testutil.DefaultBound, func() (bool, string) {
		var owner string
		err := next.BusObject().Call("org.freedesktop.DBus.GetNameOwner", 0, sdName).Store(&owner)
		return err == nil && owner == next.Names()[0], owner
	})
	f.conn = next
	f.emit("Reloading", false)
}

// reload plays `systemctl daemon-reload`: Reloading(true), UnitRemoved
// for every unit, UnitNew for every unit, Reloading(false).
func (f *fakeSystemd) reload() {
	f.emit("Reloading", true)
	names := f.names()
	for _, n := range names {
		f.emit("UnitRemoved", n, unitObject(n))
	}
	for _, n := range names {
		f.emit("UnitNew", n, unitObject(n))
	}
	f.emit("Reloading", false)
}

func (f *fakeSystemd) emit(member string, body ...any) {
	f.t.Helper()
	if err := f.conn.Emit(sdPath, sdInterface+"."+member, body...); err != nil {
		f.t.Fatal(err)
	}
}

// start adds an active unit and sends UnitNew and its start job's
// JobRemoved.
func (f *fakeSystemd) start(name, slice string, transient bool, allowed ...int) {
	f.mu.Lock()
	u := f.units[name]
	if u == nil {
		u = &fakeUnit{slice: slice, transient: transient, allowed: allowed}
		f.units[name] = u
		// A unit loaded again finds the drop-ins its name still has.
		if p := f.dropIn(name, transient); fileExists(p) {
			u.dropins = []string{p}
			u.allowed = f.readDropIn(p)
		}
	}
	u.active = "active"
	f.mu.Unlock()
	f.emit("UnitNew", name, unitObject(name))
	f.emit("JobRemoved", uint32(1), dbus.ObjectPath("/org/freedesktop/systemd1/job/1"), name, "done")
}

// remove drops a unit from memory, as the manager does with a stopped
// transient unit or one whose unit file is gone: a transient unit's
// drop-ins go with it.
func (f *fakeSystemd) remove(name string) {
	f.mu.Lock()
	if u := f.units[name]; u != nil && u.transient {
		os.RemoveAll(filepath.Dir(f.dropIn(name, true)))
	}
	delete(f.units, name)
	f.mu.Unlock()
	f.emit("UnitRemoved", name, unitObject(name))
}

// set plays `systemctl set-property --runtime NAME AllowedCPUs=...` (or
// the daemon's own call, through the bus).
func (f *fakeSystemd) set(name string, cpus []int) *dbus.Error {
	f.mu.Lock()
	defer f.mu.Unlock()
	u := f.units[name]
	if u == nil {
		return &dbus.Error{Name: "org.freedesktop.systemd1.NoSuchUnit", Body: []any{"Unit " + name + " not found."}}
	}
	p := f.dropIn(name, u.transient)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		f.t.Error(err)
	}
	// A new file each time (a new inode), as systemd's atomic write.
	tmp := p + ".tmp"
	if err := os.WriteFile(tmp, []byte("[Service]\nAllowedCPUs="+systemd.FormatCPUList(cpus)+"\n"), 0o644); err != nil {
		f.t.Error(err)
	}
	if err := os.Rename(tmp, p); err != nil {
		f.t.Error(err)
	}
	found := false
	for _, d := range u.dropins {
		found = found || d == p
	}
	if !found {
		u.dropins = append(u.dropins, p)
	}
	u.allowed = append([]int(nil), cpus...)
	f.sets = append(f.sets, name+"="+systemd.FormatCPUList(cpus))
	return nil
}

// admin calls SetUnitProperties on the bus as `systemctl set-property
// --runtime` would.
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
	if err := c.Object(sdName, sdPath).Call(sdInterface+".SetUnitProperties", 0, name, true, props).Err; err != nil {
		f.t.Fatal(err)
	}
	f.mu.Lock()
	f.sets = f.sets[:len(f.sets)-1] // not the daemon's
	f.mu.Unlock()
}

func (f *fakeSystemd) dropIn(name string, transient bool) string {
	d := "system.control"
	if transient {
		d = "transient"
	}
	return filepath.Join(f.dir, d, name+".d", allowedDropIn)
}

func (f *fakeSystemd) readDropIn(p string) []int {
	b, _ := os.ReadFile(p)
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "AllowedCPUs="); ok {
			var out []int
			for _, s := range strings.Split(v, ",") {
				if n, err := strconv.Atoi(s); err == nil {
					out = append(out, n)
				}
			}
			return out
		}
	}
	return nil
}

// allowed is a unit's AllowedCPUs= as a cpulist.
func (f *fakeSystemd) allowed(name string) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	if u := f.units[name]; u != nil {
		return systemd.FormatCPUList(u.allowed)
	}
	return "(not found)"
}

// writes is the daemon's SetUnitProperties calls so far.
func (f *fakeSystemd) writes() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.sets...)
}

func (f *fakeSystemd) names() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for n := range f.units {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }

// unitObject is a unit's object path, escaped as systemd does (go-
// systemd's PathBusEscape).
func unitObject(name string) dbus.ObjectPath {
	var b strings.Builder
	for i := 0; i < len(name); i++ {
		c := name[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' {
			b.WriteByte(c)
		} else {
			fmt.Fprintf(&b, "_%02x", c)
		}
	}
	return sdUnitPath + "/" + dbus.ObjectPath(b.String())
}

func unitName(p dbus.ObjectPath) string {
	s := strings.TrimPrefix(string(p), string(sdUnitPath)+"/")
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '_' && i+2 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+3], 16, 8); err == nil {
				b.WriteByte(byte(n))
				i += 2
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

type fakeManagerObj struct{ f *fakeSystemd }

func (fakeManagerObj) Subscribe() *dbus.Error { return nil }

type unitStatus struct {
	Name, Description, LoadState, ActiveState, SubState, Followed string
	Path                                                          dbus.ObjectPath
	JobID                                                         uint32
	JobType                                                       string
	JobPath                                                       dbus.ObjectPath
}

func (m fakeManagerObj) ListUnitsByPatterns(states, patterns []string) ([]unitStatus, *dbus.Error) {
	var out []unitStatus
	for _, n := range m.f.names() {
		for _, p := range patterns {
			if ok, _ := filepath.Match(p, n); ok {
				out = append(out, unitStatus{Name: n, LoadState: "loaded", ActiveState: "active", SubState: "running", Path: unitObject(n), JobPath: "/"})
				break
			}
		}
	}
	return out, nil
}

func (m fakeManagerObj) GetUnit(name string) (dbus.ObjectPath, *dbus.Error) {
	m.f.mu.Lock()
	defer m.f.mu.Unlock()
	if m.f.units[name] == nil {
		return "", &dbus.Error{Name: "org.freedesktop.systemd1.NoSuchUnit", Body: []any{"Unit " + name + " not loaded."}}
	}
	return unitObject(name), nil
}

func (m fakeManagerObj) SetUnitProperties(name string, runtime bool, props []struct {
	Name  string
	Value dbus.Variant
}) *dbus.Error {
	for _, p := range props {
		if p.Name == "AllowedCPUs" {
			b, _ := p.Value.Value().([]byte)
			cpus, err := systemd.DecodeCPUMask(b, 0)
			if err != nil {
				return dbus.MakeFailedError(err)
			}
			return m.f.set(name, cpus)
		}
	}
	return nil
}

type fakeManagerProps struct{}

func (fakeManagerProps) Get(iface, prop string) (dbus.Variant, *dbus.Error) {
	return dbus.MakeVariant("252-fake"), nil
}

type fakeUnitProps struct{ f *fakeSystemd }

func (p fakeUnitProps) GetAll(msg dbus.Message, iface string) (map[string]dbus.Variant, *dbus.Error) {
	path, _ := msg.Headers[dbus.FieldPath].Value().(dbus.ObjectPath)
	name := unitName(path)
	p.f.mu.Lock()
	defer p.f.mu.Unlock()
	u := p.f.units[name]
	if strings.HasSuffix(iface, ".Unit") {
		if u == nil {
			return map[string]dbus.Variant{"LoadState": dbus.MakeVariant("not-found"), "ActiveState": dbus.MakeVariant("inactive"), "DropInPaths": dbus.MakeVariant([]string{})}, nil
		}
		return map[string]dbus.Variant{"LoadState": dbus.MakeVariant("loaded"), "ActiveState": dbus.MakeVariant(u.active),
			"DropInPaths": dbus.MakeVariant(append([]string{}, u.dropins...)), "Transient": dbus.MakeVariant(u.transient)}, nil
	}
	if u == nil {
		return map[string]dbus.Variant{"AllowedCPUs": dbus.MakeVariant([]byte{}), "Slice": dbus.MakeVariant(""), "ControlGroup": dbus.MakeVariant("")}, nil
	}
	return map[string]dbus.Variant{
		"Slice": dbus.MakeVariant(u.slice), "ControlGroup": dbus.MakeVariant("/" + u.slice + "/" + name),
		"AllowedCPUs": dbus.MakeVariant(systemd.EncodeCPUMask(u.allowed)), "EffectiveCPUs": dbus.MakeVariant([]byte{}),
		"Delegate": dbus.MakeVariant(false), "DelegateControllers": dbus.MakeVariant([]string{}),
	}, nil
}

func (p fakeUnitProps) Get(msg dbus.Message, iface, prop string) (dbus.Variant, *dbus.Error) {
	all, err := p.GetAll(msg, iface)
	if err != nil {
		return dbus.Variant{}, err
	}
	v, ok := all[prop]
	if !ok {
		return dbus.Variant{}, &dbus.Error{Name: "org.freedesktop.DBus.Error.UnknownProperty", Body: []any{prop}}
	}
	return v, nil
}

// pump hands the unit messages that arrived to onEvent, as the daemon's
// loop does, until the fake manager's UnitNew for a sentinel unit comes
// through (every signal sent before it has then been followed); each
// onEvent that reports a change is followed by apply(), as recompute does.
// each, when not nil, is called after every message.
func pump(t *testing.T, f *fakeSystemd, u *Placement, apply func(), each func()) {
	t.Helper()
	sentinel := fmt.Sprintf("sentinel-%d.service", time.Now().UnixNano())
	f.emit("UnitNew", sentinel, unitObject(sentinel))
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
