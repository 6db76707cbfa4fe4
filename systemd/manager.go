package systemd

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	sd "github.com/coreos/go-systemd/v22/dbus"
	"github.com/godbus/dbus/v5"
	"golang.org/x/sys/unix"

	"github.com/schedpolicyd/schedpolicyd/internal/bussender"
)

// The systemd manager's D-Bus names (org.freedesktop.systemd1(5)).
const (
	managerInterface = "org.freedesktop.systemd1.Manager"
	managerPath      = dbus.ObjectPath("/org/freedesktop/systemd1")
	managerName      = "org.freedesktop.systemd1"
)

// SystemSocket is the system manager's private D-Bus socket; root only. It
// works without a bus daemon, so placement keeps working while dbus-daemon
// restarts. UserSocket(uid) is the same for a user's manager
// (user@UID.service).
const SystemSocket = "/run/systemd/private"

// UserSocket is the private socket of uid's user manager,
// /run/user/UID/systemd/private. systemd accepts root there as well as uid
// (its bus_check_peercred), which is how a system service reaches units of
// a user: the system manager cannot change them (they belong to the user
// manager, in a subtree delegated to it).
func UserSocket(uid int) string {
	return "/run/user/" + strconv.Itoa(uid) + "/systemd/private"
}

// UnitInfo is what placement needs to know of one service, scope or slice.
type UnitInfo struct {
	Name  string // "app-firefox-1234.scope"
	Slice string // the slice it is in, "app.slice"; "" for -.slice
	// ControlGroup is its cgroup path below the cgroup root,
	// "/user.slice/user-1000.slice/user@1000.service/app.slice/app-firefox-1234.scope";
	// "" while the unit has none (inactive).
	ControlGroup string
	ActiveState  string // "active", "activating", "inactive", ...
	// LoadState is "loaded", or "not-found" for a unit systemd does not
	// know (a transient unit that is gone).
	LoadState string
	// AllowedCPUs is the unit's AllowedCPUs= (systemd.resource-control(5)),
	// as sorted CPU numbers; nil when unset (no restriction of its own).
	AllowedCPUs []int
	// EffectiveCPUs is what the kernel gives it (cpuset.cpus.effective),
	// nil where systemd does not apply the cpuset controller (cgroup v1,
	// or the controller is off for the unit's subtree).
	EffectiveCPUs []int
	// Delegate is the unit's Delegate= (services and scopes), and
	// DelegateControllers the controllers it names: the cgroup
	// controllers the unit's own processes (a user's manager, for
	// user@UID.service) may manage below its cgroup.
	Delegate            bool
	DelegateControllers []string
	// DropInPaths are the drop-in files of the unit's configuration, as
	// the manager lists them (its DropInPaths property): what it loaded,
	// and each file a SetUnitProperties call wrote since
	// ("/run/systemd/system.control/NAME.d/50-AllowedCPUs.conf" for
	// `systemctl set-property --runtime`, below /etc/systemd/system.control
	// without --runtime, below /run/systemd/transient for a transient unit;
	// below /run/user/UID/systemd/... or ~/.config/systemd/user.control
	// for a user's manager). Empty for a unit that is not found.
	DropInPaths []string
	// MainPID is a service's main process (its MainPID property; 0 for
	// none, and for scopes and slices): for user@UID.service, the user's
	// manager, which the connection to it is checked against
	// (UserOptions.PeerPID).
	MainPID int
}

// UnitEvent is something that happened to unit Name, from the manager's
// signals.
type UnitEvent struct {
	Name string
	Kind EventKind
	// UID is the manager's (Manager.UID): -1 for the system manager.
	UID int
}

// EventKind says which signal a UnitEvent came from.
type EventKind int

const (
	// UnitLoaded: UnitNew, the unit was loaded into the manager's memory
	// (it may not be active yet).
	UnitLoaded EventKind = iota
	// UnitDropped: UnitRemoved, the manager dropped the unit from memory
	// (a stopped transient unit, after garbage collection).
	UnitDropped
	// JobFinished: JobRemoved, a job of the unit ended (a start or stop
	// completed, or failed): its state may have changed.
	JobFinished
	// ReloadStarted and ReloadFinished: the manager's Reloading(true) and
	// Reloading(false), around `systemctl daemon-reload` and
	// `daemon-reexec` (Name is empty). In between it drops every unit
	// from memory and loads it again: systemd 252 sends UnitRemoved for
	// each unit, then UnitNew for each on a reload but not after a
	// re-execution (seen in the systemd test container), so the units'
	// signals in between say nothing about which units exist.
	// ReloadFinished is never dropped (Events).
	ReloadStarted
	ReloadFinished
)

