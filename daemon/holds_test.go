package daemon

// Holds of callers that leave the bus at once,
// and the bound on the holds of one caller.

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/godbus/dbus/v5"
	"github.com/sirupsen/logrus"

	"github.com/schedpolicyd/schedpolicyd/daemon/bus"
	"github.com/schedpolicyd/schedpolicyd/daemon/snapshot"
	"github.com/schedpolicyd/schedpolicyd/internal/testutil"
	"github.com/schedpolicyd/schedpolicyd/policy"
)

// holdLog counts the daemon's "policy hold added" and "policy hold ended"
// log entries, to show how many of the leavers' holds were really added.
type holdLog struct{ added, ended atomic.Int64 }

func (h *holdLog) Levels() []logrus.Level { return logrus.AllLevels }

func (h *holdLog) Fire(e *logrus.Entry) error {
	switch e.Message {
	case "policy hold added":
		h.added.Add(1)
	case "policy hold ended":
		h.ended.Add(1)
	}
	return nil
}

// holdDaemon runs the daemon in-process on a private bus (as busDaemon),
// at info level, with the hold log counted.
func holdDaemon(t *testing.T, ppAPI bool) (*Daemon, *dbus.Conn, string, *holdLog) {
	t.Helper()
	addr := testutil.StartBus(t, testutil.BusOptions{}).Addr
	m := newMockLaptop(t)
	hl := new(holdLog)
	d := m.startWith(t, func(c *Config) {
		c.Bus, c.PowerProfilesAPI = addr, ppMode(ppAPI)
		c.Log.(*logrus.Logger).SetLevel(logrus.InfoLevel)
		c.Log.(*logrus.Logger).AddHook(hl)
	})
	conn, err := dbus.Connect(addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	testutil.Eventually(t, "bus name", func() (bool, string) { return testutil.NameOwned(conn, bus.Name) })
	return d, conn, addr, hl
}

// runningHoldCalls is the number of goroutines inside the daemon's
// HoldPolicy or HoldProfile handlers (godbus runs each call in its own).
func runningHoldCalls() int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	count := 0
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "daemon.busObject.HoldPolicy(") || strings.Contains(g, "daemon.ppObject.HoldProfile(") {
			count++
		}
	}
	return count
}

