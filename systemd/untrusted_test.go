package systemd

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/godbus/dbus/v5"

	"github.com/schedpolicyd/schedpolicyd/internal/testutil"
)

// A user's manager is whatever the user runs on /run/user/UID/systemd/
// private: these tests serve one (testutil.FakeManager) on a socket in a
// directory owned by uid 4242, listened on as that uid, as a hostile user
// would, and check what ConnectUser and the Manager make of it.

const hostileUID = 4242

// hostBound is a hang guard: a test that fails waits no longer. It is not
// a speed claim; the deadlines under test are far shorter.
const hostBound = time.Minute

// serveUser serves f as uid hostileUID's manager below a temporary
// runtime directory and returns the socket.
func serveUser(t *testing.T, f *testutil.FakeManager) string {
	t.Helper()
	return f.ServeUser(filepath.Join(t.TempDir(), "user", "4242"), hostileUID)
}

// TestConnectUserSilent: a socket that accepts and never says anything
// (not even SASL) fails ConnectUser with ctx's deadline instead of
// blocking for good, as godbus's Auth does without one.
func TestConnectUserSilent(t *testing.T) {
	f := testutil.NewFakeManager(t)
	f.SetSilent(true)
	sock := serveUser(t, f)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	m, err := ConnectUser(ctx, hostileUID, UserOptions{Socket: sock, PeerPID: os.Getpid()})
	if err == nil {
		m.Close()
		t.Fatal("connected to a socket that never answered")
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("error %v, want the deadline's", err)
	}
	if f.Accepted() == 0 {
		t.Fatal("the socket accepted no connection: the test tested nothing")
	}
}

// TestConnectUserNoAddMatch: a manager that authenticates and answers
// pings but never answers go-systemd's AddMatch (which takes no
// context) fails ConnectUser with ctx's deadline.
func TestConnectUserNoAddMatch(t *testing.T) {
	f := testutil.NewFakeManager(t)
	f.Hold("AddMatch", true)
	sock := serveUser(t, f)
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	m, err := ConnectUser(ctx, hostileUID, UserOptions{Socket: sock})
	if err == nil {
		m.Close()
		t.Fatal("connected although AddMatch was never answered")
	}
	if !errors.Is(err, context.DeadlineExceeded) || f.Calls("AddMatch") == 0 {
		t.Fatalf("error %v after %d AddMatch calls, want the deadline's during AddMatch", err, f.Calls("AddMatch"))
	}
	// Released, the same manager is reached.
	f.Hold("AddMatch", false)
	ctx2, cancel2 := context.WithTimeout(context.Background(), hostBound)
	defer cancel2()
	m, err = ConnectUser(ctx2, hostileUID, UserOptions{Socket: sock, PeerPID: os.Getpid()})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if v, err := m.Version(ctx2); err != nil || v != "252-fake" {
		t.Fatalf("Version = %q, %v", v, err)
	}
}

// TestConnectUserPeer: the socket's listener must be the user (uid) and,
// when the system manager names one, user@UID.service's MainPID: a
// socket root listens on (a symlink to the system manager's private
// socket has that listener) and one of another PID are refused.
func TestConnectUserPeer(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to listen as another uid")
	}
	ctx, cancel := context.WithTimeout(context.Background(), hostBound)
	defer cancel()
	dir := t.TempDir()
	rootSock := filepath.Join(dir, "root.sock")
	ln, err := net.Listen("unix", rootSock)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if _, err := ConnectUser(ctx, hostileUID, UserOptions{Socket: rootSock}); !errors.Is(err, ErrNotUserManager) || !strings.Contains(err.Error(), "uid 0") {
		t.Fatalf("root's socket: %v, want ErrNotUserManager naming uid 0", err)
	}
	f := testutil.NewFakeManager(t)
	sock := serveUser(t, f)
	if _, err := ConnectUser(ctx, hostileUID, UserOptions{Socket: sock, PeerPID: os.Getpid() + 1}); !errors.Is(err, ErrNotUserManager) || !strings.Contains(err.Error(), "MainPID") {
		t.Fatalf("another PID: %v, want ErrNotUserManager naming MainPID", err)
	}
	if _, err := ConnectUser(ctx, hostileUID, UserOptions{Socket: filepath.Join(dir, "none")}); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("no socket: %v, want fs.ErrNotExist", err)
	}
}

