package acpi

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/schedpolicyd/schedpolicyd/internal/testutil"
	"github.com/schedpolicyd/schedpolicyd/sysfs"
)

// fixtureDir holds the repository's power_supply corpus: twenty machines
// rebuilt from public reports, each with its source in case.json (see its
// README.md).
const fixtureDir = "../testdata/power_supply"

type fixtureCase struct {
	Name     string `json:"name"`
	Source   string `json:"source"`
	Expected Source `json:"expected"`
	Why      string `json:"why"`
}

type timelineStep struct {
	AtMS     int               `json:"at_ms"`
	Set      map[string]string `json:"set"`
	Expected *Source           `json:"expected"`
	Note     string            `json:"note"`
}

// fixtureCases discovers <fixtureDir>/*/case.json. Every case names its
// own directory, gives its public source and is labelled ac, battery or
// unknown.
func fixtureCases(t *testing.T) map[string]fixtureCase {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(fixtureDir, "*", "case.json"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatalf("no */case.json in %s", fixtureDir)
	}
	cases := map[string]fixtureCase{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var c fixtureCase
		if err := json.Unmarshal(b, &c); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		switch c.Expected {
		case AC, Battery, Unknown:
		default:
			t.Fatalf("%s: unexpected label %q", f, c.Expected)
		}
		dir := filepath.Base(filepath.Dir(f))
		if c.Name != dir {
			t.Fatalf("%s: name %q, want the directory's name %q", f, c.Name, dir)
		}
		if strings.TrimSpace(c.Source) == "" || strings.TrimSpace(c.Why) == "" {
			t.Fatalf("%s: no source or why", f)
		}
		cases[dir] = c
	}
	return cases
}

func mustFS(t *testing.T, root string) sysfs.FS {
	t.Helper()
	fsys, err := sysfs.NewFS(root)
	if err != nil {
		t.Fatal(err)
	}
	return fsys
}

// wantRule checks that a non-unknown decision is backed by evidence of
// the matching rule.
func checkDecision(t *testing.T, d Decision, want Source) {
	t.Helper()
	if d.Source != want {
		t.Fatalf("Source = %q, want %q; reason %q; evidence %+v", d.Source, want, d.Reason, d.Evidence)
	}
	if d.Reason == "" {
		t.Fatalf("empty Reason")
	}
	wantRule := map[Source]string{AC: "2:", Battery: "3:"}[want]
	if wantRule != "" && (len(d.Evidence) == 0 || !strings.HasPrefix(d.Evidence[0].Rule, wantRule)) {
		t.Fatalf("%s decision without rule %s evidence first: %+v", want, wantRule, d.Evidence)
	}
}

func TestClassifyFixtures(t *testing.T) {
	for dir, c := range fixtureCases(t) {
		t.Run(dir, func(t *testing.T) {
			fsys := mustFS(t, filepath.Join(fixtureDir, dir, "sys"))
			supplies, err := fsys.PowerSupplies()
			if err != nil {
				t.Fatal(err)
			}
			checkDecision(t, Classify(supplies), c.Expected)
			d, err := Read(fsys)
			if err != nil {
				t.Fatalf("Read: %v", err)
			}
			t.Logf("expected %s, got %s: %s", c.Expected, d.Source, d.Reason)
			checkDecision(t, d, c.Expected)
		})
	}
}

