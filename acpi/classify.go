package acpi

import (
	"fmt"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/schedpolicyd/schedpolicyd/sysfs"
)

// Source is the verdict on where the machine draws its power from.
type Source string

const (
	// AC means there is positive evidence of external power (rule 2).
	AC Source = "ac"
	// Battery means there is positive, reliable evidence that the system runs
	// from its own battery (rule 3). It is the only value that may switch the
	// daemon to its power-aware policy.
	Battery Source = "battery"
	// Unknown means there is no reliable evidence either way (rule 4: without evidence either way the source is unknown, treated as AC). Callers
	// must treat it exactly like AC: the default is AC/performance.
	Unknown Source = "unknown"
)

// The classification rules, numbered as in testdata/power_supply/README.md,
// which labels the corpus by them (docs/POWER_SOURCE.md §1). Rule 6 is
// ours and comes from systemd's on_ac_power()
// (https://github.com/systemd/systemd/blob/main/src/shared/battery-util.c).
//
//  1. A supply with scope "Device" powers a peripheral (mouse, keyboard, pen,
//     controller, attached phone, a USB-C port that is itself a source) and
//     never counts, whatever its type, online or status. A missing scope,
//     "System" or "Unknown" means the supply belongs to the system. For
//     drivers that set no scope (older kernels), the driver-name hints in
//     peripheralName are a secondary filter. A battery with present=0 never
//     counts (a missing present attribute means present).
//  2. AC: a system supply whose type is not "Battery" reports online > 0
//     (Mains, USB, UPS, ...; UCSI/TCPM drivers may report 2), or a present
//     system battery reports status "Charging".
//  3. Battery: no AC evidence, and at least one present system battery
//     reports status "Discharging".
//  4. Unknown: everything else: an adapter that merely reads offline,
//     batteries that say "Full", "Not charging" or "Unknown" (or nothing),
//     no supplies at all.
//  5. Quirk overriding rule 2: the "sbs-charger" entry on 2017 MacBook Pros
//     reports online=1 regardless of the cable (TLP issue #283, commit
//     de1797c), so its online value is never AC evidence.
//  6. A USB supply whose USB-C port reports power_role "[source]" (and no
//     port of that device reports "[sink]") is the machine powering a
//     partner, not external power; its online value is not AC evidence. The
//     port is found through the supply's device link, so only Read applies
//     this rule; Classify has only the attributes.
//
// Real-world classes and the rule that handles each (the case of the
// corpus, testdata/power_supply, that tests it in brackets):
//
//   - Peripherals with scope Device (mice, keyboards, pens, game
//     controllers, an attached iPhone): rule 1, whatever they report
//     [desktop-hidpp-mouse-keyboard, desktop-ps-controller-discharging,
//     desktop-iphone-mfi-fastcharge, hp-envy-stylus-hid-online]. On old
//     kernels without scope, rule 1's driver-name hints.
//   - USB-C ports in the source role (the machine charging a phone, a
//     graphics card's port): offline, rule 4 (an offline port is not
//     evidence either way) [chromebook-usbpd-source-and-sink,
//     desktop-dgpu-ucsi-offline]; online with a typec port in "[source]"
//     role, rule 6; with scope Device, rule 1. An online source port with
//     no typec information counts as AC (rule 2): wrong in the safe
//     direction, never a false battery.
//   - UPS units and other non-Mains external supplies (type UPS, Wireless,
//     BrickID, ...): rule 2 when online, since any non-Battery system
//     supply that is online is external power [embedded-gpio-charger-ups].
//     A USB UPS handled through hiddev does not appear in power_supply at
//     all and leaves a desktop at rule 4 [desktop-no-power-supply].
//   - USB-C PD chargers (ucsi-source-psy-*, CROS_USBPD_CHARGER*, tcpm,
//     qcom-battmgr-usb): rule 2 on online 1 or 2, whatever usb_type says
//     [framework-full-discharging-on-ac, thinkpad-x13s-qcom-battmgr,
//     chromebook-usbpd-source-and-sink]. Docks that power the laptop over
//     USB-C are such chargers and fall under the same rule; a dock's own
//     peripherals' batteries carry scope Device (rule 1).
//   - Dual batteries: rule 3 needs one present system battery that is
//     Discharging; an idle second battery (Unknown, Full, Not charging)
//     is not evidence and cannot veto it (rule 4: without evidence either way the source is unknown, treated as AC), while a Charging one is
//     AC evidence (rule 2) [thinkpad-dual-battery-on-battery]. A removed
//     battery (present=0) is ignored (rule 1).
//   - "Not charging" at a charge threshold, "Unknown" in conservation
//     mode, "Full": never battery evidence (rule 4: without evidence either way the source is unknown, treated as AC); with the adapter
//     online the verdict is AC by rule 2 [thinkpad-threshold-not-charging,
//     ideapad-conservation-unknown, tl-charge-threshold-not-charging].
//     Firmware that reports Discharging while plugged in is outranked by
//     the online adapter (rule 2 before rule 3) [framework-full-discharging-on-ac].
//   - Missing online files (batteries, charge-control entries) and
//     missing scope, status or present: absent is not zero. A supply
//     without online says nothing; a battery without present counts as
//     present; without scope it belongs to the system; without status it
//     is not evidence (rule 4: without evidence either way the source is unknown, treated as AC).
//   - Adapters that read offline: not battery evidence on their own
//     (rule 4; stale or stuck at 0 on several machines)
//     [ac-offline-battery-unknown, desktop-mains-offline-no-battery,
//     thinkpad-x13s-qcom-battmgr's qcom-battmgr-ac].
//   - The 2017 MacBook Pro sbs-charger: rule 5 [macbook-pro-2017-sbs-charger].
const (
	ruleDevice  = "1"
	ruleAC      = "2"
	ruleBattery = "3"
	ruleUnknown = "4"
	ruleQuirk   = "5"
	ruleUSBSrc  = "6"
)

