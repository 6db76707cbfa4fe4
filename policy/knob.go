package policy

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode"
)

// Policy is one of the three balance policies of the 2013 "sched: power
// aware scheduling" patch set (patch 09 of Alex Shi's "[patch v4 0/18]
// sched: simplified fork, release load avg and power awareness
// scheduling", LKML, January 2013; docs/SOURCES.md §1).
type Policy string

// The balance policies. Their names are the strings the kernel patch's
// sysfs files read and accept.
const (
	// Performance spreads work over all allowed CPUs (today's CFS behaviour).
	Performance Policy = "performance"
	// Balance packs until a group's capacity is used: about one busy task
	// per physical core (SMT counted like the 2013 kernel's smt_gain).
	Balance Policy = "balance"
	// Powersaving packs until every logical CPU of a group is busy.
	Powersaving Policy = "powersaving"
)

// AvailablePolicies is the content of available_sched_policy, in the
// patch's code order (patch 10: "performance balance powersaving").
var AvailablePolicies = []Policy{Performance, Balance, Powersaving}

// PowerAware is the three-valued knob Ingo Molnar asked for on the patch
// thread (his reply to 0/18, docs/SOURCES.md §1).
type PowerAware int

const (
	// PowerAwareOff (0): power-aware scheduling always disabled; the
	// effective policy is always Performance.
	PowerAwareOff PowerAware = 0
	// PowerAwareAuto (1, the default): the power-aware policy only when
	// there is positive, reliable evidence that the machine runs on
	// battery; Performance otherwise (AC, no battery, anything uncertain).
	PowerAwareAuto PowerAware = 1
	// PowerAwareOn (2): the power-aware policy always.
	PowerAwareOn PowerAware = 2
)

// ErrInvalid is wrapped by every parse error of this file. The daemon maps it
// to EINVAL on the tree and to org.freedesktop.DBus.Error.InvalidArgs on
// D-Bus.
var ErrInvalid = errors.New("invalid value")

// Knob is the user's choice: the power_aware mode and the power-aware
// policy that modes 1 and 2 use. The zero value is not valid; start from
// DefaultKnob.
type Knob struct {
	PowerAware       PowerAware `json:"power_aware"`
	PowerAwarePolicy Policy     `json:"power_aware_policy"`
}

// DefaultKnob is power_aware=1 (automatic) with power_aware_policy
// powersaving, the tree's defaults (docs/USAGE.md, "The tree").
func DefaultKnob() Knob {
	return Knob{PowerAware: PowerAwareAuto, PowerAwarePolicy: Powersaving}
}

// Validate reports whether k holds a knob value the files could have
// produced: power_aware in 0..2 and a power-aware policy of balance or
// powersaving. Errors wrap ErrInvalid.
func (k Knob) Validate() error {
	if k.PowerAware < PowerAwareOff || k.PowerAware > PowerAwareOn {
		return fmt.Errorf("%w: power_aware %d not in 0..2", ErrInvalid, k.PowerAware)
	}
	if k.PowerAwarePolicy != Balance && k.PowerAwarePolicy != Powersaving {
		return fmt.Errorf("%w: power_aware_policy %q is not balance or powersaving", ErrInvalid, k.PowerAwarePolicy)
	}
	return nil
}

// Effective maps the knob and the power source to the effective policy:
//
//	power_aware 0 → performance
//	power_aware 1 → power_aware_policy when powerSource is "battery", else performance
//	power_aware 2 → power_aware_policy
//
// powerSource is the classification of package acpi: "ac", "battery" or
// "unknown". Only "battery" — positive, reliable evidence — selects the
// power-aware policy in mode 1; "unknown" and anything else count as AC
// (Ingo Molnar's "positive, reliable information", docs/SOURCES.md §1;
// docs/POWER_SOURCE.md).
func (k Knob) Effective(powerSource string) Policy {
	switch {
	case k.PowerAware == PowerAwareOn:
		return k.PowerAwarePolicy
	case k.PowerAware == PowerAwareAuto && powerSource == "battery":
		return k.PowerAwarePolicy
	default:
		return Performance
	}
}

// WithCurrentPolicy applies an explicit write of p to current_sched_policy
// (docs/USAGE.md, "The tree"): performance sets power_aware to 0; balance and
// powersaving set power_aware to 2 and power_aware_policy to p.
func (k Knob) WithCurrentPolicy(p Policy) Knob {
	if p == Performance {
		k.PowerAware = PowerAwareOff
		return k
	}
	return Knob{PowerAware: PowerAwareOn, PowerAwarePolicy: p}
}

// ParsePolicy accepts exactly one of the three policy names
// (case-sensitive, as strcmp in patch 10). Errors wrap ErrInvalid.
func ParsePolicy(s string) (Policy, error) {
	for _, p := range AvailablePolicies {
		if s == string(p) {
			return p, nil
		}
	}
	return "", fmt.Errorf("%w: policy %q is not one of performance, balance, powersaving", ErrInvalid, s)
}

// ParsePowerAwarePolicy accepts balance or powersaving. Errors wrap
// ErrInvalid.
func ParsePowerAwarePolicy(s string) (Policy, error) {
	p, err := ParsePolicy(s)
	if err != nil || p == Performance {
		return "", fmt.Errorf("%w: power_aware_policy %q is not balance or powersaving", ErrInvalid, s)
	}
	return p, nil
}

// ParsePowerAware accepts "0", "1" or "2". Errors wrap ErrInvalid.
func ParsePowerAware(s string) (PowerAware, error) {
	switch s {
	case "0", "1", "2":
		n, _ := strconv.Atoi(s)
		return PowerAware(n), nil
	}
	return 0, fmt.Errorf("%w: power_aware %q is not 0, 1 or 2", ErrInvalid, s)
}

// MaxWrite is the largest write a knob file accepts, in bytes (PAGE_SIZE,
// the size of a sysfs store() buffer).
const MaxWrite = 4096

// maxToken is the width of the patch's sscanf("%15s") conversion.
const maxToken = 15

// ScanToken mimics the patch's sscanf(buf, "%15s", str) on a write(2)
// buffer: leading whitespace is skipped, the first token is returned and
// anything after it is ignored. An empty or whitespace-only buffer, a token
// longer than 15 bytes (the kernel would truncate it, so it can never
// match), NUL or other control bytes, or more than MaxWrite bytes are
// errors wrapping ErrInvalid.
func ScanToken(data []byte) (string, error) {
	if len(data) > MaxWrite {
		return "", fmt.Errorf("%w: write of %d bytes exceeds %d", ErrInvalid, len(data), MaxWrite)
	}
	fields := strings.FieldsFunc(string(data), unicode.IsSpace)
	if len(fields) == 0 {
		return "", fmt.Errorf("%w: empty write", ErrInvalid)
	}
	tok := fields[0]
	if len(tok) > maxToken {
		return "", fmt.Errorf("%w: token %.20q longer than %d bytes", ErrInvalid, tok, maxToken)
	}
	for _, r := range tok {
		if r < 0x20 || r == 0x7f {
			return "", fmt.Errorf("%w: control byte in %q", ErrInvalid, tok)
		}
	}
	return tok, nil
}