// TestHoldsOfCallersThatLeaveAtOnce: 300 callers each
// connect, send HoldPolicy("powersaving") (or HoldProfile("power-saver"))
// and close their connection 0–400 µs later without waiting for the
// reply. Every hold the daemon added must end: the daemon checks that the
// caller is still on the bus once its hold exists. Before that check 1–15
// holds of callers that were gone stayed, and the policy stayed
// powersaving.
//
// The end is found without timing: the test sees every leaver's
// NameOwnerChanged, so a call made after that reaches the daemon after
// every leaver's call and NameOwnerChanged; once its reply is back and no
// hold call is still running in the daemon, no further hold can appear.
func TestHoldsOfCallersThatLeaveAtOnce(t *testing.T) {
	for _, tc := range []struct {
		name  string
		ppAPI bool
		hold  func(c *dbus.Conn) *dbus.Call
	}{
		{"HoldPolicy", false, func(c *dbus.Conn) *dbus.Call {
			return c.Object(bus.Name, bus.ObjectPath).Go(bus.Interface+".HoldPolicy", 0, nil, "powersaving", "leaving")
		}},
		{"HoldProfile", true, func(c *dbus.Conn) *dbus.Call {
			n := ppNames[0]
			return c.Object(n.name, n.path).Go(n.name+".HoldProfile", 0, nil, bus.ProfilePowerSaver, "leaving", "org.example.Leaver")
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const callers = 300
			d, conn, addr, hl := holdDaemon(t, tc.ppAPI)
			if err := conn.AddMatchSignal(dbus.WithMatchSender("org.freedesktop.DBus"), dbus.WithMatchMember("NameOwnerChanged")); err != nil {
				t.Fatal(err)
			}
			sigs := make(chan *dbus.Signal, 4*callers)
			conn.Signal(sigs)
			left := map[string]bool{}
			gone := 0
			note := func(s *dbus.Signal) {
				if s.Name == "org.freedesktop.DBus.NameOwnerChanged" && len(s.Body) == 3 && s.Body[2] == "" {
					name := s.Body[0].(string)
					if v, ok := left[name]; ok && !v {
						gone++
					}
					left[name] = true
				}
			}
			for range callers {
				c, err := dbus.Connect(addr)
				if err != nil {
					t.Fatal(err)
				}
				name := c.Names()[0]
				if _, seen := left[name]; !seen {
					left[name] = false
				}
				if call := tc.hold(c); call.Err != nil {
					t.Fatal(call.Err)
				}
				time.Sleep(time.Duration(rand.IntN(401)) * time.Microsecond)
				c.Close()
			drain:
				for {
					select {
					case s := <-sigs:
						note(s)
					default:
						break drain
					}
				}
			}
			timeout := time.After(30 * time.Second)
			for gone < callers {
				select {
				case s := <-sigs:
					note(s)
				case <-timeout:
					t.Fatalf("saw %d of %d callers leave the bus", gone, callers)
				}
			}
			// The barrier: a call that reaches the daemon after every
			// leaver's call and NameOwnerChanged.
			sentinel, err := dbus.Connect(addr)
			if err != nil {
				t.Fatal(err)
			}
			var cookie uint32
			if err := sentinel.Object(bus.Name, bus.ObjectPath).Call(bus.Interface+".HoldPolicy", 0, "performance", "sentinel").Store(&cookie); err != nil {
				t.Fatal(err)
			}
			testutil.Eventually(t, "every hold call handled", func() (bool, string) {
				n := runningHoldCalls()
				return n == 0, fmt.Sprintf("%d hold calls running", n)
			})
			sentinel.Close()
			// From here on holds can only end. Those of callers that left
			// end once their NameOwnerChanged is handled, or at once.
			var last []snapshot.Hold
			testutil.Eventually(t, "no holds of callers that left", func() (bool, string) {
				last = d.Snapshot().Holds
				return len(last) == 0, fmt.Sprintf("%d holds remain: %v", len(last), last)
			})
			s := d.Snapshot()
			t.Logf("%d callers: %d holds were added (the sentinel's included), %d ended", callers, hl.added.Load(), hl.ended.Load())
			if len(s.Holds) != 0 || s.Policy != policy.Performance {
				t.Errorf("after every caller left: %d holds, policy %s; want 0, performance", len(s.Holds), s.Policy)
			}
			if got := prop(t, conn, "Holds").([][]any); len(got) != 0 {
				t.Errorf("Holds property = %v, want empty", got)
			}
			if a, e := hl.added.Load(), hl.ended.Load(); a != e {
				t.Errorf("%d holds added, %d ended", a, e)
			}
		})
	}
}

// unchanged fails unless refused holds left the holds alone: no hold was
// added (the log), and the published list is the one published before.
func unchanged(t *testing.T, before, after []snapshot.Hold, addedBefore, addedAfter int64) {
	t.Helper()
	if addedAfter != addedBefore {
		t.Errorf("%d holds added by refused calls", addedAfter-addedBefore)
	}
	if !reflect.DeepEqual(after, before) {
		t.Errorf("refused calls changed the published holds:\nbefore %v\nafter  %v", before, after)
	}
}

