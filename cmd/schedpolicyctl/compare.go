package main

// `schedpolicyctl energy --compare`: an A/B(/C) measurement of the
// policies on the user's own machine, under the user's own work.
//
// The daemon measures (its energy meter: RAPL package counters, or the
// system batteries' discharge while on battery; daemon/energy) and keeps
// joules and seconds per (policy, power source). The comparison holds each
// policy in turn (HoldPolicy: a hold ends when its holder leaves the bus,
// so a comparison that crashes or is killed leaves nothing changed), lets
// it settle, and takes the difference of the daemon's totals over one
// interval (RefreshEnergy before and after) as that interval's average
// power. Each round holds every policy once, in a random order, so a trend
// in the user's work (a build finishing, the screen dimming) does not
// favour the policy that always comes first.
//
// An interval counts only when it measured what it claims: the policy in
// force was the one held from start to end, the power source and the
// energy source did not change, the machine did not suspend
// (CLOCK_BOOTTIME advanced as CLOCK_MONOTONIC did), no other (policy,
// power source) total moved, and the meter counted at least 90 % of the
// interval (a battery that stops reporting, a counter that went backwards,
// AC power with only a battery to measure count nothing). Every other
// interval is discarded with its reason and shown.
//
// The report gives each policy's mean power with a 95 % confidence
// interval (Student's t over the intervals' averages) and each policy's
// difference from the first one compared (Welch's t interval): conclusive
// when that interval excludes zero, else how many more intervals of each
// policy an answer would need at the spread seen so far.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"golang.org/x/sys/unix"
)

// The comparison's bounds. The daemon coalesces RefreshEnergy calls less
// than a second apart (daemon.EnergyRefreshInterval): the settle time,
// which separates one interval's last reading from the next one's first,
// and the interval are both at least that, so that every reading the
// comparison asks for is made.
const (
	defaultCompareDuration = 30 * time.Minute
	defaultCompareInterval = time.Minute
	defaultCompareSettle   = 5 * time.Second
	minCompareInterval     = 2 * time.Second
	maxCompareInterval     = time.Hour
	minCompareSettle       = time.Second
	maxCompareSettle       = 10 * time.Minute
	maxCompareDuration     = 7 * 24 * time.Hour
	// minMeasuredShare is the share of an interval the daemon's meter
	// must have counted for the interval to count.
	minMeasuredShare = 0.9
	// maxSuspendDrift is how much more CLOCK_BOOTTIME may advance than
	// CLOCK_MONOTONIC over an interval before it counts as suspended
	// (the two differ only by time suspended).
	maxSuspendDrift = time.Second
	// compareReason is the hold's reason, shown by `status` meanwhile.
	compareReason = "schedpolicyctl energy --compare"
)

// compareOptions are energy --compare's flags.
type compareOptions struct {
	duration, interval, settle time.Duration
	policies                   []string // the first is the baseline
	// rounds, if above 0, ends the comparison after that many rounds
	// however long they took (tests on a busy machine); else duration
	// does.
	rounds int
}

// energyKey is one of the daemon's energy totals: policy and power source.
type energyKey struct{ policy, source string }

// energyTotal is a total's joules and the seconds they were measured over.
type energyTotal struct{ joules, seconds float64 }

// compareReading is what the comparison reads of the daemon after asking
// it to close its running energy segment (RefreshEnergy).
type compareReading struct {
	policy       string // ActivePolicy
	powerSource  string // PowerSource: ac | battery | unknown
	energySource string // EnergySource: rapl | battery | none
	totals       map[energyKey]energyTotal
	held         bool // the comparison's own hold is still there
}

// compareDaemon is what the comparison needs of the daemon; busCompare is
// the real one, over D-Bus.
type compareDaemon interface {
	// hold holds policy (HoldPolicy) and returns the hold's cookie.
	hold(policy string) (uint32, error)
	// release ends the hold cookie (ReleasePolicy).
	release(cookie uint32) error
	// read closes the daemon's running energy segment and reads its
	// state; cookie is the comparison's hold (0: none), looked for in
	// the Holds property.
	read(cookie uint32) (compareReading, error)
}

