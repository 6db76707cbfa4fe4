package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unicode"

	"github.com/godbus/dbus/v5"

	"github.com/schedpolicyd/schedpolicyd/internal/names"
)

// policies are the names SetPolicy and HoldPolicy accept.
var policies = []string{"performance", "balance", "powersaving"}

// checkPolicy rejects anything but the three policy names, as the daemon
// would, so a typo fails fast with exit 4 and without a bus round trip.
func checkPolicy(p string) error {
	for _, ok := range policies {
		if p == ok {
			return nil
		}
	}
	return &cliError{exitInvalid, fmt.Sprintf("invalid policy %q: want performance, balance or powersaving", p)}
}

func (c *cli) set(args []string) int {
	if len(args) != 1 {
		return c.usage("set", usagef("want exactly one POLICY (performance, balance or powersaving)"))
	}
	if err := checkPolicy(args[0]); err != nil {
		return c.fail(err)
	}
	return c.simpleCall("SetPolicy", args[0])
}

// parseKnob parses auto's argument: exactly 0, 1 or 2.
func parseKnob(s string) (uint32, error) {
	switch s {
	case "0", "1", "2":
		return uint32(s[0] - '0'), nil
	}
	return 0, &cliError{exitInvalid, fmt.Sprintf("invalid mode %q: want 0 (always performance), 1 (automatic) or 2 (always power-aware)", s)}
}

func (c *cli) auto(args []string) int {
	if len(args) != 1 {
		return c.usage("auto", usagef("want exactly one mode: 0, 1 or 2"))
	}
	mode, err := parseKnob(args[0])
	if err != nil {
		return c.fail(err)
	}
	return c.simpleCall("SetPowerAware", mode)
}

func (c *cli) reset(args []string) int {
	if len(args) > 0 {
		return c.usage("reset", usagef("unexpected argument %q", args[0]))
	}
	return c.simpleCall("ResetKnob")
}

func (c *cli) rebalance(args []string) int {
	if len(args) > 0 {
		return c.usage("rebalance", usagef("unexpected argument %q", args[0]))
	}
	return c.simpleCall("Rebalance")
}

func (c *cli) simpleCall(method string, args ...any) int {
	cl, err := c.dial()
	if err != nil {
		return c.fail(err)
	}
	defer cl.Close()
	if err := cl.call(method, nil, args...); err != nil {
		return c.fail(err)
	}
	return exitOK
}

// watchEvent is one line of `watch --json`.
type watchEvent struct {
	Time    string         `json:"time"`              // RFC 3339 with ms
	Event   string         `json:"event"`             // state | changed | policy-changed | daemon-stopped | daemon-started
	Changed map[string]any `json:"changed,omitempty"` // property → new value
	Policy  string         `json:"policy,omitempty"`
	Reason  string         `json:"reason,omitempty"`
}

// formatChanged renders changed properties as "Name=value ..." in name
// order; compound values (Workloads, Holds) are summarised.
func formatChanged(changed map[string]dbus.Variant) string {
	names := make([]string, 0, len(changed))
	for n := range changed {
		names = append(names, n)
	}
	sort.Strings(names)
	parts := make([]string, 0, len(names))
	for _, n := range names {
		parts = append(parts, n+"="+formatValue(n, changed[n]))
	}
	return strings.Join(parts, " ")
}

func formatValue(name string, v dbus.Variant) string {
	switch name {
	case "Workloads":
		ws, err := workloadsFrom(v)
		if err != nil {
			return v.String()
		}
		var b []string
		for _, w := range ws {
			b = append(b, printable(w.Name)+":"+w.CPUs)
		}
		return "[" + strings.Join(b, ",") + "]"
	case "Holds":
		hs, err := holdsFrom(v)
		if err != nil {
			return v.String()
		}
		var b []string
		for _, h := range hs {
			b = append(b, fmt.Sprintf("#%d:%s", h.Cookie, h.Policy))
		}
		return "[" + strings.Join(b, ",") + "]"
	case "LastChange":
		var us uint64
		if v.Store(&us) == nil && us > 0 {
			return time.UnixMicro(int64(us)).UTC().Format(time.RFC3339)
		}
	}
	switch x := v.Value().(type) {
	case string:
		if x == "" || strings.ContainsAny(x, " \t\"") || strings.IndexFunc(x, isControl) >= 0 {
			return strconv.Quote(x)
		}
		return x
	}
	return fmt.Sprint(v.Value())
}