// TestHoldsBoundedPerCaller: a caller may have
// MaxHoldsPerCaller holds, made with HoldPolicy and HoldProfile together;
// one more is refused with LimitsExceeded, publishes nothing and changes
// nothing. Other callers are not affected, and a released hold makes room.
func TestHoldsBoundedPerCaller(t *testing.T) {
	d, conn, addr, hl := holdDaemon(t, true)
	obj := conn.Object(bus.Name, bus.ObjectPath)
	pp := conn.Object(ppNames[1].name, ppNames[1].path)
	var cookies []uint32
	for i := range MaxHoldsPerCaller {
		var c uint32
		var err error
		if i%2 == 0 {
			err = obj.Call(bus.Interface+".HoldPolicy", 0, "balance", fmt.Sprint("hold ", i)).Store(&c)
		} else {
			err = pp.Call(ppNames[1].name+".HoldProfile", 0, bus.ProfilePerformance, fmt.Sprint("hold ", i), "org.example.Bound").Store(&c)
		}
		if err != nil {
			t.Fatalf("hold %d of %d: %v", i+1, MaxHoldsPerCaller, err)
		}
		cookies = append(cookies, c)
	}
	if hs := d.Snapshot().Holds; len(hs) != MaxHoldsPerCaller {
		t.Fatalf("%d holds, want %d", len(hs), MaxHoldsPerCaller)
	}
	before, added := d.Snapshot().Holds, hl.added.Load()
	me := conn.Names()[0]
	wantMsg := fmt.Sprintf("%s already has %d holds, the most one bus connection may have", me, MaxHoldsPerCaller)
	for _, call := range []func() error{
		func() error { return obj.Call(bus.Interface+".HoldPolicy", 0, "powersaving", "one too many").Err },
		func() error {
			return pp.Call(ppNames[1].name+".HoldProfile", 0, bus.ProfilePowerSaver, "one too many", "org.example.Bound").Err
		},
	} {
		err := call()
		if dbusErrName(err) != errLimitsExceeded {
			t.Fatalf("hold %d: %v, want %s", MaxHoldsPerCaller+1, err, errLimitsExceeded)
		}
		if msg := err.(dbus.Error).Error(); !strings.HasPrefix(msg, wantMsg) {
			t.Errorf("error message %q, want it to start with %q", msg, wantMsg)
		}
	}
	unchanged(t, before, d.Snapshot().Holds, added, hl.added.Load())
	if s := d.Snapshot(); len(s.Holds) != MaxHoldsPerCaller || s.Policy != policy.Balance {
		t.Errorf("after refused holds: %d holds, policy %s; want %d, balance", len(s.Holds), s.Policy, MaxHoldsPerCaller)
	}

	// Another caller is not affected.
	other, err := dbus.Connect(addr)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	var oc uint32
	if err := other.Object(bus.Name, bus.ObjectPath).Call(bus.Interface+".HoldPolicy", 0, "powersaving", "other").Store(&oc); err != nil {
		t.Fatalf("another caller's hold: %v", err)
	}
	if s := d.Snapshot(); len(s.Holds) != MaxHoldsPerCaller+1 || s.Policy != policy.Powersaving {
		t.Errorf("with the other caller's hold: %d holds, policy %s; want %d, powersaving", len(s.Holds), s.Policy, MaxHoldsPerCaller+1)
	}

	// A released hold makes room for one more, and only one.
	if err := obj.Call(bus.Interface+".ReleasePolicy", 0, cookies[0]).Err; err != nil {
		t.Fatal(err)
	}
	var c uint32
	if err := obj.Call(bus.Interface+".HoldPolicy", 0, "balance", "again").Store(&c); err != nil {
		t.Fatalf("hold after a release: %v", err)
	}
	if err := obj.Call(bus.Interface+".HoldPolicy", 0, "balance", "again").Err; dbusErrName(err) != errLimitsExceeded {
		t.Errorf("second hold after one release: %v, want %s", err, errLimitsExceeded)
	}
	hs := d.Snapshot().Holds
	mine := 0
	for _, h := range hs {
		if h.Owner == me {
			mine++
		}
	}
	if mine != MaxHoldsPerCaller || len(hs) != MaxHoldsPerCaller+1 {
		t.Errorf("%d holds of mine, %d in all; want %d and %d", mine, len(hs), MaxHoldsPerCaller, MaxHoldsPerCaller+1)
	}
	// The Holds property lists them in the order they were made.
	got := prop(t, conn, "Holds").([][]any)
	if len(got) != len(hs) {
		t.Fatalf("Holds property has %d entries, snapshot %d", len(got), len(hs))
	}
	for i, e := range got {
		if e[0] != hs[i].Cookie || e[3] != hs[i].Owner || (i > 0 && hs[i].Cookie <= hs[i-1].Cookie) {
			t.Errorf("Holds[%d] = %v, snapshot %+v", i, e, hs[i])
		}
	}

	// HoldProfile's strings are bounded like HoldPolicy's reason.
	long := strings.Repeat("x", 257)
	other2, err := dbus.Connect(addr)
	if err != nil {
		t.Fatal(err)
	}
	defer other2.Close()
	pp2 := other2.Object(ppNames[1].name, ppNames[1].path)
	for _, args := range [][]any{{bus.ProfilePerformance, long, "org.example.Long"}, {bus.ProfilePerformance, "r", long}} {
		if err := pp2.Call(ppNames[1].name+".HoldProfile", 0, args...).Err; dbusErrName(err) != errInvalidArgs {
			t.Errorf("HoldProfile with a 257-byte string: %v, want InvalidArgs", err)
		}
	}
}

