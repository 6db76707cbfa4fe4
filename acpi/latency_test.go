package acpi

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/schedpolicyd/schedpolicyd/sysfs"
)

// benchMonitor starts m on a copy of the T490 fixture (four supplies) with
// the adapter and USB-C port offline, so BAT0's status alone decides, and
// returns the path of BAT0/status.
func benchMonitor(b *testing.B, events EventSource, src ueventSource) (*Monitor, string) {
	b.Helper()
	root := b.TempDir()
	srcDir := filepath.Join(fixtureDir, "tl-unplug-replug-thinkpad-t490", "sys")
	if err := os.CopyFS(root, os.DirFS(srcDir)); err != nil {
		b.Fatalf("fixture: %v", err)
	}
	fsys := mustFSb(b, root)
	for p, v := range map[string]string{"class/power_supply/AC/online": "0\n", "class/power_supply/ucsi-source-psy-USBC000:001/online": "0\n"} {
		if err := os.WriteFile(fsys.Path(p), []byte(v), 0o644); err != nil {
			b.Fatal(err)
		}
	}
	// The shortest debounce NewMonitor accepts: the timer fires at once,
	// so what is measured is the path, not the debounce.
	m := newMonitor(MonitorConfig{FS: fsys, Events: events, Debounce: time.Nanosecond, Settle: -1, Interval: -1},
		func() (ueventSource, error) { return src, nil })
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); m.Run(ctx) }()
	b.Cleanup(func() { cancel(); <-done })
	<-m.C()
	return m, fsys.Path("class/power_supply/BAT0/status")
}

// BenchmarkUeventToState measures one mock attribute write plus one
// injected power_supply uevent to the delivered State (a full re-read of
// four supplies and boost), with the debounce at 1ns.
func BenchmarkUeventToState(b *testing.B) {
	src := newFakeUevents()
	m, status := benchMonitor(b, EventsNetlink, src)
	msg := psUevent("BAT0")
	values := []string{"Discharging\n", "Charging\n"} // BAT0 starts Charging
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := os.WriteFile(status, []byte(values[i%2]), 0o644); err != nil {
			b.Fatal(err)
		}
		src.ch <- fakeMsg{b: msg}
		select {
		case <-m.C():
		case <-time.After(10 * time.Second):
			b.Fatal("no state")
		}
	}
}

// BenchmarkFsnotifyToState is the same through inotify on the mock root;
// the value is written to a temp file and renamed into place, so no read
// sees a half-written file, and the loop waits for the expected verdict.
func BenchmarkFsnotifyToState(b *testing.B) {
	m, status := benchMonitor(b, EventsFsnotify, nil)
	values := []string{"Discharging\n", "Charging\n"} // BAT0 starts Charging
	want := []Source{Battery, AC}
	tmp := filepath.Join(filepath.Dir(status), ".status.tmp")
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := os.WriteFile(tmp, []byte(values[i%2]), 0o644); err != nil {
			b.Fatal(err)
		}
		if err := os.Rename(tmp, status); err != nil {
			b.Fatal(err)
		}
		for {
			select {
			case st := <-m.C():
				if st.Power.Source != want[i%2] {
					continue
				}
			case <-time.After(10 * time.Second):
				b.Fatal("no state")
			}
			break
		}
	}
}

func mustFSb(b *testing.B, root string) sysfs.FS {
	b.Helper()
	f, err := sysfs.NewFS(root)
	if err != nil {
		b.Fatal(err)
	}
	return f
}

// BenchmarkRead is the re-read alone (power supplies and boost), the bulk
// of the two benchmarks above.
func BenchmarkRead(b *testing.B) {
	m, _ := benchMonitor(b, EventsNone, nil)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		m.read(TriggerPoke)
	}
}
