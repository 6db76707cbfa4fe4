package acpi

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/schedpolicyd/schedpolicyd/internal/testutil"
)

// timelineEvent is one step of a tl-*/events.json (see the fixture README):
// Uevent nil means "every supply named in Set gets a change uevent", an
// empty list means the change is silent.
type timelineEvent struct {
	AtMS     int               `json:"at_ms"`
	Set      map[string]string `json:"set"`
	Uevent   *[]string         `json:"uevent"`
	Expected *Source           `json:"expected"`
	Note     string            `json:"note"`
}

// uevents returns the supplies that get a uevent in this step, sorted.
func (e timelineEvent) uevents() []string {
	if e.Uevent != nil {
		return *e.Uevent
	}
	seen := map[string]bool{}
	var out []string
	for k := range e.Set {
		name, _, _ := strings.Cut(k, "/")
		if !seen[name] {
			seen[name] = true
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out
}

func loadTimeline(t *testing.T, dir string) []timelineEvent {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(fixtureDir, dir, "events.json"))
	if err != nil {
		t.Fatal(err)
	}
	var steps []timelineEvent
	if err := json.Unmarshal(b, &steps); err != nil {
		t.Fatalf("%s/events.json: %v", dir, err)
	}
	return steps
}

// stateLog collects every state the monitor delivers.
type stateLog struct {
	mu     sync.Mutex
	states []State
}

func (l *stateLog) last() State {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.states[len(l.states)-1]
}

func (l *stateLog) len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.states)
}

// collect reads m.C() into a stateLog until C is closed.
func collect(m *Monitor) (*stateLog, <-chan struct{}) {
	l := &stateLog{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for st := range m.C() {
			l.mu.Lock()
			l.states = append(l.states, st)
			l.mu.Unlock()
		}
	}()
	return l, done
}

// timelineConfig is one monitor configuration the timelines run under.
type timelineConfig struct {
	name     string
	debounce time.Duration
	settle   time.Duration // 0 = DefaultSettle
}

// timelineConfigs: the production defaults, and debounces short enough
// that a silent change lands after the debounced re-read (so only the
// settle re-read sees it). The safety net is off in all of them: no
// timeline step may depend on it.
var timelineConfigs = []timelineConfig{
	{name: "defaults", debounce: DefaultDebounce},
	{name: "debounce 100ms", debounce: 100 * time.Millisecond},
	{name: "debounce 1ms", debounce: time.Millisecond},
}

// TestTimelinesUevent drives every tl-* case through the uevent path: a
// Monitor on a copy of the fixture with a fake uevent source, no fsnotify
// and no safety net. Each step writes its attributes, injects exactly the
// uevents it lists (all supplies in "set" when the field is missing, none
// for an empty list) and, when it has an expected value, checks the
// delivered state just before the next step (2 s after the last one), in
// fake time. What makes the silent steps pass is the re-read rule: any
// power_supply uevent re-reads every supply, Debounce after the first
// event of a burst, and once more Settle later.
func TestTimelinesUevent(t *testing.T) {
	cases := fixtureCases(t)
	var dirs []string
	for dir := range cases {
		if strings.HasPrefix(dir, "tl-") {
			dirs = append(dirs, dir)
		}
	}
	sort.Strings(dirs)
	if len(dirs) == 0 {
		t.Fatalf("no tl-* cases in %s", fixtureDir)
	}
	for _, cfg := range timelineConfigs {
		for _, dir := range dirs {
			t.Run(cfg.name+"/"+dir, func(t *testing.T) {
				runTimeline(t, dir, cases[dir].Expected, loadTimeline(t, dir), cfg)
			})
		}
	}
}

