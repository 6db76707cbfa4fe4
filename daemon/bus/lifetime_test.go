package bus

import (
	"context"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/godbus/dbus/v5"
	"go.uber.org/goleak"

	"github.com/schedpolicyd/schedpolicyd/internal/testutil"
)

// ourGoroutines returns the stacks of the goroutines running this
// package's code (a frame in one of its non-test files, "created by"
// not counted: a goroutine that has returned may still be listed), but
// the calling goroutine and those in before (goroutineIDs).
func ourGoroutines(before map[string]bool) []string {
	var out []string
	for i, g := range testutil.Goroutines() {
		if i == 0 || before[goroutineID(g)] {
			continue // the caller comes first
		}
		running, _, _ := strings.Cut(g, "\ncreated by ")
		for _, line := range strings.Split(running, "\n") {
			file, _, _ := strings.Cut(strings.TrimSpace(line), ":")
			if strings.HasPrefix(line, "\t") && strings.Contains(file, "/daemon/bus/") && !strings.HasSuffix(file, "_test.go") {
				out = append(out, g)
				break
			}
		}
	}
	return out
}

// goroutineID is the id in a stack's first line, "goroutine 12 [...]:".
func goroutineID(stack string) string {
	f := strings.Fields(stack)
	if len(f) < 2 {
		return ""
	}
	return f[1]
}

// goroutineIDs are the ids of the goroutines running now.
func goroutineIDs() map[string]bool {
	ids := map[string]bool{}
	for _, g := range testutil.Goroutines() {
		ids[goroutineID(g)] = true
	}
	return ids
}

// noneOfOurs fails t if any goroutine of the package started after
// before is still there: at once, without waiting for it to end.
func noneOfOurs(t *testing.T, before map[string]bool, after string) {
	t.Helper()
	if left := ourGoroutines(before); len(left) > 0 {
		t.Errorf("%d goroutines of the package still there after %s:\n\n%s", len(left), after, strings.Join(left, "\n\n"))
	}
}

// TestCloseJoinsGoroutines: Close returns only once every goroutine the
// service started has ended — the watch on the holders, the one on
// intel-lpmd's name, and the power-profiles follower's reader and
// applier, with its connection to systemd — even while each of them
// waits for a busy loop (the fake's stall), and leaves nothing behind,
// godbus's goroutines of its connections included.
func TestCloseJoinsGoroutines(t *testing.T) {
	addr := testutil.StartBus(t, testutil.BusOptions{AnyUser: true}).Addr
	// The test's connections: systemd (no power-profiles unit installed),
	// a power-profiles daemon to follow, intel-lpmd.
	testutil.NewFakeManager(t).ServeBus(addr)
	hadess := ppNames[1].name
	ppd, p := ownPPD(t, addr, hadess, ProfileBalanced)
	o := ppd.Names()[0]
	lpmd := testutil.Connect(t, addr)
	ignore := goleak.IgnoreCurrent()
	before := goroutineIDs()

	f := newFake()
	svc := New(Config{Bus: addr, PowerProfilesAPI: PowerProfilesAuto, Log: testLogger(t)}, f)
	f.serve(svc)
	t.Cleanup(svc.Close)
	if err := svc.Connect(t.Context()); err != nil {
		t.Fatal(err)
	}
	f.waitCalls(t, "FollowProfile "+hadess+" "+o+" "+ProfileBalanced)

	// Each watcher waits for the loop: the applier with the followed
	// daemon's new profile, the intel-lpmd watch with its new owner, the
	// follower's reader and the holders' watch with the followed daemon
	// leaving the bus.
	f.stall(t)
	emitProfile(t, ppd, p, hadess, ProfilePowerSaver)
	f.waitHeld(t, 1)
	if r, err := lpmd.RequestName(LpmdName, dbus.NameFlagDoNotQueue); err != nil || r != dbus.RequestNameReplyPrimaryOwner {
		t.Fatalf("RequestName(%s) = %v, %v", LpmdName, r, err)
	}
	f.waitHeld(t, 2)
	ppd.Close()
	f.waitHeld(t, 4)

	svc.Close()
	noneOfOurs(t, before, "Close")
	goleak.VerifyNone(t, ignore)
}

// TestDialAbandonedJoins: a bus that accepts the connection and never
// answers is abandoned at the timeout, and the dial's goroutine has ended
// when dialBus returns.
func TestDialAbandonedJoins(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "mute")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err == nil {
			accepted <- c // kept open, never answered
		}
	}()
	t.Cleanup(func() {
		select {
		case c := <-accepted:
			c.Close()
		default:
		}
	})
	before := goroutineIDs()
	start := time.Now()
	if conn, err := dialBus(context.Background(), "unix:path="+sock, 200*time.Millisecond); err == nil {
		conn.Close()
		t.Fatal("dialBus connected to a bus that never answers")
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("dialBus returned after %v, want the timeout", d)
	}
	noneOfOurs(t, before, "dialBus returned")
}
