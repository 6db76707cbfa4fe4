// Command schedpolicyd is the power-aware CPU placement policy daemon.
//
//	schedpolicyd [flags]              run the daemon
//	schedpolicyd probe [flags]        print topology, power source, boost, policy
//
// See schedpolicyd --help and the README.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/schedpolicyd/schedpolicyd/acpi"
	"github.com/schedpolicyd/schedpolicyd/daemon"
	"github.com/schedpolicyd/schedpolicyd/daemon/bus"
	"github.com/schedpolicyd/schedpolicyd/sysfs"
	"github.com/schedpolicyd/schedpolicyd/systemd"
	"github.com/schedpolicyd/schedpolicyd/tree"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "0.1.0-dev"

const usage = `Usage:
  schedpolicyd [flags]            run the daemon (needs root for FUSE and cgroups)
  schedpolicyd probe [flags]      show topology, power source and reason, boost and
                                  the effective policy, without side effects
  schedpolicyd plan [flags]       run the balancer offline on a sysfs root or a
                                  topology preset and print the plan and watts
  schedpolicyd soak [flags]       bounded load run against a mock machine; prints
                                  events, decisions, cpuset writes, errors, peak RSS
  schedpolicyd cleanup [flags]    after an unclean stop: detach the tree left
                                  mounted, remove its directory and lock file
  schedpolicyd version            print the version

Run 'schedpolicyd probe --help', 'schedpolicyd plan --help',
'schedpolicyd soak --help' or 'schedpolicyd cleanup --help' for their flags.

Daemon flags:
`

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run returns the process exit code: 0 success, 1 runtime failure, 2 usage
// error.
func run(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 {
		switch args[0] {
		case "probe":
			return probeMain(args[1:], stdout, stderr)
		case "plan":
			return planMain(args[1:], stdout, stderr)
		case "soak":
			return soakMain(args[1:], stdout, stderr)
		case "cleanup":
			return cleanupMain(args[1:], stdout, stderr)
		case "version", "--version":
			fmt.Fprintln(stdout, "schedpolicyd", version)
			return 0
		}
	}
	return daemonMain(args, stdout, stderr)
}

// parseFlags parses a command's flags the same way everywhere: --help
// prints the usage to stdout and returns 0; a bad flag (flag prints why)
// or an unexpected argument is a usage error, 2. ok is true when the caller
// should go on.
func parseFlags(fl *flag.FlagSet, name string, args []string, stdout, stderr io.Writer) (code int, ok bool) {
	if wantsHelp(args) {
		fl.SetOutput(stdout)
		fl.Usage()
		return 0, false
	}
	if err := fl.Parse(args); err != nil {
		return 2, false
	}
	if fl.NArg() > 0 {
		fmt.Fprintf(stderr, "%s: unexpected argument %q (see --help)\n", name, fl.Arg(0))
		return 2, false
	}
	return 0, true
}

// writeJSON prints v as indented JSON, as --json does, and returns the
// exit status: 1 when it cannot be written, else 0.
func writeJSON(w io.Writer, v any) int {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return 1
	}
	return 0
}

// wantsHelp reports whether args ask for help; help goes to stdout and
// exits 0, unlike a usage error.
func wantsHelp(args []string) bool {
	for _, a := range args {
		switch a {
		case "-h", "-help", "--help":
			return true
		case "--":
			return false
		}
	}
	return false
}