// Manager is a connection to one systemd manager: the system's (PID 1) or
// one user's. Methods are safe for concurrent use. Every error wraps what
// systemd answered (a *dbus.Error, for example
// org.freedesktop.systemd1.NoSuchUnit) or the connection's error.
type Manager struct {
	// UID is the user manager's uid, or -1 for the system manager.
	UID int
	// MaxCPUs bounds the CPU masks the manager may send (DecodeCPUMask:
	// the machine's kernel_max + 1; DefaultMaxCPUs when 0), MaxUnits the
	// units one listing may name (DefaultMaxUnits when 0). Set before the
	// first call.
	MaxCPUs, MaxUnits int

	conn *sd.Conn
	// sig is a connection of its own that receives the manager's signals
	// after Subscribe (a peer-to-peer connection gets every signal, no
	// match rules needed) on sigs, registered as it was made.
	sig  *dbus.Conn
	sigs chan *dbus.Signal
	// owner is the system manager's name on the bus, for a connection
	// through the bus: a signal counts only when its owner sent it. nil on
	// a peer-to-peer connection, where only the manager can send.
	owner    *bussender.Owner
	events   chan UnitEvent
	once     sync.Once
	overflow atomic.Bool
	// closed ends a wait to deliver ReloadFinished once Close is called.
	closed    chan struct{}
	closeOnce sync.Once
	// For a user's manager (untrusted): raws are the sockets under its
	// connections, closed first by Close (so that a write it stopped
	// reading ends at once); sigDropped is set when a signal found a
	// channel full (dropSignals), which Overflowed reports too.
	raws       []net.Conn
	sigDropped *atomic.Bool
	untrusted  bool
	// refused holds the invalid answers (*InvalidError) since the last
	// TakeRefused, at most maxRefused of them.
	refusedMu sync.Mutex
	refused   []error
	dropped   int
}

// maxRefused bounds what Manager keeps of refused answers until
// TakeRefused.
const maxRefused = 32

// SystemBusSocket is the system bus, through which ConnectSystem reaches
// the system manager when the bus runs.
const SystemBusSocket = "/run/dbus/system_bus_socket"

// ConnectSystem connects to the system manager: through the system bus
// when it runs (DBUS_SYSTEM_BUS_ADDRESS when set, as for every system bus
// client, else SystemBusSocket), else through SystemSocket (root only).
// The bus is
// preferred because systemd 252's private socket may leave the first
// message a client pipelines after authentication unread until the next
// one arrives (seen in the systemd test container: Subscribe answered
// only when the connection closed, 10 s later). ctx bounds the
// connecting. Errors: neither socket is there (systemd is not PID 1), or
// authentication failed.
func ConnectSystem(ctx context.Context) (*Manager, error) {
	if os.Getenv("DBUS_SYSTEM_BUS_ADDRESS") != "" {
		return connectBus(ctx)
	}
	if _, err := os.Stat(SystemBusSocket); err == nil {
		return connectBus(ctx)
	}
	return connect(ctx, SystemSocket, -1)
}

// ConnectSystemPrivate connects to the system manager through
// SystemSocket only, never the bus (for a daemon told to use no D-Bus).
func ConnectSystemPrivate(ctx context.Context) (*Manager, error) {
	return connect(ctx, SystemSocket, -1)
}

// connectBus connects to the system manager through the system bus: go-
// systemd's connection for the methods, and one of its own for the
// signals, with match rules for the manager's UnitNew, UnitRemoved,
// JobRemoved and Reloading.
func connectBus(ctx context.Context) (*Manager, error) {
	conn, err := sd.NewConnection(func() (*dbus.Conn, error) { return busConn() })
	if err != nil {
		return nil, fmt.Errorf("systemd manager on the system bus: %w", err)
	}
	sig, err := busConn()
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("systemd manager on the system bus: %w", err)
	}
	m := newManager(-1, conn, sig)
	for _, member := range []string{"UnitNew", "UnitRemoved", "JobRemoved", "Reloading"} {
		if err = sig.AddMatchSignalContext(ctx, dbus.WithMatchSender(managerName), dbus.WithMatchObjectPath(managerPath),
			dbus.WithMatchInterface(managerInterface), dbus.WithMatchMember(member)); err != nil {
			break
		}
	}
	if err == nil {
		m.owner, err = bussender.WatchOwner(ctx, sig, managerName)
	}
	if err != nil {
		m.Close()
		return nil, fmt.Errorf("systemd manager on the system bus: %w", err)
	}
	return m, nil
}

