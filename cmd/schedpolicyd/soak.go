package main

// schedpolicyd soak: a bounded load run of the real daemon code against a
// mock machine it builds in a temporary directory (a 4-core/8-thread
// laptop's sysfs with AC and battery, and a cgroup v2 directory tree for
// the workloads). While it runs, the power source flaps, the knob is
// written through the tree, and workloads appear, report CPU time and
// disappear. At the end it prints what was injected and handled, the
// errors, the peak RSS and the goroutines at start and end, and fails on
// any error or leaked goroutine.

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/schedpolicyd/schedpolicyd/daemon"
	"github.com/schedpolicyd/schedpolicyd/tree"
)

const soakUsage = `Usage: schedpolicyd soak [flags]

Runs the daemon for a bounded time against a mock laptop (sysfs and a
cgroup v2 tree in a temporary directory; nothing on this machine is
touched, no bus is joined) while the power source flaps, the knob is
written through the tree and workloads come and go, then prints: events
handled, decisions, cpuset writes, errors, peak RSS and goroutines at start
and end. Exit status 1 if any error was counted or goroutines leaked.

Flags:
`

// soakReport is what soak prints.
type soakReport struct {
	Duration        string `json:"duration"`
	PowerFlips      int64  `json:"power_flips"`
	TreeWrites      int64  `json:"tree_writes"`
	TreeWriteErrors int64  `json:"tree_write_errors"`
	WorkloadsMade   int64  `json:"workloads_created"`
	WorkloadsGone   int64  `json:"workloads_removed"`
	EventsHandled   int64  `json:"events_handled"`
	Decisions       int64  `json:"decisions"`
	CPUSetWrites    int64  `json:"cpuset_writes"`
	Errors          int64  `json:"errors"`
	LoggedErrors    int64  `json:"logged_warnings_and_errors"`
	PeakRSSKiB      int64  `json:"peak_rss_kib"`
	GoroutinesStart int    `json:"goroutines_start"`
	GoroutinesEnd   int    `json:"goroutines_end"`
	// Leaked names each goroutine alive at the end that was not at the
	// start, by its state and innermost function of ours or the library's
	// ("goroutine 42 [select]: github.com/.../daemon.(*Daemon).loop"),
	// the runtime's permanent ones not counted (permanentGoroutine).
	Leaked []string `json:"leaked_goroutines,omitempty"`
}

func soakMain(args []string, stdout, stderr io.Writer) int {
	fl := flag.NewFlagSet("soak", flag.ContinueOnError)
	fl.SetOutput(stderr)
	fl.Usage = func() { fmt.Fprint(fl.Output(), soakUsage); fl.PrintDefaults() }
	dur := fl.Duration("duration", 60*time.Second, "how long to run the load, e.g. 60s")
	maxW := fl.Int("workloads", 64, "most workloads alive at once")
	backend := fl.String("tree-backend", "plain", "tree backend: plain, fuse or auto")
	asJSON := fl.Bool("json", false, "print the figures as JSON")
	verbose := fl.Bool("v", false, "print the daemon's warnings as they happen")
	if code, ok := parseFlags(fl, "schedpolicyd soak", args, stdout, stderr); !ok {
		return code
	}
	if *dur <= 0 || *maxW < 1 {
		fmt.Fprintln(stderr, "schedpolicyd soak: want a positive --duration and --workloads ≥ 1")
		return 2
	}
	dir, err := os.MkdirTemp("", "schedpolicyd-soak-")
	if err != nil {
		fmt.Fprintf(stderr, "schedpolicyd soak: %v\n", err)
		return 1
	}
	defer os.RemoveAll(dir)
	rep, err := runSoak(dir, *dur, *maxW, tree.Backend(*backend), *verbose, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "schedpolicyd soak: %v\n", err)
		return 1
	}
	if *asJSON {
		b, _ := json.MarshalIndent(rep, "", "  ")
		fmt.Fprintln(stdout, string(b))
	} else {
		fmt.Fprintf(stdout, `soak: %s against a mock 4-core/8-thread laptop (cgroup v2 tree, %s tree)
  injected:        %d power flips, %d tree writes (%d refused as invalid, by design), %d workloads created, %d removed
  events handled:  %d
  decisions:       %d
  cpuset writes:   %d
  errors:          %d (cpuset writes refused, tree remount failures); %d warnings/errors logged
  peak RSS:        %d KiB
  goroutines:      %d at start, %d at end (the runtime's signal loop, which signal.Notify starts for good, not counted)
`, rep.Duration, *backend, rep.PowerFlips, rep.TreeWrites, rep.TreeWriteErrors, rep.WorkloadsMade, rep.WorkloadsGone,
			rep.EventsHandled, rep.Decisions, rep.CPUSetWrites, rep.Errors, rep.LoggedErrors, rep.PeakRSSKiB, rep.GoroutinesStart, rep.GoroutinesEnd)
		for _, g := range rep.Leaked {
			fmt.Fprintf(stdout, "  leaked:          %s\n", g)
		}
	}
	if why := soakFailed(rep); why != "" {
		fmt.Fprintf(stderr, "schedpolicyd soak: failed: %s\n", why)
		return 1
	}
	return 0
}

