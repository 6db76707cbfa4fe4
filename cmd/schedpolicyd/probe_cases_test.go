package main

import (
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/schedpolicyd/schedpolicyd/acpi"
	"github.com/schedpolicyd/schedpolicyd/sysfs"
)

// powerCases holds the repository's power_supply corpus, each case with
// its public source in case.json (see its README.md).
const powerCases = "../../testdata/power_supply"

// probeJSON runs `schedpolicyd probe --sysfs-root root --json` with an
// empty state directory (default knob).
func probeJSON(t *testing.T, bin, root string) probeReport {
	t.Helper()
	cmd := exec.Command(bin, "probe", "--sysfs-root", root, "--state-dir", t.TempDir(), "--config", emptyConf(t), "--json")
	out, err := cmd.Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			t.Fatalf("probe: %v\n%s", err, ee.Stderr)
		}
		t.Fatalf("probe: %v", err)
	}
	var r probeReport
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatalf("probe JSON: %v\n%s", err, out)
	}
	return r
}

// checkProbe compares the probe's power_source, reason and evidence with
// acpi.Read on the same tree and with the expected label.
func checkProbe(t *testing.T, bin, root string, want acpi.Source) {
	t.Helper()
	fsys, err := sysfs.NewFS(root)
	if err != nil {
		t.Fatal(err)
	}
	d, err := acpi.Read(fsys)
	if err != nil {
		t.Fatal(err)
	}
	r := probeJSON(t, bin, root)
	if r.PowerSource != string(want) || d.Source != want {
		t.Fatalf("probe says %q (%s), Read says %q, want %q", r.PowerSource, r.Reason, d.Source, want)
	}
	if r.Reason != d.Reason {
		t.Fatalf("probe reason %q, Read reason %q", r.Reason, d.Reason)
	}
	if len(r.Evidence) != 0 || len(d.Evidence) != 0 {
		if !reflect.DeepEqual(r.Evidence, d.Evidence) {
			t.Fatalf("probe evidence %+v\nRead evidence %+v", r.Evidence, d.Evidence)
		}
	}
	if want != acpi.Unknown && (len(r.Evidence) == 0 || r.Evidence[0].Supply == "" || r.Evidence[0].Attribute == "") {
		t.Fatalf("%s without a deciding supply and attribute: %+v", want, r.Evidence)
	}
	wantPolicy := map[acpi.Source]string{acpi.AC: "performance", acpi.Unknown: "performance", acpi.Battery: "powersaving"}[want]
	if r.Policy != wantPolicy {
		t.Fatalf("policy %q, want %q for %s with the default knob", r.Policy, wantPolicy, want)
	}
}

// TestProbePowerCases runs the built `schedpolicyd probe --json` on every
// case of the power_supply corpus (discovered from the directory),
// and for tl-* cases after every settled step of events.json, and checks
// it reports the expected label with the same reason and evidence as
// acpi.Read, which the daemon's monitor uses.
func TestProbePowerCases(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(powerCases, "*", "case.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no */case.json in %s (%v)", powerCases, err)
	}
	sort.Strings(files)
	bin := buildDaemon(t)
	for _, f := range files {
		dir := filepath.Dir(f)
		name := filepath.Base(dir)
		t.Run(name, func(t *testing.T) {
			var c struct {
				Expected acpi.Source `json:"expected"`
			}
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal(b, &c); err != nil {
				t.Fatal(err)
			}
			checkProbe(t, bin, filepath.Join(dir, "sys"), c.Expected)
			if !strings.HasPrefix(name, "tl-") {
				return
			}
			b, err = os.ReadFile(filepath.Join(dir, "events.json"))
			if err != nil {
				t.Fatal(err)
			}
			var steps []struct {
				Set      map[string]string `json:"set"`
				Expected *acpi.Source      `json:"expected"`
			}
			if err := json.Unmarshal(b, &steps); err != nil {
				t.Fatal(err)
			}
			root := t.TempDir()
			if err := os.CopyFS(root, os.DirFS(filepath.Join(dir, "sys"))); err != nil {
				t.Fatal(err)
			}
			for i, s := range steps {
				for k, v := range s.Set {
					if err := os.WriteFile(filepath.Join(root, "class", "power_supply", k), []byte(v+"\n"), 0o644); err != nil {
						t.Fatal(err)
					}
				}
				if s.Expected != nil {
					t.Logf("step %d", i)
					checkProbe(t, bin, root, *s.Expected)
				}
			}
		})
	}
}
