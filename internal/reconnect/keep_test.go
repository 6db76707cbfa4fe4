package reconnect

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"
)

// TestKeepBackoff: the waits double from Min to Max while attempts fail,
// start over at Min after an attempt that connected, go to the socket
// asked for at each wait, and the outage is reported once, with its first
// error, per outage; the loop ends when an attempt cancels ctx.
func TestKeepBackoff(t *testing.T) {
	// true: the attempt connected (and its session then ended).
	script := []bool{false, false, false, false, false, true, false, false, true, true, false}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	n := 0
	attempt := func(context.Context) (bool, error) {
		if n == len(script) {
			cancel()
			return false, errors.New("stop")
		}
		c := script[n]
		n++
		return c, fmt.Errorf("attempt %d", n)
	}
	var waits []time.Duration
	var sockets []string
	wait := func(_ context.Context, path string, d time.Duration) {
		waits = append(waits, d)
		sockets = append(sockets, path)
	}
	var outages []string
	calls := 0
	socket := func() string { calls++; return fmt.Sprintf("/run/s%d", calls) }
	Backoff{Min: time.Second, Max: 8 * time.Second}.keep(ctx, socket, attempt, func(err error) {
		outages = append(outages, err.Error())
	}, wait)

	s := time.Second
	wantWaits := []time.Duration{s, 2 * s, 4 * s, 8 * s, 8 * s, s, 2 * s, 4 * s, s, s, 2 * s}
	if !slices.Equal(waits, wantWaits) {
		t.Errorf("waits %v, want %v", waits, wantWaits)
	}
	wantOutages := []string{"attempt 1", "attempt 6", "attempt 9", "attempt 10"}
	if !slices.Equal(outages, wantOutages) {
		t.Errorf("outages %q, want %q", outages, wantOutages)
	}
	if len(sockets) != len(wantWaits) || sockets[0] != "/run/s1" || sockets[len(sockets)-1] != fmt.Sprintf("/run/s%d", len(wantWaits)) {
		t.Errorf("sockets %q: want socket() asked once per wait", sockets)
	}
	if n != len(script) {
		t.Errorf("%d attempts, want %d", n, len(script))
	}
}

// TestKeepStopsDuringWait: a ctx that ends while waiting ends the loop
// without another attempt.
func TestKeepStopsDuringWait(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	attempts := 0
	Backoff{Min: time.Second, Max: time.Minute}.keep(ctx, func() string { return "" },
		func(context.Context) (bool, error) { attempts++; return false, errors.New("refused") },
		nil,
		func(context.Context, string, time.Duration) { cancel() })
	if attempts != 1 {
		t.Fatalf("%d attempts, want 1", attempts)
	}
}
