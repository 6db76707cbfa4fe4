package statefile

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/schedpolicyd/schedpolicyd/daemon/snapshot"
	"github.com/schedpolicyd/schedpolicyd/internal/names"
	"github.com/schedpolicyd/schedpolicyd/policy"
	"github.com/schedpolicyd/schedpolicyd/sysfs"
)

func TestStateRoundTrip(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	st, err := LoadState(dir)
	if err != nil || st.Knob != policy.DefaultKnob() || st.Cgroups != nil {
		t.Fatalf("missing file: got %+v, %v; want defaults, nil", st, err)
	}
	want := State{
		Knob: policy.Knob{PowerAware: 2, PowerAwarePolicy: policy.Balance},
		Cgroups: []Record{
			{Path: "/sys/fs/cgroup/cpuset/schedpolicyd", Inode: 7, Values: Values{Original: "0-15"}, Parent: true},
			{Path: "/sys/fs/cgroup/cpuset/schedpolicyd/w1", Inode: 9, Values: Values{Original: "0-3,8", Applied: "0", Pending: "0-1"}, LoadBalanceCleared: true},
			{Path: "/sys/fs/cgroup/x/y", Values: Values{Original: "", Applied: "2"}, Created: true, Released: false},
		},
		Units: []UnitRecord{
			{Manager: "system", Unit: "cron.service", Values: Values{Original: "", Applied: "0"}},
			{Manager: "system", Unit: "wl.scope", Values: Values{Original: "", Pending: "1"}, Created: true},
			{Manager: "user:1000", Unit: "app-firefox-1.scope", Values: Values{Original: "2-3", Applied: "2"}},
		},
	}
	if err := SaveState(dir, want); err != nil {
		t.Fatal(err)
	}
	got, err := LoadState(dir)
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("got %+v, %v; want %+v", got, err, want)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("state dir holds %d entries, want only state.json (no temp files left)", len(entries))
	}
	fi, _ := os.Stat(filepath.Join(dir, StateFile))
	if fi.Mode().Perm() != 0o644 {
		t.Errorf("mode %v, want 0644", fi.Mode().Perm())
	}
}

func TestStateCorruptAndInvalid(t *testing.T) {
	for name, content := range map[string]string{
		"garbage":         "{not json",
		"wrong version":   `{"version": 9, "power_aware": 1, "power_aware_policy": "balance"}`,
		"bad knob":        `{"version": 1, "power_aware": 7, "power_aware_policy": "balance"}`,
		"bad policy":      `{"version": 1, "power_aware": 1, "power_aware_policy": "performance"}`,
		"bad original":    `{"version": 1, "power_aware": 1, "power_aware_policy": "balance", "originals": {"/a": "3-1"}}`,
		"relative cgroup": `{"version": 1, "power_aware": 1, "power_aware_policy": "balance", "originals": {"a": "1"}}`,
		"v2 bad applied":  `{"version": 2, "power_aware": 1, "power_aware_policy": "balance", "cgroups": [{"path": "/a", "original_cpus": "1", "applied_cpus": "x"}]}`,
		"v2 relative":     `{"version": 2, "power_aware": 1, "power_aware_policy": "balance", "cgroups": [{"path": "a", "original_cpus": "1"}]}`,
		"v2 unclean path": `{"version": 2, "power_aware": 1, "power_aware_policy": "balance", "cgroups": [{"path": "/a/../b", "original_cpus": "1"}]}`,
		"v2 twice":        `{"version": 2, "power_aware": 1, "power_aware_policy": "balance", "cgroups": [{"path": "/a", "original_cpus": "1"}, {"path": "/a", "original_cpus": "2"}]}`,
		"v2 with v1 maps": `{"version": 2, "power_aware": 1, "power_aware_policy": "balance", "originals": {"/a": "1"}}`,
		"truncated file":  ``,
		"unit manager":    `{"version": 2, "power_aware": 1, "power_aware_policy": "balance", "units": [{"manager": "user:x", "unit": "a.service", "original_cpus": ""}]}`,
		"unit not a unit": `{"version": 2, "power_aware": 1, "power_aware_policy": "balance", "units": [{"manager": "system", "unit": "a.slice", "original_cpus": ""}]}`,
		"unit path":       `{"version": 2, "power_aware": 1, "power_aware_policy": "balance", "units": [{"manager": "system", "unit": "../a.service", "original_cpus": ""}]}`,
		"unit bad cpus":   `{"version": 2, "power_aware": 1, "power_aware_policy": "balance", "units": [{"manager": "system", "unit": "a.service", "original_cpus": "", "applied_cpus": "1-"}]}`,
		"unit twice":      `{"version": 2, "power_aware": 1, "power_aware_policy": "balance", "units": [{"manager": "system", "unit": "a.service", "original_cpus": ""}, {"manager": "system", "unit": "a.service", "original_cpus": "1"}]}`,
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			os.WriteFile(filepath.Join(dir, StateFile), []byte(content), 0o644)
			st, err := LoadState(dir)
			if !errors.Is(err, ErrCorruptState) {
				t.Errorf("err = %v, want ErrCorruptState", err)
			}
			if st.Knob != policy.DefaultKnob() || st.Cgroups != nil {
				t.Errorf("state = %+v, want defaults", st)
			}
		})
	}
}