// validate rejects flag values that would make no sense at run time, so a
// typo is a usage error (exit 2) rather than a daemon that limps along.
func validate(cfg daemon.Config) error {
	switch {
	case cfg.TreeDir == "":
		return errors.New("--tree-dir must not be empty")
	case cfg.StateDir == "":
		return errors.New("--state-dir must not be empty")
	}
	// The bounds are package daemon's, which daemon.New checks too (and
	// the configuration file, with its file:line, before this).
	for _, c := range []struct {
		flag  string
		v     time.Duration
		check func(time.Duration) error
	}{
		{"--debounce", cfg.Debounce, daemon.CheckDebounce},
		{"--recheck-interval", cfg.RecheckInterval, daemon.CheckRecheckInterval},
		{"--sample-interval", cfg.SampleInterval, daemon.CheckSampleInterval},
		{"--settle", cfg.Settle, daemon.CheckSettle},
	} {
		if err := c.check(c.v); err != nil {
			return fmt.Errorf("%s %v: %w", c.flag, c.v, err)
		}
	}
	// The words of the settings; "" is the default, as in daemon.New.
	for _, w := range []struct {
		v     string
		parse func(string) error
	}{
		{string(cfg.TreeBackend), func(s string) error { _, err := tree.ParseBackend(s); return err }},
		{string(cfg.Events), func(s string) error { _, err := acpi.ParseEventSource(s); return err }},
		{string(cfg.BoostOnBattery), func(s string) error { _, err := daemon.ParseBoostMode(s); return err }},
		{string(cfg.EPP), func(s string) error { _, err := daemon.ParsePrefMode("epp", s); return err }},
		{string(cfg.PlatformProfile), func(s string) error { _, err := daemon.ParsePrefMode("platform_profile", s); return err }},
		{string(cfg.UPower), func(s string) error { _, err := acpi.ParseUPowerMode(s); return err }},
	} {
		if w.v == "" {
			continue
		}
		if err := w.parse(w.v); err != nil {
			return err
		}
	}
	switch cfg.Bus {
	case "system", "session", "none":
	default:
		// A D-Bus address is transport:key=value[,key=value][;...].
		if !strings.Contains(cfg.Bus, ":") || !strings.Contains(cfg.Bus, "=") {
			return fmt.Errorf("--bus %q: want system, session, none or a D-Bus address such as unix:path=/run/dbus/system_bus_socket", cfg.Bus)
		}
	}
	return nil
}

// resolveCgroupRoot turns the --cgroup-root / cgroup_root words into a
// path: "auto" → defaultCgroupRoot(), "none" → "" (no placement).
func resolveCgroupRoot(cfg *daemon.Config) {
	switch cfg.CgroupRoot {
	case "auto":
		cfg.CgroupRoot = defaultCgroupRoot()
	case "none":
		cfg.CgroupRoot = ""
	}
}

// resolvePlacement turns --placement / placement "auto" into a mode
// (daemon.ResolvePlacement) and returns why it was chosen.
func resolvePlacement(cfg *daemon.Config) string {
	mode, why := daemon.ResolvePlacement(cfg.Placement)
	cfg.Placement = mode
	return why
}

// defaultCgroupRoot picks the managed parent: the v1 cpuset hierarchy when
// it is mounted (systemd never manages it), else a top-level cgroup v2
// directory.
func defaultCgroupRoot() string {
	if _, err := os.Stat("/sys/fs/cgroup/cpuset/cpuset.cpus"); err == nil {
		return "/sys/fs/cgroup/cpuset/schedpolicyd"
	}
	return "/sys/fs/cgroup/schedpolicyd"
}

// daemonMain runs the daemon: it parses the flags, applies the
// configuration file under them and runs until SIGINT or SIGTERM (see
// serveDaemon). It returns the exit status: 0 after a clean stop, 1 when
// the daemon fails, 2 on a usage error (a bad flag or configuration file,
// or a configuration daemon.New refuses).
func daemonMain(args []string, stdout, stderr io.Writer) int {
	cfg, o, code, ok := parseDaemonFlags(args, stdout, stderr)
	if !ok {
		return code
	}
	flagCfg := cfg // as the command line left it; reloads start from here
	fc, err := loadConfig(o.configPath, o.set["config"])
	if err != nil {
		fmt.Fprintf(stderr, "schedpolicyd: %v\n", err)
		return 2
	}
	fc.apply(&cfg, o.set)
	if err := validate(cfg); err != nil {
		fmt.Fprintf(stderr, "schedpolicyd: %v\n", err)
		return 2
	}
	log := daemonLogger(stderr)
	lvl, err := logrus.ParseLevel(fc.LogLevelName(o.logLevel, o.set))
	if err != nil {
		fmt.Fprintf(stderr, "schedpolicyd: --log-level: %v\n", err)
		return 2
	}
	log.SetLevel(lvl)
	// A log line written to a closed pipe (`schedpolicyd | tee log`, then
	// Ctrl-C, which ends tee first) must fail with EPIPE, not end the
	// daemon with SIGPIPE in the middle of its restore: Go's runtime
	// raises SIGPIPE for a write to a broken pipe on fd 1 or 2 unless the
	// signal is ignored or handled (os/signal).
	signal.Ignore(syscall.SIGPIPE)
	resolveCgroupRoot(&cfg)
	placementWhy := resolvePlacement(&cfg)
	cfg.Log = log
	return serveDaemon(cfg, placementWhy, log, o, flagCfg)
}

// daemonOptions are the daemon's flags that are no daemon.Config field.
type daemonOptions struct {
	configPath string          // --config
	logLevel   string          // --log-level, before the file's log_level
	set        map[string]bool // the flags given on the command line, by name
}