// compareClock is the comparison's time: sleep waits d unless ctx ends
// first (its error then), now reads CLOCK_MONOTONIC and CLOCK_BOOTTIME.
// The policy is the one held, for a test's machine whose power follows it.
type compareClock interface {
	sleep(ctx context.Context, d time.Duration, policy string) error
	now() (monotonic, boottime time.Duration)
}

// realClock is the machine's clocks.
type realClock struct{}

func (realClock) sleep(ctx context.Context, d time.Duration, _ string) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (realClock) now() (time.Duration, time.Duration) {
	read := func(id int32) time.Duration {
		var ts unix.Timespec
		if err := unix.ClockGettime(id, &ts); err != nil {
			return 0
		}
		return time.Duration(ts.Nano())
	}
	return read(unix.CLOCK_MONOTONIC), read(unix.CLOCK_BOOTTIME)
}

// compareInterval is one measured (or discarded) interval: the JSON shape
// of energy --compare --json's "intervals".
type compareInterval struct {
	Round       int     `json:"round"`  // from 1
	Policy      string  `json:"policy"` // the policy held
	PowerSource string  `json:"power_source"`
	StartS      float64 `json:"start_s"` // s since the comparison began
	Joules      float64 `json:"joules"`  // J the daemon measured in it
	Seconds     float64 `json:"seconds"` // s the joules were measured over
	Watts       float64 `json:"watts"`   // joules / seconds, W; 0 if discarded
	// Discarded says why the interval does not count; "" when it does.
	Discarded string `json:"discarded,omitempty"`
}

// policySummary is one policy's intervals: the JSON shape of "policies".
type policySummary struct {
	Policy    string  `json:"policy"`
	Intervals int     `json:"intervals"`  // counted intervals
	MeanWatts float64 `json:"mean_watts"` // W; 0 with no interval
	// CI95Watts is the half-width of the mean's 95 % confidence
	// interval (W); null with fewer than two intervals.
	CI95Watts *float64 `json:"ci95_watts"`
}

// policyDifference is one policy against the baseline: the JSON shape of
// "differences".
type policyDifference struct {
	Policy   string  `json:"policy"`
	Baseline string  `json:"baseline"`
	Watts    float64 `json:"watts"`   // mean(policy) − mean(baseline), W
	Percent  float64 `json:"percent"` // Watts / mean(baseline) × 100
	// CI95LowWatts and CI95HighWatts bound the difference's 95 %
	// confidence interval (Welch); null with fewer than two intervals of
	// either policy.
	CI95LowWatts  *float64 `json:"ci95_low_watts"`
	CI95HighWatts *float64 `json:"ci95_high_watts"`
	// Conclusive is true when the interval excludes zero.
	Conclusive bool `json:"conclusive"`
	// MoreIntervals is, when not conclusive, about how many more
	// intervals of each of the two policies would make it so at the
	// spread and difference seen (moreIntervals; 0 when conclusive; -1
	// when no estimate is possible: fewer than two intervals of either,
	// or no difference seen).
	MoreIntervals int `json:"more_intervals"`
}

// compareReport is energy --compare's result, and its JSON shape.
type compareReport struct {
	EnergySource    string             `json:"energy_source"`
	IntervalSeconds float64            `json:"interval_seconds"`
	SettleSeconds   float64            `json:"settle_seconds"`
	Stopped         string             `json:"stopped,omitempty"` // why it ended early
	Intervals       []compareInterval  `json:"intervals"`
	Policies        []policySummary    `json:"policies"`
	Differences     []policyDifference `json:"differences"`
}

