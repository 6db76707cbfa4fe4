package sysfs

import (
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"sort"
	"strings"
)

// PowerSupply is one entry of <root>/class/power_supply/<Name>/, with the
// attributes the power-source decision needs (see the kernel's
// Documentation/ABI/testing/sysfs-class-power). Absent attributes are empty
// strings or nil pointers: absent is not zero.
type PowerSupply struct {
	Name    string // directory name, e.g. "AC", "BAT0", "ucsi-source-psy-USBC000:001"
	Type    string // type: Battery, Mains, USB, UPS, Wireless, ... ("" if unreadable)
	Online  *int64 // online: 0 offline, 1 online, 2 online programmable (UCSI); nil if absent
	Present *int64 // present: 0 or 1; nil if absent
	Status  string // status: Charging, Discharging, Not charging, Full, Unknown; "" if absent
	Scope   string // scope: System, Device, Unknown; "" if absent (means System)
	UsbType string // usb_type, e.g. "C [PD] PD_PPS"; "" if absent
	// Capacity is capacity in percent (0–100); nil if absent.
	Capacity *int64
}

// PowerSupplies lists <root>/class/power_supply in name order. A missing
// class directory is not an error: it returns no supplies (a desktop or VM).
// Entries whose name starts with "." never exist in real sysfs and are
// skipped. Unreadable optional attributes (the kernel answers ENODATA or
// ENODEV when hardware has no value) are left absent.
func (fsys FS) PowerSupplies() ([]PowerSupply, error) {
	dir := fsys.Path("class", "power_supply")
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", dir, err)
	}
	var out []PowerSupply
	for _, e := range entries {
		name := e.Name()
		if strings.HasPrefix(name, ".") {
			continue
		}
		d := dir + "/" + name
		st, err := os.Stat(d) // follows the real machine's symlinks
		if err != nil || !st.IsDir() {
			continue
		}
		ps := PowerSupply{Name: name}
		ps.Type, _ = ReadAttr(d + "/type")
		ps.Status, _ = ReadAttr(d + "/status")
		ps.Scope, _ = ReadAttr(d + "/scope")
		ps.UsbType, _ = ReadAttr(d + "/usb_type")
		ps.Online = optInt(d + "/online")
		ps.Present = optInt(d + "/present")
		ps.Capacity = optInt(d + "/capacity")
		out = append(out, ps)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

func optInt(path string) *int64 {
	v, err := ReadIntAttr(path)
	if err != nil {
		return nil
	}
	return &v
}

// BatteryPower is how fast one battery delivers energy, read from its
// power_supply attributes (Documentation/ABI/testing/sysfs-class-power,
// whose units are µW for power, µA for current, µV for voltage and µWh for
// energy).
type BatteryPower struct {
	// Supply is the battery's directory name, e.g. "BAT0".
	Supply string
	// MicroWatts is the magnitude of the instantaneous power (µW): drivers
	// disagree on the sign while discharging (the ABI's later text says
	// negative, many report positive), so it is the absolute value.
	MicroWatts int64
	// From names the attributes used: "power_now", or
	// "current_now*voltage_now" (µA × µV / 10⁶ = µW).
	From string
}

// MaxBatteryMicroWatts (1 kW) bounds a plausible battery reading: no
// battery-powered computer draws more, so a larger value is a unit
// mistake, e.g. power_now in nW or current_now in nA, which read as
// kilowatts.
const MaxBatteryMicroWatts = 1_000_000_000

// ErrNoBatteryPower is returned by BatteryPower for a supply that has
// neither power_now nor both current_now and voltage_now: it cannot say
// how fast it discharges. energy_now (µWh, a stored amount, not a rate) is
// never taken for power.
var ErrNoBatteryPower = errors.New("no power_now, and not both current_now and voltage_now")

// ErrImplausiblePower is wrapped by BatteryPower's error for a reading
// above MaxBatteryMicroWatts (or one whose product overflows).
var ErrImplausiblePower = errors.New("implausible battery power")

// BatteryPower reads the instantaneous power of supply name: power_now
// (µW) when it can be read, else current_now (µA) × voltage_now (µV).
// Errors: ErrNoBatteryPower when neither is there; the read error or
// *ParseError of an attribute that is there but cannot be read (the kernel
// answers ENODATA or ENODEV while the hardware has no value); an error
// wrapping ErrImplausiblePower, naming the values, for a reading above
// MaxBatteryMicroWatts. It does not look at status: the caller decides
// whether the battery is discharging.
func (fsys FS) BatteryPower(name string) (BatteryPower, error) {
	d := fsys.Path("class", "power_supply", name)
	bp := BatteryPower{Supply: name}
	has := func(attr string) bool {
		_, err := os.Stat(d + "/" + attr)
		return err == nil
	}
	abs := func(v int64) (int64, bool) {
		if v < 0 {
			if v == math.MinInt64 {
				return 0, false
			}
			return -v, true
		}
		return v, true
	}
	var pErr error
	if has("power_now") {
		v, err := ReadIntAttr(d + "/power_now")
		if err == nil {
			a, ok := abs(v)
			if !ok || a > MaxBatteryMicroWatts {
				return bp, fmt.Errorf("%s/power_now %d µW: %w (more than %d W)", d, v, ErrImplausiblePower, MaxBatteryMicroWatts/1_000_000)
			}
			bp.MicroWatts, bp.From = a, "power_now"
			return bp, nil
		}
		pErr = err
	}
	if !has("current_now") || !has("voltage_now") {
		if pErr != nil {
			return bp, pErr
		}
		return bp, fmt.Errorf("%s: %w", d, ErrNoBatteryPower)
	}
	cur, err := ReadIntAttr(d + "/current_now")
	if err != nil {
		return bp, err
	}
	volt, err := ReadIntAttr(d + "/voltage_now")
	if err != nil {
		return bp, err
	}
	c, ok1 := abs(cur)
	v, ok2 := abs(volt)
	implausible := fmt.Errorf("%s: current_now %d µA × voltage_now %d µV: %w (more than %d W)", d, cur, volt, ErrImplausiblePower, MaxBatteryMicroWatts/1_000_000)
	if !ok1 || !ok2 || (c != 0 && v > math.MaxInt64/c) {
		return bp, implausible
	}
	uw := c * v / 1_000_000
	if uw > MaxBatteryMicroWatts {
		return bp, implausible
	}
	bp.MicroWatts, bp.From = uw, "current_now*voltage_now"
	return bp, nil
}
