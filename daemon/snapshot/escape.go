package snapshot

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// The published form of names the daemon does not choose (a cgroup
// directory's name, which an administrator's mkdir can make any bytes but
// "/" and NUL): valid UTF-8 without control characters, which D-Bus, JSON
// and a terminal all take, and from which the name is had back exactly
// (Unescape).

// Escape returns s in its published form. A name that is valid UTF-8,
// has no control character (Unicode category Cc: C0, DEL and C1) and does
// not contain the two bytes `\x` is its own published form, unchanged.
// Any other s is escaped the way systemd-escape(1) writes a byte: each
// byte of an invalid UTF-8 sequence, each byte of a control character and
// every backslash becomes `\xNN`, two lower-case hex digits; every other
// character is kept. So "caf\xe9" (Latin-1 é, one byte 0xe9) is published
// as the 7 characters `caf\xe9`, "tab\there" as `tab\x09here`, and a name
// that really is the ASCII text `caf\xe9` as `caf\x5cxe9`.
//
// Escape is injective: a published form that contains `\x` is always an
// escaped one, and no two names have the same published form. The result
// is at most four times as long as s.
func Escape(s string) string {
	if !needsEscape(s) {
		return s
	}
	const hex = "0123456789abcdef"
	var b strings.Builder
	b.Grow(len(s) + 8)
	byteEsc := func(c byte) {
		b.WriteString(`\x`)
		b.WriteByte(hex[c>>4])
		b.WriteByte(hex[c&0xf])
	}
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n == 1, r == '\\', unicode.IsControl(r):
			for j := i; j < i+n; j++ {
				byteEsc(s[j])
			}
		default:
			b.WriteString(s[i : i+n])
		}
		i += n
	}
	return b.String()
}

// needsEscape reports whether s is not its own published form: invalid
// UTF-8, a control character, or `\x`.
func needsEscape(s string) bool {
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c < 0x20 || c == 0x7f || (c == '\\' && i+1 < len(s) && s[i+1] == 'x') {
				return true
			}
			i++
			continue
		}
		r, n := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && n == 1 || unicode.IsControl(r) {
			return true
		}
		i += n
	}
	return false
}

// Unescape returns the name whose published form (Escape) is s, and true;
// or "", false when s is no name's published form (a `\` not followed by
// `x` and two hex digits in an escaped form, upper-case hex digits, `\x41`
// for a plain "A", a control character). For every name n,
// Unescape(Escape(n)) is n, true.
func Unescape(s string) (string, bool) {
	if !strings.Contains(s, `\x`) {
		if needsEscape(s) {
			return "", false
		}
		return s, true
	}
	b := make([]byte, 0, len(s))
	for i := 0; i < len(s); i++ {
		if s[i] != '\\' {
			b = append(b, s[i])
			continue
		}
		if i+3 >= len(s) || s[i+1] != 'x' {
			return "", false
		}
		hi, ok1 := unhex(s[i+2])
		lo, ok2 := unhex(s[i+3])
		if !ok1 || !ok2 {
			return "", false
		}
		b = append(b, hi<<4|lo)
		i += 3
	}
	n := string(b)
	if Escape(n) != s {
		return "", false
	}
	return n, true
}

// unhex is the value of a lower-case hex digit.
func unhex(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	}
	return 0, false
}