// newManager is a Manager on conn (methods) and sig (signals), with sig's
// signal channel registered at once, so that nothing sig receives from
// now on is missed.
func newManager(uid int, conn *sd.Conn, sig *dbus.Conn) *Manager {
	m := &Manager{UID: uid, conn: conn, sig: sig, sigs: make(chan *dbus.Signal, 256), events: make(chan UnitEvent, 256), closed: make(chan struct{})}
	sig.Signal(m.sigs)
	return m
}

// busConn is a private connection to the system bus, authenticated as
// this process's uid (EXTERNAL) and registered (Hello); it lives until
// closed, whatever context connected it.
func busConn() (*dbus.Conn, error) {
	c, err := dbus.SystemBusPrivate()
	if err != nil {
		return nil, err
	}
	if err := c.Auth([]dbus.Auth{dbus.AuthExternal(strconv.Itoa(os.Getuid()))}); err != nil {
		c.Close()
		return nil, err
	}
	if err := c.Hello(); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// UserOptions are what ConnectUser checks a user's manager against.
type UserOptions struct {
	// Socket is the manager's private socket; UserSocket(uid) when "".
	Socket string
	// PeerPID, when > 0, is the PID the socket's listener must have:
	// user@UID.service's MainPID, as the system manager says (systemd
	// --user binds its private socket itself). A socket the user put
	// there (the directory is theirs) is then refused.
	PeerPID int
	// MaxCPUs and MaxUnits are the Manager's bounds.
	MaxCPUs, MaxUnits int
}

// ErrNotUserManager is the error of a user's socket whose listener is
// not the user's manager (UserOptions.PeerPID), or runs as another user
// (a symlink to the system manager's socket, say).
var ErrNotUserManager = errors.New("the socket's listener is not the user's manager")

// ConnectUser connects to uid's user manager through its private socket
// (UserOptions.Socket), as root or as uid, treating whatever answers
// there as untrusted: the listener must run as uid (and be PeerPID when
// given: SO_PEERCRED), every byte it sends is bounded (limitConn:
// MaxUserMessage, a message and byte rate), and ctx bounds the whole
// connecting — dialling, authenticating, the first ping and go-systemd's
// AddMatch, which takes no context of its own: when ctx ends first, every
// connection made is closed, which ends any call still waiting. Errors: no
// such socket (wraps fs.ErrNotExist: the user is not logged in and not
// lingering), ErrNotUserManager, authentication failed, ctx ended.
func ConnectUser(ctx context.Context, uid int, opt UserOptions) (*Manager, error) {
	socket := opt.Socket
	if socket == "" {
		socket = UserSocket(uid)
	}
	var mu sync.Mutex
	var raws []net.Conn
	var dropped atomic.Bool // a signal found a channel full (dropSignals)
	budget := newRates()    // every connection's reads, together
	expired := false
	stop := context.AfterFunc(ctx, func() {
		mu.Lock()
		defer mu.Unlock()
		expired = true
		for _, c := range raws {
			c.Close()
		}
	})
	dial := func() (*dbus.Conn, error) {
		nc, err := dialUser(ctx, socket, uid, opt.PeerPID)
		if err != nil {
			return nil, err
		}
		mu.Lock()
		if expired {
			mu.Unlock()
			nc.Close()
			return nil, ctx.Err()
		}
		raws = append(raws, nc)
		mu.Unlock()
		c, err := dbus.NewConn(newLimitConn(nc, budget), dbus.WithSignalHandler(&dropSignals{dropped: &dropped}), dbus.WithIncomingInterceptor(noBusSender))
		if err != nil {
			nc.Close()
			return nil, err
		}
		// EXTERNAL with our uid, no Hello: the socket is systemd itself,
		// not a bus.
		if err := c.Auth([]dbus.Auth{dbus.AuthExternal(strconv.Itoa(os.Getuid()))}); err != nil {
			c.Close()
			return nil, err
		}
		if err := warm(ctx, c); err != nil {
			c.Close()
			return nil, err
		}
		return c, nil
	}
	fail := func(err error) (*Manager, error) {
		if ctx.Err() != nil && !errors.Is(err, ctx.Err()) {
			err = fmt.Errorf("%w (%v)", ctx.Err(), err)
		}
		return nil, fmt.Errorf("user %d manager at %s: %w", uid, socket, err)
	}
	conn, err := sd.NewConnection(dial)
	if err != nil {
		stop()
		return fail(err)
	}
	sig, err := dial()
	if err == nil && !stop() {
		err = ctx.Err() // the deadline closed the connections meanwhile
	}
	if err != nil {
		stop()
		conn.Close()
		if sig != nil {
			sig.Close()
		}
		return fail(err)
	}
	m := newManager(uid, conn, sig)
	m.MaxCPUs, m.MaxUnits = opt.MaxCPUs, opt.MaxUnits
	m.raws, m.sigDropped, m.untrusted = raws, &dropped, true
	return m, nil
}

// dialUser dials a user's manager's socket within ctx and checks its
// listener's credentials (SO_PEERCRED): uid, and pid when > 0. Errors:
// the socket is not there (wraps fs.ErrNotExist), the dial failed, or
// ErrNotUserManager.
func dialUser(ctx context.Context, socket string, uid, pid int) (net.Conn, error) {
	var d net.Dialer
	nc, err := d.DialContext(ctx, "unix", socket)
	if err != nil {
		return nil, err
	}
	cred, err := peerCred(nc)
	switch {
	case err != nil:
	case int(cred.Uid) != uid:
		err = fmt.Errorf("%w: it runs as uid %d, not %d", ErrNotUserManager, cred.Uid, uid)
	case pid > 0 && int(cred.Pid) != pid:
		err = fmt.Errorf("%w: its PID is %d, user@%d.service's MainPID %d", ErrNotUserManager, cred.Pid, uid, pid)
	}
	if err != nil {
		nc.Close()
		return nil, err
	}
	return nc, nil
}

// peerCred is SO_PEERCRED of a unix socket connection: the credentials
// of the process that listened on it, at listen(2).
func peerCred(c net.Conn) (*unix.Ucred, error) {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return nil, errors.New("not a unix socket")
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return nil, err
	}
	var cred *unix.Ucred
	var cerr error
	if err := raw.Control(func(fd uintptr) {
		cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return nil, err
	}
	return cred, cerr
}

func connect(ctx context.Context, socket string, uid int) (*Manager, error) {
	if _, err := os.Stat(socket); err != nil {
		return nil, fmt.Errorf("systemd manager: %w", err)
	}
	dial := func() (*dbus.Conn, error) {
		// Not dbus.WithContext(ctx): godbus closes a connection when its
		// context ends, and this one lives until Close.
		c, err := dbus.Dial("unix:path=" + socket)
		if err != nil {
			return nil, err
		}
		// EXTERNAL with our uid, no Hello: the socket is systemd itself,
		// not a bus.
		if err := c.Auth([]dbus.Auth{dbus.AuthExternal(strconv.Itoa(os.Getuid()))}); err != nil {
			c.Close()
			return nil, err
		}
		if err := warm(ctx, c); err != nil {
			c.Close()
			return nil, err
		}
		return c, nil
	}
	conn, err := sd.NewConnection(dial)
	if err != nil {
		return nil, fmt.Errorf("systemd manager at %s: %w", socket, err)
	}
	sig, err := dial()
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("systemd manager at %s: %w", socket, err)
	}
	return newManager(uid, conn, sig), nil
}