func TestSaveStateRejectsInvalidAndKeepsOld(t *testing.T) {
	dir := t.TempDir()
	old := State{Knob: policy.Knob{PowerAware: 0, PowerAwarePolicy: policy.Powersaving}}
	if err := SaveState(dir, old); err != nil {
		t.Fatal(err)
	}
	if err := SaveState(dir, State{Knob: policy.Knob{PowerAware: 5, PowerAwarePolicy: policy.Balance}}); !errors.Is(err, policy.ErrInvalid) {
		t.Fatalf("err = %v, want ErrInvalid", err)
	}
	if got, _ := LoadState(dir); got.Knob != old.Knob {
		t.Errorf("state changed to %+v after a rejected save", got)
	}
}

// TestStateMigratesV1: a committed version-1 file (four parallel maps)
// loads as one record per cgroup: originals are Unverified (v1 did not
// record what it wrote), flags and created workloads keep their inodes;
// the next save writes version 2.
func TestStateMigratesV1(t *testing.T) {
	dir := t.TempDir()
	b, err := os.ReadFile("testdata/state/v1.json")
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, StateFile), b, 0o644)
	st, err := LoadState(dir)
	if err != nil {
		t.Fatal(err)
	}
	want := State{
		Knob:   policy.Knob{PowerAware: 2, PowerAwarePolicy: policy.Balance},
		Chosen: true,
		Cgroups: []Record{
			{Path: "/sys/fs/cgroup/cpuset/schedpolicyd/a", Inode: 101, Values: Values{Original: "0-1"}, Unverified: true, LoadBalanceCleared: true},
			{Path: "/sys/fs/cgroup/cpuset/schedpolicyd/b", Inode: 102, Values: Values{Original: "1"}, Unverified: true},
			{Path: "/sys/fs/cgroup/cpuset/schedpolicyd/run-1", Inode: 103, Created: true},
		},
	}
	if !reflect.DeepEqual(st, want) {
		t.Fatalf("migrated\n%+v\nwant\n%+v", st, want)
	}
	if err := SaveState(dir, st); err != nil {
		t.Fatal(err)
	}
	out, _ := os.ReadFile(filepath.Join(dir, StateFile))
	var v struct {
		Version   int            `json:"version"`
		Originals map[string]any `json:"originals"`
	}
	if err := json.Unmarshal(out, &v); err != nil || v.Version != 2 || v.Originals != nil {
		t.Fatalf("saved after migration: version %d, originals %v (%v); want version 2 without v1 maps", v.Version, v.Originals, err)
	}
	if again, err := LoadState(dir); err != nil || !reflect.DeepEqual(again, want) {
		t.Fatalf("reloaded %+v, %v", again, err)
	}
}

