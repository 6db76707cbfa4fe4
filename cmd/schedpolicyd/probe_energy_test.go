package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/schedpolicyd/schedpolicyd/daemon/energy"
	"github.com/schedpolicyd/schedpolicyd/internal/testutil"
)

// TestProbeEnergyBattery: the real binary on the corpus' Surface
// Pro on battery names the battery source and its 7.21 W.
func TestProbeEnergyBattery(t *testing.T) {
	root := filepath.Join(powerCases, "surface-pro-on-battery", "sys")
	r := probeJSON(t, buildDaemon(t), root)
	w := 7.21
	want := energy.ProbeResult{Source: "battery", Measuring: true,
		Batteries: []energy.ProbeBattery{{Supply: "BAT1", Status: "Discharging", Watts: &w, From: "power_now"}}}
	if !reflect.DeepEqual(r.Energy, want) {
		t.Errorf("energy %+v, want %+v", r.Energy, want)
	}
}

// TestProbeEnergyRAPL: RAPL zones are preferred and listed (only the
// packages summed); a user who is not root cannot read energy_uj (mode
// 0400 since November 2020) and sees the batteries chosen instead, with a
// warning that says why. The not-root half runs the binary as nobody.
func TestProbeEnergyRAPL(t *testing.T) {
	src := filepath.Join(powerCases, "surface-pro-on-battery", "sys")
	base, err := os.MkdirTemp("", "spd-probe-energy-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	os.Chmod(base, 0o755) // nobody reaches the binary and the tree
	root := filepath.Join(base, "sys")
	testutil.CopyFixture(t, src, root)
	for zone, files := range map[string]map[string]string{
		"intel-rapl:0":   {"name": "package-0", "energy_uj": "123456789", "max_energy_range_uj": "262143328850"},
		"intel-rapl:0:0": {"name": "core", "energy_uj": "3456789", "max_energy_range_uj": "262143328850"},
		"intel-rapl:1":   {"name": "psys", "energy_uj": "923456789", "max_energy_range_uj": "262143328850"},
	} {
		for f, v := range files {
			p := filepath.Join(root, "class/powercap", zone, f)
			testutil.Put(t, p, v)
			if f == "energy_uj" {
				os.Chmod(p, 0o400)
			} else {
				os.Chmod(p, 0o444)
			}
		}
	}
	bin := filepath.Join(base, "schedpolicyd")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	zones := func(errs bool) []energy.ProbeZone {
		z := []energy.ProbeZone{
			{Zone: "intel-rapl:0", Name: "package-0", Summed: true},
			{Zone: "intel-rapl:0:0", Parent: "intel-rapl:0", Name: "core"},
			{Zone: "intel-rapl:1", Name: "psys"},
		}
		if errs {
			for i := range z {
				z[i].Error = "open " + filepath.Join(root, "class/powercap", z[i].Zone, "energy_uj") + ": permission denied"
			}
		}
		return z
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root: the daemon's view (root reads energy_uj) and nobody's through setpriv")
	}
	r := probeJSON(t, bin, root)
	if r.Energy.Source != "rapl" || !r.Energy.Measuring || !reflect.DeepEqual(r.Energy.Zones, zones(false)) || len(r.Energy.Warnings) != 0 {
		t.Errorf("as root: %+v, want rapl, measuring, zones %+v", r.Energy, zones(false))
	}

	if _, err := exec.LookPath("setpriv"); err != nil {
		t.Skip("needs setpriv (Debian package util-linux) to probe as nobody")
	}
	state := filepath.Join(base, "state")
	out, err := exec.Command("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
		bin, "probe", "--sysfs-root", root, "--state-dir", state, "--json").Output()
	if err != nil {
		t.Fatalf("probe as nobody: %v %s", err, out)
	}
	var nr probeReport
	if err := json.Unmarshal(out, &nr); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if nr.Energy.Source != "battery" || !nr.Energy.Measuring || !reflect.DeepEqual(nr.Energy.Zones, zones(true)) {
		t.Errorf("as nobody: %+v, want battery (RAPL unreadable), zones %+v", nr.Energy, zones(true))
	}
	if len(nr.Energy.Warnings) != 1 || !strings.Contains(nr.Energy.Warnings[0], "root only") || !strings.Contains(strings.Join(nr.Warnings, "\n"), "CVE-2020-8694") {
		t.Errorf("as nobody, warnings %q, want one naming root-only energy_uj", nr.Energy.Warnings)
	}
	text, _ := exec.Command("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
		bin, "probe", "--sysfs-root", root, "--state-dir", state).Output()
	for _, want := range []string{"energy:        battery (measuring)", "rapl zone:   intel-rapl:0 package-0: unreadable: ", "battery:     BAT1 Discharging, 7.21 W (power_now)", "warning:       RAPL energy_uj is readable by root only"} {
		if !strings.Contains(string(text), want) {
			t.Errorf("probe as nobody lacks %q:\n%s", want, text)
		}
	}
}
