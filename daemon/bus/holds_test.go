package bus

// Holds of callers that leave the bus at once, on the fake daemon. (The
// bounds on holds, their cookies and which one wins: package daemon's
// decider_test.go.)

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/godbus/dbus/v5"

	"github.com/schedpolicyd/schedpolicyd/daemon/snapshot"
	"github.com/schedpolicyd/schedpolicyd/internal/testutil"
	"github.com/schedpolicyd/schedpolicyd/policy"
)

// runningHoldCalls is the number of goroutines inside the service's
// HoldPolicy or HoldProfile handlers (busObject.HoldPolicy, ppObject.HoldProfile) (godbus runs each call in its own).
func runningHoldCalls() int {
	count := 0
	for _, g := range testutil.Goroutines() {
		if strings.Contains(g, "/daemon/bus.busObject.HoldPolicy(") || strings.Contains(g, "/daemon/bus.ppObject.HoldProfile(") {
			count++
		}
	}
	return count
}

// TestHoldsOfCallersThatLeaveAtOnce: 300 callers each
// connect, send HoldPolicy("powersaving") (or HoldProfile("power-saver"))
// and close their connection 0–400 µs later without waiting for the
// reply. Every hold the daemon added must end: the service checks that the
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
			return c.Object(Name, ObjectPath).Go(Interface+".HoldPolicy", 0, nil, "powersaving", "leaving")
		}},
		{"HoldProfile", true, func(c *dbus.Conn) *dbus.Call {
			n := ppNames[0]
			return c.Object(n.name, n.path).Go(n.name+".HoldProfile", 0, nil, ProfilePowerSaver, "leaving", "org.example.Leaver")
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const callers = 300
			cfg := Config{PowerProfilesAPI: PowerProfilesOff}
			if tc.ppAPI {
				cfg.PowerProfilesAPI = PowerProfilesServe
			}
			st := startService(t, testutil.StartBus(t, testutil.BusOptions{}).Addr, cfg)
			conn, addr := st.client, st.addr
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
			if err := sentinel.Object(Name, ObjectPath).Call(Interface+".HoldPolicy", 0, "performance", "sentinel").Store(&cookie); err != nil {
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
				last = st.f.Published().Holds
				return len(last) == 0, fmt.Sprintf("%d holds remain: %v", len(last), last)
			})
			s := st.f.Published()
			added := 0
			for _, l := range st.f.log() {
				if strings.HasPrefix(l, "AddHold ") {
					added++
				}
			}
			t.Logf("%d callers: %d holds were added (the sentinel's included)", callers, added)
			if len(s.Holds) != 0 || s.Policy != policy.Performance {
				t.Errorf("after every caller left: %d holds, policy %s; want 0, performance", len(s.Holds), s.Policy)
			}
			var got [][]any
			if err := st.obj().StoreProperty(Interface+".Holds", &got); err != nil || len(got) != 0 {
				t.Errorf("Holds property = %v, %v; want empty", got, err)
			}
		})
	}
}

// TestRunningHoldCallsCounts: the barrier above counts a HoldPolicy call
// that is still in the service's handler (held there by a busy loop), and
// none once it returned: a count that matched no frame would make the
// barrier wait for nothing.
func TestRunningHoldCallsCounts(t *testing.T) {
	st := startService(t, "", Config{})
	release := st.f.stall(t)
	call := st.obj().Go(Interface+".HoldPolicy", 0, nil, "balance", "r")
	st.f.waitHeld(t, 1)
	if n := runningHoldCalls(); n != 1 {
		t.Fatalf("%d hold calls running while one waits for the loop, want 1", n)
	}
	release()
	if err := (<-call.Done).Err; err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "no hold call running", func() (bool, string) {
		n := runningHoldCalls()
		return n == 0, fmt.Sprint(n)
	})
}