// warm pings the manager on a new private-socket connection until it
// answers: systemd 252 may leave the first message sent right after
// authentication unread until another arrives (see ConnectSystem), so a
// ping that gets no answer within 200 ms is followed by another, which
// makes it read both. Errors: no answer after 10 pings, ctx ended, or
// the connection failed.
func warm(ctx context.Context, c *dbus.Conn) error {
	for i := 0; i < 10; i++ {
		pctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		err := c.Object(managerName, managerPath).CallWithContext(pctx, "org.freedesktop.DBus.Peer.Ping", 0).Err
		cancel()
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if !errors.Is(err, context.DeadlineExceeded) {
			return err
		}
	}
	return errors.New("no answer to Peer.Ping on the manager's private socket")
}

// Close closes the connections; Events' channel is closed.
func (m *Manager) Close() {
	m.closeOnce.Do(func() { close(m.closed) })
	for _, c := range m.raws {
		c.Close()
	}
	m.conn.Close()
	m.sig.Close()
}

// String names the manager: "system" or "user 1000".
func (m *Manager) String() string {
	if m.UID < 0 {
		return "system"
	}
	return "user " + strconv.Itoa(m.UID)
}

// Version is the manager's version, "252.39-1~deb12u2" (its Version
// property), cut to 64 bytes of printable ASCII.
func (m *Manager) Version(ctx context.Context) (string, error) {
	var v dbus.Variant
	err := m.sig.Object(managerName, managerPath).CallWithContext(ctx, "org.freedesktop.DBus.Properties.Get", 0, managerInterface, "Version").Store(&v)
	if err != nil {
		return "", fmt.Errorf("%s manager: Version: %w", m, err)
	}
	s, _ := v.Value().(string)
	return cleanVersion(s), nil
}

