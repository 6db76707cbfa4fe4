package daemon

import (
	"context"
	"testing"
	"time"

	"github.com/schedpolicyd/schedpolicyd/policy"
)

// TestNewBounds: New refuses a Config whose durations
// are out of bounds (Go callers build Config without the command line),
// with the exact message, and takes every value at the bounds and the
// zeros that mean a default. New starts nothing, so no daemon runs here.
func TestNewBounds(t *testing.T) {
	const ns = time.Nanosecond
	const huge = 2562047 * time.Hour // would make the sampling backoff overflow
	for _, c := range []struct {
		field string
		v     time.Duration
		want  string // "" when accepted
		// got is the value New keeps when it accepts (the default for 0).
		got time.Duration
	}{
		{"Debounce", 0, "", DefaultDebounce},
		{"Debounce", MinDebounce + ns, "", ns},
		{"Debounce", MaxDebounce, "", MaxDebounce},
		{"Debounce", -ns, "config Debounce -1ns: must be at least 0s and at most 1m", 0},
		{"Debounce", MaxDebounce + ns, "config Debounce 1m0.000000001s: must be at least 0s and at most 1m", 0},
		{"Debounce", huge, "config Debounce 2562047h0m0s: must be at least 0s and at most 1m", 0},
		{"RecheckInterval", 0, "", 0},
		{"RecheckInterval", -huge, "", -huge},
		{"RecheckInterval", MinRecheckInterval, "", MinRecheckInterval},
		{"RecheckInterval", MaxRecheckInterval, "", MaxRecheckInterval},
		{"RecheckInterval", MinRecheckInterval - ns, "config RecheckInterval 999.999999ms: must be at least 1s and at most 24h (0: automatic, negative: never)", 0},
		{"RecheckInterval", huge, "config RecheckInterval 2562047h0m0s: must be at least 1s and at most 24h (0: automatic, negative: never)", 0},
		{"SampleInterval", 0, "", DefaultSampleInterval},
		{"SampleInterval", MinSampleInterval, "", MinSampleInterval},
		{"SampleInterval", MaxSampleInterval, "", MaxSampleInterval},
		{"SampleInterval", -ns, "config SampleInterval -1ns: must be at least 10ms and at most 1h", 0},
		{"SampleInterval", MinSampleInterval - ns, "config SampleInterval 9.999999ms: must be at least 10ms and at most 1h", 0},
		{"SampleInterval", MaxSampleInterval + ns, "config SampleInterval 1h0m0.000000001s: must be at least 10ms and at most 1h", 0},
		{"SampleInterval", huge, "config SampleInterval 2562047h0m0s: must be at least 10ms and at most 1h", 0},
		{"Settle", 0, "", 0},
		{"Settle", -huge, "", -huge},
		{"Settle", MinSettle, "", MinSettle},
		{"Settle", MaxSettle, "", MaxSettle},
		{"Settle", MinSettle - ns, "config Settle 999.999µs: must be at least 1ms and at most 1m (0: the default 1s, negative: off)", 0},
		{"Settle", huge, "config Settle 2562047h0m0s: must be at least 1ms and at most 1m (0: the default 1s, negative: off)", 0},
		{"UtilHalfLife", 0, "", policy.DefaultHalfLife},
		{"UtilHalfLife", MinUtilHalfLife, "", MinUtilHalfLife},
		{"UtilHalfLife", MaxUtilHalfLife, "", MaxUtilHalfLife},
		{"UtilHalfLife", -ns, "config UtilHalfLife -1ns: must be at least 10ms and at most 1h", 0},
		{"UtilHalfLife", MaxUtilHalfLife + ns, "config UtilHalfLife 1h0m0.000000001s: must be at least 10ms and at most 1h", 0},
		{"UtilHalfLife", huge, "config UtilHalfLife 2562047h0m0s: must be at least 10ms and at most 1h", 0},
	} {
		t.Run(c.field+"="+c.v.String(), func(t *testing.T) {
			cfg := Config{SysfsRoot: t.TempDir(), StateDir: t.TempDir(), TreeDir: t.TempDir(), Bus: "none"}
			field := map[string]*time.Duration{
				"Debounce": &cfg.Debounce, "RecheckInterval": &cfg.RecheckInterval, "SampleInterval": &cfg.SampleInterval,
				"Settle": &cfg.Settle, "UtilHalfLife": &cfg.UtilHalfLife,
			}
			*field[c.field] = c.v
			d, err := New(cfg)
			if c.want != "" {
				if err == nil || err.Error() != c.want {
					t.Fatalf("New: %v, want %q", err, c.want)
				}
				return
			}
			if err != nil {
				t.Fatalf("New: %v", err)
			}
			kept := map[string]time.Duration{
				"Debounce": d.cfg.Debounce, "RecheckInterval": d.cfg.RecheckInterval, "SampleInterval": d.cfg.SampleInterval,
				"Settle": d.cfg.Settle, "UtilHalfLife": d.cfg.UtilHalfLife,
			}
			if kept[c.field] != c.got {
				t.Fatalf("%s = %v after New, want %v", c.field, kept[c.field], c.got)
			}
		})
	}
}

// TestReloadRefusesOutOfBounds: Reload validates like New, so a Go caller
// cannot slip an out-of-range SampleInterval into a running daemon either;
// the error is returned before the event loop is asked anything (this
// daemon never ran), and nothing changes.
func TestReloadRefusesOutOfBounds(t *testing.T) {
	cfg := Config{SysfsRoot: t.TempDir(), StateDir: t.TempDir(), TreeDir: t.TempDir(), Bus: "none"}
	d, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	cfg.SampleInterval = 2562047 * time.Hour
	const want = "config SampleInterval 2562047h0m0s: must be at least 10ms and at most 1h"
	// Cancelled: a Reload that got past validation returns
	// context.Canceled instead of waiting for a loop that never runs.
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := d.Reload(ctx, cfg); err == nil || err.Error() != want {
		t.Fatalf("Reload: %v, want %q", err, want)
	}
	if d.cfg.SampleInterval != DefaultSampleInterval {
		t.Fatalf("SampleInterval = %v after a refused reload, want %v", d.cfg.SampleInterval, DefaultSampleInterval)
	}
}
