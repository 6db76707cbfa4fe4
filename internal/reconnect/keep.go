package reconnect

import (
	"context"
	"time"
)

// Backoff is the wait between attempts: Min after an attempt that
// connected, doubling after each attempt that did not, up to Max.
type Backoff struct {
	Min, Max time.Duration
}

// Keep calls attempt again and again until ctx is done. attempt connects
// once and, when it did, serves the connection until it is lost; it
// returns whether it connected and why it ended. Between attempts Keep
// waits with WaitSocket on socket() ("" when there is no socket file to
// watch), for Min after an attempt that connected and twice the last wait
// (at most Max) after one that did not, so the first wait of an outage is
// Min. outage, if not nil, is called once per outage with its first
// error: after the first attempt, and after each attempt that connected.
// Keep returns when ctx is done; an attempt that must stop the loop
// cancels ctx.
func (b Backoff) Keep(ctx context.Context, socket func() string, attempt func(context.Context) (connected bool, err error), outage func(error)) {
	b.keep(ctx, socket, attempt, outage, WaitSocket)
}

// keep is Keep with the wait as a parameter, for the tests.
func (b Backoff) keep(ctx context.Context, socket func() string, attempt func(context.Context) (bool, error), outage func(error), wait func(context.Context, string, time.Duration)) {
	backoff := b.Min
	logged := false
	for {
		connected, err := attempt(ctx)
		if ctx.Err() != nil {
			return
		}
		if connected {
			backoff, logged = b.Min, false
		}
		if !logged && outage != nil {
			outage(err)
		}
		logged = true
		wait(ctx, socket(), backoff)
		if ctx.Err() != nil {
			return
		}
		backoff = min(2*backoff, b.Max)
	}
}
