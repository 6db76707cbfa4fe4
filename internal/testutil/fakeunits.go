package testutil

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/godbus/dbus/v5"
)

// The world's side of a FakeManager: what systemd itself, the
// administrator and other programs do to the manager's units, played as
// systemd 252 plays them (a test's Put, by contrast, sets a unit's
// properties to anything at all, as a hostile manager would answer):
//
//   - A loaded unit has LoadState "loaded", an ActiveState, a Slice, a
//     ControlGroup ("/SLICE/NAME" while active, "" once stopped), its
//     AllowedCPUs= and its DropInPaths.
//   - With drop-ins on (DropInsBelow), SetUnitProperties of AllowedCPUs=
//     takes effect at once and writes the drop-in 50-AllowedCPUs.conf
//     anew (a new inode): a transient unit's always below
//     run/systemd/transient/NAME.d/ (systemd's unit_drop_in_dir),
//     another's below run/systemd/system.control/NAME.d/ (runtime) or
//     etc/systemd/system.control/NAME.d/ (persistent); the file is added
//     to DropInPaths. A user manager's are below run/user/UID/systemd/
//     and home/UID/.config/systemd/user.control.
//   - A unit loaded (Start of a name not loaded, or a reload) has the
//     AllowedCPUs= of its own configuration unless a 50-AllowedCPUs.conf
//     drop-in is there: the persistent one shadows the runtime one, which
//     shadows the transient one (same file name: the first directory of
//     systemd's lookup paths wins), and DropInPaths lists that one.
//   - Removing a unit from memory (Drop, Stop of a transient unit)
//     removes a transient unit's drop-ins with it; another's stay.
//   - Signals, in the order the manager sends them: UnitNew when a unit
//     is loaded, JobRemoved when its start or stop job ends, UnitRemoved,
//     and Reloading(true) / Reloading(false) around a reload, between
//     which every unit is dropped and loaded again. systemd also sends
//     PropertiesChanged on a property's change, which the daemon does not
//     follow; the fake sends nothing for it.
//
// Reading a unit it does not know loads nothing here (systemd loads it
// for a moment and sends UnitNew and UnitRemoved for it, which is why the
// daemon follows signals with a look at the unit).

// AllowedCPUsDropIn is the file name of the drop-in systemd writes for a
// SetUnitProperties of AllowedCPUs= (systemctl set-property).
const AllowedCPUsDropIn = "50-AllowedCPUs.conf"

// FakeSignal is one signal of the manager's, as OnSignal hands it over:
// Member is "UnitNew", "UnitRemoved", "JobRemoved" (Unit: the unit's
// name) or "Reloading" (Reloading: its argument).
type FakeSignal struct {
	Member    string
	Unit      string
	Reloading bool
}

// OnSignal hands every signal the manager sends from now on to fn, on
// the goroutine of the call that sent it and with none of the fake's
// locks held, besides sending it on its connections: the in-memory
// subscriber of a test that calls the fake without D-Bus (nil: none).
func (f *FakeManager) OnSignal(fn func(FakeSignal)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.onSignal = fn
}

// DropInsBelow turns on systemd's drop-ins for SetUnitProperties and
// loads, laid out below dir as the manager of uid lays them out (-1: the
// system manager's).
func (f *FakeManager) DropInsBelow(dir string, uid int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.dropRoot, f.dropUID = dir, uid
}

// Start loads unit name (in slice; transient: made by StartTransientUnit,
// or from a unit file) if it is not loaded, with own as the AllowedCPUs=
// of its own configuration, sending UnitNew; then it starts it, sending
// its start job's JobRemoved.
func (f *FakeManager) Start(name, slice string, transient bool, own ...int) {
	f.mu.Lock()
	var sigs []FakeSignal
	u := f.units[name]
	if u == nil {
		u = &FakeUnit{Slice: slice, Transient: transient, Own: CPUMask(own), ActiveState: "inactive"}
		f.units[name] = u
		f.loadLocked(name, u)
		sigs = append(sigs, FakeSignal{Member: "UnitNew", Unit: name})
	}
	u.ActiveState = "active"
	u.ControlGroup = "/" + u.Slice + "/" + name
	sigs = append(sigs, FakeSignal{Member: "JobRemoved", Unit: name})
	f.mu.Unlock()
	f.signal(sigs...)
}

