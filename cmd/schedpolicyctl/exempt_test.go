package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/schedpolicyd/schedpolicyd/internal/testutil"
)

// TestExemptName: the name status prints in the command that exempts a
// workload, for a caller of uid 1000.
func TestExemptName(t *testing.T) {
	for _, c := range []struct{ name, manager, want string }{
		{"app-a.scope", "user:1000", "app-a.scope"},
		{"app-a.scope", "user:1001", "user:1001/app-a.scope"},
		{"ssh.service", "system", "ssh.service"},
		{"build", "", "build"},
	} {
		if got := exemptName(c.name, c.manager, 1000); got != c.want {
			t.Errorf("exemptName(%q, %q) = %q, want %q", c.name, c.manager, got, c.want)
		}
	}
	for s, want := range map[string]string{"a.service": "a.service", `a\x2db.service`: `'a\x2db.service'`, "it's": `'it'\''s'`, "": "''"} {
		if got := shellWord(s); got != want {
			t.Errorf("shellWord(%q) = %s, want %s", s, got, want)
		}
	}
}

// TestCtlExempt: the real schedpolicyctl against the real daemon placing
// real cgroup v1 cpusets (a parent of the test's own) on the mock laptop
// on battery: status lists each confined workload with where, why and
// the command that exempts it; exempt gives a its original cpuset.cpus
// back at once and status shows it exempt; exempting again is fine; a
// name that names nothing is exit 4; uid 65534 is refused (exit 3);
// unexempt places a again; workload-policy reaches SetWorkloadPolicy.
func TestCtlExempt(t *testing.T) {
	cg := testutil.CpusetV1Dir(t, "schedpolicyctl-exempt")
	d := startDaemon(t, cg)
	for _, n := range []string{"a", "b"} {
		if err := os.Mkdir(filepath.Join(cg, n), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	all := testutil.ReadTrim(t, filepath.Join(testutil.CpusetRoot, "cpuset.effective_cpus"))
	if all != "0-1" {
		t.Skipf("the test's plan is for CPUs 0-1; this machine's cpuset has %s", all)
	}
	cpus := func() string {
		return "a=" + testutil.ReadTrim(t, filepath.Join(cg, "a", "cpuset.cpus")) + " b=" + testutil.ReadTrim(t, filepath.Join(cg, "b", "cpuset.cpus"))
	}
	testutil.WaitFor(t, "a and b packed (powersaving on battery)", 15*time.Second, func() (bool, string) { return cpus() == "a=0 b=0", cpus() })

	var transcript []string
	ctl := func(args ...string) result {
		r := d.run(t, args...)
		transcript = append(transcript, "$ schedpolicyctl "+strings.Join(args, " ")+"\n"+r.stdout+r.stderr)
		return r
	}
	defer func() { t.Logf("transcript:\n%s", strings.Join(transcript, "")) }()

	r := ctl("status")
	for _, want := range []string{"confined:      2, placed on fewer CPUs than they may use\n", "  a     0     workload, powersaving  schedpolicyctl exempt a\n", "exempt:        none\n"} {
		if r.code != 0 || !strings.Contains(r.stdout, want) {
			t.Errorf("status lacks %q: %v", want, r)
		}
	}
	if r := ctl("exempt", "a"); r.code != 0 || r.stdout != "exempt: a: given its original CPUs back, not placed until 'schedpolicyctl unexempt a'\n" {
		t.Fatalf("exempt a: %v", r)
	}
	testutil.WantEq(t, "a exempt: its original back when exempt returns", cpus(), "a=0-1 b=0")
	if r := ctl("exempt", "a"); r.code != 0 {
		t.Errorf("exempt a again: %v", r)
	}
	r = ctl("status")
	for _, want := range []string{"confined:      1,", "exempt:        a (schedpolicyctl exempt)\n  a: exempt, on 0-1\n"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("status lacks %q: %v", want, r)
		}
	}
	if s := d.statusJSON(t); len(s.Confined) != 1 || s.Confined[0].Name != "b" || s.Confined[0].Exempt != "schedpolicyctl exempt b" || len(s.Exemptions) != 1 {
		t.Errorf("status --json: confined %+v exemptions %+v", s.Confined, s.Exemptions)
	}
	if r := ctl("exempt", "typo"); r.code != exitInvalid || !strings.Contains(r.stderr, `no workload "typo"`) {
		t.Errorf("exempt typo: %v, want exit 4", r)
	}
	if r := ctl("exempt", "home/x"); r.code != exitInvalid {
		t.Errorf("exempt home/x: %v, want exit 4", r)
	}
	if os.Geteuid() == 0 {
		if setpriv, err := exec.LookPath("setpriv"); err == nil {
			r := runCtl(t, exec.Command(setpriv, "--reuid=65534", "--regid=65534", "--clear-groups", d.ctl, "--bus", d.addr, "exempt", "b"))
			if r.code != exitAccessDenied {
				t.Errorf("exempt b as uid 65534 (a cgroup, not its own): %v, want exit 3", r)
			}
		}
	}
	if r := ctl("unexempt", "a"); r.code != 0 || r.stdout != "no longer exempt: a: placed again\n" {
		t.Fatalf("unexempt a: %v", r)
	}
	testutil.WantEq(t, "a placed again", cpus(), "a=0 b=0")
	if r := ctl("unexempt", "a"); r.code != exitInvalid || !strings.Contains(r.stderr, `"a" is not exempt`) {
		t.Errorf("unexempt a again: %v, want exit 4", r)
	}

	if r := ctl("workload-policy", "b", "performance"); r.code != 0 {
		t.Fatalf("workload-policy b performance: %v", r)
	}
	testutil.WantEq(t, "b performance", cpus(), "a=0 b=0-1")
	if r := ctl("workload-policy", "b", "none"); r.code != 0 {
		t.Fatalf("workload-policy b none: %v", r)
	}
	testutil.WantEq(t, "b placed again", cpus(), "a=0 b=0")
	if r := ctl("workload-policy", "b", "balance"); r.code != exitInvalid {
		t.Errorf("workload-policy b balance: %v, want exit 4", r)
	}
	if r := ctl("workload-policy", "nope", "performance"); r.code != exitInvalid {
		t.Errorf("workload-policy nope performance: %v, want exit 4", r)
	}
}
