package main

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/schedpolicyd/schedpolicyd/daemon"
)

// TestConfigBounds: every duration and count key of the
// configuration file at, inside and beyond its bounds. A value in range is
// taken exactly; one out of range is refused with the exact message,
// file:line first. The values are derived from package daemon's bounds
// (one definition); the messages spell the documented numbers, so the
// documentation (schedpolicyd.conf(5), the shipped file, docs/INPUTS.md)
// and the constants cannot drift apart unnoticed.
func TestConfigBounds(t *testing.T) {
	const ns = time.Nanosecond
	type row struct {
		key, value string
		want       time.Duration // for an accepted duration
		wantInt    int           // for an accepted power_aware
		err        string        // the message after "FILE:2: KEY: "; "" when accepted
	}
	dur := func(d time.Duration) string { return d.String() }
	rangeMsg := func(v, r string) string { return fmt.Sprintf("%q: must be at least %s", v, r) }
	var rows []row
	for _, k := range []struct {
		key      string
		min, max time.Duration
		msg      string // the range as the message gives it
		zero     bool   // 0 and negative values are accepted (they mean something)
	}{
		{"debounce", daemon.MinDebounce, daemon.MaxDebounce, "0s and at most 1m", false},
		{"recheck_interval", daemon.MinRecheckInterval, daemon.MaxRecheckInterval, "1s and at most 24h (0: automatic, negative: never)", true},
		{"sample_interval", daemon.MinSampleInterval, daemon.MaxSampleInterval, "10ms and at most 1h", false},
	} {
		rows = append(rows,
			row{key: k.key, value: dur(k.min), want: k.min},
			row{key: k.key, value: dur(k.max), want: k.max},
			row{key: k.key, value: dur(k.max + ns), err: rangeMsg(dur(k.max+ns), k.msg)},
			// This one would make the sampling backoff overflow.
			row{key: k.key, value: "2562047h", err: rangeMsg("2562047h", k.msg)},
			// Beyond time.Duration: not a duration at all.
			row{key: k.key, value: "2562048h", err: fmt.Sprintf("%q: want a duration such as \"500ms\", \"2s\" or \"1m\"", "2562048h")},
		)
		if k.zero {
			rows = append(rows,
				row{key: k.key, value: "0s", want: 0},
				row{key: k.key, value: "-2562047h", want: -2562047 * time.Hour},
				row{key: k.key, value: dur(k.min - ns), err: rangeMsg(dur(k.min-ns), k.msg)},
			)
		} else {
			below := k.min - ns
			if k.min == 0 {
				below = -2562047 * time.Hour
			}
			rows = append(rows, row{key: k.key, value: dur(below), err: rangeMsg(dur(below), k.msg)})
		}
	}
	rows = append(rows,
		row{key: "debounce", value: "0", want: 0}, // the default, 500ms
		row{key: "sample_interval", value: "0s", err: rangeMsg("0s", "10ms and at most 1h")},
		row{key: "power_aware", value: "0", wantInt: 0},
		row{key: "power_aware", value: "2", wantInt: 2},
		row{key: "power_aware", value: "3", err: "3: want 0 (always performance), 1 (automatic) or 2 (always power-aware)"},
		row{key: "power_aware", value: "-1", err: "-1: want 0 (always performance), 1 (automatic) or 2 (always power-aware)"},
		row{key: "power_aware", value: "9223372036854775807", err: "9223372036854775807: want 0 (always performance), 1 (automatic) or 2 (always power-aware)"},
	)
	for _, r := range rows {
		t.Run(r.key+"="+r.value, func(t *testing.T) {
			value := `"` + r.value + `"`
			if r.key == "power_aware" {
				value = r.value
			}
			const name = "/etc/schedpolicyd/schedpolicyd.conf"
			fc, err := parseConfig(name, []byte("# line 1\n"+r.key+" = "+value+"\n"))
			if r.err != "" {
				want := name + ":2: " + r.key + ": " + r.err
				if err == nil || err.Error() != want {
					t.Fatalf("error %v, want %q", err, want)
				}
				return
			}
			if err != nil {
				t.Fatalf("refused: %v", err)
			}
			var got *time.Duration
			switch r.key {
			case "debounce":
				got = fc.Debounce
			case "recheck_interval":
				got = fc.RecheckInterval
			case "sample_interval":
				got = fc.SampleInterval
			case "power_aware":
				if fc.PowerAware == nil || *fc.PowerAware != r.wantInt {
					t.Fatalf("power_aware = %v, want %d", fc.PowerAware, r.wantInt)
				}
				return
			}
			if got == nil || *got != r.want {
				t.Fatalf("%s = %v, want %v", r.key, got, r.want)
			}
		})
	}
}

