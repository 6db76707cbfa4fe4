package main

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/schedpolicyd/schedpolicyd/daemon/statefile"
	"github.com/schedpolicyd/schedpolicyd/internal/testutil"
)

// TestUserFaultModel is the fault model's hostile user: random sequences
// of what a user's manager can do to the real daemon — say nothing, hold
// any call, lie about its units (a cgroup out of the tree, a FIFO, a
// link, an oversized mask, a name that is not UTF-8), drop the
// connection, flood signals — interleaved with the user's honest units
// coming and going, root's policy changes, kill -9 and restarts of the
// daemon. Invariants, after every step:
//
//   - root's SetPolicy is answered, also while the user's manager holds a
//     call of the daemon's, and before the daemon gives that call up (its
//     warning comes later): the loop never waits for a user's manager;
//   - the daemon's resident memory stays under 128 MiB;
//   - no file a lying unit points at is opened (inotify);
//
// and at the end of each sequence, with the manager honest again, a clean
// stop puts every honest unit's original AllowedCPUs= back and leaves no
// value of ours recorded in state.json. A held call is answered late, or
// not at all; a held SetUnitProperties whose client gave up and went is
// not applied when released (testutil.FakeManager.StaleWrites): a
// manager that replays a write long after, over the daemon's later ones,
// leaves its own unit with that value, which the daemon cannot tell from
// the user's own setting (it is the user's unit, and the user's manager).
//
// Each sequence is seeded (the seed and its steps are logged); a failure
// names them, and SCHEDPOLICYD_USER_FAULT_SEED=N replays one.
// SCHEDPOLICYD_USER_FAULT_SEQS and _STEPS set the counts (default 3 of
// 14 steps).
func TestUserFaultModel(t *testing.T) {
	seqs, steps := envInt("SCHEDPOLICYD_USER_FAULT_SEQS", 3), envInt("SCHEDPOLICYD_USER_FAULT_STEPS", 14)
	seeds := []uint64{}
	if s := os.Getenv("SCHEDPOLICYD_USER_FAULT_SEED"); s != "" {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("SCHEDPOLICYD_USER_FAULT_SEED=%q", s)
		}
		seeds = append(seeds, n)
	} else {
		base := uint64(time.Now().UnixNano())
		for i := 0; i < seqs; i++ {
			seeds = append(seeds, base+uint64(i))
		}
	}
	var fig userFaultFigures
	for _, seed := range seeds {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) { runUserFaults(t, seed, steps, &fig) })
	}
	t.Logf("figures: %d steps, %d SetPolicy calls answered, the longest in %v; %d answered while the user's manager held a call of the daemon's, before the daemon gave it up (the longest %v); peak RSS %d MiB",
		fig.steps, fig.calls, fig.longest.Round(time.Millisecond), fig.whileHeld, fig.longestHeld.Round(time.Millisecond), fig.peakRSS>>20)
}

type userFaultFigures struct {
	calls, steps, whileHeld int
	longest, longestHeld    time.Duration
	peakRSS                 int64
}

func envInt(name string, def int) int {
	if n, err := strconv.Atoi(os.Getenv(name)); err == nil && n > 0 {
		return n
	}
	return def
}

// userFault is one sequence's state: the installation, the daemon, the
// model's honest units (name → original mask, hex as FakeManager.Sets
// writes it) and the log of steps.
type userFault struct {
	t      *testing.T
	s      *userSetup
	p      *daemonProc
	rnd    *rand.Rand
	honest map[string][]byte
	lies   []string
	opened func() []string
	evil   string
	steps  []string
	fig    *userFaultFigures
	serial int
}