// TestClassifyTimelines re-reads each tl-* fixture after every step of its
// events.json (applied to a copy) and checks the settled steps. Uevents and
// timing are not exercised here; only the pure re-read.
func TestClassifyTimelines(t *testing.T) {
	cases := fixtureCases(t)
	n := 0
	for dir, c := range cases {
		if !strings.HasPrefix(dir, "tl-") {
			continue
		}
		n++
		t.Run(dir, func(t *testing.T) {
			b, err := os.ReadFile(filepath.Join(fixtureDir, dir, "events.json"))
			if err != nil {
				t.Fatal(err)
			}
			var steps []timelineStep
			if err := json.Unmarshal(b, &steps); err != nil {
				t.Fatal(err)
			}
			root := t.TempDir()
			testutil.CopyFixture(t, filepath.Join(fixtureDir, dir, "sys"), root)
			fsys := mustFS(t, root)
			d, err := Read(fsys)
			if err != nil {
				t.Fatal(err)
			}
			checkDecision(t, d, c.Expected)
			for i, s := range steps {
				keys := make([]string, 0, len(s.Set))
				for k := range s.Set {
					keys = append(keys, k)
				}
				sort.Strings(keys)
				for _, k := range keys {
					p := fsys.Path("class", "power_supply", k)
					if err := os.WriteFile(p, []byte(s.Set[k]+"\n"), 0o644); err != nil {
						t.Fatalf("step %d: %v", i, err)
					}
				}
				if s.Expected == nil {
					continue
				}
				d, err := Read(fsys)
				if err != nil {
					t.Fatal(err)
				}
				if d.Source != *s.Expected {
					t.Fatalf("step %d (at %d ms, %q): Source = %q, want %q; reason %q", i, s.AtMS, s.Note, d.Source, *s.Expected, d.Reason)
				}
			}
		})
	}
	if n == 0 {
		t.Fatalf("no tl-* cases in %s", fixtureDir)
	}
}

func i64(v int64) *int64 { return &v }