// Evidence is one supply attribute that decided the verdict, or that was
// considered and set aside.
type Evidence struct {
	Supply    string `json:"supply"`    // supply name, the directory below class/power_supply, e.g. "BAT0"
	Attribute string `json:"attribute"` // attribute file, e.g. "online", "status", "scope"
	Value     string `json:"value"`     // the value read, without the trailing newline, e.g. "1", "Discharging"
	// Rule says what the attribute meant, starting with the rule number
	// (1–6, see Classify), e.g. "2: system supply online" or
	// "1: scope=Device, ignored".
	Rule string `json:"rule"`
}

// Decision is a classification together with why it was made.
type Decision struct {
	Source Source
	// Reason is one human sentence naming the deciding supply and rule, e.g.
	// "AC: Mains supply AC reports online=1 (rule 2)". It depends only on
	// the deciding attributes, so it changes only when the verdict or its
	// cause changes (not with capacity).
	Reason string
	// Evidence lists first what decided, then what was set aside (ignored
	// peripherals, quirks, offline adapters), in supply order. Empty when
	// there are no supplies.
	Evidence []Evidence
}

// Classify decides the power source from the supplies of
// <root>/class/power_supply, applying rules 1–5 below (rule 6 needs the
// sysfs tree; see Read). It is pure: it reads nothing and does not log.
//
//  1. scope=Device never counts; name hints (hidpp_battery*, hid-*, ...)
//     filter drivers that set no scope; present=0 batteries never count.
//  2. AC: a system non-Battery supply with online > 0, or a present system
//     battery that is Charging.
//  3. Battery: no AC evidence and a present system battery is Discharging.
//  4. Unknown: everything else, including no supplies at all.
//  5. The sbs-charger entry (2017 MacBook Pro) never counts as online.
func Classify(supplies []sysfs.PowerSupply) Decision {
	return classify(supplies, nil)
}