// soakFailed says why a soak run failed ("" it passed): errors counted,
// or goroutines left behind (listed in rep.Leaked).
func soakFailed(rep soakReport) string {
	var why []string
	if rep.Errors > 0 {
		why = append(why, fmt.Sprintf("%d errors (cpuset writes refused, tree remount failures)", rep.Errors))
	}
	if len(rep.Leaked) > 0 {
		why = append(why, fmt.Sprintf("%d goroutines alive at the end that were not at the start: %s", len(rep.Leaked), strings.Join(rep.Leaked, "; ")))
	}
	return strings.Join(why, "; ")
}

// levelCounter counts log entries at warning level and above.
type levelCounter struct {
	mu sync.Mutex
	n  int64
}

func (c *levelCounter) Levels() []logrus.Level {
	return []logrus.Level{logrus.PanicLevel, logrus.FatalLevel, logrus.ErrorLevel, logrus.WarnLevel}
}

func (c *levelCounter) Fire(*logrus.Entry) error {
	c.mu.Lock()
	c.n++
	c.mu.Unlock()
	return nil
}

// runSoak runs the daemon for dur against a mock laptop built under dir,
// with at most maxW workloads alive at once, and returns the figures of
// the run. Its warnings go to stderr when verbose. Errors: the mock
// machine cannot be written, or the daemon does not start or fails.
func runSoak(dir string, dur time.Duration, maxW int, backend tree.Backend, verbose bool, stderr io.Writer) (soakReport, error) {
	sys, managed := filepath.Join(dir, "sys"), filepath.Join(dir, "cgroup", "schedpolicyd")
	if err := soakMachine(sys, managed); err != nil {
		return soakReport{}, err
	}
	log := logrus.New()
	log.SetOutput(io.Discard)
	if verbose {
		log.SetOutput(stderr)
		log.SetLevel(logrus.WarnLevel)
	}
	warned := &levelCounter{}
	log.AddHook(warned)

	before := liveGoroutines()
	rep := soakReport{GoroutinesStart: len(before)}
	d, err := daemon.New(daemon.Config{
		SysfsRoot: sys, CgroupRoot: managed, TreeDir: filepath.Join(dir, "tree"), TreeBackend: backend,
		StateDir: filepath.Join(dir, "state"), Bus: "none", Events: "fsnotify", Debounce: 50 * time.Millisecond,
		RecheckInterval: 5 * time.Second, SampleInterval: 200 * time.Millisecond, Settle: -1, Log: log,
	})
	if err != nil {
		return rep, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	runErr := make(chan error, 1)
	go func() { runErr <- d.Run(ctx) }()
	select {
	case <-d.Ready():
	case err := <-runErr:
		return rep, fmt.Errorf("daemon did not start: %w", err)
	case <-time.After(30 * time.Second):
		return rep, fmt.Errorf("daemon not ready after 30s")
	}

	start := time.Now()
	load := &soakLoad{
		ps: filepath.Join(sys, "class/power_supply"), knob: filepath.Join(dir, "tree", daemon.TreePrefix),
		managed: managed, maxW: maxW, r: rand.New(rand.NewPCG(1, 2)), alive: map[string]int64{}, rep: &rep,
	}
	load.run(start.Add(dur))
	cancel()
	if err := <-runErr; err != nil {
		return rep, fmt.Errorf("daemon: %w", err)
	}
	s := d.Stats()
	rep.Duration = time.Since(start).Round(time.Millisecond).String()
	rep.EventsHandled, rep.Decisions, rep.CPUSetWrites, rep.Errors = s.Events, s.Decisions, s.CPUSetWrites, s.Errors
	warned.mu.Lock()
	rep.LoggedErrors = warned.n
	warned.mu.Unlock()
	rep.PeakRSSKiB = peakRSS()
	// Goroutines wind down asynchronously (timers, watcher readers).
	after := liveGoroutines()
	for i := 0; i < 50 && len(newGoroutines(before, after)) > 0; i++ {
		time.Sleep(20 * time.Millisecond)
		after = liveGoroutines()
	}
	rep.GoroutinesEnd, rep.Leaked = len(after), newGoroutines(before, after)
	return rep, nil
}

// liveGoroutines maps the id of every goroutine alive now to its stack
// (runtime.Stack of all goroutines), without the runtime's permanent ones
// (permanentGoroutine).
func liveGoroutines() map[string]string {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	out := map[string]string{}
	for _, g := range strings.Split(string(buf), "\n\n") {
		head, _, _ := strings.Cut(g, "\n")
		f := strings.Fields(head) // goroutine ID [STATE…]:
		if len(f) < 2 || f[0] != "goroutine" || permanentGoroutine(g) {
			continue
		}
		out[f[1]] = g
	}
	return out
}

// permanentGoroutine reports whether stack is one the runtime keeps for
// the life of the process once started: os/signal's loop, which the first
// signal.Notify starts (the task clock's SIGIO, internal/taskclock) and
// which never ends, whatever the daemon closes.
func permanentGoroutine(stack string) bool {
	return strings.Contains(stack, "os/signal.signal_recv") || strings.Contains(stack, "os/signal.loop")
}

// newGoroutines describes the goroutines of after whose ids are not in
// before, each as its header line and first function, sorted.
func newGoroutines(before, after map[string]string) []string {
	var out []string
	for id, g := range after {
		if _, ok := before[id]; ok {
			continue
		}
		lines := strings.Split(g, "\n")
		desc := strings.TrimSuffix(lines[0], ":")
		if len(lines) > 1 {
			desc += ": " + lines[1]
		}
		out = append(out, desc)
	}
	sort.Strings(out)
	return out
}

// soakLoad is the load of a soak run, counted into rep: the power source
// flaps, the knob is written through the tree, and workloads appear,
// report CPU time and disappear. Its random choices are seeded, so runs
// differ only by timing.
type soakLoad struct {
	ps      string // the mock class/power_supply
	knob    string // the tree's knob directory
	managed string // the managed parent cgroup, whose children are workloads
	maxW    int    // most workloads alive at once
	r       *rand.Rand
	alive   map[string]int64 // workload → usage_usec
	next    int              // the number of the next workload's name
	battery bool             // the mock machine runs on battery
	rep     *soakReport
}

// soakKnobWrites are the writes to the tree's knob files, picked at
// random; "bogus" is refused, by design.
var soakKnobWrites = []struct{ file, value string }{
	{"power_aware", "1"}, {"power_aware", "2"}, {"power_aware", "0"}, {"power_aware_policy", "balance"},
	{"power_aware_policy", "powersaving"}, {"current_sched_policy", "powersaving"}, {"power_aware", "bogus"},
	{"power_aware", "1"},
}

// run injects the load until end: the power source every 20ms, a knob
// write every 50ms, workloads every 30ms.
func (l *soakLoad) run(end time.Time) {
	powerTick := time.NewTicker(20 * time.Millisecond)
	treeTick := time.NewTicker(50 * time.Millisecond)
	wlTick := time.NewTicker(30 * time.Millisecond)
	defer powerTick.Stop()
	defer treeTick.Stop()
	defer wlTick.Stop()
	for time.Now().Before(end) {
		select {
		case <-powerTick.C:
			l.power()
		case <-treeTick.C:
			l.writeKnob()
		case <-wlTick.C:
			l.workloads()
		}
	}
}

// power writes the power source again, flipping it one time in four.
func (l *soakLoad) power() {
	// Bursts of flapping: most ticks write the same value again.
	if l.r.IntN(4) == 0 {
		l.battery = !l.battery
		l.rep.PowerFlips++
	}
	online, status := "1", "Charging"
	if l.battery {
		online, status = "0", "Discharging"
	}
	os.WriteFile(l.ps+"/AC/online", []byte(online+"\n"), 0o644)
	os.WriteFile(l.ps+"/BAT0/status", []byte(status+"\n"), 0o644)
}

// writeKnob writes one of soakKnobWrites through the tree.
func (l *soakLoad) writeKnob() {
	v := soakKnobWrites[l.r.IntN(len(soakKnobWrites))]
	l.rep.TreeWrites++
	if err := writeTreeFile(filepath.Join(l.knob, v.file), v.value); err != nil {
		l.rep.TreeWriteErrors++
	}
}

// workloads creates a workload (two times in three, below maxW) or
// removes one, then adds CPU time to every live one.
func (l *soakLoad) workloads() {
	if len(l.alive) < l.maxW && (len(l.alive) == 0 || l.r.IntN(3) > 0) {
		name := fmt.Sprintf("w%06d", l.next)
		l.next++
		w := filepath.Join(l.managed, name)
		if os.Mkdir(w, 0o755) == nil {
			os.WriteFile(w+"/cpuset.cpus", nil, 0o644)
			os.WriteFile(w+"/cpuset.cpus.effective", []byte("0-7\n"), 0o644)
			os.WriteFile(w+"/cpu.stat", []byte("usage_usec 0\n"), 0o644)
			l.alive[name] = 0
			l.rep.WorkloadsMade++
		}
	} else if len(l.alive) > 0 {
		for name := range l.alive {
			os.RemoveAll(filepath.Join(l.managed, name))
			delete(l.alive, name)
			l.rep.WorkloadsGone++
			break
		}
	}
	for name, use := range l.alive {
		use += int64(l.r.IntN(60000)) // up to 2 CPUs over 30 ms
		l.alive[name] = use
		os.WriteFile(filepath.Join(l.managed, name, "cpu.stat"), []byte("usage_usec "+strconv.FormatInt(use, 10)+"\n"), 0o644)
	}
}

// writeTreeFile writes value into a tree file with one write(2), as echo
// does.
func writeTreeFile(path, value string) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		return err
	}
	_, err = f.Write([]byte(value + "\n"))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// peakRSS is VmHWM from /proc/self/status, in KiB (0 if unreadable).
