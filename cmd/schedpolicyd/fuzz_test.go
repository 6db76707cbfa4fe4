package main

import (
	"bytes"
	"errors"
	"testing"

	"github.com/schedpolicyd/schedpolicyd/daemon"
)

// FuzzParseConfig: parseConfig never panics on any file content; every
// error it returns is (or joins) *ConfigError values that name the file
// and a line inside it (0 when unknown); and every file it accepts gives a
// configuration daemon.New accepts too (the file's bounds are the
// daemon's: nothing out of range gets through).
func FuzzParseConfig(f *testing.F) {
	for _, s := range []string{
		"power_aware = 2\npower_aware_policy = \"balance\"\n",
		"debounce = \"500ms\"\nrecheck_interval = \"-1s\"\n",
		"bogus_key = 1\n", "[table]\nx = 1\n", "power_aware = \"two\"\n", "debounce = \"fast\"\n",
		"boost_on_battery = \"off\"\nupower = \"on\"\npower_profiles_api = true\n",
		"bus = \"none\"\nupower = \"on\"\n",
		"tree_dir = \"relative\"\n", "= = =\n", "\x00\xff", "power_aware = 1\npower_aware = 2\n",
		"sample_interval = \"2562047h\"\n", "debounce = \"1m\"\nrecheck_interval = \"24h\"\nsample_interval = \"10ms\"\n", "sample_interval = \"1h\"\n",
	} {
		f.Add([]byte(s))
	}
	sysRoot := f.TempDir()
	f.Fuzz(func(t *testing.T, data []byte) {
		fc, err := parseConfig("fuzz.conf", data)
		if err == nil {
			// The command line's defaults (bus system): a flag that
			// conflicts with the file is the command line's error.
			cfg := daemon.Config{Bus: "system", Debounce: daemon.DefaultDebounce, SampleInterval: daemon.DefaultSampleInterval}
			fc.apply(&cfg, nil)
			cfg.SysfsRoot = sysRoot // the file's roots need not exist here
			if _, err := daemon.New(cfg); err != nil {
				t.Fatalf("parseConfig accepted %q, daemon.New refuses it: %v", data, err)
			}
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
