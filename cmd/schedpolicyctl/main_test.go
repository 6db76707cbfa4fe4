package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/godbus/dbus/v5"
)

func runArgs(args ...string) result {
	var out, errb bytes.Buffer
	code := run(args, &out, &errb)
	return result{out.String(), errb.String(), code}
}

// TestCtlUnitNames: the D-Bus names match the daemon's contract file.
func TestCtlUnitNames(t *testing.T) {
	b, err := os.ReadFile("../../daemon/bus/org.schedpolicyd.SchedPolicy1.xml")
	if err != nil {
		t.Skipf("contract file: %v", err)
	}
	for _, s := range []string{`interface name="` + iface + `"`, busName, objectPath} {
		if !strings.Contains(string(b), s) {
			t.Errorf("contract lacks %q", s)
		}
	}
	for _, m := range []string{"SetPolicy", "SetPowerAware", "ResetKnob", "Rebalance", "HoldPolicy", "ReleasePolicy", "CreateWorkload", "PolicyChanged"} {
		if !strings.Contains(string(b), `name="`+m+`"`) {
			t.Errorf("contract lacks %s, which schedpolicyctl calls", m)
		}
	}
}

func TestCtlUnitUsage(t *testing.T) {
	tests := []struct {
		args []string
		code int
		out  string // substring of stdout
		err  string // substring of stderr
	}{
		// help: stdout, exit 0
		{[]string{"--help"}, 0, "Exit status:", ""},
		{[]string{"-h"}, 0, "Commands:", ""},
		{[]string{"help"}, 0, "Commands:", ""},
		{[]string{"help", "run"}, 0, "Usage: schedpolicyctl run [--name NAME]", ""},
		{[]string{"set", "--help"}, 0, "Usage: schedpolicyctl set POLICY", ""},
		{[]string{"status", "-h"}, 0, "--json", ""},
		{[]string{"launch", "--help"}, 0, "--policy POLICY", ""},
		{[]string{"version"}, 0, "schedpolicyctl ", ""},
		// usage errors: stderr, exit 2
		{nil, 2, "", "Usage: schedpolicyctl"},
		{[]string{"nope"}, 2, "", `unknown command "nope"`},
		{[]string{"help", "nope"}, 2, "", `unknown command "nope"`},
		{[]string{"--frob", "status"}, 2, "", "flag provided but not defined: -frob"},
		{[]string{"set"}, 2, "", "want exactly one POLICY"},
		{[]string{"auto", "1", "2"}, 2, "", "want exactly one mode"},
		{[]string{"set", "--json", "balance"}, 2, "", "not defined: -json"}, // set is not a read command
		{[]string{"--bus", "nowhere", "status"}, 2, "", `--bus "nowhere"`},
		{[]string{"run"}, 2, "", "missing command"},
		{[]string{"run", "--"}, 2, "", "missing command"},
		{[]string{"launch", "--", "true"}, 2, "", "--policy is required"},
		{[]string{"watch", "now"}, 2, "", `unexpected argument "now"`},
		// invalid values: exit 4 before any bus
		{[]string{"set", "turbo"}, 4, "", `invalid policy "turbo"`},
		{[]string{"auto", "5"}, 4, "", `invalid mode "5"`},
		{[]string{"auto", "01"}, 4, "", `invalid mode "01"`},
		{[]string{"run", "--name", "a/b", "--", "true"}, 4, "", `contains "/"`},
		{[]string{"launch", "--policy", "fast", "--", "true"}, 4, "", `invalid policy "fast"`},
		// command lookup before any bus
		{[]string{"run", "--", "/nonexistent/x"}, 127, "", "/nonexistent/x"},
	}
	for _, tt := range tests {
		r := runArgs(tt.args...)
		if r.code != tt.code || !strings.Contains(r.stdout, tt.out) || !strings.Contains(r.stderr, tt.err) {
			t.Errorf("%q: %v\nwant exit %d, stdout ~ %q, stderr ~ %q", tt.args, r, tt.code, tt.out, tt.err)
		}
	}
}

