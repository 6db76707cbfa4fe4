package acpi

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
)

// Uevent is one kernel uevent as broadcast on NETLINK_KOBJECT_UEVENT to the
// kernel multicast group 1 (lib/kobject_uevent.c; systemd's
// src/libsystemd/sd-device/device-monitor.c calls it MONITOR_GROUP_KERNEL).
type Uevent struct {
	Action    string            // "add", "remove", "change", "online", "offline", "bind", ...
	DevPath   string            // kobject path below /sys, e.g. "/devices/system/cpu/cpu1"
	Subsystem string            // SUBSYSTEM, e.g. "power_supply", "cpu"; "" if the event has none
	Env       map[string]string // every KEY=VALUE pair, including ACTION, DEVPATH, SUBSYSTEM and SEQNUM
}

// ErrUdevMessage is returned (wrapped) by ParseUevent for a message of the
// udev multicast group 2, which starts with "libudev\x00" and carries a
// binary header; such messages are never parsed here.
var ErrUdevMessage = errors.New("udev monitor message, not a kernel uevent")

// ParseUevent parses one kernel uevent datagram. The kernel format has no
// nlmsghdr: a header "ACTION@DEVPATH\x00" followed by NUL-separated
// "KEY=VALUE" strings, usually "ACTION=", "DEVPATH=", "SUBSYSTEM=", device
// variables and "SEQNUM=" last; the final NUL may be missing and empty
// strings are skipped. Values may contain '='; keys may not be empty.
//
// Errors: ErrUdevMessage (wrapped) for a "libudev\x00" message; otherwise a
// descriptive error for an empty message, a header without '@', an empty
// action, a DEVPATH not starting with '/', a variable without '=' or with
// an empty key, or ACTION/DEVPATH variables that contradict the header.
func ParseUevent(b []byte) (Uevent, error) {
	if bytes.HasPrefix(b, []byte("libudev\x00")) {
		return Uevent{}, fmt.Errorf("parse uevent: %w", ErrUdevMessage)
	}
	if len(b) == 0 {
		return Uevent{}, errors.New("parse uevent: empty message")
	}
	fields := strings.Split(string(b), "\x00")
	header := fields[0]
	action, devpath, ok := strings.Cut(header, "@")
	if !ok {
		return Uevent{}, fmt.Errorf("parse uevent: header %q is not ACTION@DEVPATH", header)
	}
	if action == "" || strings.ContainsAny(action, "=") {
		return Uevent{}, fmt.Errorf("parse uevent: bad action in header %q", header)
	}
	if !strings.HasPrefix(devpath, "/") {
		return Uevent{}, fmt.Errorf("parse uevent: devpath %q does not start with /", devpath)
	}
	ev := Uevent{Action: action, DevPath: devpath, Env: map[string]string{}}
	for _, f := range fields[1:] {
		if f == "" {
			continue
		}
		k, v, ok := strings.Cut(f, "=")
		if !ok || k == "" {
			return Uevent{}, fmt.Errorf("parse uevent: variable %q is not KEY=VALUE", f)
		}
		ev.Env[k] = v
	}
	if a, ok := ev.Env["ACTION"]; ok && a != action {
		return Uevent{}, fmt.Errorf("parse uevent: ACTION=%q contradicts header %q", a, header)
	}
	if d, ok := ev.Env["DEVPATH"]; ok && d != devpath {
		return Uevent{}, fmt.Errorf("parse uevent: DEVPATH=%q contradicts header %q", d, header)
	}
	ev.Subsystem = ev.Env["SUBSYSTEM"]
	return ev, nil
}
