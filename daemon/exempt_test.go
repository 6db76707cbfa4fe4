package daemon

import (
	"context"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/schedpolicyd/schedpolicyd/daemon/snapshot"
	"github.com/schedpolicyd/schedpolicyd/daemon/statefile"
	"github.com/schedpolicyd/schedpolicyd/internal/testutil"
	"github.com/schedpolicyd/schedpolicyd/policy"
)

// TestDaemonExempt: the escape hatch through the whole daemon on the mock
// laptop's cgroup v2 tree, asked as daemon/bus asks it (controller{d},
// with the entry the service resolved), without a bus. The
// configuration's exempt setting keeps b at its original; exempting a
// gives it its original back before the request returns, publishes it as
// exempt (Workloads, Exempt) and keeps the entry in state.json, which a
// restart takes back; the configuration's entry cannot be removed; a
// reload without the setting places b again; removing a places a again.
// How the service resolves and authorises a caller's entry is daemon/bus's
// (TestResolveExempt, TestExemptAuthorisation).
func TestDaemonExempt(t *testing.T) {
	m := newMockLaptop(t)
	var cfg Config
	edit := func(c *Config) {
		c.Exempt = []string{"b"}
		cfg = *c
	}
	d, cancel, done := m.startCfg(t, edit)
	ctx := t.Context()
	cpus := func() string {
		return "a=" + cpusOf(t, m.managed+"/a") + " b=" + cpusOf(t, m.managed+"/b")
	}
	overrides := func(d *Daemon) string {
		var out []string
		for _, w := range d.Snapshot().Workloads {
			out = append(out, w.Name+":"+string(w.Override)) // "exempt": placement.ExemptOverride
		}
		return strings.Join(out, " ")
	}
	setPolicy(t, d, policy.Powersaving)
	testutil.WantEq(t, "powersaving, b exempt by the configuration", cpus(), "a=0 b=2-3")
	testutil.WantEq(t, "overrides", overrides(d), "a: b:exempt")
	if changed, err := (controller{d}).SetExempt(ctx, "a", true); err != nil || !changed {
		t.Fatalf("SetExempt(a, true) = %v, %v", changed, err)
	}
	testutil.WantEq(t, "a exempt: its original (inherit) back when the call returns", cpus(), "a= b=2-3")
	testutil.WantEq(t, "overrides", overrides(d), "a:exempt b:exempt")
	if got, want := d.Snapshot().Exempt, []snapshot.ExemptEntry{{Entry: "b", From: "config"}, {Entry: "a", From: "state"}}; !reflect.DeepEqual(got, want) {
		t.Errorf("Exempt = %v, want %v", got, want)
	}
	st, err := statefile.LoadState(m.state)
	if err != nil || strings.Join(st.Exempt, ",") != "a" {
		t.Errorf("state.json's exempt list %q, %v", st.Exempt, err)
	}
	if _, err := (controller{d}).SetExempt(ctx, "b", false); err == nil || !strings.Contains(err.Error(), "exempt by the configuration file's exempt setting") {
		t.Errorf("SetExempt(b, false), the configuration's: %v", err)
	}

	// A restart keeps a exempt; a reload without the setting places b.
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	d, _, _ = m.startCfg(t, edit)
	setPolicy(t, d, policy.Powersaving)
	testutil.WantEq(t, "restarted", cpus(), "a= b=2-3")
	cfg.Exempt = nil
	if err := d.Reload(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	testutil.WantEq(t, "reloaded without the setting: b placed", cpus(), "a= b=0")
	testutil.WantEq(t, "overrides", overrides(d), "a:exempt b:")
	if changed, err := (controller{d}).SetExempt(ctx, "a", false); err != nil || !changed {
		t.Fatalf("SetExempt(a, false) = %v, %v", changed, err)
	}
	testutil.WantEq(t, "a placed again", cpus(), "a=0 b=0")
	if st, _ := statefile.LoadState(m.state); st.Exempt != nil {
		t.Errorf("state.json's exempt list after Unexempt: %q", st.Exempt)
	}
}

// TestConfigExemptChecked: a bad exempt setting is refused at the start,
// saying which entry and why.
func TestConfigExemptChecked(t *testing.T) {
	for list, want := range map[string]string{
		"a,home/x": `exempt: exempt entry "home/x": "home" is not a manager: want system/ or user:UID/ before the name, or no "/"`,
		"a*,a*":    `exempt: "a*" given twice`,
	} {
		_, _, err := resolveConfig(Config{Exempt: strings.Split(list, ",")})
		if err == nil || err.Error() != want {
			t.Errorf("exempt %s: %v, want %s", list, err, want)
		}
	}
}

// cpusOf is dir's cpuset.cpus.
func cpusOf(t *testing.T, dir string) string {
	return strings.TrimSpace(testutil.Read(t, filepath.Join(dir, "cpuset.cpus")))
}

// setPolicy writes the knob's current policy p, as a user's write does.
func setPolicy(t *testing.T, d *Daemon, p policy.Policy) {
	t.Helper()
	if err := d.do(context.Background(), func() error { return d.setKnob(d.dec.knob.WithCurrentPolicy(p), "test") }); err != nil {
		t.Fatal(err)
	}
}