// jsonValue converts a changed property to a JSON-friendly value.
func jsonValue(name string, v dbus.Variant) any {
	switch name {
	case "Workloads":
		if ws, err := workloadsFrom(v); err == nil {
			return ws
		}
	case "Holds":
		if hs, err := holdsFrom(v); err == nil {
			return hs
		}
	}
	return v.Value()
}

// changeFilter remembers how watch last rendered each property, so that a
// PropertiesChanged whose values all render as shown before prints
// nothing: the daemon announces every change of the Workloads property,
// utilisation included, which the text line does not show ("changed
// Workloads=[build:0-3]" ten times a second otherwise). The JSON line
// shows the utilisation, so there a change of it is visible and kept.
type changeFilter struct {
	render func(name string, v dbus.Variant) string
	shown  map[string]string // property → as last rendered
}

func newChangeFilter(asJSON bool) *changeFilter {
	render := formatValue
	if asJSON {
		render = func(name string, v dbus.Variant) string {
			b, _ := json.Marshal(jsonValue(name, v))
			return string(b)
		}
	}
	return &changeFilter{render: render, shown: map[string]string{}}
}

// visible records changed and returns the properties whose rendering
// differs from what was last shown (or that were never shown); empty when
// nothing a reader of the output could see has changed.
func (f *changeFilter) visible(changed map[string]dbus.Variant) map[string]dbus.Variant {
	out := map[string]dbus.Variant{}
	for name, v := range changed {
		r := f.render(name, v)
		if old, ok := f.shown[name]; ok && old == r {
			continue
		}
		f.shown[name] = r
		out[name] = v
	}
	return out
}

func (c *cli) emit(ev watchEvent, text string) {
	if c.g.json {
		b, _ := json.Marshal(ev)
		fmt.Fprintln(c.stdout, string(b))
		return
	}
	fmt.Fprintf(c.stdout, "%s %s\n", ev.Time, text)
}