func TestClassifyRules(t *testing.T) {
	tests := []struct {
		name     string
		supplies []sysfs.PowerSupply
		want     Decision
	}{
		// Verdicts.
		{
			name:     "no supplies at all",
			supplies: nil,
			want:     Decision{Source: Unknown, Reason: "unknown: no power supplies (rule 4: without evidence either way the source is unknown, treated as AC)"},
		},
		{
			name: "UCSI port online=2 (programmable)",
			supplies: []sysfs.PowerSupply{
				{Name: "ucsi-source-psy-USBC000:001", Type: "USB", Online: i64(2)},
			},
			want: Decision{Source: AC, Reason: "AC: USB supply ucsi-source-psy-USBC000:001 reports online=2 (rule 2)", Evidence: []Evidence{
				{"ucsi-source-psy-USBC000:001", "online", "2", "2: system supply online"},
			}},
		},
		{
			name: "charging battery without adapter entry",
			supplies: []sysfs.PowerSupply{
				{Name: "BAT0", Type: "Battery", Present: i64(1), Status: "Charging"},
			},
			want: Decision{Source: AC, Reason: "AC: system battery BAT0 reports status=Charging (rule 2)", Evidence: []Evidence{
				{"BAT0", "status", "Charging", "2: present system battery charging"},
			}},
		},
		{
			name: "battery without present attribute counts as present",
			supplies: []sysfs.PowerSupply{
				{Name: "AC", Type: "Mains", Online: i64(0)},
				{Name: "BAT0", Type: "Battery", Status: "Discharging"},
			},
			want: Decision{Source: Battery, Reason: "battery: system battery BAT0 reports status=Discharging and no supply shows external power (rule 3)", Evidence: []Evidence{
				{"BAT0", "status", "Discharging", "3: present system battery discharging"},
				{"AC", "online", "0", "4: offline supply is not evidence"},
			}},
		},
		// Rule 1: set aside.
		{
			name: "removed battery that still says Charging",
			supplies: []sysfs.PowerSupply{
				{Name: "BAT1", Type: "Battery", Present: i64(0), Status: "Charging"},
				{Name: "BAT0", Type: "Battery", Present: i64(1), Status: "Discharging"},
			},
			want: Decision{Source: Battery, Reason: "battery: system battery BAT0 reports status=Discharging and no supply shows external power (rule 3)", Evidence: []Evidence{
				{"BAT0", "status", "Discharging", "3: present system battery discharging"},
				{"BAT1", "present", "0", "1: battery not present, ignored"},
			}},
		},
		{
			name: "old kernel: HID pen battery without scope reads online",
			supplies: []sysfs.PowerSupply{
				{Name: "hid-0018:04F3:2B11.0001-battery", Type: "Battery", Online: i64(1), Present: i64(1), Status: "Charging"},
				{Name: "BAT0", Type: "Battery", Present: i64(1), Status: "Discharging"},
			},
			want: Decision{Source: Battery, Reason: "battery: system battery BAT0 reports status=Discharging and no supply shows external power (rule 3)", Evidence: []Evidence{
				{"BAT0", "status", "Discharging", "3: present system battery discharging"},
				{"hid-0018:04F3:2B11.0001-battery", "scope", "(absent)", "1: peripheral driver name without scope, ignored"},
			}},
		},
		{
			name: "system fuel gauge named -battery is not a peripheral",
			supplies: []sysfs.PowerSupply{
				{Name: "axp20x-battery", Type: "Battery", Present: i64(1), Status: "Discharging"},
			},
			want: Decision{Source: Battery, Reason: "battery: system battery axp20x-battery reports status=Discharging and no supply shows external power (rule 3)", Evidence: []Evidence{
				{"axp20x-battery", "status", "Discharging", "3: present system battery discharging"},
			}},
		},
		{
			name: "explicit System scope beats a name hint",
			supplies: []sysfs.PowerSupply{
				{Name: "hid-something-battery", Type: "Battery", Scope: "System", Present: i64(1), Status: "Discharging"},
			},
			want: Decision{Source: Battery, Reason: "battery: system battery hid-something-battery reports status=Discharging and no supply shows external power (rule 3)", Evidence: []Evidence{
				{"hid-something-battery", "status", "Discharging", "3: present system battery discharging"},
			}},
		},
		// Rule 5: quirk.
		{
			name: "2017 MacBook Pro sbs-charger alone",
			supplies: []sysfs.PowerSupply{
				{Name: "sbs-charger", Type: "Mains", Online: i64(1)},
			},
			want: Decision{Source: Unknown, Reason: "unknown: no system supply is online and no system battery is charging or discharging (rule 4: without evidence either way the source is unknown, treated as AC)", Evidence: []Evidence{
				{"sbs-charger", "online", "1", "5: sbs-charger always reads online, ignored"},
			}},
		},
		// Rule 4.
		{
			name: "full battery, adapter offline",
			supplies: []sysfs.PowerSupply{
				{Name: "AC", Type: "Mains", Online: i64(0)},
				{Name: "BAT0", Type: "Battery", Present: i64(1), Status: "Full"},
			},
			want: Decision{Source: Unknown, Reason: "unknown: no system supply is online and no system battery is charging or discharging (rule 4: without evidence either way the source is unknown, treated as AC)", Evidence: []Evidence{
				{"AC", "online", "0", "4: offline supply is not evidence"},
				{"BAT0", "status", "Full", "4: battery status is not evidence"},
			}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Classify(tt.supplies)
			if !reflect.DeepEqual(tt.want, got) {
				t.Errorf("Classify:\nwant %+v\ngot  %+v", tt.want, got)
			}
		})
	}
}

