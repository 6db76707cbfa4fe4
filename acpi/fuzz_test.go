package acpi

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/schedpolicyd/schedpolicyd/sysfs"
)

// FuzzPowerSupplyAttrs writes arbitrary bytes into the attribute files of
// a mock AC adapter and battery (sysfs value parsing: type, online,
// present, status, scope) and reads them back the way the daemon does,
// through sysfs.FS and Read. Nothing panics, the answer is one of the
// three sources with a reason, and "battery" is only ever the verdict when
// a present system battery says exactly Discharging (rule 3 of
// classify.go: battery only on positive evidence).
func FuzzPowerSupplyAttrs(f *testing.F) {
	f.Add("Mains", "1", "Battery", "1", "Discharging", "System")
	f.Add("Mains", "0", "Battery", "1", "Discharging", "")
	f.Add("USB", "2", "Battery", "0", "Discharging", "Device")
	f.Add("Mains", "-1", "Battery", "x", "Charging", "Unknown")
	f.Add("\x00", "99999999999999999999", "Battery\n", " 1 ", " Discharging\n", "System\x00")
	f.Add("", "", "", "", "", "")
	// One directory per fuzzing process; iterations run one at a time in
	// it and rewrite every file.
	root := f.TempDir()
	f.Fuzz(func(t *testing.T, acType, acOnline, batType, batPresent, batStatus, batScope string) {
		ps := filepath.Join(root, "class/power_supply")
		for file, v := range map[string]string{
			"AC/type": acType, "AC/online": acOnline,
			"BAT0/type": batType, "BAT0/present": batPresent, "BAT0/status": batStatus, "BAT0/scope": batScope,
		} {
			p := filepath.Join(ps, file)
			os.MkdirAll(filepath.Dir(p), 0o755)
			if err := os.WriteFile(p, []byte(v), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		fs, err := sysfs.NewFS(root)
		if err != nil {
			t.Fatal(err)
		}
		d, err := Read(fs)
		if err != nil {
			t.Fatalf("Read: %v", err)
		}
		switch d.Source {
		case AC, Battery, Unknown:
		default:
			t.Fatalf("source %q", d.Source)
		}
		if d.Reason == "" {
			t.Fatal("no reason")
		}
		if d.Source == Battery {
			supplies, _ := fs.PowerSupplies()
			ok := false
			for _, s := range supplies {
				if s.Name == "BAT0" && s.Status == "Discharging" {
					ok = true
				}
			}
			if !ok {
				t.Fatalf("battery without a Discharging battery: %+v", supplies)
			}
		}
	})
}
