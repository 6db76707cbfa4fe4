// Command schedpolicyctl queries and controls schedpolicyd over D-Bus.
//
//	schedpolicyctl [--bus BUS] status [--json]
//	schedpolicyctl set POLICY
//	schedpolicyctl auto 0|1|2
//	schedpolicyctl reset
//	schedpolicyctl watch [--json]
//	schedpolicyctl top
//	schedpolicyctl workloads [--json]
//	schedpolicyctl exempt UNIT|WORKLOAD
//	schedpolicyctl unexempt UNIT|WORKLOAD
//	schedpolicyctl workload-policy NAME performance|none
//	schedpolicyctl run [--name NAME] -- CMD [ARGS...]
//	schedpolicyctl launch --policy POLICY [--reason TEXT] -- CMD [ARGS...]
//	schedpolicyctl energy [--json]
//	schedpolicyctl energy --compare [--duration D] [--interval I] [--settle S] [--policies P,P...] [--json]
//
// It talks only to org.schedpolicyd.SchedPolicy1 on the bus (godbus and the
// standard library; it does not import the daemon) and is documented in
// schedpolicyctl(1). Exit codes are the exit* constants below.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "0.1.0-dev"

// The daemon's D-Bus names (daemon/bus: bus.Name, bus.ObjectPath,
// bus.Interface), repeated here so the client does not import the daemon.
const (
	busName    = "org.schedpolicyd.SchedPolicy1"
	objectPath = "/org/schedpolicyd/SchedPolicy1"
	iface      = "org.schedpolicyd.SchedPolicy1"
)

// Exit codes. run and launch exit with the command's own status once it has
// started; before that, 126 means the command could not be executed and
// 127 that it was not found (as env(1) and nice(1) do).
const (
	exitOK           = 0 // success
	exitFailure      = 1 // schedpolicyd not running, bus unreachable, call failed
	exitUsage        = 2 // bad command line
	exitAccessDenied = 3 // the daemon (polkit) refused the caller
	exitInvalid      = 4 // the daemon or the client rejected a value
	exitExists       = 5 // run: a workload with that name already exists
	exitCannotExec   = 126
	exitNotFound     = 127
)

const usageText = `Usage: schedpolicyctl [--bus BUS] COMMAND [ARGS...]

Query and control schedpolicyd, the power-aware CPU placement daemon, over
D-Bus.

Commands:
  status [--json]                  policy, power source and reason, knob, boost,
                                   holds and workloads
  set POLICY                       choose performance, balance or powersaving
                                   (like writing current_sched_policy)
  auto 0|1|2                       set the knob: 0 always performance,
                                   1 automatic, 2 always power-aware
  reset                            forget the explicit choices: back to the
                                   configuration's knob
  watch [--json]                   print a line per change until interrupted
  top                              the machine as the balancer sees it, live
                                   (one plain snapshot when not on a terminal)
  workloads [--json]               list managed workloads
  exempt UNIT|WORKLOAD             take a unit or workload (or a glob of them)
                                   out of placement: its original CPUs back
  unexempt UNIT|WORKLOAD           place it again
  workload-policy NAME performance|none
                                   keep a workload on every CPU it may use,
                                   or (none) clear that
  run [--name NAME] -- CMD [ARGS]  run CMD in a new managed workload
  launch --policy POLICY [--reason TEXT] -- CMD [ARGS]
                                   hold POLICY while CMD runs
  rebalance                        re-read the power source and re-plan now
  energy [--json]                  measured energy and average watts per policy
                                   beside the energy model's estimate
  energy --compare [--duration D]  measure the policies against each other
                                   under your own work (holds each in turn)
  version                          print the version
  help [COMMAND]                   show help

Options (before or after the command):
  --bus BUS    system (default), session, or a D-Bus address such as
               unix:path=/run/dbus/system_bus_socket
  --json       machine-readable output (read commands)
  -h, --help   show help

Exit status: 0 success, 1 schedpolicyd not running or a bus error, 2 usage
error, 3 access denied, 4 invalid value, 5 workload exists. run and launch
exit with the command's status (126 cannot execute, 127 not found).
See schedpolicyctl(1).
`

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// globals are the options every command accepts.
type globals struct {
	bus  string
	json bool
}

// command is one subcommand: its synopsis, help text and implementation.
type command struct {
	name     string
	synopsis string
	help     string
	json     bool // accepts --json
	// flags adds the command's own flags to fs, storing into c; run
	// executes with the positional arguments left after flag parsing.
	flags func(fs *flag.FlagSet, c *cli)
	run   func(c *cli, args []string) int
}