// runCompare runs the comparison: rounds of every policy held in a random
// order (rng), each settled then measured over one interval, until the
// next round would end after opts.duration (or opts.rounds are done) or
// ctx ends. progress, if not
// nil, is told of each interval as it ends. The hold in place is released
// before runCompare returns, whatever ends it. The error is for what
// stops the comparison before any interval could run (the daemon
// unreachable, no energy source, the hold refused); a failure later ends
// the comparison with what it measured and says why in Stopped.
func runCompare(ctx context.Context, d compareDaemon, clk compareClock, rng *rand.Rand, opts compareOptions, progress func(compareInterval)) (compareReport, error) {
	rep := compareReport{
		IntervalSeconds: opts.interval.Seconds(), SettleSeconds: opts.settle.Seconds(),
		Intervals: []compareInterval{},
	}
	first, err := d.read(0)
	if err != nil {
		return rep, err
	}
	rep.EnergySource = first.energySource
	if first.energySource != "rapl" && first.energySource != "battery" {
		return rep, &cliError{exitFailure, fmt.Sprintf("the daemon has no energy source to measure with (energy source %q): no readable RAPL counter and no system battery with a power reading; see schedpolicyd probe", printable(first.energySource))}
	}
	start, _ := clk.now()
	var cookie uint32
	defer func() {
		if cookie != 0 {
			d.release(cookie)
		}
	}()
	step := opts.settle + opts.interval
	for round := 1; ; round++ {
		if mono, _ := clk.now(); opts.rounds > 0 && round > opts.rounds || opts.rounds == 0 && mono-start+time.Duration(len(opts.policies))*step > opts.duration {
			break
		}
		for _, i := range rng.Perm(len(opts.policies)) {
			p := opts.policies[i]
			iv, stop := compareOne(ctx, d, clk, &cookie, p, opts)
			if stop != "" {
				rep.Stopped = stop
				if round == 1 && len(rep.Intervals) == 0 && ctx.Err() == nil {
					return rep, &cliError{exitFailure, stop}
				}
				summarise(&rep, opts.policies)
				return rep, nil
			}
			iv.Round = round
			iv.StartS = (iv.StartS - start.Seconds())
			rep.Intervals = append(rep.Intervals, iv)
			if progress != nil {
				progress(iv)
			}
		}
	}
	summarise(&rep, opts.policies)
	return rep, nil
}

// compareOne holds p (releasing the hold before it once p's is in place,
// so the machine is never without one), waits opts.settle, then measures
// one interval. stop is non-empty when the comparison must end: ctx
// ended, the daemon failed, or the hold is gone (an explicit choice
// cancels every hold). iv.StartS is the interval's CLOCK_MONOTONIC start
// in seconds.
func compareOne(ctx context.Context, d compareDaemon, clk compareClock, cookie *uint32, p string, opts compareOptions) (iv compareInterval, stop string) {
	interrupted := func() string { return "interrupted: the policy in force before is back" }
	if ctx.Err() != nil {
		return iv, interrupted()
	}
	c, err := d.hold(p)
	if err != nil {
		return iv, fmt.Sprintf("holding %s: %v", p, err)
	}
	if *cookie != 0 {
		d.release(*cookie)
	}
	*cookie = c
	if clk.sleep(ctx, opts.settle, p) != nil {
		return iv, interrupted()
	}
	// The clocks are read after the first reading returns and before
	// the second is asked for: the daemon's segment runs from a moment
	// before the one to a moment after the other, so it is never shorter
	// than this, however slowly a busy machine answers the calls.
	r0, err := d.read(*cookie)
	if err != nil {
		return iv, err.Error()
	}
	m0, b0 := clk.now()
	if clk.sleep(ctx, opts.interval, p) != nil {
		return iv, interrupted()
	}
	m1, b1 := clk.now()
	r1, err := d.read(*cookie)
	if err != nil {
		return iv, err.Error()
	}
	iv = compareInterval{Policy: p, PowerSource: r1.powerSource, StartS: m0.Seconds()}
	if !r1.held {
		return iv, "the comparison's hold was cancelled (an explicit choice — schedpolicyctl set or auto, the tree, the knob — cancels every hold); stopped"
	}
	key := energyKey{p, r1.powerSource}
	t0, t1 := r0.totals[key], r1.totals[key]
	iv.Joules, iv.Seconds = t1.joules-t0.joules, t1.seconds-t0.seconds
	iv.Discarded = discardReason(r0, r1, p, key, (m1 - m0).Seconds(), (b1-b0)-(m1-m0), iv.Seconds)
	if iv.Discarded == "" {
		iv.Watts = iv.Joules / iv.Seconds
	}
	return iv, ""
}