// classify implements Classify; srcPorts names USB supplies whose USB-C port
// is a power source (rule 6).
func classify(supplies []sysfs.PowerSupply, srcPorts map[string]bool) Decision {
	if len(supplies) == 0 {
		return Decision{Source: Unknown, Reason: "unknown: no power supplies (rule 4: without evidence either way the source is unknown, treated as AC)"}
	}
	var acEv, batEv, ignored []Evidence
	for _, ps := range supplies {
		isBat := ps.Type == "Battery"
		// Rule 1: peripherals.
		if ps.Scope == "Device" {
			ignored = append(ignored, Evidence{ps.Name, "scope", ps.Scope, ruleDevice + ": scope=Device, peripheral, ignored"})
			continue
		}
		if (ps.Scope == "" || ps.Scope == "Unknown") && peripheralName(ps.Name) {
			ignored = append(ignored, Evidence{ps.Name, "scope", scopeValue(ps.Scope), ruleDevice + ": peripheral driver name without scope, ignored"})
			continue
		}
		if isBat {
			if ps.Present != nil && *ps.Present == 0 {
				ignored = append(ignored, Evidence{ps.Name, "present", "0", ruleDevice + ": battery not present, ignored"})
				continue
			}
			switch ps.Status {
			case "Charging":
				acEv = append(acEv, Evidence{ps.Name, "status", ps.Status, ruleAC + ": present system battery charging"})
			case "Discharging":
				batEv = append(batEv, Evidence{ps.Name, "status", ps.Status, ruleBattery + ": present system battery discharging"})
			default:
				ignored = append(ignored, Evidence{ps.Name, "status", statusValue(ps.Status), ruleUnknown + ": battery status is not evidence"})
			}
			continue
		}
		if ps.Online == nil {
			continue // nothing to say: e.g. a charge-control entry
		}
		online := strconv.FormatInt(*ps.Online, 10)
		switch {
		case *ps.Online <= 0:
			ignored = append(ignored, Evidence{ps.Name, "online", online, ruleUnknown + ": offline supply is not evidence"})
		case sbsChargerQuirk(ps.Name):
			ignored = append(ignored, Evidence{ps.Name, "online", online, ruleQuirk + ": sbs-charger always reads online, ignored"})
		case srcPorts[ps.Name]:
			ignored = append(ignored, Evidence{ps.Name, "online", online, ruleUSBSrc + ": USB-C port is a power source, ignored"})
		default:
			acEv = append(acEv, Evidence{ps.Name, "online", online, ruleAC + ": system supply online"})
		}
	}
	switch {
	case len(acEv) > 0:
		// Online supplies first: they change less often than a battery's
		// status, which keeps Reason stable while the battery fills up.
		sort.SliceStable(acEv, func(i, j int) bool { return acEv[i].Attribute == "online" && acEv[j].Attribute != "online" })
		return Decision{Source: AC, Reason: acReason(supplies, acEv), Evidence: append(append(acEv, batEv...), ignored...)}
	case len(batEv) > 0:
		e := batEv[0]
		return Decision{
			Source:   Battery,
			Reason:   fmt.Sprintf("battery: system battery %s reports status=%s and no supply shows external power (rule 3)", e.Supply, e.Value),
			Evidence: append(batEv, ignored...),
		}
	default:
		return Decision{
			Source:   Unknown,
			Reason:   "unknown: no system supply is online and no system battery is charging or discharging (rule 4: without evidence either way the source is unknown, treated as AC)",
			Evidence: ignored,
		}
	}
}

// acReason describes the first AC evidence (an online supply if any).
func acReason(supplies []sysfs.PowerSupply, ev []Evidence) string {
	e := ev[0]
	if e.Attribute == "status" {
		return fmt.Sprintf("AC: system battery %s reports status=%s (rule 2)", e.Supply, e.Value)
	}
	typ := "untyped"
	for _, ps := range supplies {
		if ps.Name == e.Supply && ps.Type != "" {
			typ = ps.Type
		}
	}
	return fmt.Sprintf("AC: %s supply %s reports online=%s (rule 2)", typ, e.Supply, e.Value)
}

func scopeValue(s string) string {
	if s == "" {
		return "(absent)"
	}
	return s
}

func statusValue(s string) string {
	if s == "" {
		return "(absent)"
	}
	return s
}

