// Command schedpolicyd-bench measures schedpolicyd as a resident daemon side
// by side with power-profiles-daemon: both run from their real
// binaries on a private D-Bus in the same run, and the results are printed
// as a markdown table and written into docs/BENCHMARKS.md.
//
// It needs root (FUSE, real cgroup v1 cpusets, polkitd dropping to its
// user), dbus-daemon, and power-profiles-daemon; polkitd is optional (without
// it power-profiles-daemon refuses every profile switch, so that row is
// skipped). Everything it creates lives in a temporary directory or in a
// cpuset cgroup of its own (schedpolicyd-bench-<random>), removed at exit.
// Run it through `make bench-daemon`; nothing asserts wall-clock figures.
package main

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"
)

type options struct {
	bin, before, ppd, polkitd string
	busDaemon                 string
	idle                      time.Duration
	idleRuns, starts, calls   int
	switches10, switches1000  int
	powerChanges              int
	reactTrials               int
	out                       string
	keep                      bool
	only                      string
	perf                      string
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == spinHelperArg {
		spinHelper()
	}
	var o options
	flag.StringVar(&o.bin, "bin", "bin/schedpolicyd", "schedpolicyd binary to measure")
	flag.StringVar(&o.before, "before", "", "idle phase: a second schedpolicyd binary (e.g. main's build) whose idle cases run beside -bin's, in the same windows, and are reported beside them (empty: none)")
	flag.StringVar(&o.ppd, "ppd", "/usr/libexec/power-profiles-daemon", "power-profiles-daemon binary")
	flag.StringVar(&o.polkitd, "polkitd", "/usr/lib/polkit-1/polkitd", "polkitd binary for power-profiles-daemon's authorization (empty: none; its profile switch is then refused and skipped)")
	flag.StringVar(&o.busDaemon, "dbus-daemon", "dbus-daemon", "dbus-daemon binary for the private bus")
	flag.DurationVar(&o.idle, "idle", 60*time.Second, "idle windows: the first one starts at readiness, the second (the idle figures) right after it, so 60 s after readiness; e.g. 10s while developing")
	flag.IntVar(&o.idleRuns, "idle-runs", 3, "idle runs (fresh daemons each, every run idle side by side at once, each process owning a bus name on a bus of its own; each measures two consecutive windows)")
	flag.IntVar(&o.starts, "starts", 15, "start-up measurements per daemon")
	flag.IntVar(&o.calls, "calls", 2000, "D-Bus Get and GetAll calls per daemon")
	flag.IntVar(&o.switches10, "switches-10", 100, "policy switches with 10 workloads (per path)")
	flag.IntVar(&o.switches1000, "switches-1000", 20, "policy switches with 1,000 workloads (per path)")
	flag.IntVar(&o.powerChanges, "power-changes", 40, "power-source changes")
	flag.IntVar(&o.reactTrials, "react-trials", 20, "trials per case of a packed workload turning busy (each on a fresh daemon, but the one-thread sampling-running trials: on one daemon)")
	flag.StringVar(&o.out, "out", "docs/BENCHMARKS.md", "markdown file whose \"Resident daemon vs power-profiles-daemon\" section is (re)written (empty: print only; with -only, only when given)")
	flag.BoolVar(&o.keep, "keep", false, "keep the temporary directory (daemon logs) for inspection")
	flag.StringVar(&o.only, "only", "", "comma-separated phases to run: idle,start,get,switch,power,react (default all)")
	flag.StringVar(&o.perf, "perf", "", "debugging: run `perf record -g` on our daemon during the named phase (get, switch1000, idle) and write perf.data into the temporary directory (implies -keep)")
	flag.Parse()
	outSet := false
	flag.Visit(func(f *flag.Flag) { outSet = outSet || f.Name == "out" })
	if o.only != "" && !outSet {
		// A partial run would replace the whole table with its rows.
		o.out = ""
	}
	if o.perf != "" {
		o.keep = true
	}
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "schedpolicyd-bench:", err)
		os.Exit(1)
	}
}

