package testutil

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/godbus/dbus/v5"
)

// fakeT records what a helper reports; Fatalf and Fatal stop the helper
// with a panic that catch recovers, Errorf lets it go on.
type fakeT struct {
	testing.TB
	fatal  string
	errors []string
	logs   []string
}

type stopped struct{}

func (f *fakeT) Helper()                   {}
func (f *fakeT) Log(args ...any)           { f.logs = append(f.logs, fmt.Sprint(args...)) }
func (f *fakeT) Fatalf(s string, a ...any) { f.fatal = fmt.Sprintf(s, a...); panic(stopped{}) }
func (f *fakeT) Fatal(a ...any)            { f.fatal = fmt.Sprint(a...); panic(stopped{}) }
func (f *fakeT) Errorf(s string, a ...any) { f.errors = append(f.errors, fmt.Sprintf(s, a...)) }

func (f *fakeT) catch(fn func()) {
	defer func() {
		if r := recover(); r != nil {
			if _, ok := r.(stopped); !ok {
				panic(r)
			}
		}
	}()
	fn()
}

func TestWaitFor(t *testing.T) {
	n := 0
	WaitFor(t, "three calls", time.Minute, func() (bool, string) { n++; return n == 3, "" })
	if n != 3 {
		t.Errorf("cond called %d times, want 3", n)
	}

	f := &fakeT{TB: t}
	start := time.Now()
	f.catch(func() {
		WaitFor(f, "never", 100*time.Millisecond, func() (bool, string) { return false, "still no" })
	})
	if time.Since(start) < 100*time.Millisecond {
		t.Errorf("gave up after %v, before the bound", time.Since(start))
	}
	if want := "timed out after 100ms waiting for never; last seen: still no"; f.fatal != want {
		t.Errorf("message %q, want %q", f.fatal, want)
	}
	f = &fakeT{TB: t}
	f.catch(func() { WaitFor(f, "never", 0, func() (bool, string) { return false, "" }) })
	if want := "timed out after 0s waiting for never"; f.fatal != want {
		t.Errorf("message %q, want %q", f.fatal, want)
	}
}

func TestLogger(t *testing.T) {
	f := &fakeT{TB: t}
	l := Logger(f)
	l.Debug("one")
	l.WithField("k", "v").Info("two")
	if len(f.logs) != 2 || !strings.Contains(f.logs[0], "msg=one") || !strings.Contains(f.logs[1], "k=v") || strings.HasSuffix(f.logs[1], "\n") {
		t.Errorf("logged %q", f.logs)
	}
}

