package daemon

// Issue 11, case 5: holds of callers that leave the bus at once.

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/godbus/dbus/v5"
	"github.com/sirupsen/logrus"

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
		c.Bus, c.PowerProfilesAPI = addr, ppAPI
		c.Log.(*logrus.Logger).SetLevel(logrus.InfoLevel)
		c.Log.(*logrus.Logger).AddHook(hl)
	})
	conn, err := dbus.Connect(addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	testutil.Eventually(t, "bus name", func() (bool, string) { return testutil.NameOwned(conn, BusName) })
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

// TestHoldsOfCallersThatLeaveAtOnce (issue 11, case 5): 300 callers each
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
			return c.Object(BusName, ObjectPath).Go(Interface+".HoldPolicy", 0, nil, "powersaving", "leaving")
		}},
		{"HoldProfile", true, func(c *dbus.Conn) *dbus.Call {
			n := ppNames[0]
			return c.Object(n.name, n.path).Go(n.name+".HoldProfile", 0, nil, ppPowerSaver, "leaving", "org.example.Leaver")
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
			if err := sentinel.Object(BusName, ObjectPath).Call(Interface+".HoldPolicy", 0, "performance", "sentinel").Store(&cookie); err != nil {
				t.Fatal(err)
			}
			testutil.Eventually(t, "every hold call handled", func() (bool, string) {
				n := runningHoldCalls()
				return n == 0, fmt.Sprintf("%d hold calls running", n)
			})
			sentinel.Close()
			// From here on holds can only end. Those of callers that left
			// end once their NameOwnerChanged is handled, or at once.
			var last []hold
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