// Events subscribes to the manager's unit signals (once) and returns the
// channel of its UnitNew, UnitRemoved, JobRemoved and Reloading signals
// as events, closed when the connection closes. systemd sends them for
// every unit it loads, drops or runs a job for, which is how placement
// adopts and forgets units without polling. Through the bus, only signals
// the manager's connection sent count (anyone may send a connection a
// signal); across `systemctl daemon-reexec` that is the new connection
// systemd makes, which takes the name over (the subscription itself
// survives: systemd 252 keeps its subscribers' names across the
// re-execution, checked in the systemd test container). A unit event
// that finds the channel full is dropped: the caller re-lists its slices
// when it sees Overflowed. ReloadFinished waits for room instead (until
// Close): a caller that holds its units during a reload must learn that
// it ended; except from a user's manager, which must never hold the
// goroutine: there it is dropped as the others are, and the caller's
// listing after Overflowed ends the reload's hold.
func (m *Manager) Events(ctx context.Context) (<-chan UnitEvent, error) {
	var err error
	m.once.Do(func() {
		if err = m.sig.Object(managerName, managerPath).CallWithContext(ctx, managerInterface+".Subscribe", 0).Err; err != nil {
			err = fmt.Errorf("%s manager: Subscribe: %w", m, err)
			return
		}
		go func() {
			defer close(m.events)
			for s := range m.sigs {
				if m.owner != nil && (m.owner.Observe(s) || !m.owner.Sent(s)) {
					continue // an owner change, or not the manager's
				}
				// UnitNew/UnitRemoved (s id, o path); JobRemoved (u id,
				// o job, s unit, s result).
				ev := UnitEvent{UID: m.UID}
				arg := 0
				switch s.Name {
				case managerInterface + ".UnitNew":
					ev.Kind = UnitLoaded
				case managerInterface + ".UnitRemoved":
					ev.Kind = UnitDropped
				case managerInterface + ".JobRemoved":
					ev.Kind, arg = JobFinished, 2
				case managerInterface + ".Reloading":
					// Reloading (b active).
					active, ok := false, len(s.Body) == 1
					if ok {
						active, ok = s.Body[0].(bool)
					}
					if !ok {
						continue
					}
					ev.Kind, arg = ReloadFinished, -1
					if active {
						ev.Kind = ReloadStarted
					}
				default:
					continue
				}
				if arg >= 0 {
					if len(s.Body) <= arg {
						continue
					}
					name, ok := s.Body[arg].(string)
					if !ok {
						continue
					}
					if err := CheckUnitName(name); err != nil {
						m.refuse(&InvalidError{Manager: m.String(), Unit: cutName(name), Field: "unit name in " + s.Name[len(managerInterface)+1:], Why: err.Error()})
						continue
					}
					ev.Name = name
				}
				if ev.Kind == ReloadFinished && !m.untrusted {
					select {
					case m.events <- ev:
					case <-m.closed:
					}
					continue
				}
				select {
				case m.events <- ev:
				default:
					m.overflow.Store(true)
				}
			}
		}()
	})
	if err != nil {
		return nil, err
	}
	return m.events, nil
}

// Overflowed reports whether an event was dropped (the channel was full)
// since the last call, and clears it; the caller then re-lists what it
// follows.
func (m *Manager) Overflowed() bool {
	o := m.overflow.Swap(false)
	if m.sigDropped != nil && m.sigDropped.Swap(false) {
		o = true
	}
	return o
}