// discardReason says why an interval held under p, read as r0 and r1 over
// elapsed seconds of CLOCK_MONOTONIC (and suspended: how much further
// CLOCK_BOOTTIME went), does not count, or "" when it does; measured is
// the seconds the daemon counted for key.
func discardReason(r0, r1 compareReading, p string, key energyKey, elapsed float64, suspended time.Duration, measured float64) string {
	switch {
	case r0.policy != p || r1.policy != p:
		pol := r0.policy
		if pol == p {
			pol = r1.policy
		}
		return fmt.Sprintf("%s was in force, not %s (another program's power-saving hold wins over ours)", printable(pol), p)
	case r0.powerSource != r1.powerSource:
		return fmt.Sprintf("the power source changed (%s to %s)", printable(r0.powerSource), printable(r1.powerSource))
	case r0.energySource != r1.energySource:
		return fmt.Sprintf("the energy source changed (%s to %s)", printable(r0.energySource), printable(r1.energySource))
	case suspended > maxSuspendDrift:
		return fmt.Sprintf("the machine was suspended (%s)", suspended.Round(time.Second))
	}
	for k, t1 := range r1.totals {
		if k != key && t1 != r0.totals[k] {
			return fmt.Sprintf("energy was measured under %s on %s too", printable(k.policy), printable(k.source))
		}
	}
	if measured < minMeasuredShare*elapsed || measured <= 0 {
		why := "a battery that stopped reporting, a counter that went backwards"
		if r1.energySource == "battery" && r1.powerSource != "battery" {
			why = "the batteries measure only on battery"
		}
		return fmt.Sprintf("the daemon measured %.1f s of %.1f s (%s; see its log)", max(measured, 0), elapsed, why)
	}
	return ""
}

// summarise fills rep's Policies and Differences from its counted
// intervals; policies[0] is the baseline.
func summarise(rep *compareReport, policies []string) {
	watts := map[string][]float64{}
	for _, iv := range rep.Intervals {
		if iv.Discarded == "" {
			watts[iv.Policy] = append(watts[iv.Policy], iv.Watts)
		}
	}
	rep.Policies, rep.Differences = []policySummary{}, []policyDifference{}
	for _, p := range policies {
		s := policySummary{Policy: p, Intervals: len(watts[p])}
		if m, sd, ok := meanSD(watts[p]); ok {
			s.MeanWatts = m
			if len(watts[p]) >= 2 {
				h := studentT975(float64(len(watts[p])-1)) * sd / math.Sqrt(float64(len(watts[p])))
				s.CI95Watts = &h
			}
		}
		rep.Policies = append(rep.Policies, s)
	}
	base := watts[policies[0]]
	for _, p := range policies[1:] {
		if len(base) == 0 || len(watts[p]) == 0 {
			continue
		}
		rep.Differences = append(rep.Differences, difference(p, policies[0], watts[p], base))
	}
}

