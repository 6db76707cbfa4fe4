package main

import (
	"bytes"
	"errors"
	"testing"
)

// FuzzParseConfig: parseConfig never panics on any file content; every
// error it returns is (or joins) *ConfigError values that name the file
// and a line inside it (0 when unknown).
func FuzzParseConfig(f *testing.F) {
	for _, s := range []string{
		"power_aware = 2\npower_aware_policy = \"balance\"\n",
		"debounce = \"500ms\"\nrecheck_interval = \"-1s\"\n",
		"bogus_key = 1\n", "[table]\nx = 1\n", "power_aware = \"two\"\n", "debounce = \"fast\"\n",
		"boost_on_battery = \"off\"\nupower = \"on\"\npower_profiles_api = true\n",
		"tree_dir = \"relative\"\n", "= = =\n", "\x00\xff", "power_aware = 1\npower_aware = 2\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		_, err := parseConfig("fuzz.conf", data)
		if err == nil {
			return
		}
		lines := bytes.Count(data, []byte("\n")) + 1
		var ce *ConfigError
		if !errors.As(err, &ce) {
			t.Fatalf("error %v (%T) is no *ConfigError", err, err)
		}
		if ce.File != "fuzz.conf" || ce.Line < 0 || ce.Line > lines {
			t.Fatalf("error %v: file %q line %d, file has %d lines", err, ce.File, ce.Line, lines)
		}
	})
}