func (c *cli) watch(args []string) int {
	if len(args) > 0 {
		return c.usage("watch", usagef("unexpected argument %q", args[0]))
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	cl, err := c.dial()
	if err != nil {
		return c.fail(err)
	}
	defer cl.Close()
	conn := cl.conn
	sigs := make(chan *dbus.Signal, 64)
	conn.Signal(sigs)
	owner, err := subscribe(ctx, conn,
		[]dbus.MatchOption{dbus.WithMatchObjectPath(objectPath), dbus.WithMatchInterface("org.freedesktop.DBus.Properties"), dbus.WithMatchMember("PropertiesChanged"), dbus.WithMatchArg(0, iface)},
		[]dbus.MatchOption{dbus.WithMatchObjectPath(objectPath), dbus.WithMatchInterface(iface), dbus.WithMatchMember("PolicyChanged")},
	)
	if err != nil {
		return c.fail(busError(cl.bus, "subscribing to signals", err))
	}
	now := func() string { return time.Now().Format("2006-01-02T15:04:05.000Z07:00") }

	// The current state first: it shows the subscription is in place.
	props, err := cl.properties()
	if err != nil {
		return c.fail(err)
	}
	initial := map[string]dbus.Variant{}
	for _, n := range []string{"ActivePolicy", "PowerSource", "PowerAware", "PowerAwarePolicy", "Boost"} {
		if v, ok := props[n]; ok {
			initial[n] = v
		}
	}
	c.emit(watchEvent{Time: now(), Event: "state", Changed: jsonMap(initial)}, "state "+formatChanged(initial))
	// Every property as it is now counts as shown: a later change prints
	// only what differs from it.
	filter := newChangeFilter(c.g.json)
	filter.visible(props)

	for {
		select {
		case <-ctx.Done():
			return exitOK
		case s, ok := <-sigs:
			if !ok {
				fmt.Fprintf(c.stderr, "schedpolicyctl: lost the connection to %s\n", busLabel(cl.bus))
				return exitFailure
			}
			if owner.Observe(s) {
				if neu := owner.Unique(); neu == "" {
					c.emit(watchEvent{Time: now(), Event: "daemon-stopped"}, "daemon-stopped schedpolicyd left the bus")
				} else {
					c.emit(watchEvent{Time: now(), Event: "daemon-started"}, "daemon-started schedpolicyd is on the bus as "+neu)
				}
				continue
			}
			if !owner.Sent(s) {
				continue // only the daemon speaks for the daemon
			}
			switch s.Name {
			case "org.freedesktop.DBus.Properties.PropertiesChanged":
				if s.Path != objectPath || len(s.Body) < 2 {
					continue
				}
				changed, ok := s.Body[1].(map[string]dbus.Variant)
				if !ok {
					continue
				}
				if changed = filter.visible(changed); len(changed) == 0 {
					continue
				}
				c.emit(watchEvent{Time: now(), Event: "changed", Changed: jsonMap(changed)}, "changed "+formatChanged(changed))
			case iface + ".PolicyChanged":
				var pol, reason string
				if dbus.Store(s.Body, &pol, &reason) != nil {
					continue
				}
				c.emit(watchEvent{Time: now(), Event: "policy-changed", Policy: pol, Reason: reason},
					fmt.Sprintf("policy-changed %s: %s", pol, printable(reason)))
			}
		}
	}
}

func jsonMap(m map[string]dbus.Variant) map[string]any {
	out := make(map[string]any, len(m))
	for k, v := range m {
		out[k] = jsonValue(k, v)
	}
	return out
}

// maxWorkloadName is the longest workload name the daemon accepts, in bytes.
const maxWorkloadName = names.MaxWorkload

func isControl(r rune) bool { return unicode.IsControl(r) }

// validateWorkloadName applies the daemon's own rule (names.Workload, the
// one CreateWorkload uses), so a name refused here is never sent and one
// accepted here is never refused for its form.
func validateWorkloadName(name string) error {
	var e *names.Error
	if err := names.Workload(name); errors.As(err, &e) {
		return &cliError{exitInvalid, fmt.Sprintf("invalid workload name %q: %s", name, e.Why)}
	}
	return nil
}

// defaultWorkloadName derives a name from the command and the pid:
// basename of cmd with anything outside [A-Za-z0-9._+-] replaced by "_",
// then "-PID", within 64 bytes. It always passes validateWorkloadName.
func defaultWorkloadName(cmd string, pid int) string {
	base := filepath.Base(cmd)
	var b strings.Builder
	for _, r := range base {
		switch {
		case r < 128 && (unicode.IsLetter(r) || unicode.IsDigit(r) || strings.ContainsRune("._+-", r)):
			b.WriteRune(r)
		default:
			b.WriteByte('_')
		}
	}
	suffix := "-" + strconv.Itoa(pid)
	s := b.String()
	if s == "" || s == "." || s == ".." {
		s = "cmd"
	}
	if len(s)+len(suffix) > maxWorkloadName {
		s = s[:maxWorkloadName-len(suffix)]
	}
	return s + suffix
}

// commandArgs returns the command after "--" (or after the flags, when the
// user left "--" out); an empty command is a usage error.
func commandArgs(name string, args []string) ([]string, error) {
	if len(args) > 0 && args[0] == "--" {
		args = args[1:]
	}
	if len(args) == 0 {
		return nil, usagef("missing command: schedpolicyctl %s [OPTIONS] -- CMD [ARGS...]", name)
	}
	return args, nil
}

// lookCommand resolves argv[0] like execvp and maps failures to 126/127.
func lookCommand(arg0 string) (string, error) {
	p, err := exec.LookPath(arg0)
	if err != nil {
		code := exitNotFound
		if errors.Is(err, os.ErrPermission) {
			code = exitCannotExec
		}
		return "", &cliError{code, fmt.Sprintf("%s: %v", arg0, unwrapExecErr(err))}
	}
	return p, nil
}

func unwrapExecErr(err error) error {
	var ee *exec.Error
	if errors.As(err, &ee) {
		return ee.Err
	}
	return err
}

// execFunc replaces the process image; a variable so tests can observe it.
var execFunc = syscall.Exec

func (c *cli) runCmd(args []string) int {
	argv, err := commandArgs("run", args)
	if err != nil {
		return c.usage("run", err)
	}
	path, err := lookCommand(argv[0])
	if err != nil {
		return c.fail(err)
	}
	pid := os.Getpid()
	name := c.name
	if !c.given["name"] {
		name = defaultWorkloadName(argv[0], pid)
	}
	if err := validateWorkloadName(name); err != nil {
		return c.fail(err)
	}
	cl, err := c.dial()
	if err != nil {
		return c.fail(err)
	}
	var cgroup string
	what := "run"
	if c.given["name"] {
		what = "run --name " + printable(name)
	}
	err = cl.callAs(what, "CreateWorkload", []any{&cgroup}, name, uint32(pid))
	cl.Close()
	if err != nil {
		return c.fail(err)
	}
	if os.Getenv("SCHEDPOLICYCTL_DEBUG") != "" {
		fmt.Fprintf(c.stderr, "schedpolicyctl: running %s in workload %s (%s)\n", argv[0], name, cgroup)
	}
	err = execFunc(path, argv, os.Environ())
	// Only reached when exec failed.
	code := exitCannotExec
	if errors.Is(err, syscall.ENOENT) {
		code = exitNotFound
	}
	return c.fail(&cliError{code, fmt.Sprintf("%s: %v", argv[0], err)})
}

// forwarded are the signals launch passes on to its child.
var forwarded = []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2}