// difference compares the intervals a of policy with those b of baseline
// (both non-empty): Welch's t interval for mean(a) − mean(b).
func difference(policy, baseline string, a, b []float64) policyDifference {
	ma, sa, _ := meanSD(a)
	mb, sb, _ := meanSD(b)
	d := policyDifference{Policy: policy, Baseline: baseline, Watts: ma - mb, MoreIntervals: -1}
	if mb != 0 {
		d.Percent = d.Watts / mb * 100
	}
	na, nb := float64(len(a)), float64(len(b))
	if na < 2 || nb < 2 {
		return d
	}
	va, vb := sa*sa/na, sb*sb/nb
	se := math.Sqrt(va + vb)
	df := math.Inf(1) // no spread at all: the difference is exact
	if se > 0 {
		df = (va + vb) * (va + vb) / (va*va/(na-1) + vb*vb/(nb-1))
	}
	h := studentT975(df) * se
	lo, hi := d.Watts-h, d.Watts+h
	d.CI95LowWatts, d.CI95HighWatts = &lo, &hi
	d.Conclusive = lo > 0 || hi < 0
	switch {
	case d.Conclusive:
		d.MoreIntervals = 0
	case d.Watts != 0 && se > 0:
		d.MoreIntervals = moreIntervals(math.Abs(d.Watts), sa*sa+sb*sb, int(min(na, nb)))
	}
	return d
}

// maxMoreIntervals bounds moreIntervals' search: past it, a difference
// that small is not worth measuring for (and is reported as that many).
const maxMoreIntervals = 100000

// moreIntervals estimates how many more intervals of each of two policies
// would make a difference diff (> 0, W) conclusive, if it and the two
// policies' variances (summed: vsum, W²) stay as seen, from n intervals
// of each: the smallest m > n with t(2m−2) · √(vsum/m) < diff (Welch's
// interval with m of each and equal variances' degrees of freedom),
// minus n; at least 1, at most maxMoreIntervals.
func moreIntervals(diff, vsum float64, n int) int {
	for m := n + 1; m-n < maxMoreIntervals; m++ {
		if studentT975(float64(2*m-2))*math.Sqrt(vsum/float64(m)) < diff {
			return m - n
		}
	}
	return maxMoreIntervals
}

// meanSD returns xs's mean and sample standard deviation (0 for one
// value); ok is false for none.
func meanSD(xs []float64) (mean, sd float64, ok bool) {
	if len(xs) == 0 {
		return 0, 0, false
	}
	for _, x := range xs {
		mean += x
	}
	mean /= float64(len(xs))
	if len(xs) < 2 {
		return mean, 0, true
	}
	var ss float64
	for _, x := range xs {
		ss += (x - mean) * (x - mean)
	}
	return mean, math.Sqrt(ss / float64(len(xs)-1)), true
}

// t975 is Student's t distribution's 0.975 quantile for 1 to 30 degrees of
// freedom (the two-sided 95 % critical value), to three decimals as the
// standard tables give it (e.g. NIST/SEMATECH e-Handbook of Statistical
// Methods, table 1.3.6.7.2).
var t975 = [...]float64{12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
	2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
	2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042}

// studentT975 is the 0.975 quantile of Student's t with df degrees of
// freedom: the table for df ≤ 30 (a fractional df, as Welch's, rounded
// down: the wider interval), beyond it the normal quantile with the first
// two terms of its Cornish–Fisher expansion in 1/df (within 0.001 of the
// exact value from 30 on); 1.96 for an infinite df. df < 1 is taken as 1.
func studentT975(df float64) float64 {
	if math.IsInf(df, 1) {
		return 1.959964
	}
	if df < 31 {
		return t975[max(int(df), 1)-1]
	}
	const z = 1.959964
	return z + (z*z*z+z)/(4*df) + (5*math.Pow(z, 5)+16*z*z*z+3*z)/(96*df*df)
}

// busCompare is compareDaemon over the daemon's D-Bus API.
type busCompare struct{ cl *client }

func (b busCompare) hold(policy string) (uint32, error) {
	var cookie uint32
	err := b.cl.call("HoldPolicy", []any{&cookie}, policy, compareReason)
	return cookie, err
}