func (o options) want(phase string) bool {
	if o.only == "" {
		return true
	}
	for _, p := range strings.Split(o.only, ",") {
		if strings.TrimSpace(p) == phase {
			return true
		}
	}
	return false
}

func run(o options) error {
	if os.Geteuid() != 0 {
		return fmt.Errorf("needs root (FUSE, cgroup cpusets, polkitd)")
	}
	for _, b := range []string{o.bin, o.ppd} {
		if _, err := os.Stat(b); err != nil {
			return fmt.Errorf("missing binary: %w", err)
		}
	}
	bin, err := filepath.Abs(o.bin)
	if err != nil {
		return err
	}
	o.bin = bin
	if o.before != "" {
		if _, err := os.Stat(o.before); err != nil {
			return fmt.Errorf("missing -before binary: %w", err)
		}
		if o.before, err = filepath.Abs(o.before); err != nil {
			return err
		}
	}
	tmp, err := os.MkdirTemp("", "schedpolicyd-bench-")
	if err != nil {
		return err
	}
	env := &env{o: o, tmp: tmp}
	// Clean up on SIGINT/SIGTERM too: daemons, buses and our cgroups.
	sigc := make(chan os.Signal, 1)
	signal.Notify(sigc, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		<-sigc
		env.cleanup()
		os.Exit(130)
	}()
	defer env.cleanup()
	if err := env.setup(); err != nil {
		return err
	}

	r := &report{}
	r.meta = machineInfo(o)
	fmt.Fprintf(os.Stderr, "bench: %s\n", r.meta)
	steps := []struct {
		phase string
		fn    func(*report) error
	}{
		{"start", env.benchStart},
		{"get", env.benchGet},
		{"switch", env.benchSwitch},
		{"power", env.benchPower},
		{"react", env.benchReact},
		{"idle", env.benchIdle},
	}
	for _, s := range steps {
		if !o.want(s.phase) {
			continue
		}
		fmt.Fprintf(os.Stderr, "bench: phase %s\n", s.phase)
		t0 := time.Now()
		if err := s.fn(r); err != nil {
			return fmt.Errorf("%s: %w", s.phase, err)
		}
		fmt.Fprintf(os.Stderr, "bench: phase %s took %v\n", s.phase, time.Since(t0).Round(time.Second))
	}
	md := r.markdown(o)
	fmt.Print(md)
	if o.out != "" {
		if err := writeSection(o.out, md); err != nil {
			return err
		}
		fmt.Fprintf(os.Stderr, "bench: wrote %s\n", o.out)
	}
	if o.keep {
		fmt.Fprintf(os.Stderr, "bench: kept %s\n", tmp)
	}
	return nil
}

func machineInfo(o options) string {
	model := "unknown CPU"
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(l, "model name") {
				if _, v, ok := strings.Cut(l, ":"); ok {
					model = strings.TrimSpace(v)
				}
				break
			}
		}
	}
	kernel := "?"
	var u syscall.Utsname
	if syscall.Uname(&u) == nil {
		var sb strings.Builder
		for _, c := range u.Release {
			if c == 0 {
				break
			}
			sb.WriteByte(byte(c))
		}
		kernel = sb.String()
	}
	ppdVer := "?"
	if out, err := exec.Command("dpkg-query", "-W", "-f=${Version}", "power-profiles-daemon").Output(); err == nil {
		ppdVer = string(out)
	}
	ourVer := "?"
	if out, err := exec.Command(o.bin, "version").Output(); err == nil {
		ourVer = strings.TrimSpace(string(out))
	}
	return fmt.Sprintf("Measured %s on %d CPUs (%s), Linux %s, %s; %s; power-profiles-daemon %s",
		time.Now().UTC().Format("2006-01-02"), runtime.NumCPU(), model, kernel, runtime.Version(), ourVer, ppdVer)
}
