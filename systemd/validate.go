package systemd

import (
	"errors"
	"fmt"
	"path"
	"strings"
	"unicode/utf8"
)

// What the daemon accepts of a manager's answers. A user's manager is
// whatever the user runs on its socket (frame.go), so every value it
// sends is checked against what systemd itself can send before anything
// else reads it; the system manager's answers go through the same checks,
// which cost nothing where they hold.
const (
	// DefaultMaxCPUs is the bound of a CPU mask where the machine's own
	// (kernel_max + 1, Manager.MaxCPUs) is not known: CONFIG_NR_CPUS's
	// largest value on x86_64 (MAXSMP) and the CPU_SIZE_MAX of systemd's
	// cpu-set-util.c.
	DefaultMaxCPUs = 8192
	// unitNameMax is systemd's UNIT_NAME_MAX (256, with the NUL).
	unitNameMax = 255
	// pathMax is PATH_MAX without the NUL: a ControlGroup or drop-in path.
	pathMax = 4095
	// maxDropIns bounds a unit's DropInPaths; maxControllers its
	// DelegateControllers (the kernel has 14 cgroup v2 controllers).
	maxDropIns     = 256
	maxControllers = 32
	// maxStateLen bounds ActiveState and LoadState ("deactivating",
	// "bad-setting").
	maxStateLen = 32
	// DefaultMaxUnits bounds the units one listing takes in
	// (Manager.MaxUnits): a large server's system manager has a few
	// thousand.
	DefaultMaxUnits = 65536
	// maxVersionLen bounds the manager's Version string.
	maxVersionLen = 64
)

// InvalidError is the error for a value a manager sent that systemd
// cannot have sent: Unit names the unit ("" for the manager's own
// property), Field the property, Why what is wrong with it. The value
// itself is left out, quoted and cut where it is shown (Error).
type InvalidError struct {
	Manager string // "system", "user 1000"
	Unit    string
	Field   string
	Why     string
}

// cutName is a name a manager sent as an InvalidError keeps it: its
// first 65 bytes (a refused name may be as long as a message; Quote
// shows 64 and marks the cut).
func cutName(s string) string {
	if len(s) > 65 {
		return strings.Clone(s[:65]) // not a view that keeps all of s
	}
	return s
}

func (e *InvalidError) Error() string {
	if e.Unit == "" {
		return fmt.Sprintf("%s manager sent an invalid %s: %s", e.Manager, e.Field, e.Why)
	}
	return fmt.Sprintf("%s manager sent an invalid %s for %s: %s", e.Manager, e.Field, Quote(e.Unit), e.Why)
}

// ErrInvalid is matched by every *InvalidError (errors.Is).
var ErrInvalid = errors.New("invalid value from a systemd manager")

func (e *InvalidError) Is(target error) bool { return target == ErrInvalid }

// Quote is s as it may be shown in a log line or an error: valid UTF-8,
// quoted with Go's escapes, cut to its first 64 bytes ("…" after).
func Quote(s string) string {
	cut := ""
	if len(s) > 64 {
		s, cut = s[:64], "…"
	}
	return fmt.Sprintf("%q%s", s, cut)
}

// unitSuffixes are systemd's unit types (unit_type_from_string).
var unitSuffixes = []string{".service", ".socket", ".target", ".device", ".mount", ".automount", ".swap", ".timer", ".path", ".slice", ".scope"}

// CheckUnitName reports why name is not a unit name systemd accepts
// (unit_name_is_valid with UNIT_NAME_ANY): at most 255 bytes of
// [A-Za-z0-9:_.\-@] (systemd escapes anything else as \xNN, so a valid
// name is ASCII), a known type suffix, a non-empty prefix, at most one
// "@" (template or instance) and not at its start. nil when it is one.
func CheckUnitName(name string) error {
	if name == "" || len(name) > unitNameMax {
		return fmt.Errorf("a unit name has 1 to %d bytes, not %d", unitNameMax, len(name))
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte(":_.\\-@", c) >= 0) {
			return fmt.Errorf("byte %#02x at %d is not allowed in a unit name", c, i)
		}
	}
	dot := strings.LastIndexByte(name, '.')
	if dot <= 0 {
		return errors.New("no unit type suffix")
	}
	known := false
	for _, s := range unitSuffixes {
		known = known || name[dot:] == s
	}
	if !known {
		return fmt.Errorf("unknown unit type %q", name[dot:])
	}
	if at := strings.IndexByte(name, '@'); at == 0 || at >= 0 && strings.IndexByte(name[at+1:], '@') >= 0 {
		return errors.New("misplaced '@'")
	}
	return nil
}

// CheckControlGroup reports why cg is not a ControlGroup property systemd
// can send: "" (no cgroup), or an absolute, clean path of at most
// pathMax bytes of valid UTF-8 without control characters (systemd
// derives it from unit names, which are ASCII). A path with "." or ".."
// components, "//" or a trailing "/" is not clean. It says nothing of
// where the path is allowed to be (units.cgroupDir does).
func CheckControlGroup(cg string) error {
	switch {
	case cg == "":
		return nil
	case len(cg) > pathMax:
		return fmt.Errorf("%d bytes, more than PATH_MAX", len(cg))
	case !utf8.ValidString(cg) || strings.ContainsFunc(cg, isControl):
		return errors.New("not UTF-8 text")
	case cg[0] != '/':
		return errors.New("not an absolute path")
	case path.Clean(cg) != cg:
		return errors.New("not a clean path (\".\", \"..\" or repeated \"/\")")
	}
	return nil
}