// TestCtlUnitGlobalsEitherSide: --bus and --json work before and after the
// command.
func TestCtlUnitGlobalsEitherSide(t *testing.T) {
	for _, args := range [][]string{
		{"--bus", "unix:path=/nonexistent/bus", "--json", "status"},
		{"status", "--bus", "unix:path=/nonexistent/bus", "--json"},
	} {
		r := runArgs(args...)
		if r.code != exitFailure || !strings.Contains(r.stderr, "cannot connect to the bus at unix:path=/nonexistent/bus") {
			t.Errorf("%q: %v", args, r)
		}
	}
}

func TestCtlUnitWorkloadNames(t *testing.T) {
	for _, ok := range []string{"build", "a", "my.job-1_2+x", "ünïcode", strings.Repeat("x", 64), "a..b"} {
		if err := validateWorkloadName(ok); err != nil {
			t.Errorf("%q rejected: %v", ok, err)
		}
	}
	for _, bad := range []string{"", ".", "..", "a/b", "/abs", "../up", "tab\t", "nl\n", "del\x7f", "c1\u0085", strings.Repeat("x", 65), "bad\xffutf8"} {
		err := validateWorkloadName(bad)
		var ce *cliError
		if !errors.As(err, &ce) || ce.code != exitInvalid {
			t.Errorf("%q: %v, want an exit-4 error", bad, err)
		}
	}
	tests := []struct {
		cmd  string
		pid  int
		want string
	}{
		{"make", 42, "make-42"},
		{"/usr/bin/python3", 7, "python3-7"},
		{"./my build!", 1, "my_build_-1"},
		{"..", 9, "cmd-9"},
		{"/", 9, "cmd-9"}, // filepath.Base("/") is "/"
		{strings.Repeat("y", 100), 123456, strings.Repeat("y", 57) + "-123456"},
		{"ünï", 3, "_n_-3"}, // each non-ASCII rune becomes "_"
	}
	for _, tt := range tests {
		got := defaultWorkloadName(tt.cmd, tt.pid)
		if tt.cmd == "/" {
			tt.want = "_-9"
		}
		if got != tt.want {
			t.Errorf("defaultWorkloadName(%q, %d) = %q, want %q", tt.cmd, tt.pid, got, tt.want)
		}
		if err := validateWorkloadName(got); err != nil {
			t.Errorf("default name %q is invalid: %v", got, err)
		}
	}
}

func TestCtlUnitBusErrors(t *testing.T) {
	tests := []struct {
		name string
		body string
		code int
		msg  string
	}{
		{errServiceUnknown, "The name is not activatable", 1, "schedpolicyd is not running (nobody owns org.schedpolicyd.SchedPolicy1 on the system bus)"},
		{errNameHasNoOwner, "", 1, "schedpolicyd is not running"},
		{errAccessDenied, "not authorized", 3, "SetPolicy: access denied: not authorized (needs root or authorisation for the polkit action org.schedpolicyd.set-policy)"},
		{errInteractiveAuth, "", 3, "access denied"},
		{errInvalidArgs, `invalid policy "x"`, 4, `SetPolicy: invalid policy "x"`},
		{errFileExists, `workload "b" exists`, 5, `workload "b" exists`},
		{errUnknownMethod, "No such method", 1, "does not support this (UnknownMethod)"},
		{errNoReply, "timeout", 1, "did not answer"},
		{"org.example.Weird", "boom", 1, "SetPolicy: boom (org.example.Weird)"},
	}
	for _, tt := range tests {
		var body []any
		if tt.body != "" {
			body = []any{tt.body}
		}
		for _, err := range []error{dbus.Error{Name: tt.name, Body: body}, &dbus.Error{Name: tt.name, Body: body}} {
			ce := busError("system", "SetPolicy", err)
			if ce.code != tt.code || !strings.Contains(ce.msg, tt.msg) {
				t.Errorf("%s: %d %q, want %d ~ %q", tt.name, ce.code, ce.msg, tt.code, tt.msg)
			}
		}
	}
	if ce := busError("session", "x", errors.New("plain")); ce.code != 1 || ce.msg != "x: plain" {
		t.Errorf("plain error: %+v", ce)
	}
	if ce := busError("unix:path=/b", "x", dbus.Error{Name: errServiceUnknown}); !strings.Contains(ce.msg, "on the bus at unix:path=/b") {
		t.Errorf("address bus: %q", ce.msg)
	}
}