// parseDaemonFlags parses the daemon's command line into a daemon.Config,
// whose words (--tree-backend, --events, --boost-on-battery, --upower)
// validate checks, and the other options. ok is false when the caller
// should return code at once: 0 after --help, 2 on a usage error
// (parseFlags).
func parseDaemonFlags(args []string, stdout, stderr io.Writer) (cfg daemon.Config, o daemonOptions, code int, ok bool) {
	fl := flag.NewFlagSet("schedpolicyd", flag.ContinueOnError)
	fl.SetOutput(stderr)
	fl.Usage = func() {
		fmt.Fprint(fl.Output(), usage)
		fl.PrintDefaults()
	}
	fl.StringVar(&cfg.SysfsRoot, "sysfs-root", sysfs.DefaultRoot, "sysfs root to read power_supply, CPU topology and boost from (a mock tree for tests)")
	fl.StringVar(&cfg.CgroupRoot, "cgroup-root", "auto", "managed parent cgroup; each direct child is a workload (auto: /sys/fs/cgroup/cpuset/schedpolicyd on cgroup v1, /sys/fs/cgroup/schedpolicyd on v2; none: no placement)")
	fl.StringVar(&cfg.Placement, "placement", "auto", "how workloads are placed: systemd (units of the --manage slices, through systemd's D-Bus API), cgroupfs (the children of --cgroup-root, by writing cpuset.cpus) or auto (systemd where systemd is PID 1 and /sys/fs/cgroup is cgroup v2, else cgroupfs)")
	fl.Func("manage", "comma-separated slices whose direct child services and scopes are workloads with --placement systemd (default "+strings.Join(daemon.DefaultManage, ",")+")", func(v string) error {
		cfg.Manage = []string{}
		for _, sl := range strings.Split(v, ",") {
			if sl = strings.TrimSpace(sl); sl == "" {
				continue
			}
			if !validSlice(sl) {
				return fmt.Errorf("%q is not a slice name (NAME.slice)", sl)
			}
			cfg.Manage = append(cfg.Manage, sl)
		}
		return nil
	})
	fl.StringVar(&cfg.ProcRoot, "proc-root", "/proc", "procfs root (cgroup v1 usage accounting)")
	fl.StringVar(&cfg.RunRoot, "run-root", "/run", "runtime directory root: users' managers are reached at RUN-ROOT/user/UID/systemd/private (a mock tree for tests)")
	fl.StringVar(&cfg.TreeDir, "tree-dir", daemon.DefaultTreeDir, "where to serve the virtual sysfs tree")
	treeBackend := fl.String("tree-backend", string(tree.BackendAuto), "tree backend: auto (FUSE when /dev/fuse works, else plain files), fuse or plain")
	fl.StringVar(&cfg.StateDir, "state-dir", daemon.DefaultStateDir, "directory for state.json (the user's persisted choices)")
	fl.StringVar(&cfg.Bus, "bus", "system", "the one D-Bus to use, for the daemon's name and the UPower and logind hints: system, session, a bus ADDRESS, or none for no D-Bus at all (no name, no UPower or resume hints)")
	events := fl.String("events", string(acpi.EventsAuto), "power event source: auto (netlink uevents on /sys, fsnotify on a mock root), netlink, fsnotify or none")
	fl.DurationVar(&cfg.Debounce, "debounce", daemon.DefaultDebounce, "delay before re-reading after a power event: 0 (the default, 500ms) to 1m")
	fl.DurationVar(&cfg.RecheckInterval, "recheck-interval", daemon.DefaultRecheckInterval, "re-read the power source this often even without events (0: automatic — every 60s, only while the event sources do not cover the machine; positive: 1s to 24h, always; negative: never)")
	fl.DurationVar(&cfg.SampleInterval, "sample-interval", daemon.DefaultSampleInterval, "workload utilisation sampling period while a workload is busy (10ms to 1h; sampling stops while all are idle)")
	boostOnBattery := fl.String("boost-on-battery", string(daemon.DefaultBoostOnBattery), "cpufreq boost on battery: keep (never touch it), off or on; the start-up value comes back on AC and on exit")
	epp := fl.String("epp", string(daemon.PrefAuto), "the CPUs' energy_performance_preference: auto (moved with the policy where no other daemon owns it; the value found comes back on exit) or off (never touched)")
	platformProfile := fl.String("platform-profile", string(daemon.PrefAuto), "the ACPI platform profile: auto (moved with the policy where no other daemon owns it; the value found comes back on exit) or off (never touched)")
	upower := fl.String("upower", string(daemon.DefaultUPower), "use UPower's OnBattery changes as a hint to re-read power_supply: auto, on or off (UPower is used while it runs, never started by D-Bus activation)")
	fl.BoolVar(&cfg.Logind, "logind", true, "re-read everything after resume from suspend (logind PrepareForSleep, on the --bus; off with --bus none)")
	fl.StringVar(&cfg.AcpidSocket, "acpid-socket", "", "also take hints from acpid's event socket, e.g. /run/acpid.socket (empty: off)")
	fl.DurationVar(&cfg.Settle, "settle", 0, "extra re-read this long after an event-driven one, for firmware that updates late (1ms to 1m; 0: 1s default, negative: off)")
	fl.StringVar(&cfg.MetricsTextfile, "metrics-textfile", "", "write Prometheus metrics for node_exporter's textfile collector to this file, an absolute path ending in .prom, e.g. /var/lib/prometheus/node-exporter/schedpolicyd.prom, whenever a value changes (empty: none)")
	fl.IntVar(&cfg.LowBattery, "low-battery", DefaultLowBattery, "below this percentage of the system batteries' charge, on battery, automatic mode uses powersaving even with power_aware_policy balance, until 5 points above (0: off)")
	taskClock := fl.Bool("task-clock", true, "wake when a packed workload turns busy from perf software counters of its CPU time (perf_event_open; false: CPU pressure and sampling only)")
	cfg.PowerProfilesAPI = DefaultPowerProfilesAPI
	fl.Var((*ppFlag)(&cfg.PowerProfilesAPI), "power-profiles-api", "the power-profiles D-Bus API (net.hadess.PowerProfiles, org.freedesktop.UPower.PowerProfiles) used by GNOME, KDE and powerprofilesctl, given as --power-profiles-api=VALUE (alone: true): auto (follow the power-profiles daemon that owns it, serve it while none does), true (always serve it) or false (neither)")
	fl.StringVar(&o.configPath, "config", DefaultConfigPath, "TOML configuration file, see schedpolicyd.conf(5); flags given here override it")
	fl.StringVar(&o.logLevel, "log-level", "info", "log level: debug, info, warning, error")
	if code, ok = parseFlags(fl, "schedpolicyd", args, stdout, stderr); !ok {
		return cfg, o, code, false
	}
	// The words are checked by validate, with the messages daemon.New
	// gives.
	cfg.TreeBackend, cfg.Events = tree.Backend(*treeBackend), acpi.EventSource(*events)
	cfg.BoostOnBattery, cfg.UPower = daemon.BoostMode(*boostOnBattery), acpi.UPowerMode(*upower)
	cfg.EPP, cfg.PlatformProfile = daemon.PrefMode(*epp), daemon.PrefMode(*platformProfile)
	cfg.NoTaskClock = !*taskClock
	cfg.TreeNoPollHack = true // this process never reads its own tree
	o.set = map[string]bool{}
	fl.Visit(func(f *flag.Flag) { o.set[f.Name] = true })
	return cfg, o, 0, true
}

