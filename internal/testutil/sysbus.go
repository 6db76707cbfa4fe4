package testutil

import (
	"bytes"
	"encoding/xml"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/godbus/dbus/v5"
)

// SystemConf is the system bus's own configuration (Debian package dbus).
const SystemConf = "/usr/share/dbus-1/system.conf"

// systemPolicyDirs are the directories the system bus reads service
// policies from (system.conf's <includedir>s).
var systemPolicyDirs = []string{"/usr/share/dbus-1/system.d", "/etc/dbus-1/system.d"}

// StartSystemPolicyBus starts a private dbus-daemon that enforces the
// system bus's own policy: the <policy> and <limit> elements of
// SystemConf, every service policy installed in /usr/share/dbus-1/system.d
// and /etc/dbus-1/system.d (systemd1, login1, PolicyKit1, UPower, … as the
// machine has them), then each file of extra (the package's own policy,
// say). Only its address differs from the system bus: its own socket, in a
// directory every uid may enter, so that what an unprivileged connection
// (DialAs) may do here it may do on a real system bus, and nothing more.
// It skips t without dbus-daemon or SystemConf, and fails t when the bus
// does not start.
func StartSystemPolicyBus(t testing.TB, extra ...string) *Bus {
	t.Helper()
	needBinary(t, "dbus-daemon")
	policy, err := systemPolicy(SystemConf)
	if errors.Is(err, os.ErrNotExist) {
		t.Skipf("needs %s (Debian package dbus) for the system bus's policy", SystemConf)
	}
	if err != nil {
		t.Fatalf("reading the system bus's policy: %v", err)
	}
	dir, err := os.MkdirTemp("", "testutil-sysbus-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "bus")
	var includes bytes.Buffer
	for _, d := range systemPolicyDirs {
		includes.WriteString("  <includedir>" + xmlEscape(d) + "</includedir>\n")
	}
	for _, f := range extra {
		abs, err := filepath.Abs(f)
		if err != nil {
			t.Fatal(err)
		}
		includes.WriteString("  <include>" + xmlEscape(abs) + "</include>\n")
	}
	conf := filepath.Join(dir, "bus.conf")
	WriteFile(t, conf, `<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>system</type>
  <listen>unix:path=`+EscapeAddressValue(sock)+`</listen>
  <auth>EXTERNAL</auth>
`+policy+includes.String()+`</busconfig>
`)
	b, err := startBusConfig(conf, sock, "dbus-daemon", nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Kill)
	return b
}

// systemPolicy returns the <policy> and <limit> elements of the bus
// configuration file conf, verbatim, in their order; everything else
// (listen address, user, fork, pid file, service helper, includes) stays
// behind.
func systemPolicy(conf string) (string, error) {
	data, err := os.ReadFile(conf)
	if err != nil {
		return "", err
	}
	dec := xml.NewDecoder(bytes.NewReader(data))
	dec.Strict = false
	var out bytes.Buffer
	depth, start := 0, int64(-1)
	for {
		off := dec.InputOffset()
		tok, err := dec.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			return "", err
		}
		switch tok := tok.(type) {
		case xml.StartElement:
			depth++
			if depth == 2 && (tok.Name.Local == "policy" || tok.Name.Local == "limit") {
				start = off
			}
		case xml.EndElement:
			if depth == 2 && start >= 0 {
				out.WriteString("  ")
				out.Write(data[start:dec.InputOffset()])
				out.WriteString("\n")
				start = -1
			}
			depth--
		}
	}
	if out.Len() == 0 {
		return "", errors.New(conf + " has no <policy> element")
	}
	return out.String(), nil
}

// DialAs connects to the bus at addr as uid (and gid uid, no supplementary
// groups), authenticated with EXTERNAL and registered (Hello), from this
// process: the socket is connected on a thread of its own whose
// credentials alone are changed, so the bus daemon's SO_PEERCRED sees uid,
// and that thread ends with the call. The test's cleanup closes the
// connection. It skips t unless the test runs as root.
func DialAs(t testing.TB, addr string, uid int) *dbus.Conn {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to connect to the bus as another uid")
	}
	var conn *dbus.Conn
	err := AsUID(uid, func() error {
		c, err := dbus.Dial(addr)
		if err != nil {
			return err
		}
		if err := c.Auth([]dbus.Auth{dbus.AuthExternal(strconv.Itoa(uid))}); err != nil {
			c.Close()
			return err
		}
		if err := c.Hello(); err != nil {
			c.Close()
			return err
		}
		conn = c
		return nil
	})
	if err != nil {
		t.Fatalf("connecting to %s as uid %d: %v", addr, uid, err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// UID reports the uid the bus daemon at conn's other end credits the
// connection with unique (GetConnectionUnixUser), failing t on error.
func UID(t testing.TB, conn *dbus.Conn, unique string) uint32 {
	t.Helper()
	var uid uint32
	if err := conn.BusObject().Call("org.freedesktop.DBus.GetConnectionUnixUser", 0, unique).Store(&uid); err != nil {
		t.Fatalf("GetConnectionUnixUser %s: %v", unique, err)
	}
	return uid
}

// Barrier returns once the bus daemon has routed every message conn sent
// before it (a round trip to the bus daemon, which handles a connection's
// messages in order): a signal sent before it is then queued to its
// destinations ahead of anything the bus sends them afterwards.
func Barrier(t testing.TB, conn *dbus.Conn) {
	t.Helper()
	var id string
	if err := conn.BusObject().Call("org.freedesktop.DBus.GetId", 0).Store(&id); err != nil {
		t.Fatalf("GetId: %v", err)
	}
}

// SendSignal sends the signal name ("interface.member") on path with body
// from conn: to dest alone (unicast) unless dest is "", then as a
// broadcast. The bus daemon routes it before SendSignal returns
// (Barrier). It fails t when conn cannot send it or the bus refuses it.
func SendSignal(t testing.TB, conn *dbus.Conn, dest string, path dbus.ObjectPath, name string, body ...any) {
	t.Helper()
	i := strings.LastIndexByte(name, '.')
	if i <= 0 {
		t.Fatalf("signal name %q is not interface.member", name)
	}
	h := map[dbus.HeaderField]dbus.Variant{
		dbus.FieldPath:      dbus.MakeVariant(path),
		dbus.FieldInterface: dbus.MakeVariant(name[:i]),
		dbus.FieldMember:    dbus.MakeVariant(name[i+1:]),
	}
	if dest != "" {
		h[dbus.FieldDestination] = dbus.MakeVariant(dest)
	}
	if len(body) > 0 {
		h[dbus.FieldSignature] = dbus.MakeVariant(dbus.SignatureOf(body...))
	}
	if call := conn.Send(&dbus.Message{Type: dbus.TypeSignal, Headers: h, Body: body}, nil); call.Err != nil {
		t.Fatalf("sending %s: %v", name, call.Err)
	}
	Barrier(t, conn)
}

// Peers lists the unique names of the connections on conn's bus other
// than conn itself and those in except: the connections of the code under
// test, to which a test sends unicast signals.
func Peers(t testing.TB, conn *dbus.Conn, except ...string) []string {
	t.Helper()
	var names []string
	if err := conn.BusObject().Call("org.freedesktop.DBus.ListNames", 0).Store(&names); err != nil {
		t.Fatalf("ListNames: %v", err)
	}
	skip := map[string]bool{conn.Names()[0]: true}
	for _, e := range except {
		skip[e] = true
	}
	var out []string
	for _, n := range names {
		if strings.HasPrefix(n, ":") && !skip[n] {
			out = append(out, n)
		}
	}
	return out
}
