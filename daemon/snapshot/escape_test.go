package snapshot

import (
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"
)

func TestEscape(t *testing.T) {
	for name, want := range map[string]string{
		"build":          "build",
		"":               "",
		"ünïcode ☃":      "ünïcode ☃",
		`back\slash`:     `back\slash`, // no \x: unchanged
		`trailing\`:      `trailing\`,
		"caf\xe9":        `caf\xe9`, // Latin-1 é: one byte that is no UTF-8
		"\xff\xfe":       `\xff\xfe`,
		"tab\there":      `tab\x09here`,
		"nul\x00":        `nul\x00`,
		"del\x7f":        `del\x7f`,
		"c1\u0085":       `c1\xc2\x85`, // a C1 control: both bytes of its UTF-8
		`caf\xe9`:        `caf\x5cxe9`, // the ASCII text: its backslash escaped
		`a\x`:            `a\x5cx`,
		"caf\xe9 a\\b":   `caf\xe9 a\x5cb`, // once escaped, every backslash
		"\xe2\x98":       `\xe2\x98`,       // a truncated ☃
		"ok\xe2\x98\x83": "ok☃",
	} {
		if got := Escape(name); got != want {
			t.Errorf("Escape(%q) = %q, want %q", name, got, want)
		}
		if got, ok := Unescape(want); !ok || got != name {
			t.Errorf("Unescape(%q) = %q, %v; want %q, true", want, got, ok, name)
		}
	}
	// No name's published form.
	for _, s := range []string{`\x41`, `caf\xE9`, `caf\xe`, `caf\x`, `a\x5cb`, `\xzz`, "tab\there", "c1\u0085", `caf\xe9\q`} {
		if got, ok := Unescape(s); ok {
			t.Errorf("Unescape(%q) = %q, true; want false", s, got)
		}
	}
}

// FuzzEscape: every published form is valid UTF-8 without control
// characters, gives its name back, and is the name itself exactly when the
// name needs no escape.
func FuzzEscape(f *testing.F) {
	for _, s := range []string{"build", "caf\xe9", `caf\xe9`, "tab\t", "\u0085", `\`, `\x`, "\xff\x00\\x5c"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		e := Escape(name)
		if !utf8.ValidString(e) || strings.IndexFunc(e, unicode.IsControl) >= 0 {
			t.Fatalf("Escape(%q) = %q: not valid UTF-8 without control characters", name, e)
		}
		if got, ok := Unescape(e); !ok || got != name {
			t.Fatalf("Unescape(Escape(%q) = %q) = %q, %v", name, e, got, ok)
		}
		plain := utf8.ValidString(name) && strings.IndexFunc(name, unicode.IsControl) < 0 && !strings.Contains(name, `\x`)
		if plain != (e == name) {
			t.Fatalf("Escape(%q) = %q; unchanged must mean plain (%v)", name, e, plain)
		}
		if len(e) > 4*len(name) {
			t.Fatalf("Escape(%q) = %q: more than 4 times as long", name, e)
		}
		if n, ok := Unescape(name); ok && Escape(n) != name {
			t.Fatalf("Unescape(%q) = %q, but Escape of that is %q", name, n, Escape(n))
		}
	})
}