func isControl(r rune) bool { return r < 0x20 || r == 0x7f }

// checkWord reports why s is not a state or controller name of at most
// n bytes of [a-z0-9_-].
func checkWord(s string, n int) error {
	if len(s) > n {
		return fmt.Errorf("%d bytes, at most %d", len(s), n)
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return fmt.Errorf("byte %#02x at %d", c, i)
		}
	}
	return nil
}

// checkDropIn reports why p is not a drop-in path: an absolute, clean
// path of at most pathMax bytes of UTF-8 text.
func checkDropIn(p string) error {
	switch {
	case len(p) == 0 || len(p) > pathMax:
		return fmt.Errorf("%d bytes", len(p))
	case !utf8.ValidString(p) || strings.ContainsFunc(p, isControl):
		return errors.New("not UTF-8 text")
	case p[0] != '/' || path.Clean(p) != p:
		return errors.New("not an absolute, clean path")
	}
	return nil
}

// MaskBytes is the longest AllowedCPUs= mask of ncpus possible CPUs, in
// bytes: systemd's cpu_set_to_dbus sends the CPU set's allocation, a
// whole number of unsigned longs (CPU_ALLOC_SIZE).
func MaskBytes(ncpus int) int { return (ncpus + 63) / 64 * 8 }

// DecodeCPUMask is EncodeCPUMask's inverse, bounded by the machine: the
// sorted CPU numbers whose bits are set in b, nil for none. ncpus is how
// many CPU numbers the machine can have (kernel_max + 1; DefaultMaxCPUs
// when ncpus ≤ 0). Errors: b is longer than MaskBytes(ncpus), or names a
// CPU ≥ ncpus; nothing is decoded then.
func DecodeCPUMask(b []byte, ncpus int) ([]int, error) {
	if ncpus <= 0 {
		ncpus = DefaultMaxCPUs
	}
	if len(b) > MaskBytes(ncpus) {
		return nil, fmt.Errorf("a CPU mask of %d bytes, at most %d on this machine (%d CPUs)", len(b), MaskBytes(ncpus), ncpus)
	}
	var out []int
	for i, v := range b {
		for bit := 0; bit < 8; bit++ {
			if v&(1<<bit) == 0 {
				continue
			}
			c := i*8 + bit
			if c >= ncpus {
				return nil, fmt.Errorf("CPU %d in a CPU mask, beyond the %d this machine can have", c, ncpus)
			}
			out = append(out, c)
		}
	}
	return out, nil
}

// checkInfo reports the first value of u that systemd cannot have sent
// (see the checks above), as an *InvalidError of manager m.
func checkInfo(m string, u *UnitInfo) error {
	bad := func(field string, err error) error {
		return &InvalidError{Manager: m, Unit: cutName(u.Name), Field: field, Why: err.Error()}
	}
	if err := CheckUnitName(u.Name); err != nil {
		return bad("unit name", err)
	}
	if u.Slice != "" {
		if err := CheckUnitName(u.Slice); err != nil || !strings.HasSuffix(u.Slice, ".slice") {
			if err == nil {
				err = errors.New("not a slice")
			}
			return bad("Slice", err)
		}
	}
	if err := CheckControlGroup(u.ControlGroup); err != nil {
		return bad("ControlGroup", err)
	}
	if err := checkWord(u.ActiveState, maxStateLen); err != nil {
		return bad("ActiveState", err)
	}
	if err := checkWord(u.LoadState, maxStateLen); err != nil {
		return bad("LoadState", err)
	}
	if len(u.DelegateControllers) > maxControllers {
		return bad("DelegateControllers", fmt.Errorf("%d controllers, at most %d", len(u.DelegateControllers), maxControllers))
	}
	for _, c := range u.DelegateControllers {
		if err := checkWord(c, maxStateLen); err != nil {
			return bad("DelegateControllers", err)
		}
	}
	if len(u.DropInPaths) > maxDropIns {
		return bad("DropInPaths", fmt.Errorf("%d paths, at most %d", len(u.DropInPaths), maxDropIns))
	}
	for _, p := range u.DropInPaths {
		if err := checkDropIn(p); err != nil {
			return bad("DropInPaths", err)
		}
	}
	if u.MainPID < 0 {
		return bad("MainPID", fmt.Errorf("%d", u.MainPID))
	}
	return nil
}

// cleanVersion is a manager's Version as it may be logged: at most
// maxVersionLen bytes of printable ASCII, anything else replaced by "?".
func cleanVersion(v string) string {
	if len(v) > maxVersionLen {
		v = v[:maxVersionLen]
	}
	b := []byte(v)
	for i, c := range b {
		if c < 0x20 || c > 0x7e {
			b[i] = '?'
		}
	}
	return string(b)
}