// unitInterfaces maps a unit's suffix to the D-Bus interface that carries
// its cgroup properties.
var unitInterfaces = map[string]string{".service": "Service", ".scope": "Scope", ".slice": "Slice", ".socket": "Socket", ".mount": "Mount", ".swap": "Swap"}

// UnitType is "Service", "Scope" or "Slice" (the interface of name's
// cgroup properties), "" for a unit that has no cgroup.
func UnitType(name string) string {
	i := strings.LastIndexByte(name, '.')
	if i < 0 {
		return ""
	}
	return unitInterfaces[name[i:]]
}

// UnitInfo reads unit name's properties; a unit systemd does not know has
// LoadState "not-found". Errors: no such unit
// (org.freedesktop.systemd1.NoSuchUnit, or a unit of a type without a
// cgroup), or the call failed.
func (m *Manager) UnitInfo(ctx context.Context, name string) (UnitInfo, error) {
	typ := UnitType(name)
	if typ == "" {
		return UnitInfo{}, fmt.Errorf("%s manager: %s: not a unit with a cgroup", m, name)
	}
	u := UnitInfo{Name: name}
	base, err := m.conn.GetUnitPropertiesContext(ctx, name)
	if err != nil {
		return UnitInfo{}, fmt.Errorf("%s manager: %s: %w", m, name, err)
	}
	u.ActiveState, _ = base["ActiveState"].(string)
	u.LoadState, _ = base["LoadState"].(string)
	props, err := m.conn.GetUnitTypePropertiesContext(ctx, name, typ)
	if err != nil {
		return UnitInfo{}, fmt.Errorf("%s manager: %s: %w", m, name, err)
	}
	u.Slice, _ = props["Slice"].(string)
	u.ControlGroup, _ = props["ControlGroup"].(string)
	for _, mask := range []struct {
		prop string
		to   *[]int
	}{{"AllowedCPUs", &u.AllowedCPUs}, {"EffectiveCPUs", &u.EffectiveCPUs}} {
		if b, ok := props[mask.prop].([]byte); ok {
			cpus, err := DecodeCPUMask(b, m.MaxCPUs)
			if err != nil {
				return UnitInfo{}, m.refuse(&InvalidError{Manager: m.String(), Unit: cutName(name), Field: mask.prop, Why: err.Error()})
			}
			*mask.to = cpus
		}
	}
	u.Delegate, _ = props["Delegate"].(bool)
	u.DelegateControllers, _ = props["DelegateControllers"].([]string)
	u.DropInPaths, _ = base["DropInPaths"].([]string)
	if pid, ok := props["MainPID"].(uint32); ok {
		u.MainPID = int(pid)
	}
	if err := checkInfo(m.String(), &u); err != nil {
		return UnitInfo{}, m.refuse(err)
	}
	return u, nil
}

// refuse notes an invalid answer for TakeRefused and returns it.
func (m *Manager) refuse(err error) error {
	m.refusedMu.Lock()
	defer m.refusedMu.Unlock()
	if len(m.refused) < maxRefused {
		m.refused = append(m.refused, err)
	} else {
		m.dropped++
	}
	return err
}

// TakeRefused returns the invalid answers (each an *InvalidError) the
// manager sent since the last call, at most 32, and how many more there
// were; the caller says so (the units placement, once per unit and
// manager). Units, UnitInfo and Events refuse such answers: the unit is
// left out, or the call fails with the *InvalidError.
func (m *Manager) TakeRefused() (errs []error, more int) {
	m.refusedMu.Lock()
	defer m.refusedMu.Unlock()
	errs, more = m.refused, m.dropped
	m.refused, m.dropped = nil, 0
	return errs, more
}

// DropInPaths reads unit name's DropInPaths alone (UnitInfo.DropInPaths):
// after SetAllowedCPUs, it names the file the manager wrote the value to.
// Errors: as UnitInfo.
func (m *Manager) DropInPaths(ctx context.Context, name string) ([]string, error) {
	p, err := m.conn.GetUnitPropertyContext(ctx, name, "DropInPaths")
	if err != nil {
		return nil, fmt.Errorf("%s manager: %s: DropInPaths: %w", m, name, err)
	}
	paths, _ := p.Value.Value().([]string)
	return paths, nil
}

