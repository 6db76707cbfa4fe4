package daemon

// Holds of callers that leave the bus at once, end to end. (The bounds on
// holds, their cookies and which one wins: decider_test.go; how a refused
// hold reaches a caller: daemon/bus's TestHoldsBoundedByDaemon.)

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
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

// TestHoldBoundsDocumented: the bounds the daemon enforces are the ones
// the README, the interface contract, the man page and docs/INPUTS.md give.
func TestHoldBoundsDocumented(t *testing.T) {
	for _, f := range []struct{ path, perCaller, inAll string }{
		{"../docs/USAGE.md", "may have %d holds at once", "keeps %d in all"},
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
