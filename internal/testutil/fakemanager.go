package testutil

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/godbus/dbus/v5"
)

// FakeManager is the tests' one systemd manager. Served on its private
// socket (ServeUser), it is reached as a user's manager
// (/run/user/UID/systemd/private) is: peer to peer, no bus daemon,
// EXTERNAL authentication and no Hello; served on a bus (ServeBus), as
// the system manager; not served at all, a test calls it in memory. It
// answers what the daemon asks a manager — Peer.Ping, AddMatch,
// Subscribe, ListUnitsByPatterns, GetUnit, SetUnitProperties, the units'
// Properties.GetAll and Get, the manager's Version, GetUnitFileState
// (SetUnitFiles) — from units the test
// puts in it (Put) or plays as systemd does (Start, Stop, Reload, ...:
// fakeunits.go), and emits the manager's signals. It can also misbehave as a
// hostile user's program on that socket would: hold any method's answer
// until released (Hold), say nothing at all (SetSilent),
// send bytes of its own (SendRaw) or strings that are not UTF-8
// (NotUTF8), and the test puts whatever values it likes in a unit's
// properties (a ControlGroup outside the cgroup tree, a mask of any
// length).
//
// It serves from this process, its socket listened on by a thread whose
// credentials alone are uid's, so SO_PEERCRED shows uid and this process's
// PID, in a directory owned by uid with mode 0700, as logind makes
// /run/user/UID.
type FakeManager struct {
	t *testing.T
	// Version is its Version property ("252-fake" unless set before
	// serving).
	Version string
	// AfterOK is sent in the same write as the SASL "OK" line, before the
	// client's BEGIN (a server sends nothing there).
	AfterOK []byte

	mu      sync.Mutex
	units   map[string]*FakeUnit
	held    map[string]chan struct{} // method → closed on release
	calls   map[string]int
	holding int
	sets    []fakeSet
	notUTF8 bool
	// silent: new connections are accepted and never read from or
	// answered (SetSilent).
	silent bool
	// staleWrites: a held SetUnitProperties whose connection closed
	// meanwhile is still applied when released (StaleWrites).
	staleWrites bool
	// refuse, when set, picks the SetUnitProperties of AllowedCPUs
	// refused (RefuseSets).
	refuse func(name string, mask []byte) bool
	// onSignal: OnSignal's subscriber.
	onSignal func(FakeSignal)
	// dropRoot, when not "", is where SetUnitProperties and loads find
	// the drop-ins of the manager of dropUID (DropInsBelow).
	dropRoot string
	dropUID  int
	// unitFiles: GetUnitFileState's table (SetUnitFiles).
	unitFiles map[string]string
	// busAddr and busConn: the bus ServeBus serves on and its connection
	// owning the manager's name (Reexec).
	busAddr  string
	busConn  *dbus.Conn
	conns    []*dbus.Conn
	raws     []net.Conn
	ln       net.Listener
	closed   bool
	accepted int
}

// FakeUnit is one unit of a FakeManager, as its properties say.
type FakeUnit struct {
	Slice        string
	ControlGroup string
	// ActiveState: "active" when empty.
	ActiveState string
	// Mask is AllowedCPUs= in force (systemd's byte array, any length:
	// as a test Put it, or as a client sent it).
	Mask                []byte
	MainPID             uint32
	DropIns             []string
	Delegate            bool
	DelegateControllers []string
	// Transient: made by StartTransientUnit (a scope), not from a unit
	// file: its drop-ins go with it (Drop).
	Transient bool
	// Own is the AllowedCPUs= of the unit's own configuration (its unit
	// file, or a transient unit's properties), which a load (Start,
	// Reload) gives it where no drop-in says otherwise.
	Own []byte
}

// fakeSet is one client's SetUnitProperties of AllowedCPUs= taken.
type fakeSet struct {
	name string
	mask []byte
}

// NewFakeManager makes a manager with no units, closed at t's cleanup.
func NewFakeManager(t *testing.T) *FakeManager {
	f := &FakeManager{t: t, Version: "252-fake", units: map[string]*FakeUnit{}, held: map[string]chan struct{}{}, calls: map[string]int{}, dropUID: -1}
	t.Cleanup(f.Close)
	return f
}