func (b busCompare) release(cookie uint32) error {
	return b.cl.call("ReleasePolicy", nil, cookie)
}

func (b busCompare) read(cookie uint32) (compareReading, error) {
	if err := b.cl.call("RefreshEnergy", nil); err != nil {
		return compareReading{}, err
	}
	props, err := b.cl.properties()
	if err != nil {
		return compareReading{}, err
	}
	r := compareReading{totals: map[energyKey]energyTotal{}}
	bad := func(name string, err error) error {
		return &cliError{exitFailure, fmt.Sprintf("property %s has type %s: %v", name, props[name].Signature(), err)}
	}
	for _, name := range []string{"ActivePolicy", "PowerSource", "EnergySource"} {
		v, ok := props[name]
		if !ok {
			return r, &cliError{exitFailure, fmt.Sprintf("the running schedpolicyd has no %s property; is it older than schedpolicyctl?", name)}
		}
		dst := map[string]*string{"ActivePolicy": &r.policy, "PowerSource": &r.powerSource, "EnergySource": &r.energySource}[name]
		if err := v.Store(dst); err != nil {
			return r, bad(name, err)
		}
	}
	es, err := energyFrom(props["Energy"])
	if err != nil {
		return r, bad("Energy", err)
	}
	for _, e := range es {
		r.totals[energyKey{e.Policy, e.Source}] = energyTotal{e.Joules, e.Seconds}
	}
	holds, err := holdsFrom(props["Holds"])
	if err != nil {
		return r, bad("Holds", err)
	}
	for _, h := range holds {
		if cookie != 0 && h.Cookie == cookie {
			r.held = true
		}
	}
	return r, nil
}

// parseCompare checks energy --compare's options: the policies
// comma-separated, each once, at least two; the interval, settle time and
// duration within their bounds, the duration at least one round.
func (c *cli) parseCompare() (compareOptions, error) {
	o := compareOptions{duration: c.compareDuration, interval: c.compareInterval, settle: c.compareSettle}
	switch {
	case o.interval < minCompareInterval || o.interval > maxCompareInterval:
		return o, usagef("--interval %s: want %s to %s", o.interval, minCompareInterval, maxCompareInterval)
	case o.settle < minCompareSettle || o.settle > maxCompareSettle:
		return o, usagef("--settle %s: want %s to %s", o.settle, minCompareSettle, maxCompareSettle)
	}
	for _, p := range strings.Split(c.comparePolicies, ",") {
		if err := checkPolicy(p); err != nil {
			return o, usagef("--policies %q: %v", c.comparePolicies, err)
		}
		for _, q := range o.policies {
			if q == p {
				return o, usagef("--policies %q: %s twice", c.comparePolicies, p)
			}
		}
		o.policies = append(o.policies, p)
	}
	if len(o.policies) < 2 {
		return o, usagef("--policies %q: want at least two policies to compare", c.comparePolicies)
	}
	round := time.Duration(len(o.policies)) * (o.settle + o.interval)
	if o.duration < round || o.duration > maxCompareDuration {
		return o, usagef("--duration %s: want at least one round (%s: %d policies × (settle %s + interval %s)) and at most %s", o.duration, round, len(o.policies), o.settle, o.interval, maxCompareDuration)
	}
	return o, nil
}

