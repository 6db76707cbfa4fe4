package sysfs

import (
	"errors"
	"fmt"
	"io/fs"
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