func sampleProps() map[string]dbus.Variant {
	return map[string]dbus.Variant{
		"ActivePolicy":      dbus.MakeVariant("powersaving"),
		"AvailablePolicies": dbus.MakeVariant([]string{"performance", "balance", "powersaving"}),
		"PowerAware":        dbus.MakeVariant(uint32(1)),
		"PowerAwarePolicy":  dbus.MakeVariant("powersaving"),
		"PowerSource":       dbus.MakeVariant("battery"),
		"OnBattery":         dbus.MakeVariant(true),
		"Boost":             dbus.MakeVariant("1"),
		"Reason":            dbus.MakeVariant("automatic: BAT1 is Discharging"),
		"LastChange":        dbus.MakeVariant(uint64(1700000000000000)),
		"Holds":             dbus.MakeVariant([][]any{{uint32(3), "balance", "make -j8", ":1.42"}}),
		"Workloads": dbus.MakeVariant([][]any{
			{"web", "/sys/fs/cgroup/cpuset/schedpolicyd/web", "0-7", 2.5, "performance", "workload"},
			{"build", "/sys/fs/cgroup/cpuset/schedpolicyd/build", "0-1", 0.25, "", "workload"},
		}),
		"SomethingNew": dbus.MakeVariant("ignored"),
	}
}

func TestCtlUnitStatusFormat(t *testing.T) {
	s, err := statusFrom(sampleProps())
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	now := time.UnixMicro(1700000000000000).Add(3*time.Minute + 5*time.Second)
	writeStatus(&b, s, now)
	got := b.String()
	// "since" is local time; check it separately.
	since := "  since:       " + time.UnixMicro(1700000000000000).Local().Format("2006-01-02 15:04:05") + " (3m ago)\n"
	want := `policy:        powersaving
  reason:      automatic: BAT1 is Discharging
` + since + `power source:  battery (on battery)
knob:          power_aware=1 (automatic) power_aware_policy=powersaving
boost:         1
holds:         1
  #3 balance by :1.42: make -j8
workloads:     2
  NAME   CLASS     CPUS  UTIL  POLICY       PATH
  build  workload  0-1   0.25  -            /sys/fs/cgroup/cpuset/schedpolicyd/build
  web    workload  0-7   2.50  performance  /sys/fs/cgroup/cpuset/schedpolicyd/web
`
	if got != want {
		t.Errorf("status text:\n%s\nwant:\n%s", got, want)
	}
	js, _ := json.Marshal(s)
	var back map[string]any
	json.Unmarshal(js, &back)
	if back["last_change"] != "2023-11-14T22:13:20Z" || back["power_aware"] != float64(1) {
		t.Errorf("json: %s", js)
	}
	if ws := back["workloads"].([]any); len(ws) != 2 || ws[0].(map[string]any)["name"] != "build" {
		t.Errorf("json workloads: %v", ws)
	}
}

// TestCtlUnitStatusOldDaemon: a daemon with only the first five properties
// still gives a status, with empty lists.
func TestCtlUnitStatusOldDaemon(t *testing.T) {
	props := sampleProps()
	for _, k := range []string{"AvailablePolicies", "OnBattery", "Reason", "LastChange", "Holds", "Workloads"} {
		delete(props, k)
	}
	s, err := statusFrom(props)
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	writeStatus(&b, s, time.Now())
	if !strings.Contains(b.String(), "holds:         none\nworkloads:     none\n") || strings.Contains(b.String(), "since:") {
		t.Errorf("old daemon status:\n%s", b.String())
	}
	js, _ := json.Marshal(s)
	if !strings.Contains(string(js), `"holds":[]`) || !strings.Contains(string(js), `"workloads":[]`) {
		t.Errorf("json lists should be [] not null: %s", js)
	}
}

func TestCtlUnitStatusBadType(t *testing.T) {
	_, err := statusFrom(map[string]dbus.Variant{"PowerAware": dbus.MakeVariant("one")})
	if err == nil || !strings.Contains(err.Error(), "PowerAware") {
		t.Errorf("err = %v", err)
	}
}