// Put adds or replaces unit name.
func (f *FakeManager) Put(name string, u FakeUnit) {
	f.mu.Lock()
	defer f.mu.Unlock()
	c := u
	f.units[name] = &c
}

// Remove drops unit name.
func (f *FakeManager) Remove(name string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.units, name)
}

// SetUnitFiles replaces the installed unit files GetUnitFileState answers
// from: unit name → state ("enabled", "disabled", "masked", ...; nil:
// none), as a package's install or purge changes them. systemd then sends
// UnitFilesChanged, which the test emits (Emit) when it wants it sent.
func (f *FakeManager) SetUnitFiles(files map[string]string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.unitFiles = files
}

// Hold makes every call of method (a member name: "AddMatch",
// "ListUnitsByPatterns", "GetAll", "SetUnitProperties", ...) wait
// unanswered while on, and answers the held ones when turned off.
func (f *FakeManager) Hold(method string, on bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	ch, ok := f.held[method]
	switch {
	case on && !ok:
		f.held[method] = make(chan struct{})
	case !on && ok:
		close(ch)
		delete(f.held, method)
	}
}

// Holding is how many calls wait unanswered now (Hold).
func (f *FakeManager) Holding() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.holding
}

// Calls is how many calls of method arrived so far.
func (f *FakeManager) Calls(method string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls[method]
}

// Accepted is how many connections the socket accepted so far.
func (f *FakeManager) Accepted() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.accepted
}

// Sets is "NAME=MASK" (MASK as hexadecimal bytes) for each
// SetUnitProperties of AllowedCPUs taken, in order.
func (f *FakeManager) Sets() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for _, w := range f.sets {
		out = append(out, fmt.Sprintf("%s=%x", w.name, w.mask))
	}
	return out
}

// Writes is Sets with each mask as a cpulist: "NAME=CPUS".
func (f *FakeManager) Writes() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for _, w := range f.sets {
		out = append(out, w.name+"="+CPUList(MaskCPUs(w.mask)))
	}
	return out
}

// SetSilent makes the connections accepted from now on say nothing at
// all, not even SASL, and never read (or, off, answer again).
func (f *FakeManager) SetSilent(on bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.silent = on
}

// StaleWrites makes a SetUnitProperties held (Hold) until its connection
// closed still set the value when released, as a manager that replays a
// client's write long after the client gave up on it would; by default
// such a write is dropped, as a slow manager's is.
func (f *FakeManager) StaleWrites(on bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.staleWrites = on
}

// RefuseSets makes each SetUnitProperties of AllowedCPUs for which
// refuse(name, mask) is true answer org.freedesktop.DBus.Error.AccessDenied
// and change nothing, as a manager that refuses that one write would (nil:
// none refused). A refused write is counted by Calls, not in Sets.
func (f *FakeManager) RefuseSets(refuse func(name string, mask []byte) bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.refuse = refuse
}

// NotUTF8 turns on (or off) the rewriting of every 0x7f byte it sends into
// 0xe9, which is not UTF-8 on its own: a unit named "caf\x7f.scope" then
// reaches the daemon as "caf\xe9.scope" (godbus refuses to encode
// strings that are not UTF-8; the daemon's decoder takes them).
func (f *FakeManager) NotUTF8(on bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.notUTF8 = on
}

// Emit sends the manager's signal member ("UnitNew", "UnitRemoved",
// "JobRemoved", "Reloading") with body to every connection.
func (f *FakeManager) Emit(member string, body ...any) {
	f.mu.Lock()
	conns := append([]*dbus.Conn(nil), f.conns...)
	f.mu.Unlock()
	for _, c := range conns {
		_ = c.Emit(SystemdPath, SystemdManager+"."+member, body...)
	}
}