// energyCompare is `energy --compare`.
func (c *cli) energyCompare() int {
	opts, err := c.parseCompare()
	if err != nil {
		return c.usage("energy", err)
	}
	cl, err := c.dial()
	if err != nil {
		return c.fail(err)
	}
	defer cl.Close()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	defer stop()
	rounds := int(opts.duration / (time.Duration(len(opts.policies)) * (opts.settle + opts.interval)))
	fmt.Fprintf(c.stderr, "schedpolicyctl: comparing %s over %s: %d round(s) of %s settle + %s measured each, in a random order; Ctrl-C stops and restores the policy in force\n",
		strings.Join(opts.policies, ", "), opts.duration, rounds, opts.settle, opts.interval)
	n := 0
	rep, err := runCompare(ctx, busCompare{cl}, realClock{}, rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 0)), opts, func(iv compareInterval) {
		n++
		if iv.Discarded != "" {
			fmt.Fprintf(c.stderr, "schedpolicyctl: interval %d (round %d, %s): discarded: %s\n", n, iv.Round, iv.Policy, iv.Discarded)
			return
		}
		fmt.Fprintf(c.stderr, "schedpolicyctl: interval %d (round %d, %s): %.2f W over %.1f s on %s\n", n, iv.Round, iv.Policy, iv.Watts, iv.Seconds, printable(iv.PowerSource))
	})
	if err != nil {
		return c.fail(err)
	}
	if c.g.json {
		if err := writeJSON(c.stdout, rep); err != nil {
			return c.fail(err)
		}
	} else {
		writeCompare(c.stdout, rep)
	}
	if rep.Stopped != "" && !errors.Is(ctx.Err(), context.Canceled) {
		return exitFailure
	}
	return exitOK
}

// writeCompare prints the comparison's result as text.
func writeCompare(w io.Writer, r compareReport) {
	what := energySourceText[r.EnergySource]
	if what == "" {
		what = printable(r.EnergySource)
	}
	counted := 0
	reasons := map[string]int{}
	var order []string
	for _, iv := range r.Intervals {
		if iv.Discarded == "" {
			counted++
			continue
		}
		if reasons[iv.Discarded] == 0 {
			order = append(order, iv.Discarded)
		}
		reasons[iv.Discarded]++
	}
	fmt.Fprintf(w, "measured on this machine: %s\n", what)
	fmt.Fprintf(w, "%d of %d intervals of %s counted (each after %s to settle)\n", counted, len(r.Intervals), formatSeconds(r.IntervalSeconds), formatSeconds(r.SettleSeconds))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "POLICY\tINTERVALS\tMEAN\t95%% CI\n")
	for _, p := range r.Policies {
		mean, ci := "-", "-"
		if p.Intervals > 0 {
			mean = fmt.Sprintf("%.2f W", p.MeanWatts)
		}
		if p.CI95Watts != nil {
			ci = fmt.Sprintf("± %.2f W", *p.CI95Watts)
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\n", p.Policy, p.Intervals, mean, ci)
	}
	tw.Flush()
	for _, d := range r.Differences {
		fmt.Fprintf(w, "%s vs %s: %+.2f W (%+.1f %%)", d.Policy, d.Baseline, d.Watts, d.Percent)
		switch {
		case d.CI95LowWatts == nil:
			fmt.Fprintf(w, ": too few intervals for a confidence interval (at least 2 of each)\n")
		case d.Conclusive:
			word := "less"
			if d.Watts > 0 {
				word = "more"
			}
			fmt.Fprintf(w, ", 95 %% CI %+.2f to %+.2f W: %s draws %s, conclusively\n", *d.CI95LowWatts, *d.CI95HighWatts, d.Policy, word)
		case d.MoreIntervals > 0:
			fmt.Fprintf(w, ", 95 %% CI %+.2f to %+.2f W: not distinguishable yet; about %d more intervals of each would tell\n", *d.CI95LowWatts, *d.CI95HighWatts, d.MoreIntervals)
		default:
			fmt.Fprintf(w, ", 95 %% CI %+.2f to %+.2f W: not distinguishable\n", *d.CI95LowWatts, *d.CI95HighWatts)
		}
	}
	for _, why := range order {
		fmt.Fprintf(w, "discarded %d: %s\n", reasons[why], why)
	}
	if r.Stopped != "" {
		fmt.Fprintf(w, "stopped early: %s\n", r.Stopped)
	}
	fmt.Fprintf(w, "the comparison's hold is released: the daemon is back to its own decision\n")
}