func TestCtlUnitFormatChanged(t *testing.T) {
	got := formatChanged(map[string]dbus.Variant{
		"PowerSource":  dbus.MakeVariant("ac"),
		"ActivePolicy": dbus.MakeVariant("performance"),
		"Reason":       dbus.MakeVariant("AC online"),
		"PowerAware":   dbus.MakeVariant(uint32(0)),
		"Workloads":    dbus.MakeVariant([][]any{{"a", "/x/a", "0-3", 0.5, ""}}),
	})
	want := `ActivePolicy=performance PowerAware=0 PowerSource=ac Reason="AC online" Workloads=[a:0-3]`
	if got != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
}

// TestCtlUnitChangeFilter: watch's text lines drop a change they would
// show exactly as before (only the workloads' utilisation moved); its JSON
// lines, which show the utilisation, keep it.
func TestCtlUnitChangeFilter(t *testing.T) {
	wl := func(cpus string, util float64) dbus.Variant {
		return dbus.MakeVariant([][]any{{"a", "/x/a", cpus, util, ""}})
	}
	names := func(m map[string]dbus.Variant) string { return formatChanged(m) }
	text := newChangeFilter(false)
	text.visible(map[string]dbus.Variant{"ActivePolicy": dbus.MakeVariant("performance"), "Workloads": wl("0-3", 0.5)})
	for _, c := range []struct {
		changed map[string]dbus.Variant
		want    string
	}{
		{map[string]dbus.Variant{"Workloads": wl("0-3", 0.7)}, ""},                                                                  // utilisation only
		{map[string]dbus.Variant{"Workloads": wl("0-1", 0.7)}, "Workloads=[a:0-1]"},                                                 // CPUs
		{map[string]dbus.Variant{"Workloads": wl("0-1", 0.9), "ActivePolicy": dbus.MakeVariant("balance")}, "ActivePolicy=balance"}, // only the policy shows
		{map[string]dbus.Variant{"ActivePolicy": dbus.MakeVariant("balance")}, ""},                                                  // the same again
		{map[string]dbus.Variant{"Boost": dbus.MakeVariant("1")}, "Boost=1"},                                                        // never shown before
	} {
		if got := names(text.visible(c.changed)); got != c.want {
			t.Errorf("text: %s shows %q, want %q", formatChanged(c.changed), got, c.want)
		}
	}
	js := newChangeFilter(true)
	js.visible(map[string]dbus.Variant{"Workloads": wl("0-3", 0.5)})
	if got := names(js.visible(map[string]dbus.Variant{"Workloads": wl("0-3", 0.7)})); got != "Workloads=[a:0-3]" {
		t.Errorf("JSON: a change of utilisation shows %q, want it kept", got)
	}
	if got := names(js.visible(map[string]dbus.Variant{"Workloads": wl("0-3", 0.7)})); got != "" {
		t.Errorf("JSON: the same value again shows %q, want nothing", got)
	}
}

func TestCtlUnitPrintable(t *testing.T) {
	if got := printable("ok name"); got != "ok name" {
		t.Error(got)
	}
	if got := printable("evil\x1b[2J"); got != `evil\x1b[2J` {
		t.Error(got)
	}
}

func TestCtlUnitParseKnob(t *testing.T) {
	for in, want := range map[string]uint32{"0": 0, "1": 1, "2": 2} {
		if got, err := parseKnob(in); err != nil || got != want {
			t.Errorf("parseKnob(%q) = %d, %v", in, got, err)
		}
	}
	for _, bad := range []string{"", "3", " 1", "1\n", "auto", "-0"} {
		if _, err := parseKnob(bad); err == nil {
			t.Errorf("parseKnob(%q) accepted", bad)
		}
	}
}

func TestCtlUnitCommandArgs(t *testing.T) {
	got, err := commandArgs("run", []string{"--", "ls", "-l", "--", "x"})
	if err != nil || !reflect.DeepEqual(got, []string{"ls", "-l", "--", "x"}) {
		t.Errorf("got %q, %v", got, err)
	}
	got, err = commandArgs("run", []string{"ls"})
	if err != nil || !reflect.DeepEqual(got, []string{"ls"}) {
		t.Errorf("without --: %q, %v", got, err)
	}
}

