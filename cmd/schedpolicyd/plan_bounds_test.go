package main

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/schedpolicyd/schedpolicyd/policy"
)

// TestParseLoadsBounds: every number and length of --load at and beyond
// its bound. A value at the bound is taken; one beyond is refused with the
// exact message, which names --load, the entry (clipped to 64 bytes) and
// the bound. The bounds are those plan --help and schedpolicyd(8) give.
func TestParseLoadsBounds(t *testing.T) {
	long := func(n int) string { return strings.Repeat("n", n) }
	entries := func(n int) string {
		var b strings.Builder
		for i := range n {
			if i > 0 {
				b.WriteByte(',')
			}
			fmt.Fprintf(&b, "w%d=0.1", i)
		}
		return b.String()
	}
	for _, c := range []struct {
		name, in string
		want     string // the error; "" when accepted
	}{
		{"THREADS at the bound", "a=1:65536", ""},
		{"THREADS 2^31-1", "a=1:2147483647", `--load "a=1:2147483647": THREADS must be an integer from 1 to 65536`},
		{"THREADS one beyond", "a=1:65537", `--load "a=1:65537": THREADS must be an integer from 1 to 65536`},
		{"THREADS beyond int64", "a=1:99999999999999999999", `--load "a=1:99999999999999999999": THREADS must be an integer from 1 to 65536`},
		{"THREADS 0", "a=1:0", `--load "a=1:0": THREADS must be an integer from 1 to 65536`},
		{"THREADS together at the bound", "a=1:65535,b=1", ""},
		{"THREADS together beyond", "a=1:40000,b=0.5,c=1:30000", `--load "c=1:30000": the workloads' THREADS add up to 70001 with it, at most 65536`},
		{"defaults count 1 each", "a=1:65535,b=1,c=1", `--load "c=1": the workloads' THREADS add up to 65537 with it, at most 65536`},
		{"1024 workloads", entries(1024), ""},
		{"1025 workloads", entries(1025), "--load: 1025 workloads, at most 1024"},
		{"5000 workloads", entries(5000), "--load: 5000 workloads, at most 1024"},
		{"NAME of 255 bytes", long(255) + "=1", ""},
		{"NAME of 256 bytes", long(256) + "=1", fmt.Sprintf("--load %q: NAME has 256 bytes, at most 255", long(64)+"…")},
		{"SLICE of 255 bytes", "a=1@" + long(249) + ".slice", ""},
		{"SLICE of 256 bytes", "a=1@" + long(250) + ".slice", fmt.Sprintf("--load %q: SLICE has 256 bytes, at most 255", "a=1@"+long(60)+"…")},
		{"CLASS of 255 bytes", "a=1@app.slice/" + long(255), ""},
		{"CLASS of 256 bytes", "a=1@app.slice/" + long(256), fmt.Sprintf("--load %q: CLASS has 256 bytes, at most 255", "a=1@app.slice/"+long(50)+"…")},
		{"UTIL at the bound", "a=8192", ""},
		{"UTIL one beyond", "a=8193", `--load "a=8193": UTIL must be a number from 0 to 8192 (CPUs)`},
		{"UTIL 1e300", "a=1e300:2", `--load "a=1e300:2": UTIL must be a number from 0 to 8192 (CPUs)`},
		{"UTIL beyond float64", "a=1e400", `--load "a=1e400": UTIL must be a number from 0 to 8192 (CPUs)`},
		{"UTIL Inf", "a=Inf", `--load "a=Inf": UTIL must be a number from 0 to 8192 (CPUs)`},
		{"UTIL NaN", "a=NaN", `--load "a=NaN": UTIL must be a number from 0 to 8192 (CPUs)`},
		{"UTIL negative", "a=-0.5", `--load "a=-0.5": UTIL must be a number from 0 to 8192 (CPUs)`},
		{"a long bad entry is clipped", long(300), fmt.Sprintf("--load %q: want NAME=UTIL[:THREADS]", long(64)+"…")},
	} {
		t.Run(c.name, func(t *testing.T) {
			loads, err := parseLoads(c.in)
			switch {
			case c.want == "" && err != nil:
				t.Fatalf("parseLoads: %v", err)
			case c.want == "" && len(loads) != strings.Count(c.in, ",")+1:
				t.Fatalf("parseLoads: %d loads", len(loads))
			case c.want != "" && (err == nil || err.Error() != c.want):
				t.Fatalf("parseLoads: %v (%d loads)\nwant %s", err, len(loads), c.want)
			}
		})
	}
}

// TestPlanLoadBoundsCLI: plan refuses a --load beyond its bounds with
// exit 2 and the message after "schedpolicyd plan: ", and prints nothing
// on standard output; at the bounds it plans (the energy model places
// 65536 threads one at a time, so this is the most work a plan's threads
// can cause).
func TestPlanLoadBoundsCLI(t *testing.T) {
	base := []string{"--topology", "snb-laptop-4c8t", "--policy", "performance"}
	for _, c := range []struct{ load, want string }{
		{"a=1:65537", `--load "a=1:65537": THREADS must be an integer from 1 to 65536`},
		{"a=2:40000,b=1:40000", `--load "b=1:40000": the workloads' THREADS add up to 80000 with it, at most 65536`},
		{"a=8192.5", `--load "a=8192.5": UTIL must be a number from 0 to 8192 (CPUs)`},
	} {
		code, out, errs := runPlan(t, append(base, "--load", c.load)...)
		if want := "schedpolicyd plan: " + c.want + "\n"; code != 2 || out != "" || errs != want {
			t.Errorf("--load %s: exit %d, stdout %q, stderr %q; want 2, nothing, %q", c.load, code, out, errs, want)
		}
	}
	if code, out, errs := runPlan(t, append(base, "--load", "a=8:32768,b=8192:32768", "--json")...); code != 0 || !strings.Contains(out, `"a": "0-7"`) {
		t.Errorf("at the bounds: exit %d: %s%s", code, out, errs)
	}
	if maxPlanThreads > policy.MaxSimulatedThreads {
		t.Errorf("plan takes %d threads, the energy model places only %d one at a time: its estimates would be the closed form's", maxPlanThreads, policy.MaxSimulatedThreads)
	}
}

