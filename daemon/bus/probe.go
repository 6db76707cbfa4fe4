package bus

// What `schedpolicyd probe` asks the bus, nothing activated: who owns the
// power-profiles names and what "auto" would do, and the ConfigDigest of
// the running daemon.

import (
	"context"
	"fmt"
	"strings"

	"github.com/godbus/dbus/v5"

	"github.com/schedpolicyd/schedpolicyd/internal/bussender"
)

// PowerProfilesProbe is what `schedpolicyd probe` says about the
// power-profiles API: Mode (Config.PowerProfilesAPI), then, read from the
// bus (only GetNameOwner and GetConnectionUnixProcessID to the bus daemon;
// nothing is activated), who owns the names and what the daemon does.
type PowerProfilesProbe struct {
	Mode string `json:"mode"` // auto | on | off
	// Owners maps each owned power-profiles name to "UNIQUE pid N".
	Owners map[string]string `json:"owners,omitempty"`
	// Ours: the owner is schedpolicyd itself (it owns Name too).
	Ours bool `json:"ours"`
	// Installed is the first power-profiles daemon installed, as systemd
	// says ("UNIT STATE", e.g. "power-profiles-daemon.service disabled");
	// "" none, or no systemd on the bus.
	Installed string `json:"installed,omitempty"`
	// Action is "follow NAME", "serve", "served by schedpolicyd",
	// "left to UNIT (installed)", "off" or "unknown: WHY" (no bus, or
	// systemd did not say whether one is installed).
	Action string `json:"action"`
}

// ProbePowerProfiles looks at bus ("system", "session", an address; "none"
// gives Action "unknown: bus none") for mode and the power-profiles
// daemons' units (nil: DefaultPowerProfilesUnits), within busDialTimeout.
func ProbePowerProfiles(bus, mode string, units []string) PowerProfilesProbe {
	api, err := ParsePowerProfilesAPI(mode)
	if err == nil {
		units, err = CheckPowerProfilesUnits(units)
	}
	if err != nil {
		return PowerProfilesProbe{Mode: mode, Action: "unknown: " + err.Error()}
	}
	p := PowerProfilesProbe{Mode: api}
	if bus == "" {
		bus = "system"
	}
	if bus == "none" {
		p.Action = "unknown: bus none"
		return p
	}
	conn, err := dialBus(context.Background(), bus, busDialTimeout)
	if err != nil {
		p.Action = "unknown: no bus: " + err.Error()
		return p
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), busCallTimeout)
	defer cancel()
	owner := func(name string) string {
		o, _ := bussender.GetNameOwner(ctx, conn, name)
		return o
	}
	ourOwner := owner(Name)
	var other string
	for _, n := range ppNames {
		o := owner(n.name)
		if o == "" {
			continue
		}
		var pid uint32
		conn.BusObject().CallWithContext(ctx, "org.freedesktop.DBus.GetConnectionUnixProcessID", dbus.FlagNoAutoStart, o).Store(&pid)
		if p.Owners == nil {
			p.Owners = map[string]string{}
		}
		p.Owners[n.name] = fmt.Sprintf("%s pid %d", o, pid)
		if o == ourOwner {
			p.Ours = true
		} else if other == "" {
			other = n.name
		}
	}
	var installErr error
	if o, _ := bussender.GetNameOwner(ctx, conn, systemdName); o != "" {
		var unit, state string
		if unit, state, installErr = installedUnit(ctx, conn, units); unit != "" {
			p.Installed = unit + " " + state
		}
	}
	switch {
	case p.Mode == PowerProfilesOff:
		p.Action = "off"
	case p.Mode == PowerProfilesAuto && other != "":
		p.Action = "follow " + other
	case p.Ours:
		p.Action = "served by schedpolicyd"
	case p.Mode == PowerProfilesAuto && p.Installed != "":
		p.Action = "left to " + strings.Fields(p.Installed)[0] + " (installed)"
	case p.Mode == PowerProfilesAuto && installErr != nil:
		p.Action = "unknown: " + installErr.Error()
	default:
		p.Action = "serve"
	}
	return p
}

// ConfigDigestProbe is what the daemon on a bus says of its
// configuration (ProbeConfigDigest).
type ConfigDigestProbe struct {
	// Running: a daemon owns Name and answered.
	Running bool
	// Digest is its ConfigDigest property.
	Digest string
	// Err says why nothing could be asked ("" when it could).
	Err string
}

// ProbeConfigDigest asks the daemon on bus ("system", "session", an
// address; "none": nothing is asked) for its ConfigDigest, never starting
// it (NO_AUTO_START), within busDialTimeout and busCallTimeout.
func ProbeConfigDigest(bus string) ConfigDigestProbe {
	if bus == "" {
		bus = "system"
	}
	if bus == "none" {
		return ConfigDigestProbe{Err: "bus none"}
	}
	conn, err := dialBus(context.Background(), bus, busDialTimeout)
	if err != nil {
		return ConfigDigestProbe{Err: "no bus: " + err.Error()}
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), busCallTimeout)
	defer cancel()
	owner, err := bussender.GetNameOwner(ctx, conn, Name)
	if err != nil {
		return ConfigDigestProbe{Err: err.Error()}
	}
	if owner == "" {
		return ConfigDigestProbe{}
	}
	var v dbus.Variant
	if err := conn.Object(owner, ObjectPath).CallWithContext(ctx, "org.freedesktop.DBus.Properties.Get", dbus.FlagNoAutoStart, Interface, "ConfigDigest").Store(&v); err != nil {
		return ConfigDigestProbe{Err: err.Error()}
	}
	d, _ := v.Value().(string)
	return ConfigDigestProbe{Running: true, Digest: d}
}