func (c *cli) launch(args []string) int {
	if c.policy == "" {
		return c.usage("launch", usagef("--policy is required (performance, balance or powersaving)"))
	}
	argv, err := commandArgs("launch", args)
	if err != nil {
		return c.usage("launch", err)
	}
	if err := checkPolicy(c.policy); err != nil {
		return c.fail(err)
	}
	path, err := lookCommand(argv[0])
	if err != nil {
		return c.fail(err)
	}
	reason := c.reason
	if reason == "" {
		reason = "schedpolicyctl launch " + strings.Join(argv, " ")
		if len(reason) > 200 {
			reason = reason[:200] + "…"
		}
	}
	cl, err := c.dial()
	if err != nil {
		return c.fail(err)
	}
	// The connection stays open while the command runs: the daemon drops
	// the hold when this process leaves the bus, whatever kills it.
	defer cl.Close()
	// Catch the signals before the hold exists: one that arrives between
	// the hold and the command's start is passed on to the command as soon
	// as it runs, instead of killing us with the hold still held.
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, forwarded...)
	defer signal.Stop(sigs)
	var cookie uint32
	if err := cl.call("HoldPolicy", []any{&cookie}, c.policy, reason); err != nil {
		return c.fail(err)
	}
	release := func() {
		if err := cl.call("ReleasePolicy", nil, cookie); err != nil {
			fmt.Fprintf(c.stderr, "schedpolicyctl: releasing hold %d: %v (the daemon drops it when schedpolicyctl exits)\n", cookie, err)
		}
	}

	child := exec.Command(path, argv[1:]...)
	child.Args = argv
	child.Stdin, child.Stdout, child.Stderr = os.Stdin, os.Stdout, os.Stderr
	if err := child.Start(); err != nil {
		release()
		code := exitCannotExec
		if errors.Is(err, os.ErrNotExist) {
			code = exitNotFound
		}
		return c.fail(&cliError{code, fmt.Sprintf("%s: %v", argv[0], unwrapExecErr(err))})
	}
	done := make(chan error, 1)
	go func() { done <- child.Wait() }()
	var werr error
wait:
	for {
		select {
		case s := <-sigs:
			child.Process.Signal(s)
		case werr = <-done:
			break wait
		}
	}
	release()
	return exitStatus(werr)
}

// exitStatus turns a child's wait result into our exit code: its exit
// status, or 128+N when signal N killed it (as shells report it).
func exitStatus(err error) int {
	if err == nil {
		return exitOK
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return 128 + int(ws.Signal())
		}
		return ee.ExitCode()
	}
	return exitFailure
}