// TestHoldsBoundedInAll: the daemon keeps MaxHolds
// holds of all callers together; one more, from a caller with none, is
// refused with LimitsExceeded and changes nothing, and a hold that ends
// makes room.
func TestHoldsBoundedInAll(t *testing.T) {
	d, _, addr, hl := holdDaemon(t, false)
	var callers []*dbus.Conn
	defer func() {
		for _, c := range callers {
			c.Close()
		}
	}()
	var first uint32
	for i := range MaxHolds {
		if i%MaxHoldsPerCaller == 0 {
			c, err := dbus.Connect(addr)
			if err != nil {
				t.Fatal(err)
			}
			callers = append(callers, c)
		}
		var cookie uint32
		if err := callers[len(callers)-1].Object(bus.Name, bus.ObjectPath).Call(bus.Interface+".HoldPolicy", 0, "balance", fmt.Sprint("hold ", i)).Store(&cookie); err != nil {
			t.Fatalf("hold %d of %d: %v", i+1, MaxHolds, err)
		}
		if i == 0 {
			first = cookie
		}
	}
	late, err := dbus.Connect(addr)
	if err != nil {
		t.Fatal(err)
	}
	defer late.Close()
	before, added := d.Snapshot().Holds, hl.added.Load()
	err = late.Object(bus.Name, bus.ObjectPath).Call(bus.Interface+".HoldPolicy", 0, "powersaving", "one too many").Err
	want := fmt.Sprintf("the daemon already keeps %d holds", MaxHolds)
	if dbusErrName(err) != errLimitsExceeded || !strings.HasPrefix(err.(dbus.Error).Error(), want) {
		t.Fatalf("hold %d: %v, want %s starting %q", MaxHolds+1, err, errLimitsExceeded, want)
	}
	unchanged(t, before, d.Snapshot().Holds, added, hl.added.Load())
	if s := d.Snapshot(); len(s.Holds) != MaxHolds || s.Policy != policy.Balance {
		t.Errorf("%d holds, policy %s; want %d, balance", len(s.Holds), s.Policy, MaxHolds)
	}
	if err := callers[0].Object(bus.Name, bus.ObjectPath).Call(bus.Interface+".ReleasePolicy", 0, first).Err; err != nil {
		t.Fatal(err)
	}
	if err := late.Object(bus.Name, bus.ObjectPath).Call(bus.Interface+".HoldPolicy", 0, "powersaving", "room again").Err; err != nil {
		t.Fatalf("hold after one ended: %v", err)
	}
	if s := d.Snapshot(); len(s.Holds) != MaxHolds || s.Policy != policy.Powersaving {
		t.Errorf("%d holds, policy %s; want %d, powersaving", len(s.Holds), s.Policy, MaxHolds)
	}
}

// TestHoldBoundsDocumented: the bounds the daemon enforces are the ones
// the README, the interface contract, the man page and docs/INPUTS.md give.
func TestHoldBoundsDocumented(t *testing.T) {
	for _, f := range []struct{ path, perCaller, inAll string }{
		{"../README.md", "may have %d holds at once", "keeps %d in all"},
		{"bus/org.schedpolicyd.SchedPolicy1.xml", "may have %d holds at once", "keeps %d in all"},
		{"../packaging/man/schedpolicyd.8", "may have %d holds at once", "keeps %d in all"},
		{"../docs/INPUTS.md", "at most %d holds per bus connection", "and %d in all"},
	} {
		b, err := os.ReadFile(f.path)
		if err != nil {
			t.Fatal(err)
		}
		text := strings.Join(strings.Fields(string(b)), " ") // line breaks are spaces
		for _, want := range []string{fmt.Sprintf(f.perCaller, MaxHoldsPerCaller), fmt.Sprintf(f.inAll, MaxHolds)} {
			if !strings.Contains(text, want) {
				t.Errorf("%s does not say %q", f.path, want)
			}
		}
	}
}