// peripheralName reports whether name is one that a HID or other
// peripheral driver gives its battery (rule 1, secondary filter, applied only
// when the supply has no scope or scope Unknown). The list follows the
// drivers' format strings and TLP's RE_PS_IGNORE:
//   - hid-input:            "hid-<uniq>-battery"
//   - hid-logitech-hidpp:   "hidpp_battery_<n>"
//   - hid-playstation:      "ps-controller-battery-<mac>"
//   - hid-sony:             "sony_controller_battery_<mac>"
//   - hid-nintendo:         "nintendo_switch_controller_battery_<mac>"
//   - hid-wiimote:          "wiimote_battery_<hid>"
//   - hid-steam:            "steam-controller-<serial>-battery"
//   - wacom:                "wacom_battery_<n>"
//   - apple-mfi-fastcharge: "apple_mfi_fastcharge..." (an attached iPhone)
//
// A bare "-battery" suffix is deliberately not a hint: system fuel gauges
// use it too (axp20x-battery on Allwinner tablets and the PinePhone,
// rk817-battery, cw2015-battery).
func peripheralName(name string) bool {
	for _, p := range []string{
		"hid-",
		"hidpp_battery",
		"ps-controller-battery-",
		"sony_controller_battery_",
		"nintendo_switch_controller_battery_",
		"wiimote_battery",
		"wacom_battery",
		"apple_mfi_fastcharge",
	} {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return strings.HasPrefix(name, "steam-controller-") && strings.HasSuffix(name, "-battery")
}

// sbsChargerQuirk reports whether name is the sbs-charger entry whose
// online value is always 1 on 2017 MacBook Pros (rule 5; TLP issue #283).
func sbsChargerQuirk(name string) bool {
	return name == "sbs-charger" || strings.HasPrefix(name, "sbs-charger-")
}

// Read lists <root>/class/power_supply and classifies it (rules 1–6; see
// Classify). A missing class directory gives an Unknown decision and no
// error (a desktop or VM). On a listing error it returns an Unknown decision
// whose Reason names the error, together with the error.
func Read(fs sysfs.FS) (Decision, error) {
	d, _, err := read(fs)
	return d, err
}

// read is Read that also returns the supplies it classified.
func read(fs sysfs.FS) (Decision, []sysfs.PowerSupply, error) {
	supplies, err := fs.PowerSupplies()
	if err != nil {
		return Decision{Source: Unknown, Reason: fmt.Sprintf("unknown: cannot read power supplies (rule 4: without evidence either way the source is unknown, treated as AC): %v", err)},
			nil, fmt.Errorf("read power source: %w", err)
	}
	var src map[string]bool
	for _, ps := range supplies {
		if strings.HasPrefix(ps.Type, "USB") && ps.Online != nil && *ps.Online > 0 && usbSourceOnly(fs, ps.Name) {
			if src == nil {
				src = map[string]bool{}
			}
			src[ps.Name] = true
		}
	}
	return classify(supplies, src), supplies, nil
}

// hasSystemBattery reports whether supplies include a battery that rule 1
// does not set aside (scope System or absent, or Unknown without a
// peripheral name): the supply whose status some firmware changes without a
// uevent.
func hasSystemBattery(supplies []sysfs.PowerSupply) bool {
	for _, ps := range supplies {
		if ps.Type != "Battery" || ps.Scope == "Device" {
			continue
		}
		if (ps.Scope == "" || ps.Scope == "Unknown") && peripheralName(ps.Name) {
			continue
		}
		return true
	}
	return false
}

// SystemBatteries returns the batteries among supplies that power the
// system, in the order given: type Battery and not set aside by rule 1
// (scope Device, a peripheral driver's name without scope, present=0).
// While the machine runs on battery (rule 3), their discharge is its
// draw; a mouse's or a phone's battery says nothing about it. It is pure.
func SystemBatteries(supplies []sysfs.PowerSupply) []sysfs.PowerSupply {
	var out []sysfs.PowerSupply
	for _, ps := range supplies {
		if ps.Type != "Battery" || ps.Scope == "Device" {
			continue
		}
		if (ps.Scope == "" || ps.Scope == "Unknown") && peripheralName(ps.Name) {
			continue
		}
		if ps.Present != nil && *ps.Present == 0 {
			continue
		}
		out = append(out, ps)
	}
	return out
}

// BatteryPercent is the charge of the system batteries (SystemBatteries)
// in percent, rounded down, 0–100: the sum of their energy_now over the
// sum of their energy_full (µWh) when every one has both (energy_full >
// 0), else the mean of their capacity (percent) when every one has it;
// -1 when there is no system battery or neither can be read for all.
func BatteryPercent(fs sysfs.FS, supplies []sysfs.PowerSupply) int {
	bats := SystemBatteries(supplies)
	if len(bats) == 0 {
		return -1
	}
	var now, full, capSum int64
	energy, capacity := true, true
	for _, b := range bats {
		d := fs.Path("class", "power_supply", b.Name)
		n, err1 := readInt(d + "/energy_now")
		f, err2 := readInt(d + "/energy_full")
		if err1 != nil || err2 != nil || f <= 0 || n < 0 {
			energy = false
		}
		now, full = now+n, full+f
		if b.Capacity == nil {
			capacity = false
		} else {
			capSum += *b.Capacity
		}
	}
	var pct int64
	switch {
	case energy:
		pct = 100 * now / full
	case capacity:
		pct = capSum / int64(len(bats))
	default:
		return -1
	}
	return int(min(max(pct, 0), 100))
}

func readInt(path string) (int64, error) {
	s, err := sysfs.ReadAttr(path)
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(s, 10, 64)
}

// usbSourceOnly reports whether the USB-C ports next to supply name are in
// power source role: some port below the supply's parent device reports
// power_role "[source]" and none reports "[sink]", as systemd's
// device_is_power_sink() decides (src/shared/battery-util.c). The ports are found as
// <root>/class/power_supply/<name>/device/typec/*/power_role (the class
// glue directory of the typec ports registered on the same parent) and
// .../device/*/power_role. Absent ports mean "not a source".
func usbSourceOnly(fs sysfs.FS, name string) bool {
	dev := fs.Path("class", "power_supply", name, "device")
	var files []string
	for _, pat := range []string{"typec/*/power_role", "*/power_role"} {
		m, _ := filepath.Glob(filepath.Join(glob(dev), pat))
		files = append(files, m...)
	}
	source := false
	for _, f := range files {
		v, err := sysfs.ReadAttr(f)
		if err != nil {
			continue
		}
		switch {
		case strings.Contains(v, "[sink]"):
			return false
		case strings.Contains(v, "[source]"):
			source = true
		}
	}
	return source
}

// glob escapes the glob metacharacters of a literal path.
func glob(p string) string {
	r := strings.NewReplacer(`\`, `\\`, `*`, `\*`, `?`, `\?`, `[`, `\[`)
	return r.Replace(p)
}
