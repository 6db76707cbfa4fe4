package sysfs

import (
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"testing"
)

// A 2020s Intel laptop's powercap class as the kernel lays it out (the zone
// directories are symlinks into devices/virtual/powercap there; plain
// directories do here). Built in code: committed file names may not hold
// ":". Values in µJ and µW.
var laptopRAPL = map[string]string{
	"class/powercap/intel-rapl/enabled":                            "1",
	"class/powercap/intel-rapl:0/name":                             "package-0",
	"class/powercap/intel-rapl:0/energy_uj":                        "123456789",
	"class/powercap/intel-rapl:0/max_energy_range_uj":              "262143328850",
	"class/powercap/intel-rapl:0/constraint_0_name":                "long_term",
	"class/powercap/intel-rapl:0/constraint_0_power_limit_uw":      "15000000",
	"class/powercap/intel-rapl:0/constraint_1_name":                "short_term",
	"class/powercap/intel-rapl:0/constraint_1_power_limit_uw":      "64000000",
	"class/powercap/intel-rapl:0/enabled":                          "1",
	"class/powercap/intel-rapl:0:0/name":                           "core",
	"class/powercap/intel-rapl:0:0/energy_uj":                      "50000000",
	"class/powercap/intel-rapl:0:0/max_energy_range_uj":            "262143328850",
	"class/powercap/intel-rapl:0:0/constraint_0_power_limit_uw":    "0",
	"class/powercap/intel-rapl:0:1/name":                           "uncore",
	"class/powercap/intel-rapl:0:1/energy_uj":                      "2000000",
	"class/powercap/intel-rapl:0:1/max_energy_range_uj":            "262143328850",
	"class/powercap/intel-rapl:1/name":                             "psys",
	"class/powercap/intel-rapl:1/energy_uj":                        "987654321",
	"class/powercap/intel-rapl:1/max_energy_range_uj":              "262143328850",
	"class/powercap/intel-rapl-mmio/enabled":                       "1",
	"class/powercap/intel-rapl-mmio:0/name":                        "package-0",
	"class/powercap/intel-rapl-mmio:0/energy_uj":                   "123456789",
	"class/powercap/intel-rapl-mmio:0/max_energy_range_uj":         "262143328850",
	"class/powercap/intel-rapl-mmio:0/constraint_0_power_limit_uw": "15000000",
	"class/powercap/dtpm/enabled":                                  "0",
}

func withFiles(base map[string]string, edits map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range base {
		out[k] = v
	}
	for k, v := range edits {
		if v == "" {
			delete(out, k)
			continue
		}
		out[k] = v
	}
	return out
}

func TestPowercapZones(t *testing.T) {
	const rng = 262143328850
	got, err := boostTree(t, laptopRAPL).PowercapZones()
	if err != nil {
		t.Fatal(err)
	}
	want := []PowercapZone{
		{Zone: "intel-rapl:0", Name: "package-0", EnergyUJ: 123456789, MaxEnergyRangeUJ: rng, PowerLimitUW: 64000000},
		{Zone: "intel-rapl:0:0", Parent: "intel-rapl:0", Name: "core", EnergyUJ: 50000000, MaxEnergyRangeUJ: rng},
		{Zone: "intel-rapl:0:1", Parent: "intel-rapl:0", Name: "uncore", EnergyUJ: 2000000, MaxEnergyRangeUJ: rng},
		{Zone: "intel-rapl:1", Name: "psys", EnergyUJ: 987654321, MaxEnergyRangeUJ: rng},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("PowercapZones:\n got %+v\nwant %+v", got, want)
	}
	if !got[0].TopLevel() || got[1].TopLevel() {
		t.Errorf("TopLevel: %v %v, want true false", got[0].TopLevel(), got[1].TopLevel())
	}
}

func TestPowercapZonesNone(t *testing.T) {
	for name, files := range map[string]map[string]string{
		"no powercap class (VM)":       {"devices/system/cpu/online": "0-1"},
		"only the mmio interface":      {"class/powercap/intel-rapl-mmio:0/energy_uj": "1", "class/powercap/intel-rapl-mmio:0/max_energy_range_uj": "2"},
		"names that only look like it": {"class/powercap/intel-rapl:x/energy_uj": "1", "class/powercap/intel-rapl:01/energy_uj": "1", "class/powercap/intel-rapl:/energy_uj": "1"},
	} {
		t.Run(name, func(t *testing.T) {
			got, err := boostTree(t, files).PowercapZones()
			if err != nil || got != nil {
				t.Errorf("PowercapZones = %+v, %v; want none, nil", got, err)
			}
		})
	}
}

// TestPowercapZonesOrder: numeric order, so zone 10 comes after zone 2.
func TestPowercapZonesOrder(t *testing.T) {
	files := map[string]string{}
	for _, z := range []string{"intel-rapl:10", "intel-rapl:2", "intel-rapl:2:1", "intel-rapl:2:0", "intel-rapl:0"} {
		files["class/powercap/"+z+"/energy_uj"] = "1"
		files["class/powercap/"+z+"/max_energy_range_uj"] = "100"
	}
	zs, err := boostTree(t, files).PowercapZones()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, z := range zs {
		names = append(names, z.Zone)
	}
	if want := []string{"intel-rapl:0", "intel-rapl:2", "intel-rapl:2:0", "intel-rapl:2:1", "intel-rapl:10"}; !reflect.DeepEqual(names, want) {
		t.Errorf("order %v, want %v", names, want)
	}
}