// cli carries the state of one invocation.
type cli struct {
	g      globals
	stdout io.Writer
	stderr io.Writer
	// command-specific options filled by flags
	name   string
	policy string
	reason string
	// energy --compare's options (compare.go)
	compare                                         bool
	compareDuration, compareInterval, compareSettle time.Duration
	comparePolicies                                 string
	// given records the flags present on the command line.
	given map[string]bool
}

// usageError is printed with a hint at --help and exits 2.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error { return usageError{fmt.Sprintf(format, args...)} }

// run parses args and executes the command, returning the exit code.
func run(args []string, stdout, stderr io.Writer) int {
	c := &cli{g: globals{bus: "system"}, stdout: stdout, stderr: stderr}
	// Global options before the command.
	gfs := newFlagSet("schedpolicyctl")
	c.globalFlags(gfs, true)
	help := gfs.Bool("help", false, "show help")
	gfs.BoolVar(help, "h", false, "show help")
	if err := gfs.Parse(args); err != nil {
		return c.usage("", err)
	}
	rest := gfs.Args()
	if *help || len(rest) == 0 {
		if len(rest) == 0 && !*help {
			fmt.Fprint(stderr, usageText)
			return exitUsage
		}
		fmt.Fprint(stdout, usageText)
		return exitOK
	}
	name, rest := rest[0], rest[1:]
	switch name {
	case "help":
		if len(rest) == 0 {
			fmt.Fprint(stdout, usageText)
			return exitOK
		}
		if rest[0] == "help" || rest[0] == "version" {
			fmt.Fprint(stdout, usageText)
			return exitOK
		}
		cmd, ok := commands()[rest[0]]
		if !ok {
			return c.usage("", usagef("unknown command %q", rest[0]))
		}
		cmd.printHelp(stdout)
		return exitOK
	case "version", "--version":
		fmt.Fprintln(stdout, "schedpolicyctl", version)
		return exitOK
	}
	cmd, ok := commands()[name]
	if !ok {
		return c.usage("", usagef("unknown command %q", name))
	}
	fs := newFlagSet("schedpolicyctl " + name)
	c.globalFlags(fs, cmd.json)
	if cmd.flags != nil {
		cmd.flags(fs, c)
	}
	if wantsHelp(rest) {
		cmd.printHelp(stdout)
		return exitOK
	}
	if err := fs.Parse(rest); err != nil {
		return c.usage(name, err)
	}
	c.given = map[string]bool{}
	fs.Visit(func(f *flag.Flag) { c.given[f.Name] = true })
	if err := checkBus(c.g.bus); err != nil {
		return c.usage(name, err)
	}
	return cmd.run(c, fs.Args())
}

func newFlagSet(name string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard) // errors are printed by cli.usage
	return fs
}

// globalFlags registers --bus and, when the command reads, --json. Values
// given before the command are the defaults, so either position works.
func (c *cli) globalFlags(fs *flag.FlagSet, withJSON bool) {
	fs.StringVar(&c.g.bus, "bus", c.g.bus, "system, session or a D-Bus address")
	if withJSON {
		fs.BoolVar(&c.g.json, "json", c.g.json, "print JSON")
	}
}

// checkBus validates --bus: system, session or an address
// transport:key=value[,...].
func checkBus(b string) error {
	switch {
	case b == "system" || b == "session":
		return nil
	case strings.Contains(b, ":") && strings.Contains(b, "="):
		return nil
	}
	return usagef("--bus %q: want system, session or a D-Bus address such as unix:path=/run/dbus/system_bus_socket", b)
}

// usage reports err (a flag or usage error) for command name and returns 2.
func (c *cli) usage(name string, err error) int {
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprint(c.stdout, usageText)
		return exitOK
	}
	prog := "schedpolicyctl"
	hint := "schedpolicyctl --help"
	if name != "" {
		prog += " " + name
		hint = "schedpolicyctl " + name + " --help"
	}
	fmt.Fprintf(c.stderr, "%s: %v\nTry '%s'.\n", prog, err, hint)
	return exitUsage
}

// wantsHelp reports whether args ask for help before any "--".
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

func (cmd command) printHelp(w io.Writer) {
	fmt.Fprintf(w, "Usage: schedpolicyctl %s\n\n%s\n", cmd.synopsis, strings.TrimSpace(cmd.help))
	fmt.Fprintln(w, "\nOptions:")
	fmt.Fprintln(w, "  --bus BUS          system (default), session, or a D-Bus address")
	if cmd.json {
		fmt.Fprintln(w, "  --json             print JSON instead of text")
	}
	fs := flag.NewFlagSet("", flag.ContinueOnError)
	if cmd.flags != nil {
		cmd.flags(fs, &cli{})
	}
	fs.VisitAll(func(f *flag.Flag) {
		name, usage := flag.UnquoteUsage(f)
		left := "--" + f.Name
		if name != "" {
			left += " " + name
		}
		fmt.Fprintf(w, "  %-18s %s\n", left, usage)
	})
	fmt.Fprintln(w, "  -h, --help         show this help")
}