// TestPlanCPUListBounds: a --allowed or --current cpulist that names a CPU
// beyond the topology is refused, naming the flag, the CPU and the
// topology's CPUs, however far beyond (2147483646, or more digits than an
// int holds); a list below sysfs.MaxCPUs names every CPU the topology
// lacks as before. A list that names the topology's CPUs again and again
// is taken.
func TestPlanCPUListBounds(t *testing.T) {
	base := []string{"--topology", "snb-laptop-4c8t", "--policy", "powersaving", "--load", "a=1,b=0.5"}
	digits := strings.Repeat("9", 100)
	for _, c := range []struct {
		args []string
		want string // after "schedpolicyd plan: "
	}{
		{[]string{"--allowed", "0-2147483646"}, "--allowed: CPU 2147483646 is not in the topology (CPUs 0-7)"},
		{[]string{"--allowed", "0-3," + digits}, "--allowed: CPU " + strings.Repeat("9", 64) + "… is not in the topology (CPUs 0-7)"},
		{[]string{"--allowed", "0-8191"}, "--allowed: CPU 8 is not in the topology (CPUs 0-7)"},
		{[]string{"--allowed", "0-8192"}, "--allowed: CPU 8192 is not in the topology (CPUs 0-7)"},
		{[]string{"--current", "a=0-2147483646"}, "--current a=0-2147483646: CPU 2147483646 is not in the topology (CPUs 0-7)"},
		{[]string{"--current", "a=0,b=1,2147483646"}, "--current b=1,2147483646: CPU 2147483646 is not in the topology (CPUs 0-7)"},
		{[]string{"--current", "*=0-8191"}, "--current *=0-8191: CPUs 8-8191 are not in the topology (CPUs 0-7)"},
		{[]string{"--current", "a=" + strings.Repeat("0-7,", 20000) + "9"}, "--current a=" + strings.Repeat("0-7,", 16) + "…: CPUs 9 are not in the topology (CPUs 0-7)"},
		{[]string{"--current", "x=0,a=0-2147483646"}, `--current: "x" is no workload of --load`},
	} {
		code, out, errs := runPlan(t, append(base, c.args...)...)
		if want := "schedpolicyd plan: " + c.want + "\n"; code != 2 || out != "" || errs != want {
			t.Errorf("%.80s: exit %d, stdout %.200q, stderr %.200q; want 2, nothing, %.200q", strings.Join(c.args, " "), code, out, errs, want)
		}
	}
	code, out, errs := runPlan(t, append(base, "--json", "--allowed", strings.Repeat("0-7,", 20000),
		"--current", "a="+strings.Repeat("0-3,", 19999)+"0-3", "--current", "*=4")...)
	var r planReport
	if code != 0 || json.Unmarshal([]byte(out), &r) != nil || r.Current["a"] != "0-3" || r.Current["b"] != "4" {
		t.Errorf("repeated lists: exit %d, %.200s, current %v", code, errs, r.Current)
	}
}

// TestPlanBoundsDocumented: the bounds parseLoads enforces are the ones
// plan --help, schedpolicyd(8) and docs/INPUTS.md give.
func TestPlanBoundsDocumented(t *testing.T) {
	_, out, errs := runPlan(t, "--help")
	help := out + errs
	for _, f := range []struct {
		path, text string // text: the document, or "" to read path
		says       []string
	}{
		{"plan --help", help, []string{"At most %[1]d workloads", "UTIL 0 to %[2]d", "THREADS 1 to %[3]d, and at most %[3]d all together", "at most %[4]d bytes"}},
		{"../../packaging/man/schedpolicyd.8", "", []string{"at most %[1]d workloads", "UTIL from 0 to %[2]d", "THREADS from 1 to %[3]d", "together at most %[3]d", "at most %[4]d bytes"}},
		{"../../docs/INPUTS.md", "", []string{"at most %[1]d workloads", "UTIL 0–%[2]d", "THREADS 1–%[3]d and at most %[3]d for all the workloads together", "≤ %[4]d bytes"}},
	} {
		if f.text == "" {
			b, err := os.ReadFile(f.path)
			if err != nil {
				t.Fatal(err)
			}
			f.text = string(b)
		}
		text := strings.Join(strings.Fields(f.text), " ") // line breaks are spaces
		for _, say := range f.says {
			if want := fmt.Sprintf(say, maxPlanLoads, maxPlanUtil, maxPlanThreads, maxPlanName); !strings.Contains(text, want) {
				t.Errorf("%s does not say %q", f.path, want)
			}
		}
	}
}