func TestCtlUnitAgo(t *testing.T) {
	base := time.Unix(1000000, 0)
	for d, want := range map[time.Duration]string{
		5 * time.Second:                  "5s ago",
		90 * time.Second:                 "1m ago",
		3*time.Hour + 4*time.Minute:      "3h04m ago",
		72 * time.Hour:                   "3d ago",
		-time.Second:                     "in the future",
		47*time.Hour + 59*time.Minute:    "47h59m ago",
		48*time.Hour + 1*time.Nanosecond: "2d ago",
	} {
		if got := ago(base, base.Add(d)); got != want {
			t.Errorf("ago(%v) = %q, want %q", d, got, want)
		}
	}
}

// TestCtlNoSystemBus: without a system bus the client says what works
// (the tree, named at the daemon's default place, and whether it is
// there) and how to run the daemon on a bus it can reach; with
// DBUS_SYSTEM_BUS_ADDRESS set a failure is that bus's, and says only
// that. The whole message is checked where this machine has no system
// bus (as the project's CI has none).
func TestCtlNoSystemBus(t *testing.T) {
	knob := t.TempDir()
	h := noBusHelp(knob)
	for _, want := range []string{"No system bus runs here", "A running schedpolicyd serves its tree without a bus",
		"cat " + knob + "/current_sched_policy", "echo powersaving > " + knob + "/current_sched_policy",
		"dbus-daemon --session --nofork --address=unix:path=/tmp/spd-bus &", "schedpolicyd --bus unix:path=/tmp/spd-bus &",
		"schedpolicyctl --bus unix:path=/tmp/spd-bus status"} {
		if !strings.Contains(h, want) {
			t.Errorf("help without a tree lacks %q:\n%s", want, h)
		}
	}
	if err := os.WriteFile(knob+"/current_sched_policy", []byte("performance\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if h := noBusHelp(knob); !strings.Contains(h, "schedpolicyd's tree is there and works without a bus:") {
		t.Errorf("help with the tree there:\n%s", h)
	}

	t.Setenv("DBUS_SYSTEM_BUS_ADDRESS", "unix:path="+knob+"/no-bus")
	if noSystemBus(errors.New("dial: no such file")) {
		t.Error("with DBUS_SYSTEM_BUS_ADDRESS set, a failure was taken for no system bus")
	}
	r := runArgs("status")
	if r.code != exitFailure || strings.Contains(r.stderr, "No system bus runs here") || !strings.Contains(r.stderr, "cannot connect to the system bus") {
		t.Errorf("status with a bus address that fails: %+v", r)
	}

	os.Unsetenv("DBUS_SYSTEM_BUS_ADDRESS") // restored by Setenv's cleanup
	for _, p := range systemBusSockets {
		if _, err := os.Stat(p); err == nil {
			t.Skipf("this machine has a system bus socket (%s): the no-bus message is checked above only", p)
		}
	}
	r = runArgs("set", "powersaving")
	if r.code != exitFailure || !strings.HasPrefix(r.stderr, "schedpolicyctl: cannot connect to the system bus: system bus not found\nNo system bus runs here") {
		t.Errorf("set without a system bus: %+v", r)
	}
}

// TestCtlUnitHolderProcess: a hold's holder is shown by its PID and
// command (from /proc/PID/comm, read at most 64 bytes, its newline
// dropped, control characters escaped), or its bus name alone when the
// bus gave no PID.
func TestCtlUnitHolderProcess(t *testing.T) {
	procRoot = t.TempDir()
	t.Cleanup(func() { procRoot = "/proc" })
	for pid, comm := range map[string]string{"41": "make\n", "42": "evil\x1b[2J\n", "43": strings.Repeat("x", 4096)} {
		if err := os.MkdirAll(procRoot+"/"+pid, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(procRoot+"/"+pid+"/comm", []byte(comm), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		pid  uint32
		want string
	}{
		{41, "PID 41 (make, :1.7)"},
		{42, `PID 42 (evil\x1b[2J, :1.7)`},
		{43, "PID 43 (" + strings.Repeat("x", 64) + ", :1.7)"},
		{44, "PID 44 (:1.7)"}, // gone: no comm
		{0, ":1.7"},           // the bus did not say
	} {
		h := hold{Holder: ":1.7", PID: tc.pid}
		if tc.pid != 0 {
			h.Command = procComm(tc.pid)
		}
		if got := holderText(h); got != tc.want {
			t.Errorf("PID %d: %q, want %q", tc.pid, got, tc.want)
		}
	}
}