// Stop stops unit name, sending its stop job's JobRemoved; a transient
// unit is then removed from memory (Drop). It fails t for a unit not
// loaded.
func (f *FakeManager) Stop(name string) {
	f.t.Helper()
	f.mu.Lock()
	u := f.units[name]
	if u == nil {
		f.mu.Unlock()
		f.t.Fatalf("stop %s: not loaded", name)
	}
	u.ActiveState, u.ControlGroup = "inactive", ""
	sigs := []FakeSignal{{Member: "JobRemoved", Unit: name}}
	if u.Transient {
		sigs = append(sigs, f.dropLocked(name))
	}
	f.mu.Unlock()
	f.signal(sigs...)
}

// Drop removes unit name from memory (garbage collection of a stopped
// unit, or its unit file gone), sending UnitRemoved; a transient unit's
// drop-ins go with it. It fails t for a unit not loaded. (Remove forgets
// a unit and says nothing.)
func (f *FakeManager) Drop(name string) {
	f.t.Helper()
	f.mu.Lock()
	if f.units[name] == nil {
		f.mu.Unlock()
		f.t.Fatalf("remove %s: not loaded", name)
	}
	sig := f.dropLocked(name)
	f.mu.Unlock()
	f.signal(sig)
}

func (f *FakeManager) dropLocked(name string) FakeSignal {
	u := f.units[name]
	if u.Transient && f.dropRoot != "" {
		for _, p := range u.DropIns {
			if filepath.Dir(filepath.Dir(p)) == f.controlDir("transient") {
				os.Remove(p)
				os.Remove(filepath.Dir(p))
			}
		}
	}
	delete(f.units, name)
	return FakeSignal{Member: "UnitRemoved", Unit: name}
}

// Admin is the administrator's `systemctl set-property [--runtime] NAME
// AllowedCPUs=CPUS`: as SetUnitProperties, but neither refused
// (RefuseSets) nor counted in Sets and Writes; it sends no signal
// (systemd sends only PropertiesChanged). It fails t on an error.
func (f *FakeManager) Admin(name string, runtime bool, cpus ...int) {
	f.t.Helper()
	f.mu.Lock()
	err := f.setLocked(name, runtime, CPUMask(cpus), false)
	f.mu.Unlock()
	if err != nil {
		f.t.Fatal(err)
	}
}

// Set is a client's SetUnitProperties of AllowedCPUs=mask on unit name
// (runtime: --runtime), as the served method applies it: refused as
// RefuseSets says (org.freedesktop.DBus.Error.AccessDenied), NoSuchUnit
// for a unit not loaded, Failed when the drop-in cannot be written; else
// in force at once and counted in Sets and Writes.
func (f *FakeManager) Set(name string, runtime bool, mask []byte) *dbus.Error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.setLocked(name, runtime, mask, true)
}

func (f *FakeManager) setLocked(name string, runtime bool, mask []byte, client bool) *dbus.Error {
	u := f.units[name]
	if u == nil {
		return NoSuchUnit(name)
	}
	if client && f.refuse != nil && f.refuse(name, mask) {
		return &dbus.Error{Name: "org.freedesktop.DBus.Error.AccessDenied", Body: []any{"refused by the test"}}
	}
	if f.dropRoot != "" {
		if err := f.writeDropIn(name, u, runtime, mask); err != nil {
			return dbus.MakeFailedError(err)
		}
	}
	u.Mask = slices.Clone(mask)
	if u.Mask == nil {
		u.Mask = []byte{}
	}
	if client {
		f.sets = append(f.sets, fakeSet{name, slices.Clone(mask)})
	}
	return nil
}