// SendMessage sends msg, as it is (any type, any header fields: a
// signal whose sender claims to be the bus, a method call), on every
// connection; godbus gives it a serial.
func (f *FakeManager) SendMessage(msg *dbus.Message) {
	f.mu.Lock()
	conns := append([]*dbus.Conn(nil), f.conns...)
	f.mu.Unlock()
	for _, c := range conns {
		m := *msg
		c.Send(&m, nil)
	}
}

// SendRaw writes b to every connection as it is, past the D-Bus framing
// (a message header announcing more than the daemon accepts, say).
func (f *FakeManager) SendRaw(b []byte) {
	f.mu.Lock()
	raws := append([]net.Conn(nil), f.raws...)
	f.mu.Unlock()
	for _, c := range raws {
		_, _ = c.Write(b)
	}
}

// DropConnections closes every connection made so far (a manager that
// re-executes, or exits); the socket keeps accepting.
func (f *FakeManager) DropConnections() {
	f.mu.Lock()
	raws := f.raws
	f.raws, f.conns = nil, nil
	f.mu.Unlock()
	for _, c := range raws {
		c.Close()
	}
}

// Close stops serving: the socket, every connection, every held call.
func (f *FakeManager) Close() {
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		return
	}
	f.closed = true
	for m, ch := range f.held {
		close(ch)
		delete(f.held, m)
	}
	ln, raws := f.ln, f.raws
	f.raws, f.conns = nil, nil
	f.mu.Unlock()
	if ln != nil {
		ln.Close()
	}
	for _, c := range raws {
		c.Close()
	}
}

// HeaderAnnouncing is the 16-byte fixed header of a method reply
// (little-endian) that announces a body of n bytes, for SendRaw.
func HeaderAnnouncing(n uint32) []byte {
	h := []byte{'l', 2, 0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0}
	binary.LittleEndian.PutUint32(h[4:8], n)
	return h
}

// ServeUser serves the manager on runtimeDir/systemd/private, with
// runtimeDir (and runtimeDir/systemd) made owned by uid with mode 0700,
// listened on as uid; the directories above it within os.TempDir() are
// made searchable (0755), as /run/user is. It returns the socket's path. It skips t unless the
// test runs as root.
func (f *FakeManager) ServeUser(runtimeDir string, uid int) string {
	t := f.t
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to serve a socket as another uid")
	}
	// The directories above it (a t.TempDir is 0700) must let uid pass,
	// as /run/user does.
	for d := filepath.Dir(runtimeDir); strings.HasPrefix(d, os.TempDir()+"/"); d = filepath.Dir(d) {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	sd := filepath.Join(runtimeDir, "systemd")
	for _, d := range []string{runtimeDir, sd} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(d, uid, uid); err != nil {
			t.Fatal(err)
		}
	}
	sock := filepath.Join(sd, "private")
	ln, err := ListenUnixAs(sock, uid)
	if err != nil {
		t.Fatalf("listening on %s as uid %d: %v", sock, uid, err)
	}
	f.mu.Lock()
	f.ln = ln
	f.mu.Unlock()
	go f.accept(ln)
	return sock
}

