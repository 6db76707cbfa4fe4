package daemon

import (
	"fmt"
	"path/filepath"
	"regexp"
	"runtime"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/godbus/dbus/v5"
	"github.com/sirupsen/logrus"

	"github.com/schedpolicyd/schedpolicyd/daemon/bus"
	"github.com/schedpolicyd/schedpolicyd/internal/testutil"
	"github.com/schedpolicyd/schedpolicyd/policy"
)

// msgLog keeps the daemon's log entries as "message k=v ...", for tests
// that read what the daemon said.
type msgLog struct {
	mu      sync.Mutex
	entries []string
}

func (l *msgLog) Levels() []logrus.Level { return logrus.AllLevels }

func (l *msgLog) Fire(e *logrus.Entry) error {
	keys := make([]string, 0, len(e.Data))
	for k := range e.Data {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	s := e.Message
	for _, k := range keys {
		s += fmt.Sprintf(" %s=%v", k, e.Data[k])
	}
	l.mu.Lock()
	l.entries = append(l.entries, s)
	l.mu.Unlock()
	return nil
}

// count is the number of entries whose message starts with prefix.
func (l *msgLog) count(prefix string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, e := range l.entries {
		if strings.HasPrefix(e, prefix) {
			n++
		}
	}
	return n
}

// mentions is the first entry that contains text, "" if none does.
func (l *msgLog) mentions(text string) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, e := range l.entries {
		if strings.Contains(e, text) {
			return e
		}
	}
	return ""
}

// mentionsName is the first entry that names the bus connection name
// (":1.3", not ":1.30"), "" if none does.
func (l *msgLog) mentionsName(name string) string {
	re := regexp.MustCompile(regexp.QuoteMeta(name) + `([^0-9]|$)`)
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, e := range l.entries {
		if re.MatchString(e) {
			return e
		}
	}
	return ""
}

// sysBus is a daemon running in-process as root on a bus with the system
// bus's policy and the package's (testutil.StartSystemPolicyBus), with a
// root connection, a connection of uid 65534 and the daemon's log.
type sysBus struct {
	d              *Daemon
	addr           string
	root, attacker *dbus.Conn
	log            *msgLog
}

func sysBusDaemon(t *testing.T, edit func(*Config)) sysBus {
	t.Helper()
	pbus := testutil.StartSystemPolicyBus(t, "../packaging/dbus/org.schedpolicyd.SchedPolicy1.conf")
	sb := sysBus{addr: pbus.Addr, log: new(msgLog)}
	sb.d = newMockLaptop(t).startWith(t, func(c *Config) {
		c.Bus = pbus.Addr
		c.Log.(*logrus.Logger).AddHook(sb.log)
		if edit != nil {
			edit(c)
		}
	})
	var err error
	if sb.root, err = dbus.Connect(pbus.Addr); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sb.root.Close() })
	testutil.Eventually(t, "bus name", func() (bool, string) { return testutil.NameOwned(sb.root, bus.Name) })
	sb.attacker = testutil.DialAs(t, pbus.Addr, 65534)
	return sb
}

// forge sends the signal name on path with body from attacker to every
// other connection on the bus but those in except: unicast, which no match
// rule filters, so each consumer of the daemon's connections receives it.
func forge(t *testing.T, attacker *dbus.Conn, except []string, path dbus.ObjectPath, name string, body ...any) {
	t.Helper()
	for _, dest := range testutil.Peers(t, attacker, except...) {
		testutil.SendSignal(t, attacker, dest, path, name, body...)
	}
}

const nameOwnerChanged = "org.freedesktop.DBus.NameOwnerChanged"

// fakePPD answers Properties.Get for ActiveProfile, as much of a
// power-profiles daemon as following needs.
type fakePPD struct{ profile string }

func (f fakePPD) Get(iface, prop string) (dbus.Variant, *dbus.Error) {
	if prop != "ActiveProfile" {
		return dbus.Variant{}, dbus.MakeFailedError(fmt.Errorf("no property %s", prop))
	}
	return dbus.MakeVariant(f.profile), nil
}