func runTimeline(t *testing.T, dir string, initial Source, steps []timelineEvent, cfg timelineConfig) {
	synctest.Test(t, func(t *testing.T) {
		fsys := fixtureRoot(t, dir)
		src := newFakeUevents()
		m := newMonitor(MonitorConfig{FS: fsys, Events: EventsNetlink, Debounce: cfg.debounce, Settle: cfg.settle, Interval: -1, Log: testutil.Logger(t)},
			func() (ueventSource, error) { return src, nil })
		stop := runMonitor(t, m)
		log, done := collect(m)
		synctest.Wait()
		if got := log.last(); got.Power.Source != initial || got.Trigger != TriggerStart {
			t.Fatalf("static fixture: %s (%s, trigger %s), want %s", got.Power.Source, got.Power.Reason, got.Trigger, initial)
		}
		start := time.Now()
		for i, s := range steps {
			time.Sleep(time.Until(start.Add(time.Duration(s.AtMS) * time.Millisecond)))
			keys := make([]string, 0, len(s.Set))
			for k := range s.Set {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			for _, k := range keys {
				testutil.WriteFile(t, fsys.Path("class", "power_supply", k), s.Set[k]+"\n")
			}
			for _, name := range s.uevents() {
				src.send(t, psUevent(name), nil)
			}
			if s.Expected == nil {
				continue
			}
			check := start.Add(time.Duration(s.AtMS)*time.Millisecond + 2*time.Second)
			if i+1 < len(steps) {
				check = start.Add(time.Duration(steps[i+1].AtMS-1) * time.Millisecond)
			}
			time.Sleep(time.Until(check))
			synctest.Wait()
			got := log.last()
			t.Logf("step %d at %d ms (uevents %v): expected %s, got %s by %s: %s", i, s.AtMS, s.uevents(), *s.Expected, got.Power.Source, got.Trigger, got.Power.Reason)
			if got.Power.Source != *s.Expected {
				t.Errorf("step %d at %d ms (%q): %s (%s), want %s", i, s.AtMS, s.Note, got.Power.Source, got.Power.Reason, *s.Expected)
			}
		}
		stop()
		<-done
	})
}

// TestFlappingConnectorOneDecision: an adapter flapping 10 times within
// 200 ms, with a uevent each time, gives exactly one delivered decision,
// the last state, one debounce after the first event; the settle re-read
// that follows finds nothing new.
func TestFlappingConnectorOneDecision(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fsys := fixtureRoot(t, "tl-unplug-replug-thinkpad-t490") // AC online, BAT0 Charging
		testutil.WriteFile(t, fsys.Path("class/power_supply/BAT0/status"), "Discharging\n")
		testutil.WriteFile(t, fsys.Path("class/power_supply/ucsi-source-psy-USBC000:001/online"), "0\n")
		src := newFakeUevents()
		m := newMonitor(MonitorConfig{FS: fsys, Events: EventsNetlink, Interval: -1, Log: testutil.Logger(t)},
			func() (ueventSource, error) { return src, nil })
		stop := runMonitor(t, m)
		log, done := collect(m)
		synctest.Wait()
		if st := log.last(); st.Power.Source != AC {
			t.Fatalf("initial %+v", st)
		}
		start := time.Now()
		for i := range 10 {
			testutil.WriteFile(t, fsys.Path("class/power_supply/AC/online"), fmt.Sprintf("%d\n", i%2)) // 0,1,...,0,1
			src.send(t, psUevent("AC"), nil)
			time.Sleep(20 * time.Millisecond)
		}
		testutil.WriteFile(t, fsys.Path("class/power_supply/AC/online"), "0\n") // settles unplugged
		src.send(t, psUevent("AC"), nil)
		if d := time.Since(start); d > 200*time.Millisecond {
			t.Fatalf("burst took %v", d)
		}
		time.Sleep(10 * time.Second)
		synctest.Wait()
		if n := log.len(); n != 2 {
			t.Fatalf("%d states delivered, want 2 (start + one decision): %+v", n, log.states)
		}
		st := log.last()
		if st.Power.Source != Battery || st.Trigger != TriggerUevent {
			t.Fatalf("decision %+v, want battery by uevent", st)
		}
		if n := m.reads.Load(); n != 3 {
			t.Fatalf("%d reads, want 3 (start, debounced, settle)", n)
		}
		stop()
		<-done
	})
}

// TestSettleReRead: a value that changes silently after the debounced
// re-read is found by the settle re-read, with trigger "settle".
func TestSettleReRead(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fsys := fixtureRoot(t, "ac-offline-battery-unknown")
		src := newFakeUevents()
		m := newMonitor(MonitorConfig{FS: fsys, Events: EventsNetlink, Debounce: 100 * time.Millisecond, Interval: -1, Log: testutil.Logger(t)},
			func() (ueventSource, error) { return src, nil })
		stop := runMonitor(t, m)
		recvState(t, m)
		testutil.WriteFile(t, fsys.Path("class/power_supply/BAT0/status"), "Not charging\n")
		src.send(t, psUevent("BAT0"), nil)
		time.Sleep(150 * time.Millisecond)
		synctest.Wait()
		testutil.WriteFile(t, fsys.Path("class/power_supply/BAT0/status"), "Discharging\n") // silent
		start := time.Now()
		st := recvState(t, m)
		if st.Power.Source != Battery || st.Trigger != TriggerSettle {
			t.Fatalf("state %+v, want battery by settle", st)
		}
		if d := time.Since(start); d != DefaultSettle-50*time.Millisecond {
			t.Fatalf("settle re-read %v after the write, want %v", d, DefaultSettle-50*time.Millisecond)
		}
		stop()
	})
}