// commands returns the command table.
func commands() map[string]command {
	list := []command{
		{
			name: "status", synopsis: "status [--json]", json: true, run: (*cli).status,
			help: `Show the effective policy and why, the power source, the knob
(power_aware and power_aware_policy), boost, active holds and the managed
workloads; then each workload placed on fewer CPUs than it may use (its
CPUs, its class and the policy that placed it, and the command that
exempts it), and the exempt list.`,
		},
		{
			name: "exempt", synopsis: "exempt UNIT|WORKLOAD", run: (*cli).exempt,
			help: `Take a unit (app-firefox-1234.scope, build.service) or a workload of the
managed parent out of placement: it gets its original AllowedCPUs=
(cpuset.cpus) back at once and is not placed until 'unexempt'; kept
across restarts. The name may be a glob (path.Match: 'app-steam*.scope',
quoted for the shell) and may name a manager: system/NAME, user:UID/NAME.
Without one, run as a user other than root it means your own units
(user:UID/NAME) when it names one of them or nothing running now, and
may so name units still to come; a name only other managers' units have
(a system service) means those, which needs root or the polkit action
org.schedpolicyd.exempt. Your own units need no authorisation. Prints the
entry made. Exempting twice changes nothing.`,
		},
		{
			name: "unexempt", synopsis: "unexempt UNIT|WORKLOAD", run: (*cli).unexempt,
			help: `Place again what 'exempt' took out: the entry it printed, or the name
you gave it (yours first). Entries of the configuration file's exempt
setting are removed there. Authorised as exempt.`,
		},
		{
			name: "workload-policy", synopsis: "workload-policy NAME performance|none", run: (*cli).workloadPolicy,
			help: `Set a workload's own policy (D-Bus SetWorkloadPolicy): performance keeps
it on every CPU it may use whatever the machine's policy (a unit: its
original AllowedCPUs=), none gives it the machine's policy again and
takes back a cgroup released because someone else wrote its
cpuset.cpus. NAME as 'workloads' lists it. Needs root or the polkit
action org.schedpolicyd.set-policy.`,
		},
		{
			name: "set", synopsis: "set POLICY", run: (*cli).set,
			help: `Choose a policy explicitly: POLICY is exactly performance, balance or
powersaving, and the effect is that of writing current_sched_policy:
performance sets power_aware to 0; balance or powersaving set power_aware to 2
and power_aware_policy to POLICY. An explicit choice cancels all holds, is
saved across restarts and wins over the configuration file's power_aware
and power_aware_policy for good, on the power source it was made on (see
reset). Needs root or the polkit action org.schedpolicyd.set-policy.`,
		},
		{
			name: "auto", synopsis: "auto 0|1|2", run: (*cli).auto,
			help: `Set the knob power_aware: 0 always performance, 1 automatic (power-aware
only on positive evidence of battery), 2 always power-aware. Like set, an
explicit choice, saved until reset. Needs root or the polkit action
org.schedpolicyd.set-policy.`,
		},
		{
			name: "reset", synopsis: "reset", run: (*cli).reset,
			help: `Forget every explicit choice (set, auto, a write to the tree, the
power-profiles slider; on every power source) and return to the
configuration file's power_aware and power_aware_policy (the built-in
default without one; the followed power profile's while the daemon follows
another power-profiles daemon). Holds stay. status says where the knob in
force comes from. Needs root or the polkit action
org.schedpolicyd.set-policy.`,
		},
		{
			name: "watch", synopsis: "watch [--json]", json: true, run: (*cli).watch,
			help: `Print the current state, then one line per change (changed properties,
PolicyChanged, the daemon leaving or joining the bus) until interrupted with
Ctrl-C. A line shows only properties that look different from how they were
last shown: workloads appear as NAME:CPUS, so a change of their utilisation
alone prints nothing. With --json every line is one JSON object, which
includes the utilisation.`,
		},
		{
			name: "top", synopsis: "top", run: (*cli).top,
			help: `Show the machine as the balancer sees it and keep the view up to date:
the policy and why, the power source, boost, the measured watts of the
current policy on this power source (when the daemon measures energy), the
packages, LLCs and cores with each CPU's utilisation and the workloads that
hold it (by letter), and the workloads. The daemon measures utilisation per
workload, so a CPU's figure is the workloads' utilisation spread over their
CPUs. It changes only when the daemon signals a change; it never polls.
Keys: q quits, up/down and PgUp/PgDn scroll. When standard output is not a
terminal it prints one snapshot, 80 columns wide, and exits.`,
		},
		{
			name: "workloads", synopsis: "workloads [--json]", json: true, run: (*cli).workloads,
			help: `List the managed workloads: name, class (workload, service, user or
a managed slice's name), CPUs (cpulist), utilisation in CPUs,
per-workload policy override and cgroup directory.`,
		},
		{
			name: "run", synopsis: "run [--name NAME] -- CMD [ARGS...]", run: (*cli).runCmd,
			flags: func(fs *flag.FlagSet, c *cli) {
				fs.StringVar(&c.name, "name", "", "workload `NAME` (default: the command's name and this process's pid)")
			},
			help: `Create a new managed workload, move this process into it, then execute
CMD in place (so CMD keeps this process's pid, stdin, stdout and signals).
NAME: 1-64 bytes, no "/", not "." or "..", no control characters; an
existing name is an error (exit 5). Needs root or the polkit action
org.schedpolicyd.set-policy, and schedpolicyd must manage a cgroup.`,
		},
		{
			name: "launch", synopsis: "launch --policy POLICY [--reason TEXT] -- CMD [ARGS...]", run: (*cli).launch,
			flags: func(fs *flag.FlagSet, c *cli) {
				fs.StringVar(&c.policy, "policy", "", "`POLICY` to hold: performance, balance or powersaving (required)")
				fs.StringVar(&c.reason, "reason", "", "`TEXT`: why, shown in status (default: the command line)")
			},
			help: `Hold POLICY while CMD runs: start CMD, wait for it, release the hold,
and exit with CMD's status. Signals (SIGINT, SIGTERM, SIGHUP, SIGQUIT,
SIGUSR1, SIGUSR2) are forwarded to CMD. The daemon also drops the hold if
schedpolicyctl dies. When holds disagree the power-saving one wins; an
explicit 'set' or 'auto' cancels holds.`,
		},
		{
			name: "rebalance", synopsis: "rebalance", run: (*cli).rebalance,
			help: `Ask the daemon to re-read the power source and re-plan now.`,
		},
		{
			name: "energy", synopsis: "energy [--json] [--compare [--duration D] [--interval I] [--settle S] [--policies P,P...]]", json: true, run: (*cli).energy,
			flags: func(fs *flag.FlagSet, c *cli) {
				fs.BoolVar(&c.compare, "compare", false, "measure the policies against each other under your own work (see below)")
				fs.DurationVar(&c.compareDuration, "duration", defaultCompareDuration, "--compare: how long to compare (`D`, default 30m, at most 168h)")
				fs.DurationVar(&c.compareInterval, "interval", defaultCompareInterval, "--compare: each measured interval (`I`, default 1m, 2s to 1h)")
				fs.DurationVar(&c.compareSettle, "settle", defaultCompareSettle, "--compare: wait this long after each switch before measuring (`S`, default 5s, 1s to 10m)")
				fs.StringVar(&c.comparePolicies, "policies", strings.Join(policies, ","), "--compare: the policies to compare (`P,P...`, default performance,balance,powersaving), the first the baseline")
			},
			help: `Show the energy measured under each policy and power source (RAPL
package counters, or the system batteries' discharge while on battery):
joules, the time they were measured over and the average power, beside
the energy model's estimate for the managed workloads' current load under
the same policy. The daemon first closes the running segment
(RefreshEnergy), so the figures are up to date. Needs no authorisation.

With --compare, measure instead: hold each policy in turn (HoldPolicy),
in a random order each round, let it settle, and take the daemon's
measured energy over one interval; repeat for --duration while you work
as usual. Intervals in which the policy held was not in force, the power
source changed, the machine suspended or the meter could not count are
discarded and said. The result is each policy's mean power with a 95 %
confidence interval, and each policy's difference from the first with
its own: conclusive when it excludes zero, else about how many more
intervals would tell. Progress goes to standard error. Ctrl-C stops early
and prints what was measured; the hold ends with the command however it
ends, so nothing is left changed. It measures with what the daemon
measures: RAPL counters, or the batteries while on battery (without
either it stops at once and says so). Needs root or the polkit action
org.schedpolicyd.set-policy (for the holds).`,
		},
	}
	m := map[string]command{}
	for _, c := range list {
		m[c.name] = c
	}
	return m
}
