package main

import (
	"bytes"
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/schedpolicyd/schedpolicyd/daemon"
	"github.com/schedpolicyd/schedpolicyd/daemon/statefile"
	"github.com/schedpolicyd/schedpolicyd/internal/testutil"
	"github.com/schedpolicyd/schedpolicyd/policy"
)

// onBatteryRoot is a mock machine (laptop-4c8t) running on battery: the
// adapter offline, the battery discharging.
func onBatteryRoot(t *testing.T) string {
	t.Helper()
	root := filepath.Join(t.TempDir(), "sys")
	testutil.CopyFixture(t, "../../sysfs/testdata/topology/laptop-4c8t", root)
	ps := filepath.Join(root, "class/power_supply")
	testutil.Put(t, ps+"/ADP1/type", "Mains")
	testutil.Put(t, ps+"/ADP1/online", "0")
	testutil.Put(t, ps+"/BAT1/type", "Battery")
	testutil.Put(t, ps+"/BAT1/present", "1")
	testutil.Put(t, ps+"/BAT1/status", "Discharging")
	return root
}

func probeRun(t *testing.T, args ...string) (probeReport, string) {
	t.Helper()
	var out, errb bytes.Buffer
	if code := run(append([]string{"probe"}, args...), &out, &errb); code != 0 {
		t.Fatalf("probe %q: exit %d: %s", args, code, errb.String())
	}
	var r probeReport
	if err := json.Unmarshal(out.Bytes(), &r); err != nil {
		t.Fatalf("probe JSON: %v\n%s", err, out.String())
	}
	return r, out.String()
}

// servedPolicy starts the daemon in-process on root and stateDir with the
// configuration file conf, as daemonMain would read it, and returns the
// policy it serves once ready.
func servedPolicy(t *testing.T, root, stateDir, conf string) policy.Policy {
	t.Helper()
	fc, err := loadConfig(conf, true)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cfg := daemon.Config{SysfsRoot: root, StateDir: stateDir, TreeDir: filepath.Join(dir, "tree"), TreeBackend: "plain",
		Bus: "none", Events: "none", RecheckInterval: -1, Log: testutil.Logger(t)}
	fc.apply(&cfg, map[string]bool{})
	d, err := daemon.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("daemon: %v", err)
		}
	}()
	select {
	case <-d.Ready():
	case <-d.Done():
		t.Fatal("daemon stopped during start-up")
	case <-time.After(20 * time.Second):
		t.Fatal("daemon not ready within 20s")
	}
	return d.Snapshot().Policy
}

// TestProbeConfig: with power_aware = 0 in the
// configuration, the daemon serves performance on battery; probe, given
// the same file and state directory, must say so too, and say where the
// knob comes from. A choice saved in the state directory wins over the
// file, for both. A bad file is a usage error naming file and line.
func TestProbeConfig(t *testing.T) {
	root := onBatteryRoot(t)
	conf := filepath.Join(t.TempDir(), "schedpolicyd.conf")
	testutil.WriteFile(t, conf, "power_aware = 0\n")

	// No choice saved: the file's knob.
	state := filepath.Join(t.TempDir(), "state")
	r, _ := probeRun(t, "--sysfs-root", root, "--state-dir", state, "--config", conf, "--json")
	if r.PowerSource != "battery" || r.Policy != "performance" || r.PowerAware != 0 || r.KnobFrom != "config" || r.Config != conf {
		t.Errorf("probe with power_aware = 0: %+v; want battery, performance, power_aware 0 from config %s", r, conf)
	}
	if got := servedPolicy(t, root, state, conf); string(got) != r.Policy {
		t.Errorf("the daemon serves %s, probe says %s", got, r.Policy)
	}
	// The file's sysfs_root and state_dir are probe's defaults too.
	testutil.WriteFile(t, conf, "power_aware = 0\nsysfs_root = \""+root+"\"\nstate_dir = \""+state+"\"\n")
	if r, _ := probeRun(t, "--config", conf, "--json"); r.PowerSource != "battery" || r.Policy != "performance" || r.KnobFrom != "config" {
		t.Errorf("probe with the roots from the file: %+v", r)
	}

	// Without a file: the built-in default, powersaving on battery.
	empty := emptyConf(t)
	if r, _ := probeRun(t, "--sysfs-root", root, "--state-dir", state, "--config", empty, "--json"); r.Policy != "powersaving" || r.PowerAware != 1 || r.KnobFrom != "default" {
		t.Errorf("probe without a knob configured: %+v; want powersaving, power_aware 1 by default", r)
	}

	// A saved choice (power_aware 2, balance) wins over the file.
	chosen := filepath.Join(t.TempDir(), "state")
	st := statefile.State{Knob: policy.Knob{PowerAware: policy.PowerAwareOn, PowerAwarePolicy: policy.Balance}, Chosen: true}
	if err := statefile.SaveState(chosen, st); err != nil {
		t.Fatal(err)
	}
	testutil.WriteFile(t, conf, "power_aware = 0\n")
	r, text := probeRun(t, "--sysfs-root", root, "--state-dir", chosen, "--config", conf, "--json")
	if r.Policy != "balance" || r.PowerAware != 2 || r.KnobFrom != "state" {
		t.Errorf("probe with a saved choice: %+v; want balance, power_aware 2 from the state", r)
	}
	if got := servedPolicy(t, root, chosen, conf); string(got) != r.Policy {
		t.Errorf("with a saved choice the daemon serves %s, probe says %s (%s)", got, r.Policy, text)
	}
	var out, errb bytes.Buffer
	if code := run([]string{"probe", "--sysfs-root", root, "--state-dir", chosen, "--config", conf}, &out, &errb); code != 0 ||
		!strings.Contains(out.String(), "knob:          power_aware=2 power_aware_policy=balance (a choice saved in "+filepath.Join(chosen, "state.json")+")\n") {
		t.Errorf("probe text: exit %d\n%s%s", code, out.String(), errb.String())
	}

	// A bad file: exit 2, file and line, nothing printed on stdout.
	bad := filepath.Join(t.TempDir(), "bad.conf")
	testutil.WriteFile(t, bad, "\npower_aware = 3\n")
	out.Reset()
	errb.Reset()
	if code := run([]string{"probe", "--sysfs-root", root, "--config", bad}, &out, &errb); code != 2 || out.Len() != 0 ||
		!strings.Contains(errb.String(), bad+":2: power_aware: 3: want 0") {
		t.Errorf("probe with a bad file: exit %d, stdout %q, stderr %q", code, out.String(), errb.String())
	}
}
