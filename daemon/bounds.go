package daemon

import (
	"fmt"
	"time"
)

// Bounds of the durations in Config: the one definition that New, the
// command-line flags and the configuration file (cmd/schedpolicyd,
// schedpolicyd.conf(5)) check against. Every bound is inclusive. They keep
// every period the daemon derives from a setting (the idle sampling backoff,
// 2^5 × SampleInterval; the lazy-balance reset, 8 × SampleInterval) far
// from overflowing a time.Duration, whose range is about ±292 years.
const (
	// Debounce (config debounce, flag --debounce): 0 to 1 min; 0 in
	// Config means DefaultDebounce (500 ms).
	MinDebounce time.Duration = 0
	MaxDebounce               = time.Minute
	// RecheckInterval (config recheck_interval, flag --recheck-interval):
	// a positive value is 1 s to 24 h; 0 means automatic and any negative
	// value never.
	MinRecheckInterval = time.Second
	MaxRecheckInterval = 24 * time.Hour
	// SampleInterval (config sample_interval, flag --sample-interval):
	// 10 ms to 1 h (an hour is, in effect, no periodic sampling); 0 in
	// Config means DefaultSampleInterval (1 s).
	MinSampleInterval = 10 * time.Millisecond
	MaxSampleInterval = time.Hour
	// Settle (flag --settle): a positive value is 1 ms to 1 min; 0 means
	// acpi.DefaultSettle (1 s) and any negative value off.
	MinSettle = time.Millisecond
	MaxSettle = time.Minute
	// UtilHalfLife (Config only): 10 ms to 1 h; 0 means
	// policy.DefaultHalfLife (2 s).
	MinUtilHalfLife = 10 * time.Millisecond
	MaxUtilHalfLife = time.Hour
)

// RangeError says that a duration setting is out of its bounds. Its message
// names the value's range, e.g. "must be at least 10ms and at most 1h",
// followed by what 0 and negative values mean where they mean something
// ("(0: automatic, negative: never)"); the caller prefixes the setting's
// name and the value given.
type RangeError struct {
	Value    time.Duration // the rejected value
	Min, Max time.Duration // the inclusive range of regular values
	// Special says what values outside [Min, Max] are accepted and what
	// they mean, "" when none are.
	Special string
}

func (e *RangeError) Error() string {
	s := fmt.Sprintf("must be at least %s and at most %s", formatDuration(e.Min), formatDuration(e.Max))
	if e.Special != "" {
		s += " (" + e.Special + ")"
	}
	return s
}

// formatDuration writes d in the shortest unit that represents it exactly
// ("10ms", "1m", "24h"), the way the bounds are written in the
// documentation; other values as time.Duration.String does.
func formatDuration(d time.Duration) string {
	for _, u := range []struct {
		unit time.Duration
		name string
	}{{time.Hour, "h"}, {time.Minute, "m"}, {time.Second, "s"}, {time.Millisecond, "ms"}} {
		if d != 0 && d%u.unit == 0 {
			return fmt.Sprintf("%d%s", d/u.unit, u.name)
		}
	}
	return d.String()
}

func checkRange(d, lo, hi time.Duration, special string) error {
	if d < lo || d > hi {
		return &RangeError{Value: d, Min: lo, Max: hi, Special: special}
	}
	return nil
}

// CheckDebounce returns nil when d is a valid Debounce (MinDebounce to
// MaxDebounce), else a *RangeError.
func CheckDebounce(d time.Duration) error {
	return checkRange(d, MinDebounce, MaxDebounce, "")
}

// CheckRecheckInterval returns nil when d is a valid RecheckInterval: 0
// (automatic), negative (never), or MinRecheckInterval to
// MaxRecheckInterval; else a *RangeError.
func CheckRecheckInterval(d time.Duration) error {
	if d <= 0 {
		return nil
	}
	return checkRange(d, MinRecheckInterval, MaxRecheckInterval, "0: automatic, negative: never")
}

// CheckSampleInterval returns nil when d is a valid SampleInterval
// (MinSampleInterval to MaxSampleInterval), else a *RangeError. New also
// accepts 0, for the default.
func CheckSampleInterval(d time.Duration) error {
	return checkRange(d, MinSampleInterval, MaxSampleInterval, "")
}

// CheckSettle returns nil when d is a valid Settle: 0 (the default),
// negative (off), or MinSettle to MaxSettle; else a *RangeError.
func CheckSettle(d time.Duration) error {
	if d <= 0 {
		return nil
	}
	return checkRange(d, MinSettle, MaxSettle, "0: the default 1s, negative: off")
}

// CheckUtilHalfLife returns nil when d is a valid UtilHalfLife
// (MinUtilHalfLife to MaxUtilHalfLife), else a *RangeError. New also
// accepts 0, for the default.
func CheckUtilHalfLife(d time.Duration) error {
	return checkRange(d, MinUtilHalfLife, MaxUtilHalfLife, "")
}

// checkBounds rejects a Config whose durations are out of bounds, after New
// has put the defaults in place of zeros. The error names the Config field
// and the value.
func checkBounds(cfg Config) error {
	for _, c := range []struct {
		name  string
		v     time.Duration
		check func(time.Duration) error
	}{
		{"Debounce", cfg.Debounce, CheckDebounce},
		{"RecheckInterval", cfg.RecheckInterval, CheckRecheckInterval},
		{"SampleInterval", cfg.SampleInterval, CheckSampleInterval},
		{"Settle", cfg.Settle, CheckSettle},
		{"UtilHalfLife", cfg.UtilHalfLife, CheckUtilHalfLife},
	} {
		if err := c.check(c.v); err != nil {
			return fmt.Errorf("config %s %v: %w", c.name, c.v, err)
		}
	}
	return nil
}
