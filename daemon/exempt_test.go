package daemon

import (
	"context"
	"strings"
	"testing"

	"github.com/godbus/dbus/v5"

	"github.com/schedpolicyd/schedpolicyd/daemon/bus"
	"github.com/schedpolicyd/schedpolicyd/daemon/statefile"
	"github.com/schedpolicyd/schedpolicyd/internal/testutil"
	"github.com/schedpolicyd/schedpolicyd/policy"
)

// TestDaemonExempt: the escape hatch through the whole daemon on the mock
// laptop's cgroup v2 tree and a private bus. The configuration's exempt
// setting keeps b at its original; Exempt over D-Bus gives a its original
// back before the call returns, publishes it as exempt (Workloads,
// Exemptions) and keeps the entry in state.json, which a restart takes
// back; a reload without the setting places b again; Unexempt places a
// again; a bad entry changes nothing.
func TestDaemonExempt(t *testing.T) {
	addr := testutil.StartBus(t, testutil.BusOptions{AnyUser: true}).Addr
	m := newMockLaptop(t)
	var cfg Config
	edit := func(c *Config) {
		c.Bus, c.Exempt = addr, []string{"b"}
		cfg = *c
	}
	d, cancel, done := m.startCfg(t, edit)
	conn, err := dbus.Connect(addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	testutil.Eventually(t, "our name on the bus", func() (bool, string) { return testutil.NameOwnedAt(addr, bus.Name) })
	obj := conn.Object(bus.Name, bus.ObjectPath)
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

	var entry string
	if err := obj.Call(bus.Interface+".Exempt", 0, "a").Store(&entry); err != nil || entry != "a" {
		t.Fatalf("Exempt(a) = %q, %v", entry, err)
	}
	testutil.WantEq(t, "a exempt: its original (inherit) back when the call returns", cpus(), "a= b=2-3")
	testutil.WantEq(t, "overrides", overrides(d), "a:exempt b:exempt")
	var list [][]any
	if err := obj.StoreProperty(bus.Interface+".Exemptions", &list); err != nil || len(list) != 2 ||
		list[0][0] != "b" || list[0][1] != "config" || list[1][0] != "a" || list[1][1] != "state" {
		t.Errorf("Exemptions = %v, %v", list, err)
	}
	st, err := statefile.LoadState(m.state)
	if err != nil || strings.Join(st.Exempt, ",") != "a" {
		t.Errorf("state.json's exempt list %q, %v", st.Exempt, err)
	}
	if err := obj.Call(bus.Interface+".Exempt", 0, "home/a").Store(&entry); err == nil {
		t.Error("Exempt(home/a) accepted")
	}
	if err := obj.Call(bus.Interface+".Unexempt", 0, "b").Store(&entry); err == nil || !strings.Contains(err.Error(), "exempt by the configuration file's exempt setting") {
		t.Errorf("Unexempt(b), the configuration's: %v", err)
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
	testutil.Eventually(t, "our name on the bus again", func() (bool, string) { return testutil.NameOwnedAt(addr, bus.Name) })
	if err := obj.Call(bus.Interface+".Unexempt", 0, "a").Store(&entry); err != nil || entry != "a" {
		t.Fatalf("Unexempt(a) = %q, %v", entry, err)
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