// TestStateEveryVersion: every earlier version-2 shape of state.json in
// testdata/state (its README says which commit wrote each) loads without
// an error, its records' values where they were, and a save of what
// loaded writes the very same bytes: the format is unchanged (records
// embed Values; their fields are still the records' own).
func TestStateEveryVersion(t *testing.T) {
	files, err := filepath.Glob("testdata/state/v2-*.json")
	if err != nil || len(files) != 4 {
		t.Fatalf("version-2 files %v (%v), want 4", files, err)
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		dir := t.TempDir()
		os.WriteFile(filepath.Join(dir, StateFile), b, 0o644)
		st, err := LoadState(dir)
		if err != nil || st.EnergyErr != nil || st.ChoicesErr != nil {
			t.Fatalf("%s: %v (energy %v, choices %v)", f, err, st.EnergyErr, st.ChoicesErr)
		}
		if len(st.Cgroups) > 0 {
			if r := st.Cgroups[1]; r.Path != "/sys/fs/cgroup/cpuset/schedpolicyd/build" || r.Values != (Values{Original: "0-7", Applied: "0-1"}) || !r.LoadBalanceCleared {
				t.Errorf("%s: cgroup record %+v", f, r)
			}
		}
		if len(st.Units) > 0 {
			if r := st.Units[1]; r.Key() != "system/run-build.scope" || r.Values != (Values{Pending: "1"}) || !r.Created {
				t.Errorf("%s: unit record %+v", f, r)
			}
		}
		out := t.TempDir()
		if err := SaveState(out, st); err != nil {
			t.Fatal(err)
		}
		if again, _ := os.ReadFile(filepath.Join(out, StateFile)); string(again) != string(b) {
			t.Errorf("%s: saved again as\n%s\nwant the file as it was\n%s", f, again, b)
		}
	}
}

// TestValuesSteps: the protocol's steps on a record's values.
func TestValuesSteps(t *testing.T) {
	v := Values{Original: "0-3"}
	if !v.Begin("0") || v.Begin("0") || v != (Values{Original: "0-3", Pending: "0"}) {
		t.Fatalf("begin: %+v", v)
	}
	v.Done("0")
	if v != (Values{Original: "0-3", Applied: "0"}) {
		t.Fatalf("done: %+v", v)
	}
	v.Begin("1")
	v.Failed()
	if v != (Values{Original: "0-3", Applied: "0"}) {
		t.Fatalf("failed: %+v", v)
	}
	v.Begin("0-3")
	v.Done("0-3") // the original: nothing of ours there
	if v != (Values{Original: "0-3"}) {
		t.Fatalf("done with the original: %+v", v)
	}
	v = Values{Original: "0-3", Applied: "0", Pending: "1"}
	v.Theirs("2")
	if v != (Values{Original: "2"}) {
		t.Fatalf("theirs: %+v", v)
	}
	v = Values{Original: "0-3", Applied: "0", Pending: "1"}
	v.Restored()
	if v != (Values{Original: "0-3"}) {
		t.Fatalf("restored: %+v", v)
	}
}

