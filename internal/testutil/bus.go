package testutil

import (
	"bufio"
	"bytes"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/godbus/dbus/v5"
)

// BusOptions say how a private dbus-daemon is configured. Whatever they
// say, every connection may send to any destination and eavesdrop, and
// authenticates with EXTERNAL (its uid); it may own any name but those in
// DenyOwn.
type BusOptions struct {
	// System makes the bus system-like (<type>system</type>), for code
	// that expects the system bus; otherwise it is session-like.
	System bool
	// AnyUser lets every uid connect (<allow user="*"/>), for clients run
	// as another user or services that drop privileges (polkitd). StartBus
	// then also puts the socket in a directory others may enter, outside
	// t.TempDir (whose parent only the test's user may enter), and
	// StartBusProcess makes Dir searchable by all (0755).
	AnyUser bool
	// Dir holds the configuration (Name + ".conf") and the socket (Name).
	// Empty: StartBus makes a new temporary directory (StartBusProcess
	// needs one). A bus started again in the same Dir with the same Name
	// has the same address, for tests of a bus that goes away and comes
	// back; a socket left behind by a killed bus is removed first.
	Dir string
	// Name is the socket's file name in Dir; empty means "bus".
	Name string
	// Binary is the dbus-daemon to run; empty means "dbus-daemon" on PATH.
	Binary string
	// Stderr receives dbus-daemon's standard error. Nil: it is kept and
	// quoted in the error when the bus does not start.
	Stderr io.Writer
	// DenyOwn are names nobody may own (<deny own="..."/>): RequestName
	// fails with org.freedesktop.DBus.Error.AccessDenied, as on a system
	// bus without the service's policy file.
	DenyOwn []string
	// ServiceDir, if set, is a directory of activation files
	// (<servicedir>): a call to a name one of them declares starts its
	// Exec= unless the caller sets NO_AUTO_START. Only on a session-like
	// bus (System false; a system bus needs a setuid helper).
	ServiceDir string
}

// Bus is a running private dbus-daemon.
type Bus struct {
	// Addr is the bus's address, "unix:path=" + Socket, without the
	// server's guid, so it also reaches a bus started again at Socket.
	Addr string
	// Socket is the path of the listening socket.
	Socket string
	// Config is the path of its configuration file (see Reload).
	Config string
	// Cmd is the dbus-daemon process.
	Cmd *exec.Cmd

	waitOnce sync.Once
}

// busStartBound bounds the wait for dbus-daemon to print its address.
const busStartBound = 30 * time.Second

// BusConfig returns a dbus-daemon configuration listening on the unix
// socket sock, as BusOptions describe (System, AnyUser, DenyOwn and
// ServiceDir count). Names are XML-escaped.
func BusConfig(o BusOptions, sock string) string {
	kind, users, deny, services := "session", "", "", ""
	if o.System {
		kind = "system"
	}
	if o.AnyUser {
		users = "\n    <allow user=\"*\"/>"
	}
	for _, n := range o.DenyOwn {
		deny += "\n    <deny own=\"" + xmlEscape(n) + "\"/>"
	}
	if o.ServiceDir != "" {
		services = "\n  <servicedir>" + xmlEscape(o.ServiceDir) + "</servicedir>"
	}
	return `<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>` + kind + `</type>
  <listen>unix:path=` + EscapeAddressValue(sock) + `</listen>
  <auth>EXTERNAL</auth>` + services + `
  <policy context="default">` + users + `
    <allow send_destination="*" eavesdrop="true"/>
    <allow eavesdrop="true"/>
    <allow own="*"/>` + deny + `
  </policy>
</busconfig>
`
}

func xmlEscape(s string) string {
	var b strings.Builder
	xml.EscapeText(&b, []byte(s))
	return b.String()
}

// Reload has the bus read its configuration file again (SIGHUP), after a
// test rewrote it with BusConfig, e.g. without DenyOwn. dbus-daemon
// reloads asynchronously: wait for what the change allows.
func (b *Bus) Reload() error {
	return b.Cmd.Process.Signal(syscall.SIGHUP)
}

// StartBusProcess writes the configuration into o.Dir, starts dbus-daemon
// and returns once it listens (it has printed its address), for programs
// without a testing.T. Stopping it is the caller's job (Bus.Stop or
// Bus.Kill). It returns an error when o.Dir is empty or cannot be written,
// when dbus-daemon cannot be started, or when it prints no address within
// 30 s (it is killed then, and its standard error quoted unless o.Stderr
// took it).
func StartBusProcess(o BusOptions) (*Bus, error) {
	if o.Dir == "" {
		return nil, errors.New("testutil: BusOptions.Dir is empty")
	}
	name, bin := o.Name, o.Binary
	if name == "" {
		name = "bus"
	}
	if bin == "" {
		bin = "dbus-daemon"
	}
	sock := filepath.Join(o.Dir, name)
	conf := filepath.Join(o.Dir, name+".conf")
	if err := os.WriteFile(conf, []byte(BusConfig(o, sock)), 0o644); err != nil {
		return nil, err
	}
	if o.AnyUser {
		if err := os.Chmod(o.Dir, 0o755); err != nil {
			return nil, err
		}
	}
	if err := os.Remove(sock); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, err // a killed bus leaves its socket behind
	}
	return startBusConfig(conf, sock, bin, o.Stderr)
}

