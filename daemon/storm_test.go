package daemon

// Event storms and load: bounded work for a burst of attribute
// writes, D-Bus calls from many clients while the policy changes, and no
// goroutine left behind (a thousand workloads coming and going is the
// cgroupfs driver's, daemon/placement/cgroupfs/storm_test.go). The
// default sizes keep `go test -race ./...` short; SCHEDPOLICYD_STORM=1
// runs the long versions.

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/godbus/dbus/v5"
	"github.com/sirupsen/logrus"
	"go.uber.org/goleak"

	"github.com/schedpolicyd/schedpolicyd/daemon/bus"
	"github.com/schedpolicyd/schedpolicyd/internal/testutil"
)

func longStorm() bool { return os.Getenv("SCHEDPOLICYD_STORM") == "1" }

// heapInUse is the live heap after two collections.
func heapInUse() uint64 {
	var ms runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&ms)
	return ms.HeapInuse
}

// TestStormAttributeWrites: 10,000 writes to the mock AC's online file in
// a burst (every one an inotify event) give at most one decision per
// debounce window, the final state is right, and the heap does not grow
// with the number of events. The daemon starts and stops inside the test
// and leaves no goroutine behind.
func TestStormAttributeWrites(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	const writes = 10000
	const debounce = 100 * time.Millisecond
	m := newMockLaptop(t)
	d, cancel, done := m.startCfg(t, func(c *Config) {
		c.Debounce = debounce
		c.Settle = -1
		c.SampleInterval = time.Hour // no periodic decisions: count only the storm's
		c.Log.(*logrus.Logger).SetLevel(logrus.InfoLevel)
	})
	heap0 := heapInUse()
	s0 := d.Stats()
	online := filepath.Join(m.sys, "class/power_supply/AC/online")
	start := time.Now()
	for i := range writes {
		// Ends on "1": AC.
		if err := os.WriteFile(online, []byte(fmt.Sprint((i+1)%2)+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	burst := time.Since(start)
	// Settle: the last write's debounce window plus a margin.
	testutil.Eventually(t, "AC at the end", func() (bool, string) {
		return d.Snapshot().PowerSource == "ac", string(d.Snapshot().PowerSource)
	})
	time.Sleep(3 * debounce)
	elapsed := time.Since(start)
	s1 := d.Stats()
	decisions := s1.Decisions - s0.Decisions
	windows := int64(elapsed/debounce) + 1
	t.Logf("%d writes in %v; %d loop events, %d decisions over %v (%d debounce windows), heap %d → %d KiB",
		writes, burst.Round(time.Millisecond), s1.Events-s0.Events, decisions, elapsed.Round(time.Millisecond), windows, heap0>>10, heapInUse()>>10)
	if decisions > windows {
		t.Errorf("%d decisions in %d debounce windows, want at most one per window", decisions, windows)
	}
	if grew := int64(heapInUse()) - int64(heap0); grew > 4<<20 {
		t.Errorf("heap grew by %d KiB over the storm, want flat (< 4 MiB)", grew>>10)
	}
	cancel()
	<-done
}

// TestStormBusCalls: 8 clients on a private bus call the daemon at 1,000
// calls per second in total (property reads, GetAll, Introspect) while a
// ninth changes the policy through SetPolicy; every call succeeds. 2 s by
// default, 5 s with SCHEDPOLICYD_STORM=1.
func TestStormBusCalls(t *testing.T) {
	dur := 2 * time.Second
	if longStorm() {
		dur = 5 * time.Second
	}
	const clients, perClient = 8, 125 // calls per second each
	d, _, _, addr := busDaemon(t, false)
	var calls, failures atomic.Int64
	var firstErr atomic.Value
	fail := func(err error) {
		failures.Add(1)
		firstErr.CompareAndSwap(nil, err.Error())
	}
	stop := time.Now().Add(dur)
	var wg sync.WaitGroup
	// client runs body in a goroutine of its own (wg counts it) on a
	// connection of its own to the daemon's object; a connection that
	// fails is a failure.
	client := func(body func(obj dbus.BusObject)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			conn, err := dbus.Connect(addr)
			if err != nil {
				fail(err)
				return
			}
			defer conn.Close()
			body(conn.Object(bus.Name, bus.ObjectPath))
		}()
	}
	for c := range clients {
		client(func(obj dbus.BusObject) {
			tick := time.NewTicker(time.Second / perClient)
			defer tick.Stop()
			for i := 0; time.Now().Before(stop); i++ {
				<-tick.C
				var err error
				switch (i + c) % 3 {
				case 0:
					_, err = obj.GetProperty(bus.Interface + ".ActivePolicy")
				case 1:
					var all map[string]dbus.Variant
					err = obj.Call("org.freedesktop.DBus.Properties.GetAll", 0, bus.Interface).Store(&all)
				case 2:
					var xml string
					err = obj.Call("org.freedesktop.DBus.Introspectable.Introspect", 0).Store(&xml)
				}
				calls.Add(1)
				if err != nil {
					fail(err)
				}
			}
		})
	}
	var sets atomic.Int64
	client(func(obj dbus.BusObject) {
		pols := []string{"powersaving", "performance", "balance"}
		for i := 0; time.Now().Before(stop); i++ {
			if err := obj.Call(bus.Interface+".SetPolicy", 0, pols[i%3]).Err; err != nil {
				fail(err)
			}
			sets.Add(1)
			time.Sleep(10 * time.Millisecond)
		}
	})
	wg.Wait()
	rate := float64(calls.Load()) / dur.Seconds()
	t.Logf("%d calls from %d clients in %v (%.0f/s), %d SetPolicy, %d failures; daemon: %+v",
		calls.Load(), clients, dur, rate, sets.Load(), failures.Load(), d.Stats())
	if failures.Load() != 0 {
		t.Errorf("%d calls failed, first: %v", failures.Load(), firstErr.Load())
	}
	if sets.Load() == 0 {
		t.Error("no SetPolicy went through")
	}
}
