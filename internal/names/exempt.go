package names

import (
	"fmt"
	"path"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// The bounds of the exempt list (the configuration's exempt setting and
// the exemptions made over D-Bus, each list on its own): how many
// entries, and how long a pattern may be (a unit name's bound, systemd's
// UNIT_NAME_MAX) and an entry with its manager ("user:4294967295/").
const (
	MaxExempts       = 256
	MaxExemptPattern = 255
	MaxExemptEntry   = len("user:4294967295/") + MaxExemptPattern
)

// The managers an exempt entry may name (Exempt.Manager); "" is every
// manager and every cgroup of the managed parent.
const (
	ManagerSystem = "system"
	managerUser   = "user:"
)

// Exempt is one entry of the exempt list, written [MANAGER/]PATTERN:
// PATTERN is a workload's name — a unit's ("app-firefox-1234.scope"), a
// cgroup's as the Workloads property publishes it — or a glob of them
// with path.Match's syntax ("app-steam*.scope"); MANAGER narrows it to
// the units of the system manager ("system") or of one user's manager
// ("user:UID"). Without MANAGER it names workloads of every manager and
// the managed parent's cgroups.
type Exempt struct {
	Manager string
	Pattern string
}

// ExemptError is a refused exempt entry: Why says what is wrong with it.
type ExemptError struct {
	Entry string
	Why   string
}

func (e *ExemptError) Error() string { return fmt.Sprintf("exempt entry %q: %s", e.Entry, e.Why) }

// ParseExempt parses an exempt entry: [system/|user:UID/]PATTERN, UID a
// decimal uint32 without leading zeros, PATTERN 1 to MaxExemptPattern
// bytes of valid UTF-8 without "/" or a control character, and a valid
// path.Match pattern (a "[" closed, no "\" at the end). The error is an
// *ExemptError.
func ParseExempt(s string) (Exempt, error) {
	bad := func(why string) (Exempt, error) { return Exempt{}, &ExemptError{Entry: s, Why: why} }
	if len(s) > MaxExemptEntry {
		return bad(fmt.Sprintf("longer than %d bytes", MaxExemptEntry))
	}
	if !utf8.ValidString(s) {
		return bad("not valid UTF-8")
	}
	if strings.IndexFunc(s, unicode.IsControl) >= 0 {
		return bad("contains a control character")
	}
	var e Exempt
	pat := s
	if m, p, ok := strings.Cut(s, "/"); ok {
		switch {
		case m == ManagerSystem:
		case strings.HasPrefix(m, managerUser):
			id := m[len(managerUser):]
			n, err := strconv.ParseUint(id, 10, 32)
			if err != nil || strconv.FormatUint(n, 10) != id {
				return bad(fmt.Sprintf("%q is not a user's manager: want user:UID, UID a decimal number", m))
			}
		default:
			return bad(fmt.Sprintf("%q is not a manager: want system/ or user:UID/ before the name, or no \"/\"", m))
		}
		e.Manager, pat = m, p
	}
	switch {
	case pat == "":
		return bad("no name")
	case len(pat) > MaxExemptPattern:
		return bad(fmt.Sprintf("name longer than %d bytes", MaxExemptPattern))
	case strings.Contains(pat, "/"):
		return bad(`name contains "/"`)
	}
	if _, err := path.Match(pat, ""); err != nil {
		return bad("not a valid glob (path.Match: " + err.Error() + ")")
	}
	e.Pattern = pat
	return e, nil
}

// UserExempt is the entry for pattern among uid's own units
// (user:UID/PATTERN).
func UserExempt(uid uint32, pattern string) Exempt {
	return Exempt{Manager: UserManager(uid), Pattern: pattern}
}

// UserManager is the manager name of uid's manager, "user:UID".
func UserManager(uid uint32) string { return managerUser + strconv.FormatUint(uint64(uid), 10) }

// String is the entry as ParseExempt reads it.
func (e Exempt) String() string {
	if e.Manager == "" {
		return e.Pattern
	}
	return e.Manager + "/" + e.Pattern
}

// IsGlob reports whether the pattern has a wildcard ("*", "?" or "[").
func (e Exempt) IsGlob() bool { return strings.ContainsAny(e.Pattern, "*?[") }

// UID is the uid of a user:UID entry's manager; ok false for any other.
func (e Exempt) UID() (uid uint32, ok bool) {
	id, found := strings.CutPrefix(e.Manager, managerUser)
	if !found {
		return 0, false
	}
	n, err := strconv.ParseUint(id, 10, 32)
	return uint32(n), err == nil
}

// Match reports whether the entry names the workload name of manager
// ("system", "user:UID", or "" for a cgroup of the managed parent, which
// only an entry without a manager names): the pattern equals name, or
// matches it as path.Match does (so a unit name holding systemd's "\x2d"
// escapes names itself too).
func (e Exempt) Match(manager, name string) bool {
	if e.Manager != "" && e.Manager != manager {
		return false
	}
	if e.Pattern == name {
		return true
	}
	ok, err := path.Match(e.Pattern, name)
	return ok && err == nil
}