// benchDaemon runs the daemon in-process on a private bus with no
// placement and warnings only, for benchmarks (the mock laptop's helpers
// take a *testing.T).
func benchDaemon(b *testing.B, ppAPI bool) (*Daemon, string) {
	b.Helper()
	// AnyUser puts the socket under os.TempDir: b.TempDir has the
	// sub-benchmark's name, whose "=" a D-Bus address cannot hold unescaped.
	addr := testutil.StartBus(b, testutil.BusOptions{AnyUser: true}).Addr
	dir := b.TempDir()
	sys := filepath.Join(dir, "sys")
	testutil.CopyFixture(b, "../sysfs/testdata/topology/laptop-4c8t", sys)
	testutil.Put(b, sys+"/class/power_supply/AC/type", "Mains")
	testutil.Put(b, sys+"/class/power_supply/AC/online", "1")
	log := logrus.New()
	log.SetLevel(logrus.WarnLevel)
	d, err := New(Config{
		SysfsRoot: sys, CgroupRoot: "", TreeDir: filepath.Join(dir, "tree"), TreeBackend: "plain",
		StateDir: filepath.Join(dir, "state"), Bus: addr, Events: "fsnotify", RecheckInterval: -1,
		Settle: -1, PowerProfilesAPI: ppMode(ppAPI), Log: log,
	})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); d.Run(ctx) }()
	b.Cleanup(func() { cancel(); wg.Wait() })
	select {
	case <-d.Ready():
	case <-d.Done():
		b.Fatal("daemon stopped during start-up")
	}
	testutil.Eventually(b, "bus name", func() (bool, string) { return testutil.NameOwnedAt(addr, bus.Name) })
	return d, addr
}

// BenchmarkHoldAdd measures adding one hold and releasing it again (one
// HoldPolicy and one ReleasePolicy round trip from a client, or
// HoldProfile/ReleaseProfile with the power-profiles API) while `held`
// holds of other callers exist (MaxHoldsPerCaller per caller, up to one
// below MaxHolds).
func BenchmarkHoldAdd(b *testing.B) {
	for _, ppAPI := range []bool{false, true} {
		for _, held := range []int{0, 16, 64, MaxHolds - 1} {
			b.Run(fmt.Sprintf("pp=%v/held=%d", ppAPI, held), func(b *testing.B) {
				d, addr := benchDaemon(b, ppAPI)
				makeHolds(b, addr, held)
				if n := len(d.Snapshot().Holds); n != held {
					b.Fatalf("%d holds, want %d", n, held)
				}
				conn, err := dbus.Connect(addr)
				if err != nil {
					b.Fatal(err)
				}
				defer conn.Close()
				hold, release := bus.Interface+".HoldPolicy", bus.Interface+".ReleasePolicy"
				obj := conn.Object(bus.Name, bus.ObjectPath)
				args := []any{"powersaving", "the measured hold"}
				if ppAPI {
					n := ppNames[0]
					obj = conn.Object(n.name, n.path)
					hold, release = n.name+".HoldProfile", n.name+".ReleaseProfile"
					args = []any{bus.ProfilePowerSaver, "the measured hold", "org.example.Bench"}
				}
				b.ReportAllocs()
				b.ResetTimer()
				for range b.N {
					var cookie uint32
					if err := obj.Call(hold, 0, args...).Store(&cookie); err != nil {
						b.Fatal(err)
					}
					if err := obj.Call(release, 0, cookie).Err; err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// makeHolds makes held holds of performance on the daemon at addr, from
// as many callers as MaxHoldsPerCaller needs; the callers stay connected
// until the benchmark ends.
func makeHolds(b *testing.B, addr string, held int) {
	b.Helper()
	var holders []*dbus.Conn
	b.Cleanup(func() {
		for _, c := range holders {
			c.Close()
		}
	})
	for made := range held {
		if made%MaxHoldsPerCaller == 0 {
			c, err := dbus.Connect(addr)
			if err != nil {
				b.Fatal(err)
			}
			holders = append(holders, c)
		}
		err := holders[len(holders)-1].Object(bus.Name, bus.ObjectPath).Call(bus.Interface+".HoldPolicy", 0, "performance", fmt.Sprintf("background hold %d of the benchmark", made)).Err
		if err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkHoldPublish measures one publication in which no hold changed
// (a re-plan on the event loop, as every utilisation sample makes while a
// workload is busy) while `held` holds exist, with the power-profiles API.
func BenchmarkHoldPublish(b *testing.B) {
	for _, held := range []int{0, 16, 64, MaxHolds} {
		b.Run(fmt.Sprintf("held=%d", held), func(b *testing.B) {
			d, addr := benchDaemon(b, true)
			makeHolds(b, addr, held)
			if n := len(d.Snapshot().Holds); n != held {
				b.Fatalf("%d holds, want %d", n, held)
			}
			ctx := context.Background()
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				d.do(ctx, func() error {
					d.recompute("benchmark", false)
					return nil
				})
			}
		})
	}
}