// ownPPD connects to the bus as root, serves fakePPD with profile at
// name's path and takes name, replacing its owner; the test's cleanup
// closes it.
func ownPPD(t *testing.T, addr, name, profile string) *dbus.Conn {
	t.Helper()
	c, err := dbus.Connect(addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if err := c.Export(fakePPD{profile}, ppPath(name), "org.freedesktop.DBus.Properties"); err != nil {
		t.Fatal(err)
	}
	if r, err := c.RequestName(name, dbus.NameFlagReplaceExisting|dbus.NameFlagDoNotQueue); err != nil || r != dbus.RequestNameReplyPrimaryOwner {
		t.Fatalf("RequestName(%s) = %v, %v", name, r, err)
	}
	return c
}

// TestForgedOwnerChangeTakesNoPowerProfilesNames is the trust issue's
// first case on a bus with the system bus's policy: uid 65534, refused by
// SetPowerAware, sends the daemon NameOwnerChanged(net.hadess.PowerProfiles,
// "", itself) and its own PropertiesChanged(ActiveProfile performance).
// Root's connection then takes a name by replacement, as
// power-profiles-daemon --replace does, and serves power-saver. The daemon
// follows it (knob 2), which it does after handling the forged signals,
// routed first; it released the names once, for that owner, and never
// acted on anything from the attacker (believed, the forged change makes
// it release the names a first time and follow the attacker).
func TestForgedOwnerChangeTakesNoPowerProfilesNames(t *testing.T) {
	sb := sysBusDaemon(t, func(c *Config) { c.PowerProfilesAPI = bus.PowerProfilesAuto })
	for _, n := range ppNames {
		testutil.Eventually(t, "serving "+n.name, func() (bool, string) { return testutil.NameOwned(sb.root, n.name) })
	}
	err := sb.attacker.Object(bus.Name, bus.ObjectPath).Call(bus.Interface+".SetPowerAware", 0, uint32(0)).Err
	if dbusErrName(err) != errAccessDenied {
		t.Fatalf("SetPowerAware as uid 65534: %v, want AccessDenied", err)
	}
	me := sb.attacker.Names()[0]
	except := []string{sb.root.Names()[0]}
	forge(t, sb.attacker, except, "/org/freedesktop/DBus", nameOwnerChanged, "net.hadess.PowerProfiles", "", me)
	forge(t, sb.attacker, except, "/net/hadess/PowerProfiles", "org.freedesktop.DBus.Properties.PropertiesChanged",
		"net.hadess.PowerProfiles", map[string]dbus.Variant{"ActiveProfile": dbus.MakeVariant(bus.ProfilePerformance)}, []string{})

	ppd := ownPPD(t, sb.addr, ppNames[0].name, bus.ProfilePowerSaver)
	testutil.Eventually(t, "following the new owner's power-saver", func() (bool, string) {
		k := sb.d.Snapshot().Knob
		return k.PowerAware == policy.PowerAwareOn, fmt.Sprintf("power_aware %d", k.PowerAware)
	})
	if e := sb.log.mentionsName(me); e != "" {
		t.Fatalf("the daemon acted on the forged signals: %q", e)
	}
	if n := sb.log.count("released the power-profiles names"); n != 1 {
		t.Fatalf("released the names %d times, want once (for %s)", n, ppd.Names()[0])
	}
}

// holders returns the owners of the daemon's holds, sorted.
func holders(d *Daemon) []string {
	var out []string
	for _, h := range d.Snapshot().Holds {
		out = append(out, h.Owner)
	}
	sort.Strings(out)
	return out
}

// TestForgedOwnerChangeEndsNoHold is the trust issue's second case: root
// holds powersaving with HoldPolicy and power-saver with HoldProfile, from
// two connections that stay; uid 65534 sends the daemon
// NameOwnerChanged(holder, holder, "") for each. A third holder then
// really leaves: its hold ends, which the daemon does after handling the
// forged signals (routed first), and the two holds are still there.
func TestForgedOwnerChangeEndsNoHold(t *testing.T) {
	sb := sysBusDaemon(t, func(c *Config) { c.PowerProfilesAPI = bus.PowerProfilesServe })
	conn := func() *dbus.Conn {
		c, err := dbus.Connect(sb.addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	h, p, q := conn(), conn(), conn()
	if err := h.Object(bus.Name, bus.ObjectPath).Call(bus.Interface+".HoldPolicy", 0, "powersaving", "test").Err; err != nil {
		t.Fatal(err)
	}
	if err := p.Object(ppNames[1].name, ppNames[1].path).Call(ppNames[1].name+".HoldProfile", 0, bus.ProfilePowerSaver, "test", "app").Err; err != nil {
		t.Fatal(err)
	}
	if err := q.Object(bus.Name, bus.ObjectPath).Call(bus.Interface+".HoldPolicy", 0, "powersaving", "leaves").Err; err != nil {
		t.Fatal(err)
	}
	want := []string{h.Names()[0], p.Names()[0], q.Names()[0]}
	sort.Strings(want)
	if got := holders(sb.d); !slicesEqual(got, want) {
		t.Fatalf("holders %v, want %v", got, want)
	}
	except := []string{sb.root.Names()[0], h.Names()[0], p.Names()[0], q.Names()[0]}
	for _, c := range []*dbus.Conn{h, p} {
		forge(t, sb.attacker, except, "/org/freedesktop/DBus", nameOwnerChanged, c.Names()[0], c.Names()[0], "")
	}
	q.Close()
	want = []string{h.Names()[0], p.Names()[0]}
	sort.Strings(want)
	testutil.Eventually(t, "the hold of the connection that left ended", func() (bool, string) {
		got := holders(sb.d)
		for _, o := range got {
			if o == q.Names()[0] {
				return false, fmt.Sprint(got)
			}
		}
		return true, ""
	})
	if got := holders(sb.d); !slicesEqual(got, want) {
		t.Fatalf("holders %v, want %v: a forged NameOwnerChanged ended a hold", got, want)
	}
	if pol := sb.d.Snapshot().Policy; pol != policy.Powersaving {
		t.Fatalf("policy %s, want powersaving (held)", pol)
	}
}

func slicesEqual(a, b []string) bool { return strings.Join(a, "\x00") == strings.Join(b, "\x00") }

// ppdPolicy writes the bus policy power-profiles-daemon's package installs
// (net.hadess.PowerProfiles.conf: root owns the name, anyone may call it),
// so that the test does not depend on whether that package is installed.
func ppdPolicy(t *testing.T) string {
	t.Helper()
	f := filepath.Join(t.TempDir(), "net.hadess.PowerProfiles.conf")
	testutil.WriteFile(t, f, `<busconfig>
  <policy user="root"><allow own="net.hadess.PowerProfiles"/></policy>
  <policy context="default"><allow send_destination="net.hadess.PowerProfiles"/></policy>
</busconfig>
`)
	return f
}

// followingDaemon runs the daemon ("auto", log kept at info level) on a
// bus with the system bus's policy, where root's fake power-profiles
// daemon owns net.hadess.PowerProfiles with balanced, and returns once the
// daemon follows it.
func followingDaemon(t *testing.T) (*testutil.Bus, *dbus.Conn, *Daemon, *msgLog) {
	t.Helper()
	pbus := testutil.StartSystemPolicyBus(t, "../packaging/dbus/org.schedpolicyd.SchedPolicy1.conf", ppdPolicy(t))
	ppd := ownPPD(t, pbus.Addr, "net.hadess.PowerProfiles", bus.ProfileBalanced)
	ml := new(msgLog)
	d := newMockLaptop(t).startWith(t, func(c *Config) {
		c.Bus, c.PowerProfilesAPI = pbus.Addr, bus.PowerProfilesAuto
		c.Log.(*logrus.Logger).AddHook(ml)
		c.Log.(*logrus.Logger).SetLevel(logrus.InfoLevel)
	})
	testutil.Eventually(t, "following", func() (bool, string) {
		return ml.count("following the power-profiles daemon's ActiveProfile") == 1, ""
	})
	return pbus, ppd, d, ml
}

// TestForgedOwnerChangeKeepsFollowing: the daemon follows root's
// power-profiles daemon; uid 65534 sends it NameOwnerChanged saying that
// daemon left. The daemon goes on following it without a pause (no "no
// longer following"), and applies the followed daemon's next profile.
func TestForgedOwnerChangeKeepsFollowing(t *testing.T) {
	pbus, ppd, d, ml := followingDaemon(t)
	attacker := testutil.DialAs(t, pbus.Addr, 65534)
	forge(t, attacker, []string{ppd.Names()[0]}, "/org/freedesktop/DBus", nameOwnerChanged, "net.hadess.PowerProfiles", ppd.Names()[0], "")
	if err := ppd.Emit("/net/hadess/PowerProfiles", "org.freedesktop.DBus.Properties.PropertiesChanged",
		"net.hadess.PowerProfiles", map[string]dbus.Variant{"ActiveProfile": dbus.MakeVariant(bus.ProfilePowerSaver)}, []string{}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "the followed daemon's power-saver", func() (bool, string) {
		k := d.Snapshot().Knob
		return k.PowerAware == policy.PowerAwareOn, fmt.Sprintf("power_aware %d", k.PowerAware)
	})
	if n := ml.count("no longer following"); n != 0 {
		t.Fatalf("stopped following %d times after a forged NameOwnerChanged", n)
	}
}

// TestFollowedDaemonFlaps is the trust issue's fourth case: a followed
// power-profiles daemon sets ActiveProfile 3,000 times at 1,000 a second,
// alternating performance and power-saver, ends on power-saver and leaves
// the bus. The daemon applies at most one profile per bus.FollowMinInterval (the
// count is bounded by the flood's length), its goroutines do not pile up
// behind the loop (godbus parks one per signal a full channel cannot take),
// the last profile wins, and once the daemon says it no longer follows,
// nothing of the departed daemon is applied.
func TestFollowedDaemonFlaps(t *testing.T) {
	pbus, ppd, d, ml := followingDaemon(t)
	before := ml.count("knob changed")
	peak := runtime.NumGoroutine()
	const flaps = 3000
	start := time.Now()
	tick := time.NewTicker(time.Millisecond)
	for i := 0; i < flaps; i++ {
		p := bus.ProfilePerformance
		if i%2 == 1 || i == flaps-1 {
			p = bus.ProfilePowerSaver
		}
		if err := ppd.Emit("/net/hadess/PowerProfiles", "org.freedesktop.DBus.Properties.PropertiesChanged",
			"net.hadess.PowerProfiles", map[string]dbus.Variant{"ActiveProfile": dbus.MakeVariant(p)}, []string{}); err != nil {
			t.Fatal(err)
		}
		if i%50 == 0 {
			peak = max(peak, runtime.NumGoroutine())
		}
		<-tick.C
	}
	tick.Stop()
	testutil.Eventually(t, "the last profile, power-saver", func() (bool, string) {
		k := d.Snapshot().Knob
		peak = max(peak, runtime.NumGoroutine())
		return k.PowerAware == policy.PowerAwareOn, fmt.Sprintf("power_aware %d", k.PowerAware)
	})
	elapsed := time.Since(start)
	applied := ml.count("knob changed") - before
	if limit := 2 + int(elapsed/bus.FollowMinInterval); applied > limit {
		t.Errorf("%d profiles applied in %v, want at most %d (one per %v)", applied, elapsed, limit, bus.FollowMinInterval)
	}
	if peak > 500 {
		t.Errorf("%d goroutines at the peak of the flood: signals pile up behind the loop", peak)
	}
	t.Logf("%d flaps in %v: %d applied, at most %d goroutines", flaps, elapsed, applied, peak)

	ppd.Close()
	testutil.Eventually(t, "no longer following", func() (bool, string) { return ml.count("no longer following") == 1, "" })
	testutil.Eventually(t, "serving the names again", func() (bool, string) {
		return testutil.NameOwnedAt(pbus.Addr, "net.hadess.PowerProfiles")
	})
	ml.mu.Lock()
	defer ml.mu.Unlock()
	left := -1
	for i, e := range ml.entries {
		if strings.HasPrefix(e, "no longer following") {
			left = i
		}
		if left >= 0 && strings.HasPrefix(e, "knob changed") {
			t.Errorf("applied after the followed daemon left: %q", e)
		}
	}
}