// LoadedUnitInfo is UnitInfo for a unit the manager has loaded now, and
// never loads one: it asks GetUnit first, which answers NoSuchUnit for a
// unit not in memory, where reading properties would load it. Following
// signals with UnitInfo alone can loop: reading a unit that was just
// garbage-collected loads it again (UnitNew), and a reader slower than
// the collector reads it again. Errors: as UnitInfo, and
// org.freedesktop.systemd1.NoSuchUnit for a unit not loaded.
func (m *Manager) LoadedUnitInfo(ctx context.Context, name string) (UnitInfo, error) {
	var path dbus.ObjectPath
	if err := m.sig.Object(managerName, managerPath).CallWithContext(ctx, managerInterface+".GetUnit", 0, name).Store(&path); err != nil {
		return UnitInfo{}, fmt.Errorf("%s manager: %s: %w", m, name, err)
	}
	return m.UnitInfo(ctx, name)
}

// SliceUnits lists the services and scopes loaded in slice (its direct
// children; slices below it are not listed), with their properties. A
// unit that goes away while being read is left out.
func (m *Manager) SliceUnits(ctx context.Context, slice string) ([]UnitInfo, error) {
	all, err := m.Units(ctx, "*.service", "*.scope")
	if err != nil {
		return nil, err
	}
	var out []UnitInfo
	for _, u := range all {
		if u.Slice == slice {
			out = append(out, u)
		}
	}
	return out, nil
}

// unitReaders bounds the property reads Units has under way at once: a
// manager answers them one after another, but with several sent its
// answers need not wait for our next request (under emulation or on a
// busy machine the round trips, not the manager's work, are what cost).
const unitReaders = 8

