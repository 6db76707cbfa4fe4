package policy

import (
	"errors"
	"strings"
	"testing"
	"unicode"
)

// FuzzScanToken drives the tree's write handler parse (the same one D-Bus
// setters use): ScanToken, then the three knob parsers. Whatever the
// bytes, nothing panics; an accepted token is 1–15 bytes without space or
// control characters; a value a parser accepts prints back as the token;
// every refusal wraps ErrInvalid.
func FuzzScanToken(f *testing.F) {
	for _, s := range []string{"powersaving\n", "  balance  trailing words", "2", "performance\x00", "", " \t\n", strings.Repeat("x", 4097), "0123456789abcdefg", "perf\x7fmance", "ÿperformance"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		tok, err := ScanToken(data)
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("ScanToken(%q) error %v does not wrap ErrInvalid", data, err)
			}
			return
		}
		if len(data) > MaxWrite {
			t.Fatalf("ScanToken accepted %d bytes", len(data))
		}
		// Bytes are taken as the kernel's %s takes them: C1 controls or
		// invalid UTF-8 may form a token; no parser accepts one.
		if tok == "" || len(tok) > maxToken || strings.IndexFunc(tok, unicode.IsSpace) >= 0 || strings.ContainsFunc(tok, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
			t.Fatalf("ScanToken(%q) = %q: not one 1–15 byte token without spaces or ASCII controls", data, tok)
		}
		if p, err := ParsePolicy(tok); err == nil && string(p) != tok {
			t.Fatalf("ParsePolicy(%q) = %q", tok, p)
		} else if err != nil && !errors.Is(err, ErrInvalid) {
			t.Fatalf("ParsePolicy error %v does not wrap ErrInvalid", err)
		}
		if p, err := ParsePowerAwarePolicy(tok); err == nil && string(p) != tok {
			t.Fatalf("ParsePowerAwarePolicy(%q) = %q", tok, p)
		} else if err != nil && !errors.Is(err, ErrInvalid) {
			t.Fatalf("ParsePowerAwarePolicy error %v does not wrap ErrInvalid", err)
		}
		if v, err := ParsePowerAware(tok); err == nil {
			if v < 0 || v > 2 || string(rune('0'+int(v))) != tok {
				t.Fatalf("ParsePowerAware(%q) = %d", tok, v)
			}
		} else if !errors.Is(err, ErrInvalid) {
			t.Fatalf("ParsePowerAware error %v does not wrap ErrInvalid", err)
		}
	})
}