// writeDropIn writes unit name's AllowedCPUs= drop-in as systemd does: a
// new file each time (a new inode), renamed over the old one.
func (f *FakeManager) writeDropIn(name string, u *FakeUnit, runtime bool, mask []byte) error {
	kind := "persistent"
	switch {
	case u.Transient:
		kind = "transient"
	case runtime:
		kind = "runtime"
	}
	p := f.dropIn(name, kind)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	section := "[" + unitSection(name) + "]"
	if err := os.WriteFile(p+".tmp", []byte(section+"\nAllowedCPUs="+CPUList(MaskCPUs(mask))+"\n"), 0o644); err != nil {
		return err
	}
	if err := os.Rename(p+".tmp", p); err != nil {
		return err
	}
	if !slices.Contains(u.DropIns, p) {
		u.DropIns = append(u.DropIns, p)
	}
	return nil
}

// ReloadBegin and ReloadEnd play `systemctl daemon-reload`:
// Reloading(true) and UnitRemoved for every unit, every unit loaded again
// from its configuration and drop-ins (a runtime value that a persistent
// drop-in of the same name shadows is lost), then UnitNew for each unit
// and Reloading(false).
func (f *FakeManager) ReloadBegin() {
	f.mu.Lock()
	sigs := []FakeSignal{{Member: "Reloading", Reloading: true}}
	for _, n := range f.namesLocked() {
		sigs = append(sigs, FakeSignal{Member: "UnitRemoved", Unit: n})
	}
	for _, n := range f.namesLocked() {
		f.loadLocked(n, f.units[n])
	}
	f.mu.Unlock()
	f.signal(sigs...)
}

// ReloadEnd: see ReloadBegin.
func (f *FakeManager) ReloadEnd() {
	f.mu.Lock()
	var sigs []FakeSignal
	for _, n := range f.namesLocked() {
		sigs = append(sigs, FakeSignal{Member: "UnitNew", Unit: n})
	}
	sigs = append(sigs, FakeSignal{Member: "Reloading", Reloading: false})
	f.mu.Unlock()
	f.signal(sigs...)
}

// Reload plays `systemctl daemon-reload` (ReloadBegin, then ReloadEnd).
func (f *FakeManager) Reload() {
	f.ReloadBegin()
	f.ReloadEnd()
}

// loadLocked reads unit name's AllowedCPUs= from its configuration: with
// drop-ins on, the first 50-AllowedCPUs.conf of the persistent, runtime
// and transient directories, else its own.
func (f *FakeManager) loadLocked(name string, u *FakeUnit) {
	u.Mask, u.DropIns = slices.Clone(u.Own), nil
	if u.Mask == nil {
		u.Mask = []byte{}
	}
	if f.dropRoot == "" {
		return
	}
	for _, kind := range []string{"persistent", "runtime", "transient"} {
		p := f.dropIn(name, kind)
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		u.DropIns = []string{p}
		var cpus []int
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, "AllowedCPUs="); ok {
				cpus = ParseCPUList(v)
			}
		}
		u.Mask = CPUMask(cpus)
		return
	}
}

// controlDir is the directory of one kind of drop-ins: "persistent",
// "runtime" or "transient".
func (f *FakeManager) controlDir(kind string) string {
	if f.dropUID < 0 {
		return map[string]string{
			"persistent": filepath.Join(f.dropRoot, "etc/systemd/system.control"),
			"runtime":    filepath.Join(f.dropRoot, "run/systemd/system.control"),
			"transient":  filepath.Join(f.dropRoot, "run/systemd/transient"),
		}[kind]
	}
	uid := strconv.Itoa(f.dropUID)
	return map[string]string{
		"persistent": filepath.Join(f.dropRoot, "home", uid, ".config/systemd/user.control"),
		"runtime":    filepath.Join(f.dropRoot, "run/user", uid, "systemd/user.control"),
		"transient":  filepath.Join(f.dropRoot, "run/user", uid, "systemd/transient"),
	}[kind]
}

// dropIn is unit name's AllowedCPUs= drop-in of one kind.
func (f *FakeManager) dropIn(name, kind string) string {
	return filepath.Join(f.controlDir(kind), name+".d", AllowedCPUsDropIn)
}