func peakRSS() int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			n, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return n
		}
	}
	return 0
}

// soakMachine writes a mock 4-core/8-thread laptop (one package, SMT
// siblings n and n+4, one shared L3) with an AC adapter and a battery, and
// a cgroup v2 tree whose managed parent has the cpuset controller.
func soakMachine(sys, managed string) error {
	files := map[string]string{
		"devices/system/cpu/online":        "0-7",
		"devices/system/cpu/possible":      "0-7",
		"class/power_supply/AC/type":       "Mains",
		"class/power_supply/AC/online":     "1",
		"class/power_supply/BAT0/type":     "Battery",
		"class/power_supply/BAT0/present":  "1",
		"class/power_supply/BAT0/status":   "Charging",
		"class/power_supply/BAT0/scope":    "System",
		"devices/system/cpu/cpufreq/boost": "1",
	}
	cg := map[string]string{
		filepath.Join(managed, "../cgroup.controllers"):     "cpuset cpu io memory",
		filepath.Join(managed, "../cgroup.subtree_control"): "cpuset cpu",
		filepath.Join(managed, "cgroup.controllers"):        "cpuset cpu",
		filepath.Join(managed, "cgroup.subtree_control"):    "cpuset",
		filepath.Join(managed, "cpuset.cpus.effective"):     "0-7",
	}
	for c := range 8 {
		core := c % 4
		t := fmt.Sprintf("devices/system/cpu/cpu%d/topology/", c)
		files[t+"core_id"] = strconv.Itoa(core)
		files[t+"physical_package_id"] = "0"
		files[t+"core_cpus_list"] = fmt.Sprintf("%d,%d", core, core+4)
		files[t+"package_cpus_list"] = "0-7"
		cache := fmt.Sprintf("devices/system/cpu/cpu%d/cache/index3/", c)
		files[cache+"level"] = "3"
		files[cache+"type"] = "Unified"
		files[cache+"shared_cpu_list"] = "0-7"
	}
	for rel, v := range files {
		cg[filepath.Join(sys, rel)] = v
	}
	for p, v := range cg {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(p, []byte(v+"\n"), 0o644); err != nil {
			return err
		}
	}
	return nil
}
