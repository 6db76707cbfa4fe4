package systemd

import (
	"strings"
	"testing"
)

// TestUnitNoIPSockets: the daemon opens no IP socket, and the unit keeps it
// so (fleet metrics go through node_exporter's textfile collector, not
// a port of ours): the address families are a list without
// AF_INET and AF_INET6 (an empty list or a "~" deny list would allow
// them), and IPAddressDeny=any stops what a filter might let through.
func TestUnitNoIPSockets(t *testing.T) {
	o := unitOptions(t)
	fam := o["Service.RestrictAddressFamilies"]
	if len(fam) != 1 || strings.TrimSpace(fam[0]) == "" || strings.HasPrefix(strings.TrimSpace(fam[0]), "~") || fam[0] == "none" {
		t.Fatalf("RestrictAddressFamilies = %q, want one allow list", fam)
	}
	for _, f := range strings.Fields(fam[0]) {
		switch f {
		case "AF_UNIX", "AF_NETLINK":
		default:
			t.Errorf("RestrictAddressFamilies allows %s; the daemon needs AF_UNIX (D-Bus, sd_notify) and AF_NETLINK (uevents) only", f)
		}
	}
	if d := o["Service.IPAddressDeny"]; len(d) != 1 || d[0] != "any" {
		t.Errorf("IPAddressDeny = %q, want any", d)
	}
}