// TestStateEnergy: the energy totals survive a save and a load; invalid
// ones are dropped alone, with the reason, and everything else in the file
// is used; SaveState refuses to write invalid ones.
func TestStateEnergy(t *testing.T) {
	dir := t.TempDir()
	want := State{
		Knob:    policy.DefaultKnob(),
		Cgroups: []Record{{Path: "/sys/fs/cgroup/cpuset/schedpolicyd/w", Values: Values{Original: "0-3", Applied: "0"}}},
		Energy: []snapshot.EnergyTotal{
			{Policy: policy.Performance, PowerSource: "ac", Joules: 1234.5, Seconds: 60},
			{Policy: policy.Powersaving, PowerSource: "battery", Joules: 72.1, Seconds: 10},
		},
	}
	if err := SaveState(dir, want); err != nil {
		t.Fatal(err)
	}
	got, err := LoadState(dir)
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("got %+v, %v; want %+v", got, err, want)
	}
	b, _ := os.ReadFile(filepath.Join(dir, StateFile))
	var raw map[string]any
	json.Unmarshal(b, &raw)
	if e, _ := raw["energy"].([]any); len(e) != 2 || e[1].(map[string]any)["power_source"] != "battery" || e[1].(map[string]any)["joules"] != 72.1 {
		t.Errorf("state.json energy = %v", raw["energy"])
	}

	const head = `{"version": 2, "power_aware": 2, "power_aware_policy": "balance", "cgroups": [{"path": "/a", "original_cpus": "1", "applied_cpus": "0"}], "energy": `
	for name, energy := range map[string]string{
		"unknown policy":   `[{"policy": "turbo", "power_source": "ac", "joules": 1, "seconds": 1}]`,
		"unknown source":   `[{"policy": "balance", "power_source": "solar", "joules": 1, "seconds": 1}]`,
		"negative joules":  `[{"policy": "balance", "power_source": "ac", "joules": -1, "seconds": 1}]`,
		"huge seconds":     `[{"policy": "balance", "power_source": "ac", "joules": 1, "seconds": 1e300}]`,
		"a pair twice":     `[{"policy": "balance", "power_source": "ac", "joules": 1, "seconds": 1}, {"policy": "balance", "power_source": "ac", "joules": 2, "seconds": 2}]`,
		"not a list":       `{"policy": "balance"}`,
		"joules as string": `[{"policy": "balance", "power_source": "ac", "joules": "1", "seconds": 1}]`,
	} {
		t.Run(name, func(t *testing.T) {
			d := t.TempDir()
			os.WriteFile(filepath.Join(d, StateFile), []byte(head+energy+"}"), 0o644)
			st, err := LoadState(d)
			if name == "not a list" || name == "joules as string" {
				// JSON of the wrong shape is a file that does not parse.
				if !errors.Is(err, ErrCorruptState) {
					t.Errorf("err = %v, want ErrCorruptState", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("err = %v: the rest of the file must be used", err)
			}
			if st.EnergyErr == nil || st.Energy != nil {
				t.Errorf("energy %+v, EnergyErr %v; want none and a reason", st.Energy, st.EnergyErr)
			}
			if st.Knob.PowerAware != 2 || len(st.Cgroups) != 1 || st.Cgroups[0].Applied != "0" {
				t.Errorf("the rest of the file was not used: %+v", st)
			}
		})
	}

	bad := want
	bad.Energy = []snapshot.EnergyTotal{{Policy: "turbo", PowerSource: "ac"}}
	if err := SaveState(dir, bad); err == nil {
		t.Error("SaveState wrote an invalid energy total")
	}
	if got, _ := LoadState(dir); !reflect.DeepEqual(got, want) {
		t.Errorf("a refused save changed the file: %+v", got)
	}
}

// TestUnfinished: what a run that did not finish its stop left, as the
// start logs it; records that hold nothing of the daemon's do not count.
func TestUnfinished(t *testing.T) {
	for _, c := range []struct {
		name string
		st   State
		want string
	}{
		// Nothing of ours.
		{"empty", State{}, ""},
		{"only a parent, a created and a released record", State{Cgroups: []Record{{Path: "/p", Values: Values{Original: "0-3"}, Parent: true}, {Path: "/p/a", Created: true}, {Path: "/p/b", Released: true}}}, ""},
		{"a unit record without a value of ours", State{Units: []UnitRecord{{Manager: "system", Unit: "a.service", Values: Values{Original: "1"}}}}, ""},
		// Something left.
		{"one cgroup", State{Cgroups: []Record{{Path: "/p/a", Values: Values{Applied: "0"}}}}, "1 cgroup"},
		{"cgroups by value, pending, unverified or cleared flag", State{Cgroups: []Record{{Path: "/a", Values: Values{Applied: "0"}}, {Path: "/b", Values: Values{Pending: "1"}}, {Path: "/c", Unverified: true}, {Path: "/d", LoadBalanceCleared: true}}}, "4 cgroups"},
		{"all kinds", State{
			Cgroups: []Record{{Path: "/a", Values: Values{Applied: "0"}}, {Path: "/b", Values: Values{Pending: "1"}}},
			Units:   []UnitRecord{{Manager: "system", Unit: "a.service", Values: Values{Pending: "0"}}},
			Boost:   []sysfs.BoostSetting{{File: "devices/system/cpu/cpufreq/boost", Value: "1"}},
		}, "2 cgroups, 1 unit, boost"},
	} {
		if got := c.st.Unfinished(); got != c.want {
			t.Errorf("%s: Unfinished() = %q, want %q", c.name, got, c.want)
		}
	}
}

func TestRecordWrittenNeeded(t *testing.T) {
	for _, c := range []struct {
		name            string
		r               Record
		written, needed bool
	}{
		{"original only", Record{Path: "/a", Values: Values{Original: "0-3"}}, false, false},
		{"parent", Record{Path: "/a", Values: Values{Original: "0-3"}, Parent: true}, false, false},
		{"applied", Record{Path: "/a", Values: Values{Applied: "0"}}, true, true},
		{"pending", Record{Path: "/a", Values: Values{Pending: "0"}}, true, true},
		{"unverified", Record{Path: "/a", Unverified: true}, true, true},
		{"cleared flag", Record{Path: "/a", LoadBalanceCleared: true}, false, true},
		{"created", Record{Path: "/a", Created: true}, false, true},
		{"released", Record{Path: "/a", Released: true}, false, true},
	} {
		if got := c.r.Written(); got != c.written {
			t.Errorf("%s: Written() = %v, want %v", c.name, got, c.written)
		}
		if got := c.r.Needed(); got != c.needed {
			t.Errorf("%s: Needed() = %v, want %v", c.name, got, c.needed)
		}
	}
}

// TestStateExempt: the exempt list saves and loads in order; a file
// without it (every earlier shape: TestStateEveryVersion) loads with
// none; a hand-edited list loses only its bad entries, said in
// ExemptErr; SaveState refuses a bad list and leaves the file alone.
func TestStateExempt(t *testing.T) {
	dir := t.TempDir()
	want := []string{"user:1000/app-firefox.scope", "app-steam*.scope", "system/ssh.service"}
	if err := SaveState(dir, State{Knob: policy.DefaultKnob(), Exempt: want}); err != nil {
		t.Fatal(err)
	}
	st, err := LoadState(dir)
	if err != nil || st.ExemptErr != nil || !reflect.DeepEqual(st.Exempt, want) {
		t.Fatalf("loaded %v (%v, %v), want %v", st.Exempt, err, st.ExemptErr, want)
	}
	b, _ := os.ReadFile(filepath.Join(dir, StateFile))
	if !json.Valid(b) || !strings.Contains(string(b), `"exempt": [`) {
		t.Fatalf("state.json:\n%s", b)
	}

	bad := `{"version": 2, "power_aware": 1, "power_aware_policy": "powersaving",
	  "exempt": ["ok.service", "home/x", "ok.service", "app[", "user:5/a*"]}`
	os.WriteFile(filepath.Join(dir, StateFile), []byte(bad), 0o644)
	st, err = LoadState(dir)
	if err != nil || !reflect.DeepEqual(st.Exempt, []string{"ok.service", "user:5/a*"}) {
		t.Fatalf("hand-edited list: %v, %v", st.Exempt, err)
	}
	wantErr := dir + `/state.json: exempt: dropped exempt entry "home/x": "home" is not a manager: want system/ or user:UID/ before the name, or no "/"; exempt entry "ok.service": given twice; exempt entry "app[": not a valid glob (path.Match: syntax error in pattern); the other exemptions are kept`
	if st.ExemptErr == nil || st.ExemptErr.Error() != wantErr {
		t.Errorf("ExemptErr = %v\nwant %s", st.ExemptErr, wantErr)
	}

	many := make([]string, names.MaxExempts+1)
	for i := range many {
		many[i] = fmt.Sprintf("w%d", i)
	}
	if err := SaveState(dir, State{Knob: policy.DefaultKnob(), Exempt: many}); err == nil || !strings.Contains(err.Error(), `exempt entry "w256": beyond the 256 entries kept`) {
		t.Errorf("SaveState of %d entries: %v", len(many), err)
	}
	if again, _ := os.ReadFile(filepath.Join(dir, StateFile)); string(again) != bad {
		t.Errorf("a refused save changed state.json:\n%s", again)
	}
}