// connectFake connects to f as uid hostileUID's manager, with masks
// bounded at 64 CPUs.
func connectFake(t *testing.T, f *testutil.FakeManager) (*Manager, context.Context) {
	t.Helper()
	sock := serveUser(t, f)
	ctx, cancel := context.WithTimeout(context.Background(), hostBound)
	t.Cleanup(cancel)
	m, err := ConnectUser(ctx, hostileUID, UserOptions{Socket: sock, PeerPID: os.Getpid(), MaxCPUs: 64})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	return m, ctx
}

// TestUserManagerMessageTooLarge: a message header announcing 100 MiB
// ends the connection at the header, before godbus allocates or waits
// for the body: the events channel closes and calls fail at once.
func TestUserManagerMessageTooLarge(t *testing.T) {
	f := testutil.NewFakeManager(t)
	m, ctx := connectFake(t, f)
	events, err := m.Events(ctx)
	if err != nil {
		t.Fatal(err)
	}
	f.SendRaw(testutil.HeaderAnnouncing(100 << 20))
	for {
		select {
		case _, ok := <-events:
			if ok {
				continue
			}
		case <-ctx.Done():
			t.Fatal("the connection stayed open after a 100 MiB announcement")
		}
		break
	}
	if _, err := m.Units(ctx, "*.scope"); err == nil || errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Units after the connection closed: %v, want the closed connection's error", err)
	}
}

// TestUserManagerInvalidUnits: units whose properties systemd cannot have
// sent are left out of a listing and refused by UnitInfo, each reported
// once through TakeRefused: a ControlGroup that climbs out of the cgroup
// tree, a mask longer than the machine's CPUs need (2 MiB; 16 MiB is
// over MaxUserMessage and ends the connection), a CPU beyond them, a
// name that is not UTF-8, a name with a blank in it.
func TestUserManagerInvalidUnits(t *testing.T) {
	f := testutil.NewFakeManager(t)
	const cg = "/user.slice/user-4242.slice/user@4242.service/app.slice/"
	f.Put("good.scope", testutil.FakeUnit{Slice: "app.slice", ControlGroup: cg + "good.scope", Mask: []byte{3}})
	f.Put("evil.scope", testutil.FakeUnit{Slice: "app.slice", ControlGroup: "/../../run/user/4242/evil"})
	f.Put("bigmask.scope", testutil.FakeUnit{Slice: "app.slice", ControlGroup: cg + "bigmask.scope", Mask: make([]byte, 2<<20)})
	f.Put("farcpu.scope", testutil.FakeUnit{Slice: "app.slice", ControlGroup: cg + "farcpu.scope", Mask: []byte{0, 0, 0, 0, 0, 0, 0, 0, 1}})
	f.Put("caf\x7f.scope", testutil.FakeUnit{Slice: "app.slice", ControlGroup: cg + "cafe.scope"})
	f.Put("a b.scope", testutil.FakeUnit{Slice: "app.slice", ControlGroup: cg + "b.scope"})
	f.NotUTF8(true)
	m, ctx := connectFake(t, f)
	list, err := m.Units(ctx, "*.scope")
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 1 || list[0].Name != "good.scope" || len(list[0].AllowedCPUs) != 2 {
		t.Fatalf("listed %+v, want good.scope alone with CPUs 0-1", list)
	}
	errs, more := m.TakeRefused()
	var got []string
	for _, e := range errs {
		var ie *InvalidError
		if !errors.As(e, &ie) || ie.Manager != "user 4242" {
			t.Fatalf("refusal %v is not an *InvalidError of user 4242", e)
		}
		got = append(got, ie.Field)
	}
	// The two names at the listing, then the properties read.
	sort.Strings(got)
	if want := "AllowedCPUs,AllowedCPUs,ControlGroup,unit name,unit name"; strings.Join(got, ",") != want || more != 0 {
		t.Fatalf("refused fields %q (+%d), want %s", got, more, want)
	}
	if _, err := m.UnitInfo(ctx, "evil.scope"); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "ControlGroup") {
		t.Fatalf("UnitInfo(evil.scope) = %v, want the ControlGroup refused", err)
	}
}