func runUserFaults(t *testing.T, seed uint64, steps int, fig *userFaultFigures) {
	m := &userFault{t: t, s: newUserSetup(t), rnd: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), honest: map[string][]byte{}, fig: fig}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("seed %d, steps:\n  %s", seed, strings.Join(m.steps, "\n  "))
		}
	})
	m.evil = filepath.Join(m.s.run, "user", "4242", "evil")
	for _, d := range []string{"fifo", "link", "target"} {
		if err := os.MkdirAll(filepath.Join(m.evil, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := syscall.Mkfifo(m.evil+"/fifo/cpu.stat", 0o644); err != nil {
		t.Fatal(err)
	}
	testutil.WriteFile(t, m.evil+"/target/cpu.stat", "usage_usec 1\n")
	if err := os.Symlink(m.evil+"/target/cpu.stat", m.evil+"/link/cpu.stat"); err != nil {
		t.Fatal(err)
	}
	m.opened = testutil.WatchOpens(t, m.evil+"/fifo", m.evil+"/link", m.evil+"/target")
	m.addHonest("app-editor.scope", "app.slice", nil)
	m.addHonest("indexer.service", "background.slice", []byte{3})
	m.s.serveUser()
	m.p = m.s.start(t)
	actions := []struct {
		name string
		do   func()
	}{
		{"silent", m.actSilent}, {"hold", m.actHold}, {"release", m.actRelease}, {"lie", m.actLie},
		{"disconnect", m.actDisconnect}, {"flood", m.actFlood}, {"unit", m.actUnit}, {"policy", m.actPolicy},
		{"kill9", m.actKill9}, {"restart", m.actRestart},
	}
	for i := 0; i < steps; i++ {
		a := actions[m.rnd.IntN(len(actions))]
		a.do()
		m.check()
		fig.steps++
	}
	m.finish()
}

func (m *userFault) step(format string, args ...any) {
	m.steps = append(m.steps, fmt.Sprintf(format, args...))
}

// addHonest puts an honest unit in the user's manager, with its cgroup in
// the mock tree and its original mask.
func (m *userFault) addHonest(name, slice string, mask []byte) {
	m.s.unit(m.t, name, slice, mask)
	m.honest[name] = mask
}

func (m *userFault) actSilent() {
	m.step("silent: the manager says nothing on new connections, the old ones dropped")
	m.s.user.SetSilent(true)
	m.s.user.DropConnections()
}

var holdable = []string{"GetAll", "SetUnitProperties", "ListUnitsByPatterns", "AddMatch", "GetUnit", "Get"}

func (m *userFault) actHold() {
	method := holdable[m.rnd.IntN(len(holdable))]
	m.step("hold: every %s held unanswered", method)
	m.s.user.Hold(method, true)
	// Something that makes the daemon call the user's manager: a unit's
	// signal (GetUnit, GetAll), a plan (SetUnitProperties), a
	// reconnection (AddMatch, ListUnitsByPatterns, Get).
	names := sortedKeys(m.honest)
	if len(names) > 0 {
		n := names[m.rnd.IntN(len(names))]
		m.s.user.Emit("UnitNew", n, testutil.FakeUnitPath(n))
	}
	m.setPolicy([]string{"performance", "powersaving"}[m.rnd.IntN(2)])
	if method == "AddMatch" || method == "ListUnitsByPatterns" || method == "Get" {
		m.s.user.DropConnections()
	}
	testutil.Poll(3*time.Second, func() (bool, string) { return m.s.user.Holding() > 0, "" })
}

func (m *userFault) actRelease() {
	m.step("release: every hold released, the manager speaks again")
	for _, h := range holdable {
		m.s.user.Hold(h, false)
	}
	m.s.user.SetSilent(false)
}

func (m *userFault) actLie() {
	m.serial++
	name := fmt.Sprintf("app-lie%d.scope", m.serial)
	kinds := []struct {
		what string
		u    testutil.FakeUnit
	}{
		{"a ControlGroup climbing to a FIFO", testutil.FakeUnit{ControlGroup: userCG + strings.Repeat("/..", 8) + m.evil + "/fifo"}},
		{"a clean ControlGroup not the user's, to a link", testutil.FakeUnit{ControlGroup: filepath.Join("/", m.evil, "link")}},
		{"a 1 MiB mask", testutil.FakeUnit{ControlGroup: userCG + "/app.slice/" + name, Mask: make([]byte, 1<<20)}},
		{"a name that is not UTF-8", testutil.FakeUnit{ControlGroup: userCG + "/app.slice/x.scope"}},
	}
	k := kinds[m.rnd.IntN(len(kinds))]
	if strings.HasPrefix(k.what, "a name") {
		name = fmt.Sprintf("app-caf\x7f%d.scope", m.serial)
		m.s.user.NotUTF8(true)
	}
	k.u.Slice = "app.slice"
	m.step("lie: %s (%s), announced", name, k.what)
	m.s.user.Put(name, k.u)
	m.lies = append(m.lies, name)
	m.s.user.Emit("UnitNew", name, testutil.FakeUnitPath(name))
}

func (m *userFault) actDisconnect() {
	m.step("disconnect: every connection closed (a re-execution)")
	m.s.user.DropConnections()
}

func (m *userFault) actFlood() {
	n := 1000 + m.rnd.IntN(3000)
	m.step("flood: %d UnitNew of units that do not exist", n)
	for i := 0; i < n; i++ {
		name := fmt.Sprintf("flood-%d.service", i)
		m.s.user.Emit("UnitNew", name, testutil.FakeUnitPath(name))
	}
}

func (m *userFault) actUnit() {
	m.serial++
	names := sortedKeys(m.honest)
	if len(names) > 1 && m.rnd.IntN(2) == 0 {
		name := names[m.rnd.IntN(len(names))]
		m.step("unit: %s stops", name)
		m.s.user.Remove(name)
		delete(m.honest, name)
		m.s.user.Emit("UnitRemoved", name, testutil.FakeUnitPath(name))
		return
	}
	name := fmt.Sprintf("bg-%d.service", m.serial)
	var mask []byte
	if m.rnd.IntN(2) == 0 {
		mask = []byte{3}
	}
	m.step("unit: %s starts in background.slice (mask %x)", name, mask)
	m.addHonest(name, "background.slice", mask)
	m.s.user.Emit("UnitNew", name, testutil.FakeUnitPath(name))
}

func (m *userFault) actPolicy() {
	pol := []string{"performance", "balance", "powersaving"}[m.rnd.IntN(3)]
	m.step("policy: root sets %s", pol)
	m.setPolicy(pol)
}

// setPolicy is root's SetPolicy, checked: answered; when a call of the
// daemon's is held by the user's manager, answered before the daemon
// gives that call up (the daemon's warning is not in the log yet when
// the answer comes).
func (m *userFault) setPolicy(pol string) {
	held := m.s.user.Holding() > 0
	before := strings.Count(m.p.log.String(), "does not answer as systemd does")
	took := m.s.setPolicy(m.t, pol)
	after := strings.Count(m.p.log.String(), "does not answer as systemd does")
	m.fig.calls++
	m.fig.longest = max(m.fig.longest, took)
	if held && m.s.user.Holding() > 0 {
		m.fig.longestHeld = max(m.fig.longestHeld, took)
		if after == before {
			// Held before and after, and not given up meanwhile: the
			// answer did not wait for the user's manager.
			m.fig.whileHeld++
		}
	}
}

func (m *userFault) actKill9() {
	m.step("kill9: the daemon is killed, then started again")
	m.p.kill9(m.t)
	m.p = m.s.start(m.t)
}

func (m *userFault) actRestart() {
	m.step("restart: a clean stop, then a start")
	m.p.stop(m.t)
	m.p = m.s.start(m.t)
}

// check is the invariants after every step.
func (m *userFault) check() {
	t := m.t
	t.Helper()
	m.p.alive(t)
	m.setPolicy([]string{"performance", "powersaving"}[m.rnd.IntN(2)])
	r := rss(t, m.p)
	m.fig.peakRSS = max(m.fig.peakRSS, r)
	if r > 128<<20 {
		t.Fatalf("the daemon holds %d MiB, want under 128 MiB", r>>20)
	}
	if o := m.opened(); len(o) > 0 {
		t.Fatalf("the daemon opened what a lying unit points at: %v", o)
	}
}

// finish makes the manager honest, starts the daemon anew (a fresh start
// reaches the manager at once, whatever back-off the last run was in),
// waits until it placed the honest units, and stops it: each honest
// unit's mask must be its original, and state.json hold no value of ours.
func (m *userFault) finish() {
	t := m.t
	m.actRelease()
	m.s.user.NotUTF8(false)
	for _, n := range m.lies {
		m.s.user.Remove(n)
	}
	m.step("finish: honest manager, daemon started anew, powersaving, clean stop")
	m.p.stop(t)
	m.p = m.s.start(t)
	testutil.WaitFor(t, "the user's units adopted", time.Minute, func() (bool, string) {
		return strings.Contains(m.p.log.String(), "managing a user's units through its manager"), ""
	})
	m.setPolicy("powersaving")
	m.p.stop(t)
	want := map[string]string{}
	for n, mask := range m.honest {
		want[n] = fmt.Sprintf("%x", mask)
	}
	last := map[string]string{}
	for _, s := range m.s.user.Sets() {
		n, v, _ := strings.Cut(s, "=")
		last[n] = v
	}
	for n, w := range want {
		got, set := last[n]
		// The fake's mask is what the daemon last set, or the original
		// when it set none.
		if set && got != w && !(w == "" && got == "") {
			t.Errorf("%s: AllowedCPUs %q after the stop, its original %q", n, got, w)
		}
	}
	st, err := statefile.LoadState(m.s.state)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range st.Units {
		if r.Manager == "user:4242" && r.Written() {
			if _, honest := m.honest[r.Unit]; honest {
				t.Errorf("state.json keeps a value of ours on %s after the stop: %+v", r.Unit, r)
			}
		}
	}
}

func sortedKeys(m map[string][]byte) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
