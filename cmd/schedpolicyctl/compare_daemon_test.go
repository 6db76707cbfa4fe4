package main

import (
	"bufio"
	"context"
	"encoding/json"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/schedpolicyd/schedpolicyd/internal/testutil"
)

// machineClock is the real clock beside the real daemon, with a mock
// machine whose draw follows the policy held: as each settle begins it
// sets the draw of the policy about to be measured (before the interval's
// first reading), and as each interval ends it may change the machine
// (before the interval's last reading). The daemon measures real time, so
// only what the test writes between two readings shows in an interval.
type machineClock struct {
	realClock
	t      *testing.T
	settle time.Duration
	n      int // intervals slept so far
	// atSettle is called with the interval about to be measured (from 1)
	// and its policy; atEnd likewise as it ends.
	atSettle, atEnd func(n int, policy string)
}

func (m *machineClock) sleep(ctx context.Context, d time.Duration, p string) error {
	if d == m.settle {
		m.atSettle(m.n+1, p)
		return m.realClock.sleep(ctx, d, p)
	}
	m.n++
	err := m.realClock.sleep(ctx, d, p)
	if m.atEnd != nil {
		m.atEnd(m.n, p)
	}
	return err
}

// compareOn runs the comparison in this process against the test daemon,
// with the shortest settle and interval the daemon's refresh coalescing
// allows (1 s apart; the flags' own bounds are for people).
func compareOn(t *testing.T, d *testDaemon, clk *machineClock, rounds int, policies ...string) compareReport {
	t.Helper()
	c := &cli{g: globals{bus: d.addr}}
	cl, err := c.dial()
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	// rounds, not a duration: a loaded machine's slower calls must not
	// drop the last round.
	opts := compareOptions{settle: time.Second, interval: 1200 * time.Millisecond, policies: policies, rounds: rounds}
	clk.settle = opts.settle
	rep, err := runCompare(context.Background(), busCompare{cl}, clk, rand.New(rand.NewPCG(11, 12)), opts, nil)
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

// holdsAndPolicy reads the daemon's holds and policy after a comparison.
func holdsAndPolicy(t *testing.T, d *testDaemon) (int, string) {
	t.Helper()
	s := d.statusJSON(t)
	return len(s.Holds), s.ActivePolicy
}

// TestCompareBatteryDaemon: the real daemon on the mock Surface Pro on
// battery measures each interval from BAT1's power_now, which the test
// sets for the policy held (performance 9.5 W, powersaving 6.25 W): a
// reading constant over an interval is its exact average. In the second
// round the battery stops reporting (power_now garbage) as its second
// interval ends: that interval is discarded, and counted again after.
// At the end no hold is left and the knob's powersaving is back.
func TestCompareBatteryDaemon(t *testing.T) {
	d := startDaemon(t, "none")
	powerNow := filepath.Join(d.sys, "class/power_supply/BAT1/power_now")
	watts := map[string]float64{"performance": 9.5, "powersaving": 6.25}
	put := func(v string) {
		if err := os.WriteFile(powerNow, []byte(v+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	clk := &machineClock{t: t,
		atSettle: func(n int, p string) { put(strconv.Itoa(int(watts[p] * 1e6))) },
		atEnd: func(n int, p string) {
			if n == 4 {
				put("garbage")
			}
		},
	}
	rep := compareOn(t, d, clk, 3, "performance", "powersaving")
	if rep.EnergySource != "battery" || len(rep.Intervals) != 6 || rep.Stopped != "" {
		t.Fatalf("report %+v", rep)
	}
	for i, iv := range rep.Intervals {
		if i == 3 {
			if !strings.HasPrefix(iv.Discarded, "the daemon measured 0.0 s of ") {
				t.Errorf("interval 4 (battery stopped reporting): %+v", iv)
			}
			continue
		}
		if iv.Discarded != "" || iv.PowerSource != "battery" || math.Abs(iv.Watts-watts[iv.Policy]) > 1e-9 || iv.Seconds < 1.2 {
			t.Errorf("interval %d: %+v, want %v W over ≥ 1.2 s", i+1, iv, watts[iv.Policy])
		}
	}
	var counted int
	for _, p := range rep.Policies {
		counted += p.Intervals
		if math.Abs(p.MeanWatts-watts[p.Policy]) > 1e-9 || p.CI95Watts != nil && *p.CI95Watts > 1e-9 {
			t.Errorf("policy %+v", p)
		}
	}
	if d := rep.Differences; counted != 5 || len(d) != 1 || math.Abs(d[0].Watts+3.25) > 1e-9 || !d[0].Conclusive {
		t.Errorf("%d counted, differences %+v", counted, d)
	}
	if n, p := holdsAndPolicy(t, d); n != 0 || p != "powersaving" {
		t.Errorf("after the comparison: %d holds, policy %s; want none, powersaving", n, p)
	}
}

// TestCompareRAPLDaemon: with a RAPL package counter the daemon measures
// the counter's advance: the test advances it by exactly 6 J under
// performance and 3 J under powersaving in each interval, across the
// counter's wrap at max_energy_range_uj; each interval counts exactly
// those joules, over the daemon's own seconds.
func TestCompareRAPLDaemon(t *testing.T) {
	base, err := os.MkdirTemp("", "spd-compare-rapl-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	const rangeUJ = 262143328850
	counter := int64(rangeUJ - 10_000_000) // wraps in the second or third interval
	zone := "class/powercap/intel-rapl:0"
	d := startDaemonWith(t, "none", func(sys string) {
		for f, v := range map[string]string{"name": "package-0", "energy_uj": strconv.FormatInt(counter, 10), "max_energy_range_uj": strconv.Itoa(rangeUJ), "constraint_0_power_limit_uw": "15000000"} {
			testutil.Put(t, filepath.Join(sys, zone, f), v)
		}
	})
	energyUJ := filepath.Join(d.sys, zone, "energy_uj")
	joules := map[string]int64{"performance": 6, "powersaving": 3}
	advance := func(uj int64) {
		counter = (counter + uj) % rangeUJ
		if err := os.WriteFile(energyUJ, []byte(strconv.FormatInt(counter, 10)+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	clk := &machineClock{t: t,
		atSettle: func(int, string) { advance(100_000) }, // 0.1 J in each settle
		atEnd:    func(_ int, p string) { advance(joules[p] * 1_000_000) },
	}
	rep := compareOn(t, d, clk, 2, "performance", "powersaving")
	if rep.EnergySource != "rapl" || len(rep.Intervals) != 4 || rep.Stopped != "" {
		t.Fatalf("report %+v", rep)
	}
	for i, iv := range rep.Intervals {
		if iv.Discarded != "" || iv.Joules != float64(joules[iv.Policy]) || iv.Watts != iv.Joules/iv.Seconds || iv.Seconds < 1.2 {
			t.Errorf("interval %d: %+v, want exactly %d J", i+1, iv, joules[iv.Policy])
		}
	}
	if counter >= rangeUJ-10_000_000 {
		t.Fatalf("the counter did not wrap (%d)", counter)
	}
	if n, _ := holdsAndPolicy(t, d); n != 0 {
		t.Errorf("%d holds left", n)
	}
}

// TestCompareBinaryInterrupted: the real binary, stopped with SIGINT after
// its first interval, prints what it measured and exits 0; its hold is
// gone and the knob's choice back.
func TestCompareBinaryInterrupted(t *testing.T) {
	d := startDaemon(t, "none")
	cmd := exec.Command(d.ctl, "--bus", d.addr, "energy", "--compare", "--json", "--interval", "2s", "--settle", "1s", "--duration", "1h", "--policies", "powersaving,performance")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	var out testutil.LockedBuffer
	cmd.Stdout = &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := bufio.NewScanner(stderr)
	var seen []string
	for lines.Scan() {
		seen = append(seen, lines.Text())
		if strings.Contains(lines.Text(), "interval 1 (round 1, ") {
			break
		}
	}
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	for lines.Scan() {
		seen = append(seen, lines.Text())
	}
	err = cmd.Wait()
	if err != nil {
		t.Fatalf("exit: %v\nstderr:\n%s", err, strings.Join(seen, "\n"))
	}
	if !strings.HasPrefix(seen[0], "schedpolicyctl: comparing powersaving, performance over 1h0m0s: ") {
		t.Errorf("first line %q", seen[0])
	}
	var rep compareReport
	if err := json.Unmarshal([]byte(out.String()), &rep); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	if !strings.HasPrefix(rep.Stopped, "interrupted") || len(rep.Intervals) < 1 || rep.Intervals[0].Discarded != "" || math.Abs(rep.Intervals[0].Watts-7.21) > 1e-9 {
		t.Errorf("report %+v", rep)
	}
	if n, p := holdsAndPolicy(t, d); n != 0 || p != "powersaving" {
		t.Errorf("after the interrupt: %d holds, policy %s", n, p)
	}
}