// TestUserManagerEventNames: a signal naming a unit systemd could not
// have (not UTF-8, a path) is not an event; the next valid one is.
func TestUserManagerEventNames(t *testing.T) {
	f := testutil.NewFakeManager(t)
	m, ctx := connectFake(t, f)
	events, err := m.Events(ctx)
	if err != nil {
		t.Fatal(err)
	}
	f.NotUTF8(true)
	f.Emit("UnitNew", "caf\x7f.scope", dbus.ObjectPath("/org/freedesktop/systemd1/unit/x"))
	f.Emit("UnitNew", "../../etc/passwd.service", dbus.ObjectPath("/org/freedesktop/systemd1/unit/x"))
	f.NotUTF8(false)
	f.Emit("UnitNew", "app-ok.scope", dbus.ObjectPath("/org/freedesktop/systemd1/unit/app_2dok_2escope"))
	select {
	case ev := <-events:
		if ev.Name != "app-ok.scope" || ev.UID != hostileUID {
			t.Fatalf("event %+v, want app-ok.scope of user 4242", ev)
		}
	case <-ctx.Done():
		t.Fatal("no event")
	}
	if errs, _ := m.TakeRefused(); len(errs) != 2 {
		t.Fatalf("refused %v, want the two bad names", errs)
	}
}

// TestDecodeCPUMaskBounded: a mask is bounded by the machine's CPUs: at
// most MaskBytes(ncpus) bytes (systemd's CPU_ALLOC_SIZE: whole unsigned
// longs), no CPU beyond.
func TestDecodeCPUMaskBounded(t *testing.T) {
	for _, tc := range []struct {
		mask  []byte
		ncpus int
		want  string
		err   string
	}{
		{[]byte{0x0f}, 4, "0-3", ""},
		{[]byte{1, 0, 0, 0, 0, 0, 0, 0}, 2, "0", ""},
		{[]byte{0x1f}, 4, "", "CPU 4"},
		{make([]byte, 9), 64, "", "9 bytes, at most 8"},
		{make([]byte, 16<<20), 0, "", "at most 1024"},
		{nil, 8, "", ""},
	} {
		got, err := DecodeCPUMask(tc.mask, tc.ncpus)
		switch {
		case tc.err == "" && (err != nil || FormatCPUList(got) != tc.want):
			t.Errorf("DecodeCPUMask(%d bytes, %d) = %v, %v, want %s", len(tc.mask), tc.ncpus, got, err, tc.want)
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err) || got != nil):
			t.Errorf("DecodeCPUMask(%d bytes, %d) = %v, %v, want an error with %q", len(tc.mask), tc.ncpus, got, err, tc.err)
		}
	}
}

func TestCheckUnitName(t *testing.T) {
	for name, ok := range map[string]bool{
		"app-firefox-1234.scope": true, "user@1000.service": true, "getty@.service": true, "a\\x2db.service": true,
		"": false, "noext": false, ".service": false, "a.foo": false, "caf\xe9.scope": false, "café.scope": false,
		"a/b.service": false, "a b.service": false, "@x.service": false, "a@b@c.service": false,
		strings.Repeat("a", 248) + ".service": false, strings.Repeat("a", 247) + ".service": true,
	} {
		if err := CheckUnitName(name); (err == nil) != ok {
			t.Errorf("CheckUnitName(%q) = %v, want valid %v", name, err, ok)
		}
	}
	for cg, ok := range map[string]bool{
		"": true, "/": true, "/user.slice/user-1.slice": true,
		"/../x": false, "/a/./b": false, "a/b": false, "/a//b": false, "/a/": false, "/a\x00b": false, "/caf\xe9": false,
		"/" + strings.Repeat("a", 4094): true, "/" + strings.Repeat("a", 4095): false,
	} {
		if err := CheckControlGroup(cg); (err == nil) != ok {
			t.Errorf("CheckControlGroup(%q) = %v, want valid %v", cg, err, ok)
		}
	}
}