// Allowed is unit name's AllowedCPUs= as a cpulist ("" when unset),
// "(not found)" for a unit not loaded.
func (f *FakeManager) Allowed(name string) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	if u := f.units[name]; u != nil {
		return CPUList(MaskCPUs(u.Mask))
	}
	return "(not found)"
}

// Unit is a copy of unit name as it is now; false when it is not loaded.
func (f *FakeManager) Unit(name string) (FakeUnit, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	u := f.units[name]
	if u == nil {
		return FakeUnit{}, false
	}
	c := *u
	c.Mask, c.Own, c.DropIns = slices.Clone(u.Mask), slices.Clone(u.Own), slices.Clone(u.DropIns)
	return c, true
}

// UnitNames are the loaded units' names, sorted.
func (f *FakeManager) UnitNames() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.namesLocked()
}

func (f *FakeManager) namesLocked() []string {
	out := make([]string, 0, len(f.units))
	for n := range f.units {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

// signal sends each of sigs as the manager's signal on every connection,
// and to the OnSignal subscriber. Called with f.mu not held.
func (f *FakeManager) signal(sigs ...FakeSignal) {
	f.mu.Lock()
	fn := f.onSignal
	f.mu.Unlock()
	for _, s := range sigs {
		switch s.Member {
		case "UnitNew", "UnitRemoved":
			f.Emit(s.Member, s.Unit, FakeUnitPath(s.Unit))
		case "JobRemoved":
			f.Emit(s.Member, uint32(1), dbus.ObjectPath("/org/freedesktop/systemd1/job/1"), s.Unit, "done")
		case "Reloading":
			f.Emit(s.Member, s.Reloading)
		}
		if fn != nil {
			fn(s)
		}
	}
}

// unitSection is the section of a unit's file that AllowedCPUs= goes in
// ("Service", "Scope", "Slice", ...): its suffix, capitalised.
func unitSection(name string) string {
	i := strings.LastIndexByte(name, '.')
	if i < 0 || i+1 >= len(name) {
		return ""
	}
	s := name[i+1:]
	return strings.ToUpper(s[:1]) + s[1:]
}

// CPUMask is cpus as systemd's AllowedCPUs= byte array: CPU n is bit
// n%8 of byte n/8, as long as the highest CPU needs ([]byte{} for none).
// Negative CPUs are ignored.
func CPUMask(cpus []int) []byte {
	hi := -1
	for _, c := range cpus {
		hi = max(hi, c)
	}
	b := make([]byte, (hi+8)/8)
	for _, c := range cpus {
		if c >= 0 {
			b[c/8] |= 1 << (c % 8)
		}
	}
	return b
}

// MaskCPUs is the CPUs of an AllowedCPUs= byte array, ascending (CPUMask's
// inverse; nil for none).
func MaskCPUs(mask []byte) []int {
	var out []int
	for i, v := range mask {
		for bit := 0; bit < 8; bit++ {
			if v&(1<<bit) != 0 {
				out = append(out, 8*i+bit)
			}
		}
	}
	return out
}

// CPUList is cpus (ascending) as a cpulist, "0-3,6" ("" for none).
func CPUList(cpus []int) string {
	var b strings.Builder
	for i := 0; i < len(cpus); {
		j := i
		for j+1 < len(cpus) && cpus[j+1] == cpus[j]+1 {
			j++
		}
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(cpus[i]))
		if j > i {
			b.WriteString("-" + strconv.Itoa(cpus[j]))
		}
		i = j + 1
	}
	return b.String()
}

// ParseCPUList is the CPUs of a cpulist such as "0-3,6" (CPUList's
// inverse); parts that are not numbers or ranges are skipped.
func ParseCPUList(s string) []int {
	var out []int
	for _, r := range strings.Split(strings.TrimSpace(s), ",") {
		lo, hi, isRange := strings.Cut(r, "-")
		a, err := strconv.Atoi(lo)
		if err != nil {
			continue
		}
		z := a
		if isRange {
			if z, err = strconv.Atoi(hi); err != nil {
				continue
			}
		}
		for c := a; c <= z; c++ {
			out = append(out, c)
		}
	}
	return out
}