// Units lists the loaded units whose names match one of the shell-style
// patterns ("user@*.service"), with their properties, sorted by name. A
// unit that goes away while being read is left out, and so is one with a
// value systemd cannot send (TakeRefused has it). Errors: the listing
// failed, or named more than MaxUnits units (no units), or reading a
// unit's properties failed, ctx's
// deadline included: then the units read by then come with the error,
// still sorted, and the others are missing.
func (m *Manager) Units(ctx context.Context, patterns ...string) ([]UnitInfo, error) {
	all, err := m.conn.ListUnitsByPatternsContext(ctx, nil, patterns)
	if err != nil {
		return nil, fmt.Errorf("%s manager: ListUnitsByPatterns: %w", m, err)
	}
	maxUnits := m.MaxUnits
	if maxUnits <= 0 {
		maxUnits = DefaultMaxUnits
	}
	if len(all) > maxUnits {
		return nil, m.refuse(&InvalidError{Manager: m.String(), Field: "ListUnitsByPatterns answer", Why: fmt.Sprintf("%d units, at most %d", len(all), maxUnits)})
	}
	var names []string
	seen := map[string]bool{}
	for _, s := range all {
		if s.LoadState != "loaded" || seen[s.Name] {
			continue
		}
		if err := CheckUnitName(s.Name); err != nil {
			m.refuse(&InvalidError{Manager: m.String(), Unit: cutName(s.Name), Field: "unit name", Why: err.Error()})
			continue
		}
		seen[s.Name] = true
		names = append(names, s.Name)
	}
	infos := make([]UnitInfo, len(names))
	errs := make([]error, len(names))
	next := make(chan int)
	var wg sync.WaitGroup
	for w := 0; w < min(unitReaders, len(names)); w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				u, err := m.UnitInfo(ctx, names[i])
				var e dbus.Error
				switch {
				case err == nil:
					infos[i] = u
				case errors.As(err, &e) && e.Name == "org.freedesktop.systemd1.NoSuchUnit":
				case errors.Is(err, ErrInvalid): // left out (TakeRefused)
				default:
					errs[i] = err
				}
			}
		}()
	}
	for i := range names {
		if ctx.Err() != nil {
			errs[i] = fmt.Errorf("%s manager: %s: %w", m, names[i], ctx.Err())
			continue
		}
		next <- i
	}
	close(next)
	wg.Wait()
	var out []UnitInfo
	for i := range names {
		if infos[i].Name != "" { // read (a unit gone meanwhile is not)
			out = append(out, infos[i])
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	for _, err := range errs {
		if err != nil {
			return out, err
		}
	}
	return out, nil
}

// SetAllowedCPUs sets unit name's AllowedCPUs= at runtime only
// (SetUnitProperties with runtime=true, as `systemctl set-property
// --runtime`): the unit file and its drop-ins are untouched, and a reboot
// forgets it. cpus nil or empty resets it (AllowedCPUs= empty: no
// restriction of the unit's own). On cgroup v2 systemd writes the unit's
// cpuset.cpus; on v1 it stores the value without applying it.
func (m *Manager) SetAllowedCPUs(ctx context.Context, name string, cpus []int) error {
	p := sd.Property{Name: "AllowedCPUs", Value: dbus.MakeVariant(EncodeCPUMask(cpus))}
	if err := m.conn.SetUnitPropertiesContext(ctx, name, true, p); err != nil {
		return fmt.Errorf("%s manager: set AllowedCPUs=%s on %s: %w", m, FormatCPUList(cpus), name, err)
	}
	return nil
}

// StartScope starts transient scope name in slice with the processes pids
// (StartTransientUnit, mode "fail", as `systemd-run --scope --slice=`),
// and waits until its start job is over and the scope is active. systemd
// removes the scope when its last process exits. Errors: the name is
// taken (org.freedesktop.systemd1.UnitExists), a PID is not there or not
// the manager's to move, the scope is not active once its job is over, or
// ctx ended first.
func (m *Manager) StartScope(ctx context.Context, name, slice, description string, pids ...uint32) error {
	props := []sd.Property{
		sd.PropDescription(description),
		sd.PropSlice(slice),
		sd.PropPids(pids...),
	}
	// No job channel: go-systemd completes it from any JobRemoved its
	// connection receives, whoever sent it. The job is watched through
	// calls instead, whose answers only the manager can give.
	id, err := m.conn.StartTransientUnitContext(ctx, name, "fail", props, nil)
	if err != nil {
		return fmt.Errorf("%s manager: start %s in %s: %w", m, name, slice, err)
	}
	if err := m.waitJob(ctx, id); err != nil {
		return fmt.Errorf("%s manager: start %s in %s: %w", m, name, slice, err)
	}
	u, err := m.UnitInfo(ctx, name)
	if err != nil {
		return fmt.Errorf("%s manager: start %s in %s: %w", m, name, slice, err)
	}
	if u.ActiveState != "active" {
		return fmt.Errorf("%s manager: start %s in %s: the scope is %s after its start job", m, name, slice, u.ActiveState)
	}
	return nil
}

// waitJob returns once job id is over (the manager no longer has its
// object), asking every 5 to 100 ms; an error when ctx ends first or the
// manager answers otherwise.
func (m *Manager) waitJob(ctx context.Context, id int) error {
	path := dbus.ObjectPath(string(managerPath) + "/job/" + strconv.Itoa(id))
	wait := 5 * time.Millisecond
	for {
		err := m.sig.Object(managerName, path).CallWithContext(ctx, "org.freedesktop.DBus.Properties.Get", 0,
			"org.freedesktop.systemd1.Job", "State").Err
		var de dbus.Error
		if errors.As(err, &de) && (de.Name == "org.freedesktop.DBus.Error.UnknownObject" || de.Name == "org.freedesktop.systemd1.NoSuchJob") {
			return nil
		}
		if err != nil {
			return fmt.Errorf("job %d: %w", id, err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("job %d: %w", id, ctx.Err())
		case <-time.After(wait):
		}
		wait = min(2*wait, 100*time.Millisecond)
	}
}

// EncodeCPUMask encodes CPU numbers as systemd's AllowedCPUs= byte array
// (D-Bus "ay"): bit n%8 of byte n/8 is CPU n, as long as the highest CPU
// needs (systemd's cpu_set_to_dbus). Negative numbers are ignored; nil
// or empty gives an empty array (unset).
func EncodeCPUMask(cpus []int) []byte {
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

// FormatCPUList writes sorted CPU numbers in the kernel's cpulist syntax,
// "0-3,8" ("" for none), as systemctl shows AllowedCPUs.
func FormatCPUList(cpus []int) string {
	c := append([]int(nil), cpus...)
	sort.Ints(c)
	var b strings.Builder
	for i := 0; i < len(c); {
		j := i
		for j+1 < len(c) && c[j+1] <= c[j]+1 {
			j++
		}
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(c[i]))
		if c[j] != c[i] {
			b.WriteByte('-')
			b.WriteString(strconv.Itoa(c[j]))
		}
		i = j + 1
	}
	return b.String()
}