func TestCopy(t *testing.T) {
	src := t.TempDir()
	WriteFile(t, filepath.Join(src, "a/b/file"), "x")
	os.Chmod(filepath.Join(src, "a/b/file"), 0o600)
	os.Symlink("b/file", filepath.Join(src, "a/link"))
	if err := syscall.Mkfifo(filepath.Join(src, "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}

	dst := filepath.Join(t.TempDir(), "new")
	CopyFixture(t, src, dst)
	if got := Read(t, filepath.Join(dst, "a/b/file")); got != "x" {
		t.Errorf("file = %q", got)
	}
	if st, err := os.Stat(filepath.Join(dst, "a/b/file")); err != nil || st.Mode().Perm() != 0o644 {
		t.Errorf("file mode %v, %v; want 0644", st.Mode(), err)
	}
	if l, err := os.Readlink(filepath.Join(dst, "a/link")); err != nil || l != "b/file" {
		t.Errorf("link = %q, %v", l, err)
	}
	if _, err := os.Lstat(filepath.Join(dst, "fifo")); !os.IsNotExist(err) {
		t.Errorf("fifo copied: %v", err)
	}

	dst = t.TempDir()
	CopyReadable(t, src, dst)
	if got := Read(t, filepath.Join(dst, "a/b/file")); got != "x" {
		t.Errorf("file = %q", got)
	}
	if _, err := os.Lstat(filepath.Join(dst, "a/link")); !os.IsNotExist(err) {
		t.Errorf("CopyReadable copied a symbolic link: %v", err)
	}
	CopyReadable(t, filepath.Join(src, "missing"), dst) // nothing, no failure
	if err := CopyTree(filepath.Join(src, "missing"), dst); err == nil {
		t.Error("CopyTree of a missing tree: no error")
	}
}

func TestFiles(t *testing.T) {
	dir := t.TempDir()
	Put(t, filepath.Join(dir, "x/y"), "1")
	if got := Read(t, filepath.Join(dir, "x/y")); got != "1\n" {
		t.Errorf("Put wrote %q", got)
	}
	Write(t, filepath.Join(dir, "x/y"), "2")
	if got := ReadTrim(t, filepath.Join(dir, "x/y")); got != "2" {
		t.Errorf("Write wrote %q", got)
	}
	WriteTree(t, dir, map[string]string{"a/b/c": "x\n", "a/d": "", "e": "y"})
	for p, want := range map[string]string{"a/b/c": "x\n", "a/d": "", "e": "y", "x/y": "2\n"} {
		if got := Read(t, filepath.Join(dir, p)); got != want {
			t.Errorf("%s holds %q, want %q", p, got, want)
		}
	}
	f := &fakeT{TB: t}
	f.catch(func() { Write(f, filepath.Join(dir, "nodir/y"), "3") })
	if !strings.Contains(f.fatal, "nodir/y") {
		t.Errorf("Write into a missing directory: %q", f.fatal)
	}
	f.catch(func() { ReadTrim(f, filepath.Join(dir, "none")) })
	if !strings.HasPrefix(f.fatal, "read "+dir) {
		t.Errorf("ReadTrim of a missing file: %q", f.fatal)
	}
}

func TestBusConfig(t *testing.T) {
	c := BusConfig(BusOptions{System: true, AnyUser: true}, "/x/bus")
	for _, want := range []string{"<type>system</type>", "<listen>unix:path=/x/bus</listen>", `<allow user="*"/>`, `<allow own="*"/>`} {
		if !strings.Contains(c, want) {
			t.Errorf("config lacks %s:\n%s", want, c)
		}
	}
	c = BusConfig(BusOptions{}, "/x/bus")
	if !strings.Contains(c, "<type>session</type>") || strings.Contains(c, "user=") {
		t.Errorf("session config:\n%s", c)
	}
	if _, err := StartBusProcess(BusOptions{}); err == nil {
		t.Error("StartBusProcess without a Dir: no error")
	}
}

func TestStartBus(t *testing.T) {
	b := StartBus(t, BusOptions{AnyUser: true})
	if st, err := os.Stat(filepath.Dir(b.Socket)); err != nil || st.Mode().Perm() != 0o755 {
		t.Errorf("AnyUser bus directory: %v %v", st.Mode(), err)
	}
	conn, err := dbus.Connect(b.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if ok, seen := NameOwned(conn, "org.example.Test"); ok || seen != "org.example.Test has no owner" {
		t.Errorf("NameOwned before the request: %v %q", ok, seen)
	}
	if _, err := conn.RequestName("org.example.Test", 0); err != nil {
		t.Fatal(err)
	}
	Eventually(t, "name owned", func() (bool, string) { return NameOwnedAt(b.Addr, "org.example.Test") })

	// Stopped and started again in the same directory: the same address.
	dir := t.TempDir()
	b1 := StartBus(t, BusOptions{Dir: dir, System: true})
	b1.Stop()
	b1.Stop() // a second stop does nothing
	if ok, _ := NameOwnedAt(b1.Addr, "org.freedesktop.DBus"); ok {
		t.Error("bus answers after Stop")
	}
	b2 := StartBus(t, BusOptions{Dir: dir, System: true})
	if b2.Addr != b1.Addr {
		t.Errorf("restarted at %s, want %s", b2.Addr, b1.Addr)
	}
	b2.Kill() // leaves its socket
	b3 := StartBus(t, BusOptions{Dir: dir, System: true})
	if ok, seen := NameOwnedAt(b3.Addr, "org.freedesktop.DBus"); !ok {
		t.Errorf("bus started over a killed one's socket: %s", seen)
	}
}

func TestCpusetV1Parent(t *testing.T) {
	var dir string
	t.Run("parent", func(t *testing.T) {
		dir = CpusetV1Parent(t, "testutil-test")
		if got, want := ReadTrim(t, dir+"/cpuset.cpus"), ReadTrim(t, CpusetRoot+"/cpuset.effective_cpus"); got != want {
			t.Errorf("cpuset.cpus = %q, want %q", got, want)
		}
		if err := os.MkdirAll(dir+"/a/b", 0o755); err != nil {
			t.Fatal(err)
		}
	})
	if dir == "" {
		t.Skip("no cpuset v1 parent (the subtest skipped)")
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("%s left after the cleanup: %v", dir, err)
	}
}

// TestStartBusEscapedPath: a socket under a directory whose name needs
// escaping in a D-Bus address (a sub-test named "held=16") still works.
func TestStartBusEscapedPath(t *testing.T) {
	t.Run("held=16,x y", func(t *testing.T) {
		b := StartBus(t, BusOptions{})
		conn, err := dbus.Connect(b.Addr)
		if err != nil {
			t.Fatalf("connect %s: %v", b.Addr, err)
		}
		conn.Close()
	})
	if got := EscapeAddressValue("/tmp/a=b c"); got != "/tmp/a%3db%20c" {
		t.Errorf("EscapeAddressValue = %q", got)
	}
}

// TestSystemPolicyBus: the private bus enforces the system bus's policy.
// A connection DialAs makes as nobody is credited with uid 65534, may not
// own a name the installed policies give to root only
// (org.freedesktop.login1) and may not call a method nobody punched a
// hole for, but may send a unicast signal to any connection, which
// arrives with its own unique name as sender; root may own the name.
func TestSystemPolicyBus(t *testing.T) {
	if _, err := os.Stat("/usr/share/dbus-1/system.d/org.freedesktop.login1.conf"); err != nil {
		t.Skip("needs systemd's org.freedesktop.login1.conf (Debian package systemd) for a root-only name")
	}
	b := StartSystemPolicyBus(t)
	root, err := dbus.Connect(b.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	nobody := DialAs(t, b.Addr, 65534)
	if uid := UID(t, root, nobody.Names()[0]); uid != 65534 {
		t.Fatalf("the bus credits DialAs's connection with uid %d, want 65534", uid)
	}
	if uid := UID(t, root, root.Names()[0]); uid != 0 {
		t.Fatalf("the test's own connection is uid %d, want 0 (DialAs must not change this process's credentials)", uid)
	}
	if os.Geteuid() != 0 || os.Getuid() != 0 {
		t.Fatalf("after DialAs this process runs as uid %d/%d", os.Getuid(), os.Geteuid())
	}
	if _, err := nobody.RequestName("org.freedesktop.login1", dbus.NameFlagDoNotQueue); err == nil {
		t.Fatal("uid 65534 owned org.freedesktop.login1: the system policy is not enforced")
	}
	// Another connection of root's owns it: a name's policy also guards
	// what is sent to its owner, so the signal below goes to root's first.
	owner, err := dbus.Connect(b.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer owner.Close()
	if r, err := owner.RequestName("org.freedesktop.login1", dbus.NameFlagDoNotQueue); err != nil || r != dbus.RequestNameReplyPrimaryOwner {
		t.Fatalf("root cannot own org.freedesktop.login1: %v %v", r, err)
	}
	err = nobody.Object("org.freedesktop.login1", "/org/freedesktop/login1").Call("org.freedesktop.login1.Manager.NoSuchMember", 0).Err
	if err == nil || !strings.Contains(err.Error(), "Rejected send message") {
		t.Fatalf("nobody's call to a root-only method: %v, want rejected by the policy", err)
	}

	sigs := make(chan *dbus.Signal, 4)
	root.Signal(sigs)
	// Broadcasts reach only connections with a matching rule; this one
	// is unicast.
	SendSignal(t, nobody, root.Names()[0], "/org/freedesktop/DBus", "org.freedesktop.DBus.NameOwnerChanged", "x", "", ":1.999")
	select {
	case s := <-sigs:
		if s.Sender != nobody.Names()[0] || s.Name != "org.freedesktop.DBus.NameOwnerChanged" {
			t.Fatalf("got %s from %s, want the forged NameOwnerChanged from %s", s.Name, s.Sender, nobody.Names()[0])
		}
	case <-time.After(time.Minute):
		t.Fatal("the unicast signal from uid 65534 did not arrive")
	}
}