// serveDaemon runs the daemon with cfg until SIGINT or SIGTERM. SIGHUP
// (systemctl reload) re-reads the configuration file o.configPath on top
// of flagCfg, the command line's configuration; a bad file keeps the
// running configuration, and one that changes what only a start reads
// starts the daemon again in this process. It returns the exit status:
// 0, 1 when the daemon fails, 2 when daemon.New refuses cfg.
func serveDaemon(cfg daemon.Config, placementWhy string, log *logrus.Logger, o daemonOptions, flagCfg daemon.Config) int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	for {
		next, err := runDaemon(ctx, cfg, placementWhy, log, hup, o.configPath, o.set, flagCfg)
		if err == errNewFailed {
			return 2
		}
		if next != nil && ctx.Err() == nil {
			// A reload that changed what only a start reads: every
			// workload was restored; the same process starts again.
			cfg, placementWhy = *next, "reload"
			continue
		}
		if err != nil {
			if os.Geteuid() != 0 && errors.Is(err, fs.ErrPermission) {
				// The defaults are root's: /var/lib, /run, the cgroup tree.
				log.WithError(err).Error("must run as root (or with --state-dir, --tree-dir and --cgroup-root that this user may write, or --cgroup-root none)")
				return 1
			}
			log.WithError(err).Error("exiting")
			return 1
		}
		return 0
	}
}

// errNewFailed: daemon.New refused the configuration (said on stderr).
var errNewFailed = errors.New("daemon.New failed")