// ServeBus serves the manager on the bus at addr as the system manager
// does: a connection of root's owning org.freedesktop.systemd1, its
// signals broadcast. The bus's own AddMatch and Hello are the bus
// daemon's. It returns that connection (closed at t's cleanup), for a
// test that sends on it itself or waits for its messages (Barrier).
func (f *FakeManager) ServeBus(addr string) *dbus.Conn {
	t := f.t
	t.Helper()
	c, err := dbus.Connect(addr)
	if err != nil {
		t.Fatal(err)
	}
	f.export(c)
	f.mu.Lock()
	f.conns = append(f.conns, c)
	f.busAddr, f.busConn = addr, c
	f.mu.Unlock()
	if r, err := c.RequestName(SystemdName, dbus.NameFlagDoNotQueue); err != nil || r != dbus.RequestNameReplyPrimaryOwner {
		c.Close()
		t.Fatalf("RequestName(%s) = %v, %v", SystemdName, r, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// Reexec plays `systemctl daemon-reexec` of a manager served on a bus
// (ServeBus): Reloading(true) and UnitRemoved for every unit from the old
// connection, a new connection queued for the name takes it over as the
// old one closes, Reloading(false) from the new one, and no UnitNew. The
// units stay as they are. It returns the new connection.
func (f *FakeManager) Reexec() *dbus.Conn {
	t := f.t
	t.Helper()
	f.mu.Lock()
	addr, old := f.busAddr, f.busConn
	f.mu.Unlock()
	if old == nil {
		t.Fatal("Reexec of a manager not served on a bus")
	}
	sigs := []FakeSignal{{Member: "Reloading", Reloading: true}}
	for _, n := range f.UnitNames() {
		sigs = append(sigs, FakeSignal{Member: "UnitRemoved", Unit: n})
	}
	f.signal(sigs...)
	next, err := dbus.Connect(addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { next.Close() })
	f.export(next)
	if _, err := next.RequestName(SystemdName, 0); err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	f.conns = slices.DeleteFunc(f.conns, func(c *dbus.Conn) bool { return c == old })
	f.mu.Unlock()
	old.Close()
	WaitFor(t, "the re-executed manager to own its name", DefaultBound, func() (bool, string) {
		var owner string
		err := next.BusObject().Call("org.freedesktop.DBus.GetNameOwner", 0, SystemdName).Store(&owner)
		return err == nil && owner == next.Names()[0], owner
	})
	f.mu.Lock()
	f.conns = append(f.conns, next)
	f.busConn = next
	f.mu.Unlock()
	f.signal(FakeSignal{Member: "Reloading", Reloading: false})
	return next
}

// ListenUnixAs listens on a unix socket at path from a thread whose
// credentials alone are uid's (and gid uid's), so that SO_PEERCRED shows
// the connecting side uid; the thread ends with the call.
func ListenUnixAs(path string, uid int) (net.Listener, error) {
	var ln net.Listener
	err := AsUID(uid, func() (err error) {
		ln, err = net.Listen("unix", path)
		return err
	})
	return ln, err
}

func (f *FakeManager) accept(ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		f.mu.Lock()
		f.accepted++
		silent, closed := f.silent, f.closed
		f.raws = append(f.raws, c)
		f.mu.Unlock()
		if closed {
			c.Close()
			return
		}
		if silent {
			continue // held open, never read: Close ends it
		}
		go f.serveConn(c)
	}
}

// serveConn authenticates the client (the server's side of SASL
// EXTERNAL), then serves it through a godbus connection whose own client
// SASL is answered locally (fakeSASL).
func (f *FakeManager) serveConn(c net.Conn) {
	br := bufio.NewReader(c)
	if b, err := br.ReadByte(); err != nil || b != 0 {
		c.Close()
		return
	}
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			c.Close()
			return
		}
		line = strings.TrimRight(line, "\r\n")
		switch {
		case line == "AUTH":
			io.WriteString(c, "REJECTED EXTERNAL\r\n")
		case strings.HasPrefix(line, "AUTH EXTERNAL"):
			f.mu.Lock()
			after := f.AfterOK
			f.mu.Unlock()
			c.Write(append([]byte("OK 0123456789abcdef0123456789abcdef\r\n"), after...))
		case line == "BEGIN":
			conn, err := dbus.NewConn(&fakeSASL{r: br, c: c, f: f})
			if err != nil {
				c.Close()
				return
			}
			// Exported before godbus starts reading (Auth), so that no
			// call finds an object missing.
			if !f.export(conn) {
				return
			}
			if err := conn.Auth([]dbus.Auth{dbus.AuthExternal("0")}); err != nil {
				c.Close()
				return
			}
			f.mu.Lock()
			f.conns = append(f.conns, conn) // Emit reaches it from now on
			f.mu.Unlock()
			return
		default:
			io.WriteString(c, "ERROR\r\n")
		}
	}
}

// fakeSASL is the fake's side of a connection for godbus: godbus's client
// SASL lines are answered here and never sent (the peer has finished
// authenticating already), then bytes pass through, 0x7f rewritten while
// NotUTF8 is on.
type fakeSASL struct {
	r     *bufio.Reader
	c     net.Conn
	f     *FakeManager
	begun bool
	out   bytes.Buffer
}

