package daemon

import (
	"fmt"
	"path/filepath"
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

// forge sends the signal name on path with body from attacker to every
// other connection on the bus but those in except: unicast, which no match
// rule filters, so each consumer of the daemon's connections receives it.
func forge(t *testing.T, attacker *dbus.Conn, except []string, path dbus.ObjectPath, name string, body ...any) {
	t.Helper()
	for _, dest := range testutil.Peers(t, attacker, except...) {
		testutil.SendSignal(t, attacker, dest, path, name, body...)
	}
}

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