// TestLimitConnFraming steps the framing over a stream cut into
// arbitrary pieces: SASL lines up to the server's OK, then messages whose
// announced sizes are checked; a message over MaxUserMessage, a
// non-D-Bus byte where a header starts, and SASL over maxAuthBytes fail
// the read.
func TestLimitConnFraming(t *testing.T) {
	msg := func(fields, body uint32) []byte {
		h := make([]byte, 16)
		h[0], h[1], h[3] = 'l', 2, 1
		binary.LittleEndian.PutUint32(h[4:8], body)
		binary.LittleEndian.PutUint32(h[12:16], fields)
		pad := (int(fields) + 7) &^ 7
		return append(h, make([]byte, pad+int(body))...)
	}
	sasl := []byte("REJECTED EXTERNAL\r\nOK 0123456789abcdef0123456789abcdef\r\n")
	var stream bytes.Buffer
	stream.Write(msg(5, 3))
	stream.Write(msg(0, 0))
	stream.Write(msg(13, 1000))
	whole := stream.Bytes()
	fresh := func() *limitConn {
		return &limitConn{clock: func() time.Time { return time.Time{} }, sleep: func(time.Duration) {}, auth: true, rates: newRates()}
	}
	for _, piece := range []int{1, 3, 7, 16, 100, len(whole)} {
		c := fresh()
		// The SASL lines (the server's OK ends a read: it sends nothing
		// before the client's BEGIN), then the messages, each cut in pieces.
		for _, part := range [][]byte{sasl[:19], sasl[19:]} {
			if _, err := c.step(part); err != nil {
				t.Fatalf("SASL: %v", err)
			}
		}
		for i := 0; i < len(whole); i += piece {
			end := min(i+piece, len(whole))
			if _, err := c.step(whole[i:end]); err != nil {
				t.Fatalf("pieces of %d: %v", piece, err)
			}
		}
		if c.auth || c.hn != 0 || c.left != 0 {
			t.Fatalf("pieces of %d: ends in auth=%v, header %d, left %d; want at a message boundary", piece, c.auth, c.hn, c.left)
		}
	}
	call := msg(0, 0)
	call[1] = 1 // METHOD_CALL
	for what, tc := range map[string]struct {
		b    []byte
		want error
	}{
		"too large":          {msg(0, MaxUserMessage)[:16], ErrMessageTooLarge},
		"not D-Bus":          {[]byte{'x', 2, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}, ErrMessageTooLarge},
		"a method call":      {call, ErrUnexpectedMessage},
		"bytes after the OK": {nil, ErrUnexpectedMessage},
	} {
		c := fresh()
		if tc.b == nil {
			if _, err := c.step(append([]byte("OK 1\r\n"), msg(0, 0)...)); !errors.Is(err, tc.want) {
				t.Errorf("%s: %v, want %v", what, err, tc.want)
			}
			continue
		}
		if _, err := c.step([]byte("OK 1\r\n")); err != nil {
			t.Fatal(err)
		}
		if _, err := c.step(tc.b); !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", what, err, tc.want)
		}
	}
	for what, b := range map[string][]byte{
		"long SASL": bytes.Repeat([]byte("DATA\r\n"), maxAuthBytes/6+1),
		"long line": bytes.Repeat([]byte("x"), maxAuthBytes+1),
	} {
		if _, err := fresh().step(b); !errors.Is(err, ErrMessageTooLarge) {
			t.Errorf("%s: %v, want ErrMessageTooLarge", what, err)
		}
	}
}

// TestLimitConnRate: past the burst, messages are taken at
// userMessageRate per second and bytes at userByteRate, on an injected
// clock: 10,000 messages at one instant wait (10,000 − burst) / rate.
func TestLimitConnRate(t *testing.T) {
	now := time.Unix(1000, 0)
	var slept time.Duration
	c := &limitConn{clock: func() time.Time { return now }, sleep: func(d time.Duration) { slept += d; now = now.Add(d) }, auth: false, rates: newRates()}
	one := make([]byte, 16)
	one[0], one[1], one[3] = 'l', 4, 1
	for i := 0; i < 10000; i++ {
		if err := c.observe(one); err != nil {
			t.Fatal(err)
		}
	}
	want := time.Duration(float64(10000-userMessageBurst) / userMessageRate * float64(time.Second))
	if d := slept - want; d < -time.Millisecond || d > time.Millisecond {
		t.Fatalf("slept %v for 10000 messages, want %v", slept, want)
	}
	// Bytes: 64 MiB in 4 MiB reads, past the burst (MaxUserMessage) at
	// userByteRate.
	slept = 0
	c = &limitConn{clock: func() time.Time { return now }, sleep: func(d time.Duration) { slept += d; now = now.Add(d) }, auth: false, rates: newRates(), left: 1 << 40}
	chunk := make([]byte, 4<<20)
	for i := 0; i < 16; i++ {
		if err := c.observe(chunk); err != nil {
			t.Fatal(err)
		}
	}
	want = time.Duration(float64(64<<20-MaxUserMessage) / userByteRate * float64(time.Second))
	if d := slept - want; d < -time.Millisecond || d > time.Millisecond {
		t.Fatalf("slept %v for 64 MiB, want %v", slept, want)
	}
}