func (s *fakeSASL) Read(p []byte) (int, error) {
	if s.out.Len() > 0 {
		return s.out.Read(p)
	}
	if !s.begun {
		return 0, errors.New("fake manager: SASL read out of turn")
	}
	return s.r.Read(p)
}

func (s *fakeSASL) Write(p []byte) (int, error) {
	if !s.begun {
		line := strings.TrimRight(string(bytes.TrimLeft(p, "\x00")), "\r\n")
		switch {
		case line == "AUTH":
			s.out.WriteString("REJECTED EXTERNAL\r\n")
		case strings.HasPrefix(line, "AUTH EXTERNAL"):
			s.out.WriteString("OK 0123456789abcdef0123456789abcdef\r\n")
		case line == "BEGIN":
			s.begun = true
		}
		return len(p), nil
	}
	s.f.mu.Lock()
	patch := s.f.notUTF8
	s.f.mu.Unlock()
	if patch {
		p = bytes.ReplaceAll(p, []byte{0x7f}, []byte{0xe9})
	}
	return s.c.Write(p)
}

func (s *fakeSASL) Close() error { return s.c.Close() }

// The system manager's names on D-Bus (org.freedesktop.systemd1(5)), as
// a fake serves them: its bus name, its object and interface, and the
// object path below which each unit is an object (FakeUnitPath).
const (
	SystemdName     = "org.freedesktop.systemd1"
	SystemdPath     = dbus.ObjectPath("/org/freedesktop/systemd1")
	SystemdManager  = "org.freedesktop.systemd1.Manager"
	SystemdUnitPath = dbus.ObjectPath("/org/freedesktop/systemd1/unit")
)

func (f *FakeManager) export(conn *dbus.Conn) bool {
	for _, e := range []struct {
		obj   any
		path  dbus.ObjectPath
		iface string
	}{
		{fakeManagerObj{f, conn}, SystemdPath, SystemdManager},
		{fakeManagerProps{f}, SystemdPath, "org.freedesktop.DBus.Properties"},
		{fakeBusObj{f}, "/org/freedesktop/DBus", "org.freedesktop.DBus"},
	} {
		if err := conn.Export(e.obj, e.path, e.iface); err != nil {
			conn.Close()
			return false
		}
	}
	if err := conn.ExportSubtree(FakeUnitProps(f.unitProps), SystemdUnitPath, "org.freedesktop.DBus.Properties"); err != nil {
		conn.Close()
		return false
	}
	return true
}

// call counts a call of method and, while it is held, waits for its
// release (or Close).
func (f *FakeManager) call(method string) {
	f.mu.Lock()
	f.calls[method]++
	ch, held := f.held[method]
	if held {
		f.holding++
	}
	f.mu.Unlock()
	if held {
		<-ch
		f.mu.Lock()
		f.holding--
		f.mu.Unlock()
	}
}

// FakeUnitPath is the object path of unit name below SystemdUnitPath,
// escaped as systemd and go-systemd's PathBusEscape do: every byte
// outside [A-Za-z0-9] as _XX (two lowercase hexadecimal digits).
func FakeUnitPath(name string) dbus.ObjectPath {
	var b strings.Builder
	for i := 0; i < len(name); i++ {
		c := name[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' {
			b.WriteByte(c)
		} else {
			fmt.Fprintf(&b, "_%02x", c)
		}
	}
	return SystemdUnitPath + "/" + dbus.ObjectPath(b.String())
}