// TestReadUSBSourceRole builds a UCSI port that reports online while its
// typec port is in source role (rule 6, systemd's on_ac_power()).
func TestReadUSBSourceRole(t *testing.T) {
	for _, tt := range []struct {
		name  string
		roles []string
		want  Source
	}{
		{"only port is a source", []string{"sink [source]"}, Unknown},
		{"one port sinks", []string{"sink [source]", "[sink] source"}, AC},
		{"no typec ports", nil, AC},
	} {
		t.Run(tt.name, func(t *testing.T) {
			root := t.TempDir()
			fsys := mustFS(t, root)
			dev := fsys.Path("devices", "platform", "USBC000:00")
			psy := filepath.Join(dev, "power_supply", "ucsi-source-psy-USBC000:001")
			testutil.WriteFile(t, filepath.Join(psy, "type"), "USB\n")
			testutil.WriteFile(t, filepath.Join(psy, "online"), "1\n")
			if err := os.Symlink(dev, filepath.Join(psy, "device")); err != nil {
				t.Fatal(err)
			}
			for i, r := range tt.roles {
				testutil.WriteFile(t, filepath.Join(dev, "typec", "port"+string(rune('0'+i)), "power_role"), r+"\n")
			}
			if err := os.MkdirAll(fsys.Path("class", "power_supply"), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(psy, fsys.Path("class", "power_supply", "ucsi-source-psy-USBC000:001")); err != nil {
				t.Fatal(err)
			}
			d, err := Read(fsys)
			if err != nil {
				t.Fatal(err)
			}
			if d.Source != tt.want {
				t.Fatalf("Source = %q, want %q (%q, %+v)", d.Source, tt.want, d.Reason, d.Evidence)
			}
			// Classify alone cannot see the port.
			supplies, _ := fsys.PowerSupplies()
			if got := Classify(supplies).Source; got != AC {
				t.Fatalf("Classify Source = %q, want ac", got)
			}
		})
	}
}

func TestReadNoClassDir(t *testing.T) {
	d, err := Read(mustFS(t, t.TempDir()))
	if err != nil {
		t.Fatalf("Read: %v", err)
	}
	want := Decision{Source: Unknown, Reason: "unknown: no power supplies (rule 4: without evidence either way the source is unknown, treated as AC)"}
	if !reflect.DeepEqual(want, d) {
		t.Fatalf("want %+v, got %+v", want, d)
	}
}

// TestSystemBatteries: only the batteries that power the machine, by rule
// 1, on the corpus and on the cases it lacks.
func TestSystemBatteries(t *testing.T) {
	names := func(ps []sysfs.PowerSupply) []string {
		var out []string
		for _, p := range ps {
			out = append(out, p.Name)
		}
		return out
	}
	for dir, want := range map[string][]string{
		"surface-pro-on-battery":            {"BAT1"},
		"thinkpad-dual-battery-on-battery":  {"BAT0", "BAT1"},
		"desktop-hidpp-mouse-keyboard":      nil, // scope Device
		"desktop-ps-controller-discharging": nil, // a controller, discharging
		"hp-envy-stylus-hid-online":         {"BAT0"},
		"desktop-no-power-supply":           nil,
		"thinkpad-x13s-qcom-battmgr":        {"qcom-battmgr-bat"},
	} {
		t.Run(dir, func(t *testing.T) {
			supplies, err := mustFS(t, filepath.Join(fixtureDir, dir, "sys")).PowerSupplies()
			if err != nil {
				t.Fatal(err)
			}
			if got := names(SystemBatteries(supplies)); !reflect.DeepEqual(got, want) {
				t.Errorf("SystemBatteries = %v, want %v", got, want)
			}
		})
	}
	zero, one := int64(0), int64(1)
	got := names(SystemBatteries([]sysfs.PowerSupply{
		{Name: "BAT0", Type: "Battery", Present: &zero}, // removed
		{Name: "BAT1", Type: "Battery", Present: &one},  // present
		{Name: "BAT2", Type: "Battery"},                 // no present attribute: present
		{Name: "hidpp_battery_3", Type: "Battery"},      // peripheral driver, no scope
		{Name: "wacom_battery_0", Type: "Battery", Scope: "Unknown"},
		{Name: "axp20x-battery", Type: "Battery"}, // a system fuel gauge
		{Name: "AC", Type: "Mains", Online: &one}, // not a battery
		{Name: "BAT9", Type: "Battery", Scope: "Device", Present: &one},
	}))
	if want := []string{"BAT1", "BAT2", "axp20x-battery"}; !reflect.DeepEqual(got, want) {
		t.Errorf("SystemBatteries = %v, want %v", got, want)
	}
}