// TestUserManagerForgedBusSignal: a signal whose sender says it is the
// bus daemon (org.freedesktop.DBus NameLost without a body) is what
// godbus v5.2.4 reads unchecked, panicking its reader; from a user's
// manager the sender is removed before godbus looks, and the connection
// goes on.
func TestUserManagerForgedBusSignal(t *testing.T) {
	f := testutil.NewFakeManager(t)
	m, ctx := connectFake(t, f)
	events, err := m.Events(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, member := range []string{"NameLost", "NameAcquired"} {
		f.SendMessage(&dbus.Message{Type: dbus.TypeSignal, Headers: map[dbus.HeaderField]dbus.Variant{
			dbus.FieldPath: dbus.MakeVariant(dbus.ObjectPath("/org/freedesktop/DBus")), dbus.FieldInterface: dbus.MakeVariant("org.freedesktop.DBus"),
			dbus.FieldMember: dbus.MakeVariant(member), dbus.FieldSender: dbus.MakeVariant("org.freedesktop.DBus"),
		}})
	}
	f.Emit("UnitNew", "app-ok.scope", testutil.FakeUnitPath("app-ok.scope"))
	select {
	case ev := <-events:
		if ev.Name != "app-ok.scope" {
			t.Fatalf("event %+v", ev)
		}
	case <-ctx.Done():
		t.Fatal("no event after the forged signals")
	}
	if _, err := m.Version(ctx); err != nil {
		t.Fatalf("the connection did not survive: %v", err)
	}
}

// TestUserManagerMethodCalls: a manager never calls its client; one that
// does (a flood of calls would each get a godbus goroutine, blocked when
// the manager stops reading its socket) is cut off at the first call.
func TestUserManagerMethodCalls(t *testing.T) {
	f := testutil.NewFakeManager(t)
	m, ctx := connectFake(t, f)
	events, err := m.Events(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 100; i++ {
		f.SendMessage(&dbus.Message{Type: dbus.TypeMethodCall, Headers: map[dbus.HeaderField]dbus.Variant{
			dbus.FieldPath: dbus.MakeVariant(dbus.ObjectPath("/x")), dbus.FieldMember: dbus.MakeVariant("Poke"),
		}})
	}
	for range events {
	} // closed: the connection is gone
	// The fake (in this process too) has goroutines of its own sending;
	// what must not be there is godbus answering the calls on the
	// daemon's side, one goroutine each (handleCall).
	buf := make([]byte, 4<<20)
	if n := strings.Count(string(buf[:runtime.Stack(buf, true)]), "dbus/v5.(*Conn).handleCall("); n > 0 {
		t.Fatalf("%d goroutines answer the manager's calls", n)
	}
}

// TestUserManagerSignalFlood: 20,000 signals while nobody reads the
// events: the connection's signal handler drops what finds no room
// (Overflowed says so) instead of starting a goroutine for each, as
// godbus's own does.
func TestUserManagerSignalFlood(t *testing.T) {
	f := testutil.NewFakeManager(t)
	m, ctx := connectFake(t, f)
	if _, err := m.Events(ctx); err != nil {
		t.Fatal(err)
	}
	before := runtime.NumGoroutine()
	for i := 0; i < 20000; i++ {
		f.Emit("UnitNew", "app-x.scope", testutil.FakeUnitPath("app-x.scope"))
	}
	if _, err := m.Version(ctx); err != nil { // every signal sent before it is read
		t.Fatal(err)
	}
	if n := runtime.NumGoroutine(); n > before+20 {
		t.Fatalf("%d goroutines after 20,000 signals nobody read, %d before", n, before)
	}
	if !m.Overflowed() {
		t.Fatal("signals were dropped, and Overflowed does not say so")
	}
}

// TestUserManagerBytesAfterOK: bytes right after the SASL OK (before the
// client's BEGIN), which godbus's SASL reader would swallow and so put
// the size checks out of step with what godbus decodes, end the
// connecting.
func TestUserManagerBytesAfterOK(t *testing.T) {
	f := testutil.NewFakeManager(t)
	f.AfterOK = testutil.HeaderAnnouncing(12 << 20)
	sock := serveUser(t, f)
	ctx, cancel := context.WithTimeout(context.Background(), hostBound)
	defer cancel()
	m, err := ConnectUser(ctx, hostileUID, UserOptions{Socket: sock, PeerPID: os.Getpid()})
	if err == nil {
		m.Close()
		t.Fatal("connected to a manager that sent bytes before BEGIN")
	}
	if !strings.Contains(err.Error(), "after its SASL OK") {
		t.Fatalf("error %v, want the bytes after the OK refused", err)
	}
}