// FakeUnitName is the unit name of a unit's object path p (FakeUnitPath's
// inverse): p without SystemdUnitPath's prefix, each _XX unescaped; an
// underscore not followed by two hexadecimal digits stays as it is.
func FakeUnitName(p dbus.ObjectPath) string {
	s := strings.TrimPrefix(string(p), string(SystemdUnitPath)+"/")
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

// NoSuchUnit is the error systemd's manager answers GetUnit (and a unit's
// SetUnitProperties) with for a unit that is not loaded:
// org.freedesktop.systemd1.NoSuchUnit, "Unit NAME not loaded.".
func NoSuchUnit(name string) *dbus.Error {
	return &dbus.Error{Name: "org.freedesktop.systemd1.NoSuchUnit", Body: []any{"Unit " + name + " not loaded."}}
}

// FakeUnitStatus is one entry of the manager's ListUnitsByPatterns
// answer, a(ssssssouso): name, description, load, active and sub state,
// the unit it follows, its object path, and its job's id, type and path.
type FakeUnitStatus struct {
	Name, Description, LoadState, ActiveState, SubState, Following string
	Path                                                           dbus.ObjectPath
	JobID                                                          uint32
	JobType                                                        string
	JobPath                                                        dbus.ObjectPath
}

// FakeUnitProps serves org.freedesktop.DBus.Properties on the units'
// objects (export it with ExportSubtree at SystemdUnitPath): GetAll
// answers what the function answers for the unit the object path names
// (FakeUnitName) and the interface asked for
// (org.freedesktop.systemd1.Unit, .Service, .Scope, .Slice); Get answers
// one property of that, or org.freedesktop.DBus.Error.UnknownProperty.
type FakeUnitProps func(name, iface string) (map[string]dbus.Variant, *dbus.Error)

// GetAll is org.freedesktop.DBus.Properties.GetAll on msg's object.
func (all FakeUnitProps) GetAll(msg dbus.Message, iface string) (map[string]dbus.Variant, *dbus.Error) {
	path, _ := msg.Headers[dbus.FieldPath].Value().(dbus.ObjectPath)
	return all(FakeUnitName(path), iface)
}

// Get is org.freedesktop.DBus.Properties.Get on msg's object.
func (all FakeUnitProps) Get(msg dbus.Message, iface, prop string) (dbus.Variant, *dbus.Error) {
	props, err := all.GetAll(msg, iface)
	if err != nil {
		return dbus.Variant{}, err
	}
	v, ok := props[prop]
	if !ok {
		return dbus.Variant{}, &dbus.Error{Name: "org.freedesktop.DBus.Error.UnknownProperty", Body: []any{prop}}
	}
	return v, nil
}

type fakeBusObj struct{ f *FakeManager }

func (o fakeBusObj) AddMatch(rule string) *dbus.Error    { o.f.call("AddMatch"); return nil }
func (o fakeBusObj) RemoveMatch(rule string) *dbus.Error { o.f.call("RemoveMatch"); return nil }

// fakeManagerObj is the Manager interface of one connection, c.
type fakeManagerObj struct {
	f *FakeManager
	c *dbus.Conn
}

func (o fakeManagerObj) Subscribe() *dbus.Error { o.f.call("Subscribe"); return nil }

// GetUnitFileState answers from SetUnitFiles's table, and
// org.freedesktop.DBus.Error.FileNotFound for a unit not in it, as
// systemd does for a unit without a file.
func (o fakeManagerObj) GetUnitFileState(name string) (string, *dbus.Error) {
	o.f.call("GetUnitFileState")
	o.f.mu.Lock()
	defer o.f.mu.Unlock()
	if st, ok := o.f.unitFiles[name]; ok {
		return st, nil
	}
	return "", dbus.NewError("org.freedesktop.DBus.Error.FileNotFound", []any{"No such file or directory"})
}

func (o fakeManagerObj) ListUnitsByPatterns(states, patterns []string) ([]FakeUnitStatus, *dbus.Error) {
	o.f.call("ListUnitsByPatterns")
	o.f.mu.Lock()
	defer o.f.mu.Unlock()
	names := make([]string, 0, len(o.f.units))
	for n := range o.f.units {
		names = append(names, n)
	}
	sort.Strings(names)
	out := []FakeUnitStatus{}
	for _, n := range names {
		u := o.f.units[n]
		ok := len(patterns) == 0
		for _, p := range patterns {
			if m, _ := filepath.Match(p, n); m {
				ok = true
			}
		}
		if ok {
			sub := "running"
			if u.active() != "active" {
				sub = "dead" // as systemd says of an inactive unit
			}
			out = append(out, FakeUnitStatus{Name: n, LoadState: "loaded", ActiveState: u.active(), SubState: sub, Path: FakeUnitPath(n), JobPath: "/"})
		}
	}
	return out, nil
}

func (o fakeManagerObj) GetUnit(name string) (dbus.ObjectPath, *dbus.Error) {
	o.f.call("GetUnit")
	o.f.mu.Lock()
	defer o.f.mu.Unlock()
	if o.f.units[name] == nil {
		return "", NoSuchUnit(name)
	}
	return FakeUnitPath(name), nil
}

func (o fakeManagerObj) SetUnitProperties(name string, runtime bool, props []struct {
	Name  string
	Value dbus.Variant
}) *dbus.Error {
	o.f.call("SetUnitProperties")
	if !o.c.Connected() {
		// Held until its client gave up and went: a slow manager, not one
		// that replays a stale write long after (which would leave the
		// unit with a value no client knows of; see StaleWrites).
		o.f.mu.Lock()
		stale := o.f.staleWrites
		o.f.mu.Unlock()
		if !stale {
			return &dbus.Error{Name: "org.freedesktop.DBus.Error.NoReply", Body: []any{"the client went away"}}
		}
	}
	o.f.mu.Lock()
	defer o.f.mu.Unlock()
	if o.f.units[name] == nil {
		return NoSuchUnit(name)
	}
	for _, p := range props {
		if p.Name == "AllowedCPUs" {
			b, _ := p.Value.Value().([]byte)
			if err := o.f.setLocked(name, runtime, b, true); err != nil {
				return err
			}
		}
	}
	return nil
}

func (u *FakeUnit) active() string {
	if u.ActiveState == "" {
		return "active"
	}
	return u.ActiveState
}

type fakeManagerProps struct{ f *FakeManager }

func (p fakeManagerProps) Get(iface, prop string) (dbus.Variant, *dbus.Error) {
	p.f.call("Get")
	return dbus.MakeVariant(p.f.Version), nil
}

// unitProps are the properties of unit name on iface, for FakeUnitProps
// (a unit it does not have is not-found, inactive and empty, as systemd
// answers for a name it loads no unit for).
func (f *FakeManager) unitProps(name, iface string) (map[string]dbus.Variant, *dbus.Error) {
	f.call("GetAll")
	f.mu.Lock()
	defer f.mu.Unlock()
	u := f.units[name]
	if strings.HasSuffix(iface, ".Unit") {
		if u == nil {
			return map[string]dbus.Variant{"LoadState": dbus.MakeVariant("not-found"), "ActiveState": dbus.MakeVariant("inactive"), "DropInPaths": dbus.MakeVariant([]string{})}, nil
		}
		return map[string]dbus.Variant{"LoadState": dbus.MakeVariant("loaded"), "ActiveState": dbus.MakeVariant(u.active()),
			"DropInPaths": dbus.MakeVariant(append([]string{}, u.DropIns...)), "Transient": dbus.MakeVariant(u.Transient)}, nil
	}
	if u == nil {
		return map[string]dbus.Variant{"AllowedCPUs": dbus.MakeVariant([]byte{}), "Slice": dbus.MakeVariant(""), "ControlGroup": dbus.MakeVariant("")}, nil
	}
	ctl := u.DelegateControllers
	if ctl == nil {
		ctl = []string{}
	}
	mask := u.Mask
	if mask == nil {
		mask = []byte{}
	}
	return map[string]dbus.Variant{
		"Slice": dbus.MakeVariant(u.Slice), "ControlGroup": dbus.MakeVariant(u.ControlGroup),
		"AllowedCPUs": dbus.MakeVariant(mask), "EffectiveCPUs": dbus.MakeVariant([]byte{}),
		"Delegate": dbus.MakeVariant(u.Delegate), "DelegateControllers": dbus.MakeVariant(ctl),
		"MainPID": dbus.MakeVariant(u.MainPID),
	}, nil
}