// runDaemon runs one daemon with cfg until ctx ends or a reload (hup)
// needs a restart; then next is the configuration to start again with.
func runDaemon(ctx context.Context, cfg daemon.Config, placementWhy string, log *logrus.Logger, hup <-chan os.Signal,
	configPath string, set map[string]bool, flagCfg daemon.Config) (next *daemon.Config, err error) {
	d, err := daemon.New(cfg)
	if err != nil {
		fmt.Fprintf(log.Out, "schedpolicyd: %v\n", err)
		return nil, errNewFailed
	}
	log.WithFields(logrus.Fields{"placement": cfg.Placement, "why": placementWhy}).Info("placement chosen")
	if cfg.Placement == daemon.PlacementCgroupfs {
		if w := daemon.ForeignCgroupRoot(cfg.CgroupRoot); w != "" {
			log.Warn(w)
		}
	}
	if cfg.Placement != daemon.PlacementSystemd && len(cfg.Slices) > 0 {
		// Children of the managed parent are in no slice: the rules stay
		// checked, and apply once placement is systemd.
		log.WithField("placement", cfg.Placement).Warn("[[slice]] rules apply to units with placement \"systemd\" only; here they change nothing")
	}
	runCtx, end := context.WithCancel(ctx)
	defer end()
	restart := make(chan daemon.Config, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-runCtx.Done():
				return
			case <-hup:
				if nc, ok := reload(runCtx, d, log, configPath, set, flagCfg); ok {
					restart <- nc
					end()
					return
				}
			}
		}
	}()
	err = d.Run(runCtx)
	end()
	<-done
	select {
	case nc := <-restart:
		return &nc, err
	default:
		return nil, err
	}
}

// reload re-reads the configuration file on SIGHUP and applies it on top of
// the command line (flagCfg, so a key deleted from the file falls back to
// its flag or default). A bad file keeps the running configuration and
// says why, with file:line. systemd hears RELOADING=1 first and READY=1
// after, whatever the outcome. A file that changes what only a start reads
// (daemon.ReloadNeedsRestart) returns it with restart true: d is told to
// stop for a restart, and the new daemon's READY=1 ends the reload.
func reload(ctx context.Context, d *daemon.Daemon, log *logrus.Logger, path string, set map[string]bool, flagCfg daemon.Config) (next daemon.Config, restart bool) {
	n := systemd.Notifier{}
	n.Reloading()
	// READY=1 carries STATUS= again: the policy line, not a word about the
	// reload, is what `systemctl status` should keep showing.
	defer func() {
		if !restart {
			n.Ready(d.Snapshot().StatusText())
		}
	}()
	fc, err := loadConfig(path, set["config"])
	if err != nil {
		log.WithError(err).Error("reload: keeping the running configuration")
		return daemon.Config{}, false
	}
	cfg := flagCfg
	fc.apply(&cfg, set)
	if err := validate(cfg); err != nil {
		log.WithError(err).Error("reload: keeping the running configuration")
		return daemon.Config{}, false
	}
	resolveCgroupRoot(&cfg)
	resolvePlacement(&cfg)
	cfg.Log = log
	if lvl, err := logrus.ParseLevel(fc.LogLevelName(log.GetLevel().String(), set)); err == nil {
		log.SetLevel(lvl)
	}
	names, err := d.ReloadNeedsRestart(ctx, cfg)
	if err != nil {
		log.WithError(err).Error("reload: keeping the running configuration")
		return daemon.Config{}, false
	}
	if len(names) > 0 {
		log.WithFields(logrus.Fields{"config": path, "settings": names}).Info("reload: these settings are read at start: restoring every workload and starting again in this process (holds end)")
		d.PrepareRestart(names)
		return cfg, true
	}
	if err := d.Reload(ctx, cfg); err != nil {
		log.WithError(err).Error("reload failed")
		return daemon.Config{}, false
	}
	log.WithField("config", path).Info("configuration reloaded")
	return daemon.Config{}, false
}

// ppFlag is --power-profiles-api: "auto", "true" or "false" (also
// "on"/"off"); given alone it is "true", as when it was a boolean flag.
type ppFlag string

func (f *ppFlag) String() string   { return string(*f) }
func (f *ppFlag) IsBoolFlag() bool { return true }
func (f *ppFlag) Set(v string) error {
	switch v {
	case "auto":
		*f = bus.PowerProfilesAuto
	case "true", "on":
		*f = bus.PowerProfilesServe
	case "false", "off":
		*f = bus.PowerProfilesOff
	default:
		return fmt.Errorf("%q: want auto, true or false", v)
	}
	return nil
}