// startBusConfig runs dbus-daemon bin with the configuration file conf,
// which listens on sock, and returns once it has printed its address
// (standard error to stderr; nil: kept for the error).
func startBusConfig(conf, sock, bin string, stderrTo io.Writer) (*Bus, error) {
	cmd := exec.Command(bin, "--nofork", "--print-address=1", "--config-file="+conf)
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	var stderr bytes.Buffer
	cmd.Stderr = stderrTo
	if stderrTo == nil {
		cmd.Stderr = &stderr
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("%s: %w", bin, err)
	}
	b := &Bus{Addr: "unix:path=" + EscapeAddressValue(sock), Socket: sock, Config: conf, Cmd: cmd}
	line := make(chan error, 1)
	go func() {
		_, err := bufio.NewReader(out).ReadString('\n')
		line <- err
	}()
	select {
	case err = <-line:
	case <-time.After(busStartBound):
		err = fmt.Errorf("no address within %v", busStartBound)
	}
	if err != nil {
		b.Kill()
		return nil, fmt.Errorf("%s did not start: %v %s", bin, err, strings.TrimSpace(stderr.String()))
	}
	return b, nil
}

// NeedBusDaemon skips t unless dbus-daemon (Debian package dbus) is on
// PATH.
func NeedBusDaemon(t testing.TB) {
	t.Helper()
	needBinary(t, "dbus-daemon")
}

func needBinary(t testing.TB, bin string) {
	t.Helper()
	if _, err := exec.LookPath(bin); err != nil {
		t.Skipf("needs %s (Debian package dbus) for a private bus: %v", bin, err)
	}
}

// StartBus starts a private dbus-daemon configured as o says and returns
// once it listens; the test's cleanup kills it. It skips t when the
// dbus-daemon binary is missing and fails t when the bus does not start
// (see StartBusProcess). With o.AnyUser and no o.Dir the directory is made
// with os.MkdirTemp (mode 0755) and removed at cleanup.
func StartBus(t testing.TB, o BusOptions) *Bus {
	t.Helper()
	bin := o.Binary
	if bin == "" {
		bin = "dbus-daemon"
	}
	needBinary(t, bin)
	if o.Dir == "" && o.AnyUser {
		dir, err := os.MkdirTemp("", "testutil-bus-")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(dir) })
		o.Dir = dir
	} else if o.Dir == "" {
		o.Dir = t.TempDir()
	}
	b, err := StartBusProcess(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Kill)
	return b
}

// Stop ends the bus with SIGTERM and waits for it, so it removes its
// socket. Stopping a bus that has already ended does nothing.
func (b *Bus) Stop() {
	b.Cmd.Process.Signal(syscall.SIGTERM)
	b.wait()
}

// Kill ends the bus with SIGKILL and waits for it: a crash, which leaves
// the socket behind. Killing a bus that has already ended does nothing.
func (b *Bus) Kill() {
	b.Cmd.Process.Kill()
	b.wait()
}

func (b *Bus) wait() {
	b.waitOnce.Do(func() { b.Cmd.Wait() })
}

// NameOwned reports whether name has an owner on conn's bus, with a
// description of what was seen for WaitFor's message (the error, or that
// there is no owner).
func NameOwned(conn *dbus.Conn, name string) (bool, string) {
	var has bool
	err := conn.BusObject().Call("org.freedesktop.DBus.NameHasOwner", 0, name).Store(&has)
	switch {
	case err != nil:
		return false, err.Error()
	case !has:
		return false, name + " has no owner"
	}
	return true, ""
}

// Connect is a connection of the test's own to the bus at addr
// (authenticated, Hello done), closed at cleanup; it fails t when the bus
// does not take it.
func Connect(t testing.TB, addr string) *dbus.Conn {
	t.Helper()
	c, err := dbus.Connect(addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// NameOwnedAt is NameOwned on a new connection to addr, closed before it
// returns, for a bus that may go away between two polls; a failure to
// connect is reported as not owned.
func NameOwnedAt(addr, name string) (bool, string) {
	conn, err := dbus.Connect(addr)
	if err != nil {
		return false, err.Error()
	}
	defer conn.Close()
	return NameOwned(conn, name)
}

// EscapeAddressValue escapes v for a D-Bus address: every byte outside
// [-0-9A-Za-z_/.\\*] as %XX (D-Bus specification, "Server Addresses"), so a
// socket under a test directory named after a sub-test ("held=16") works.
func EscapeAddressValue(v string) string {
	const hex = "0123456789abcdef"
	var b strings.Builder
	for i := 0; i < len(v); i++ {
		c := v[i]
		if c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || strings.IndexByte("-_/.\\*", c) >= 0 {
			b.WriteByte(c)
			continue
		}
		b.WriteByte('%')
		b.WriteByte(hex[c>>4])
		b.WriteByte(hex[c&15])
	}
	return b.String()
}
