package daemon

// The bounds on holds, documented, and the benchmarks of holds through
// the bus. (Holds of callers that leave the bus at once: daemon/bus's
// TestHoldsOfCallersThatLeaveAtOnce; the bounds, cookies and which hold
// wins: decider_test.go; how a refused hold reaches a caller: daemon/bus's
// TestHoldsBoundedByDaemon.)

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/godbus/dbus/v5"
	"github.com/sirupsen/logrus"

	"github.com/schedpolicyd/schedpolicyd/daemon/bus"
	"github.com/schedpolicyd/schedpolicyd/internal/testutil"
)

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