// TestPowercapZoneErrors: a counter that cannot be used is listed with the
// reason, never as a value.
func TestPowercapZoneErrors(t *testing.T) {
	const z = "class/powercap/intel-rapl:0/"
	tests := []struct {
		name  string
		edits map[string]string
		check func(error) bool
	}{
		{"energy above its range", map[string]string{z + "energy_uj": "262143328851"}, func(e error) bool { return errors.Is(e, ErrEnergyRange) }},
		{"zero range", map[string]string{z + "max_energy_range_uj": "0"}, func(e error) bool { return errors.Is(e, ErrEnergyRange) }},
		{"no energy_uj (a power_uw-only zone)", map[string]string{z + "energy_uj": ""}, func(e error) bool { return errors.Is(e, fs.ErrNotExist) }},
		{"no range", map[string]string{z + "max_energy_range_uj": ""}, func(e error) bool { return errors.Is(e, fs.ErrNotExist) }},
		{"negative", map[string]string{z + "energy_uj": "-5"}, func(e error) bool { return errors.Is(e, strconv.ErrSyntax) }},
		{"garbage", map[string]string{z + "energy_uj": "12 kJ"}, func(e error) bool { return errors.Is(e, strconv.ErrSyntax) }},
		{"beyond 64 bits", map[string]string{z + "energy_uj": "18446744073709551616"}, func(e error) bool { return errors.Is(e, strconv.ErrRange) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			zs, err := boostTree(t, withFiles(laptopRAPL, tt.edits)).PowercapZones()
			if err != nil {
				t.Fatal(err)
			}
			if zs[0].Zone != "intel-rapl:0" || !tt.check(zs[0].Err) {
				t.Fatalf("zone %+v: wrong error", zs[0])
			}
			if zs[0].EnergyUJ != 0 || zs[0].MaxEnergyRangeUJ != 0 {
				t.Errorf("an unusable counter keeps values: %+v", zs[0])
			}
			if zs[1].Err != nil {
				t.Errorf("the next zone suffers too: %+v", zs[1])
			}
		})
	}
}

// TestPowercapZonesUnreadableForNonRoot: since the November 2020 kernels
// (CVE-2020-8694) energy_uj is mode 0400, owned by root. A process that is
// not root gets the zone with an ErrPermission, not a value. As root the
// test runs itself again as nobody (setpriv), since root reads the file
// whatever its mode.
func TestPowercapZonesUnreadableForNonRoot(t *testing.T) {
	dir := os.Getenv("SCHEDPOLICYD_TEST_POWERCAP_DIR")
	if dir == "" {
		if os.Getuid() != 0 {
			dir = t.TempDir()
		} else {
			if _, err := exec.LookPath("setpriv"); err != nil {
				t.Skip("needs setpriv (Debian package util-linux) to read as a user other than root")
			}
			base, err := os.MkdirTemp("", "spd-powercap-")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { os.RemoveAll(base) })
			os.Chmod(base, 0o755) // nobody must reach the files
			dir = base
		}
		for p, v := range laptopRAPL {
			full := filepath.Join(dir, p)
			os.MkdirAll(filepath.Dir(full), 0o755)
			if err := os.WriteFile(full, []byte(v+"\n"), 0o444); err != nil {
				t.Fatal(err)
			}
		}
		for _, z := range []string{"intel-rapl:0", "intel-rapl:0:0", "intel-rapl:0:1", "intel-rapl:1"} {
			if err := os.Chmod(filepath.Join(dir, "class/powercap", z, "energy_uj"), 0o400); err != nil {
				t.Fatal(err)
			}
		}
		if os.Getuid() == 0 {
			cmd := exec.Command("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
				os.Args[0], "-test.run=^TestPowercapZonesUnreadableForNonRoot$", "-test.v")
			cmd.Env = append(os.Environ(), "SCHEDPOLICYD_TEST_POWERCAP_DIR="+dir)
			out, err := cmd.CombinedOutput()
			t.Logf("as nobody:\n%s", out)
			if err != nil {
				t.Fatalf("the check as nobody failed: %v", err)
			}
			return
		}
	}
	fsys, err := NewFS(dir)
	if err != nil {
		t.Fatal(err)
	}
	zs, err := fsys.PowercapZones()
	if err != nil {
		t.Fatal(err)
	}
	if len(zs) != 4 {
		t.Fatalf("zones %+v, want all 4 listed", zs)
	}
	for _, z := range zs {
		if !errors.Is(z.Err, fs.ErrPermission) || z.EnergyUJ != 0 {
			t.Errorf("zone %s: %+v, want an ErrPermission and no value", z.Zone, z)
		}
		if z.Name == "" {
			t.Errorf("zone %s: name (mode 0444) not read", z.Zone)
		}
	}
}
