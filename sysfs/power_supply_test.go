package sysfs

import (
	"errors"
	"io/fs"
	"testing"
)

// TestBatteryPowerFixture reads the corpus' Surface Pro on battery
// (testdata/power_supply/surface-pro-on-battery):
// power_now 7210000 µW is 7.21 W; its energy_now (28830000 µWh) is a stored
// amount and plays no part.
func TestBatteryPowerFixture(t *testing.T) {
	fsys, err := NewFS("../testdata/power_supply/surface-pro-on-battery/sys")
	if err != nil {
		t.Fatal(err)
	}
	got, err := fsys.BatteryPower("BAT1")
	if err != nil {
		t.Fatal(err)
	}
	if want := (BatteryPower{Supply: "BAT1", MicroWatts: 7210000, From: "power_now"}); got != want {
		t.Errorf("BatteryPower = %+v, want %+v", got, want)
	}
}

func TestBatteryPower(t *testing.T) {
	const b = "class/power_supply/BAT0/"
	tests := []struct {
		name    string
		files   map[string]string
		want    BatteryPower
		wantErr error
	}{
		// Success.
		{name: "power_now µW", files: map[string]string{b + "power_now": "7210000"},
			want: BatteryPower{"BAT0", 7210000, "power_now"}},
		{name: "negative power_now while discharging (sign varies by driver)", files: map[string]string{b + "power_now": "-7210000"},
			want: BatteryPower{"BAT0", 7210000, "power_now"}},
		{name: "current_now µA × voltage_now µV", files: map[string]string{b + "current_now": "500000", b + "voltage_now": "12000000"},
			want: BatteryPower{"BAT0", 6000000, "current_now*voltage_now"}},
		{name: "negative current_now (bq27xxx, sbs)", files: map[string]string{b + "current_now": "-1250000", b + "voltage_now": "3800000"},
			want: BatteryPower{"BAT0", 4750000, "current_now*voltage_now"}},
		{name: "power_now wins over current and voltage", files: map[string]string{b + "power_now": "1000000", b + "current_now": "500000", b + "voltage_now": "12000000"},
			want: BatteryPower{"BAT0", 1000000, "power_now"}},
		{name: "power_now without data falls back to current × voltage", files: map[string]string{b + "power_now": "", b + "current_now": "500000", b + "voltage_now": "12000000"},
			want: BatteryPower{"BAT0", 6000000, "current_now*voltage_now"}},
		{name: "zero is a reading (firmware just after unplug)", files: map[string]string{b + "power_now": "0"},
			want: BatteryPower{"BAT0", 0, "power_now"}},

		// Unit mistakes: never a wattage.
		{name: "energy_now µWh alone is not a power", files: map[string]string{b + "energy_now": "28830000", b + "energy_full": "45040000"},
			wantErr: ErrNoBatteryPower},
		{name: "charge_now µAh and voltage_now are not a power", files: map[string]string{b + "charge_now": "2500000", b + "voltage_now": "11400000"},
			wantErr: ErrNoBatteryPower},
		{name: "current_now without voltage_now", files: map[string]string{b + "current_now": "500000"},
			wantErr: ErrNoBatteryPower},
		{name: "current_now in nA: 1.25 A × 11.4 V reads 14 kW", files: map[string]string{b + "current_now": "1250000000", b + "voltage_now": "11400000"},
			wantErr: ErrImplausiblePower},
		{name: "power_now in nW", files: map[string]string{b + "power_now": "7210000000"},
			wantErr: ErrImplausiblePower},
		{name: "product overflows int64", files: map[string]string{b + "current_now": "9223372036854775807", b + "voltage_now": "2"},
			wantErr: ErrImplausiblePower},
		{name: "most negative int64", files: map[string]string{b + "power_now": "-9223372036854775808"},
			wantErr: ErrImplausiblePower},

		// Unreadable values.
		{name: "garbage power_now, no fallback", files: map[string]string{b + "power_now": "7.2 W"},
			wantErr: errParse},
		{name: "no such supply (vanished)", files: map[string]string{"class/power_supply/AC/online": "1"},
			wantErr: ErrNoBatteryPower},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := boostTree(t, tt.files).BatteryPower("BAT0")
			switch {
			case tt.wantErr == errParse:
				var pe *ParseError
				if !errors.As(err, &pe) || errors.Is(err, ErrNoBatteryPower) || errors.Is(err, ErrImplausiblePower) {
					t.Fatalf("err = %v, want a parse error", err)
				}
				return
			case tt.wantErr != nil:
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("BatteryPower = %+v, %v; want %v", got, err, tt.wantErr)
				}
				return
			case err != nil:
				t.Fatal(err)
			}
			if got != tt.want {
				t.Errorf("BatteryPower = %+v, want %+v", got, tt.want)
			}
		})
	}
}

// errParse marks a case whose error is the attribute's parse error.
var errParse = errors.New("parse error")

// TestBatteryPowerUnreadable: an attribute that is there but cannot be
// read (here a directory in its place; the kernel answers ENODATA) is an
// error, not a zero.
func TestBatteryPowerUnreadable(t *testing.T) {
	fsys := boostTree(t, map[string]string{"class/power_supply/BAT0/power_now/x": "", "class/power_supply/BAT0/type": "Battery"})
	_, err := fsys.BatteryPower("BAT0")
	if err == nil || errors.Is(err, ErrNoBatteryPower) || errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("err = %v, want the read error", err)
	}
}
