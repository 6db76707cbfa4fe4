package names

import (
	"errors"
	"strings"
	"testing"
)

// TestParseExempt: the entries accepted, as they print again, and every
// refusal with its reason.
func TestParseExempt(t *testing.T) {
	for s, want := range map[string]Exempt{
		"app-steam*.scope":               {Pattern: "app-steam*.scope"},
		"build":                          {Pattern: "build"},
		"system/ssh.service":             {Manager: "system", Pattern: "ssh.service"},
		"user:1000/app-firefox-12.scope": {Manager: "user:1000", Pattern: "app-firefox-12.scope"},
		"user:0/x":                       {Manager: "user:0", Pattern: "x"},
		"user:4294967295/" + strings.Repeat("y", 255): {Manager: "user:4294967295", Pattern: strings.Repeat("y", 255)},
		`foo\x2dbar.service`:                          {Pattern: `foo\x2dbar.service`},
		"[ab]?.scope":                                 {Pattern: "[ab]?.scope"},
	} {
		got, err := ParseExempt(s)
		if err != nil || got != want || got.String() != s {
			t.Errorf("ParseExempt(%q) = %+v, %v; want %+v printing as itself", s, got, err, want)
		}
	}
	for s, why := range map[string]string{
		"":                                    "no name",
		"system/":                             "no name",
		"user:1000/a/b":                       `name contains "/"`,
		"home/x":                              `"home" is not a manager: want system/ or user:UID/ before the name, or no "/"`,
		"user:01/x":                           `"user:01" is not a user's manager: want user:UID, UID a decimal number`,
		"user:-1/x":                           `"user:-1" is not a user's manager: want user:UID, UID a decimal number`,
		"user:4294967296/x":                   `"user:4294967296" is not a user's manager: want user:UID, UID a decimal number`,
		"user:/x":                             `"user:" is not a user's manager: want user:UID, UID a decimal number`,
		"app[.scope":                          "not a valid glob (path.Match: syntax error in pattern)",
		`trailing\`:                           "not a valid glob (path.Match: syntax error in pattern)",
		strings.Repeat("z", 256):              "name longer than 255 bytes",
		strings.Repeat("z", MaxExemptEntry+1): "longer than 271 bytes",
		"tab\there":                           "contains a control character",
		"bad\xff":                             "not valid UTF-8",
	} {
		_, err := ParseExempt(s)
		var e *ExemptError
		if !errors.As(err, &e) || e.Why != why || e.Entry != s {
			t.Errorf("ParseExempt(%q) = %v, want an ExemptError %q", s, err, why)
		}
	}
}

// TestExemptMatch: a manager narrows, a pattern matches by equality or
// path.Match, and only an entry without a manager names a cgroup.
func TestExemptMatch(t *testing.T) {
	for _, c := range []struct {
		entry, manager, name string
		want                 bool
	}{
		{"app-steam*.scope", "user:1000", "app-steam-42.scope", true},
		{"app-steam*.scope", "system", "app-steam-42.scope", true},
		{"app-steam*.scope", "user:1000", "app-firefox.scope", false},
		{"user:1000/app-*.scope", "user:1000", "app-a.scope", true},
		{"user:1000/app-*.scope", "user:1001", "app-a.scope", false},
		{"user:1000/app-*.scope", "system", "app-a.scope", false},
		{"system/ssh.service", "system", "ssh.service", true},
		{"system/ssh.service", "user:0", "ssh.service", false},
		{"build", "", "build", true},
		{"system/build", "", "build", false},
		{"b*", "", "build", true},
		{`foo\x2dbar.service`, "system", `foo\x2dbar.service`, true},
		{`foo\x2dbar.service`, "system", "foox2dbar.service", true}, // path.Match's escape
		{"*", "system", "a.b", true},
	} {
		e, err := ParseExempt(c.entry)
		if err != nil {
			t.Fatal(err)
		}
		if got := e.Match(c.manager, c.name); got != c.want {
			t.Errorf("%q.Match(%q, %q) = %v, want %v", c.entry, c.manager, c.name, got, c.want)
		}
	}
	if e := UserExempt(4242, "x.scope"); e.String() != "user:4242/x.scope" || e.IsGlob() {
		t.Errorf("UserExempt: %+v", e)
	}
	if uid, ok := UserExempt(7, "a*").UID(); !ok || uid != 7 {
		t.Errorf("UID = %d %v", uid, ok)
	}
	if _, ok := (Exempt{Manager: "system", Pattern: "a"}).UID(); ok {
		t.Error("system entry has a uid")
	}
}