// TestConfigIntegerOverflow: an integer beyond int64 is a file:line error,
// never a wrapped value.
func TestConfigIntegerOverflow(t *testing.T) {
	const name = "c.conf"
	_, err := parseConfig(name, []byte("\npower_aware = 9223372036854775808\n"))
	if err == nil || !strings.HasPrefix(err.Error(), name+":2: ") {
		t.Fatalf("error %v, want one at %s:2", err, name)
	}
}

// TestFlagBounds: the same bounds for the command-line flags, checked by
// validate (which daemonMain runs before anything starts: exit 2, see
// TestCLIBadInput), with the exact message; values at the bounds pass. It
// calls validate rather than run, so that a bound lost by mistake cannot
// start a daemon on this machine's /sys.
func TestFlagBounds(t *testing.T) {
	const ns = time.Nanosecond
	for _, c := range []struct {
		flag  string
		value time.Duration
		want  string // "" when accepted
	}{
		{"--debounce", daemon.MinDebounce, ""},
		{"--debounce", daemon.MaxDebounce, ""},
		{"--debounce", -ns, "--debounce -1ns: must be at least 0s and at most 1m"},
		{"--debounce", daemon.MaxDebounce + ns, "--debounce 1m0.000000001s: must be at least 0s and at most 1m"},
		{"--recheck-interval", -2562047 * time.Hour, ""},
		{"--recheck-interval", 0, ""},
		{"--recheck-interval", daemon.MinRecheckInterval, ""},
		{"--recheck-interval", daemon.MaxRecheckInterval, ""},
		{"--recheck-interval", daemon.MinRecheckInterval - ns, "--recheck-interval 999.999999ms: must be at least 1s and at most 24h (0: automatic, negative: never)"},
		{"--recheck-interval", daemon.MaxRecheckInterval + ns, "--recheck-interval 24h0m0.000000001s: must be at least 1s and at most 24h (0: automatic, negative: never)"},
		{"--sample-interval", daemon.MinSampleInterval, ""},
		{"--sample-interval", daemon.MaxSampleInterval, ""},
		{"--sample-interval", 0, "--sample-interval 0s: must be at least 10ms and at most 1h"},
		{"--sample-interval", daemon.MinSampleInterval - ns, "--sample-interval 9.999999ms: must be at least 10ms and at most 1h"},
		{"--sample-interval", 2562047 * time.Hour, "--sample-interval 2562047h0m0s: must be at least 10ms and at most 1h"},
		{"--settle", -2562047 * time.Hour, ""},
		{"--settle", 0, ""},
		{"--settle", daemon.MinSettle, ""},
		{"--settle", daemon.MaxSettle, ""},
		{"--settle", daemon.MinSettle - ns, "--settle 999.999µs: must be at least 1ms and at most 1m (0: the default 1s, negative: off)"},
		{"--settle", daemon.MaxSettle + ns, "--settle 1m0.000000001s: must be at least 1ms and at most 1m (0: the default 1s, negative: off)"},
	} {
		t.Run(c.flag+"="+c.value.String(), func(t *testing.T) {
			cfg := daemon.Config{TreeDir: "/t", StateDir: "/s", Bus: "none", Debounce: daemon.DefaultDebounce, SampleInterval: daemon.DefaultSampleInterval}
			switch c.flag {
			case "--debounce":
				cfg.Debounce = c.value
			case "--recheck-interval":
				cfg.RecheckInterval = c.value
			case "--sample-interval":
				cfg.SampleInterval = c.value
			case "--settle":
				cfg.Settle = c.value
			}
			err := validate(cfg)
			if c.want == "" {
				if err != nil {
					t.Fatalf("validate: %v", err)
				}
				return
			}
			if err == nil || err.Error() != c.want {
				t.Fatalf("validate: %v, want %q", err, c.want)
			}
		})
	}
}
