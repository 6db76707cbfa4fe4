package main

// The fault model's D-Bus surface: every sequence runs its
// daemons on a private bus with the system bus's own policy and the
// package's, in power-profiles "auto" mode, and draws these steps among
// the cgroup faults:
//
//   - forge: a connection of uid 65534 calls SetPolicy (refused) and sends
//     every other connection on the bus forged signals — the bus daemon's
//     NameOwnerChanged giving it the power-profiles names and ending every
//     holder's connection, its own ActiveProfile, logind's UserRemoved and
//     the manager's UnitRemoved. Nothing may change: the knob, the holds
//     and who owns the power-profiles names are as before.
//   - hold: a root connection holds a policy (HoldPolicy); the hold is
//     listed.
//   - leave: a holder's connection closes; its holds end, the others stay.
//   - flap: a power-profiles daemon of root's takes the names by
//     replacement, sets ActiveProfile faultFlaps times as fast as it can,
//     and stays (its last profile is followed) or leaves (the daemon
//     serves the names again). The daemon's peak RSS stays within
//     faultRSSBound.
//
// Holds, the followed daemon and the knob are not part of what a stop
// restores; the cgroup model's promise is checked as before.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"

	"github.com/godbus/dbus/v5"
	"pgregory.net/rapid"

	"github.com/schedpolicyd/schedpolicyd/daemon/bus"
	"github.com/schedpolicyd/schedpolicyd/internal/testutil"
)

const (
	// faultFlaps is how many profiles a flap step sends.
	faultFlaps = 1000
	// faultRSSBound bounds the daemon's peak resident set (VmHWM): the
	// flood of a flapping daemon must not pile up in memory (before the
	// follower kept only the latest profile, 10,000 flaps took it from 8
	// to 42–70 MB).
	faultRSSBound = 32 << 20
)

var ppNames = []struct {
	name string
	path dbus.ObjectPath
}{
	{"org.freedesktop.UPower.PowerProfiles", "/org/freedesktop/UPower/PowerProfiles"},
	{"net.hadess.PowerProfiles", "/net/hadess/PowerProfiles"},
}

// faultBus is a sequence's bus and the connections the steps use.
type faultBus struct {
	bus      *testutil.Bus
	root     *dbus.Conn   // reads the daemon's properties
	attacker *dbus.Conn   // uid 65534
	holders  []*dbus.Conn // root connections that may hold
	ppd      *dbus.Conn   // the followed power-profiles daemon, nil when none
	ppdProf  faultPPD     // its ActiveProfile
}

// faultPPD serves ActiveProfile, as much of a power-profiles daemon as
// following needs.
type faultPPD struct {
	mu      sync.Mutex
	profile string
}

func (p *faultPPD) Get(iface, prop string) (dbus.Variant, *dbus.Error) {
	return dbus.MakeVariant(p.get()), nil
}

func (p *faultPPD) get() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.profile
}

func (p *faultPPD) set(v string) {
	p.mu.Lock()
	p.profile = v
	p.mu.Unlock()
}

// startBus starts the sequence's bus (setup) and its connections.
func (m *faultModel) startBus(rt *rapid.T) {
	ppd := m.dir + "/net.hadess.PowerProfiles.conf"
	// What power-profiles-daemon's package installs: root owns the name,
	// anyone may call it.
	if err := os.WriteFile(ppd, []byte(`<busconfig>
  <policy user="root"><allow own="net.hadess.PowerProfiles"/></policy>
  <policy context="default"><allow send_destination="net.hadess.PowerProfiles"/></policy>
</busconfig>
`), 0o644); err != nil {
		m.fatalf(rt, "%v", err)
	}
	fb := &faultBus{bus: testutil.StartSystemPolicyBus(m.t, "../../packaging/dbus/org.schedpolicyd.SchedPolicy1.conf", ppd)}
	var err error
	if fb.root, err = dbus.Connect(fb.bus.Addr); err != nil {
		m.fatalf(rt, "%v", err)
	}
	fb.attacker = testutil.DialAs(m.t, fb.bus.Addr, 65534)
	m.fb = fb
}

// stopBus closes the connections and ends the bus (teardown).
func (m *faultModel) stopBus() {
	if m.fb == nil {
		return
	}
	for _, c := range append(m.fb.holders, m.fb.root, m.fb.attacker, m.fb.ppd) {
		// Closing twice (also at the test's cleanup) only returns an error.
		if c != nil {
			c.Close()
		}
	}
	m.fb.bus.Kill()
	m.fb = nil
}

// call calls the daemon's method (of bus.Interface) from c. A daemon that
// does not answer within faultBound fails the call with the context's
// error: no step of the model waits unbounded on a daemon that hangs.
func (m *faultModel) call(c *dbus.Conn, method string, args ...any) *dbus.Call {
	return m.callIface(c, bus.Interface+"."+method, args...)
}

func (m *faultModel) callIface(c *dbus.Conn, method string, args ...any) *dbus.Call {
	ctx, cancel := context.WithTimeout(context.Background(), faultBound)
	defer cancel()
	return c.Object(bus.Name, bus.ObjectPath).CallWithContext(ctx, method, 0, args...)
}

// prop reads the daemon's property name (of bus.Interface) as root,
// within faultBound.
func (m *faultModel) prop(name string) (dbus.Variant, error) {
	var v dbus.Variant
	err := m.callIface(m.fb.root, "org.freedesktop.DBus.Properties.Get", bus.Interface, name).Store(&v)
	return v, err
}

// busState is what no forged signal may change: the knob, the holds and
// the owners of the power-profiles names.
func (m *faultModel) busState(rt *rapid.T) string {
	var b strings.Builder
	for _, p := range []string{"PowerAware", "PowerAwarePolicy", "Holds"} {
		v, err := m.prop(p)
		if err != nil {
			m.fatalf(rt, "reading %s: %v", p, err)
		}
		fmt.Fprintf(&b, "%s=%v ", p, v.Value())
	}
	for _, n := range ppNames {
		var o string
		m.fb.root.BusObject().Call("org.freedesktop.DBus.GetNameOwner", 0, n.name).Store(&o)
		fmt.Fprintf(&b, "%s=%s ", n.name, o)
	}
	return b.String()
}

// needBusDaemon skips the step unless a daemon runs and owns its name.
func (m *faultModel) needBusDaemon(rt *rapid.T) {
	if m.d == nil {
		rt.Skip("no daemon")
	}
	m.poll(rt, "the daemon on the bus", func() (bool, string) { return testutil.NameOwned(m.fb.root, bus.Name) })
}

// actForge: uid 65534 tries to steer the daemon (see the top of the file).
func (m *faultModel) actForge(rt *rapid.T) {
	m.needBusDaemon(rt)
	profile := rapid.SampledFrom([]string{"performance", "balanced", "power-saver"}).Draw(rt, "profile")
	m.step(rt, "forge", "uid 65534: SetPolicy, NameOwnerChanged for the power-profiles names and %d holders, ActiveProfile %s", len(m.fb.holders), profile)
	m.settle(rt)
	before := m.busState(rt)
	a := m.fb.attacker
	if err := m.call(a, "SetPolicy", "performance").Err; err == nil ||
		!strings.Contains(err.Error(), "not authorised") {
		m.fatalf(rt, "SetPolicy as uid 65534: %v, want refused", err)
	}
	me := a.Names()[0]
	var except []string
	for _, c := range append([]*dbus.Conn{m.fb.root, m.fb.ppd}, m.fb.holders...) {
		if c != nil {
			except = append(except, c.Names()[0])
		}
	}
	for _, dest := range testutil.Peers(m.t, a, except...) {
		for _, n := range ppNames {
			testutil.SendSignal(m.t, a, dest, "/org/freedesktop/DBus", "org.freedesktop.DBus.NameOwnerChanged", n.name, "", me)
			testutil.SendSignal(m.t, a, dest, n.path, "org.freedesktop.DBus.Properties.PropertiesChanged",
				n.name, map[string]dbus.Variant{"ActiveProfile": dbus.MakeVariant(profile)}, []string{})
		}
		for _, h := range m.fb.holders {
			u := h.Names()[0]
			testutil.SendSignal(m.t, a, dest, "/org/freedesktop/DBus", "org.freedesktop.DBus.NameOwnerChanged", u, u, "")
		}
		testutil.SendSignal(m.t, a, dest, "/org/freedesktop/login1", "org.freedesktop.login1.Manager.UserRemoved",
			uint32(0), dbus.ObjectPath("/org/freedesktop/login1/user/_0"))
		testutil.SendSignal(m.t, a, dest, "/org/freedesktop/systemd1", "org.freedesktop.systemd1.Manager.UnitRemoved",
			"schedpolicyd.service", dbus.ObjectPath("/org/freedesktop/systemd1/unit/schedpolicyd_2eservice"))
	}
	m.settle(rt)
	if after := m.busState(rt); after != before {
		m.fatalf(rt, "forged signals changed the daemon:\nbefore %s\nafter  %s", before, after)
	}
	if regexp.MustCompile(regexp.QuoteMeta(me) + `([^0-9]|$)`).MatchString(m.d.logText()) {
		m.fatalf(rt, "the daemon's log names the attacker %s: it acted on a forged signal", me)
	}
}

// holds is the daemon's Holds property: (cookie, policy, reason, owner).
func (m *faultModel) holds(rt *rapid.T) [][]any {
	v, err := m.prop("Holds")
	if err != nil {
		m.fatalf(rt, "reading Holds: %v", err)
	}
	hs, _ := v.Value().([][]any)
	return hs
}

func holdOwners(hs [][]any) map[string]int {
	out := map[string]int{}
	for _, h := range hs {
		if len(h) == 4 {
			o, _ := h[3].(string)
			out[o]++
		}
	}
	return out
}

// actHold: a root connection (new, or one that holds already) holds a
// policy.
func (m *faultModel) actHold(rt *rapid.T) {
	m.needBusDaemon(rt)
	pol := rapid.SampledFrom([]string{"performance", "balance", "powersaving"}).Draw(rt, "policy")
	var c *dbus.Conn
	if len(m.fb.holders) > 0 && rapid.Bool().Draw(rt, "again") {
		c = rapid.SampledFrom(m.fb.holders).Draw(rt, "holder")
	} else {
		var err error
		if c, err = dbus.Connect(m.fb.bus.Addr); err != nil {
			m.fatalf(rt, "%v", err)
		}
		m.fb.holders = append(m.fb.holders, c)
	}
	m.step(rt, "hold", "%s holds %s", c.Names()[0], pol)
	var cookie uint32
	if err := m.call(c, "HoldPolicy", pol, "fault model").Store(&cookie); err != nil {
		var de dbus.Error
		if errors.As(err, &de) && de.Name == "org.freedesktop.DBus.Error.LimitsExceeded" {
			return // the per-caller bound: documented, nothing held
		}
		m.fatalf(rt, "HoldPolicy: %v", err)
	}
	if holdOwners(m.holds(rt))[c.Names()[0]] == 0 {
		m.fatalf(rt, "the hold of %s (cookie %d) is not listed", c.Names()[0], cookie)
	}
	m.settle(rt)
}

// actLeave: a holder's connection closes: its holds end, nobody else's.
func (m *faultModel) actLeave(rt *rapid.T) {
	if len(m.fb.holders) == 0 {
		rt.Skip("no holder")
	}
	i := rapid.IntRange(0, len(m.fb.holders)-1).Draw(rt, "holder")
	c := m.fb.holders[i]
	u := c.Names()[0]
	m.step(rt, "leave", "holder %s leaves the bus", u)
	var before map[string]int
	if m.d != nil {
		m.needBusDaemon(rt)
		before = holdOwners(m.holds(rt))
	}
	c.Close()
	m.fb.holders = append(m.fb.holders[:i:i], m.fb.holders[i+1:]...)
	if m.d == nil {
		return
	}
	delete(before, u)
	m.poll(rt, "the holds of "+u+" ended, nobody else's", func() (bool, string) {
		got := holdOwners(m.holds(rt))
		return fmt.Sprint(got) == fmt.Sprint(before), fmt.Sprint(got)
	})
	m.settle(rt)
}

// peakRSS is the daemon's VmHWM in bytes.
func (m *faultModel) peakRSS(rt *rapid.T) int64 {
	for _, l := range strings.Split(faultRead(fmt.Sprintf("/proc/%d/status", m.d.cmd.Process.Pid)), "\n") {
		if f := strings.Fields(l); len(f) == 3 && f[0] == "VmHWM:" {
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			return kb << 10
		}
	}
	m.fatalf(rt, "no VmHWM for the daemon")
	return 0
}

// actFlap: root's power-profiles daemon takes the names and flaps (see
// the top of the file).
func (m *faultModel) actFlap(rt *rapid.T) {
	m.needBusDaemon(rt)
	last := rapid.SampledFrom([]string{"performance", "balanced", "power-saver"}).Draw(rt, "last")
	leave := rapid.Bool().Draw(rt, "leave")
	m.step(rt, "flap", "a power-profiles daemon sets ActiveProfile %d times, ending on %s, then leaves: %v", faultFlaps, last, leave)
	fb := m.fb
	// The knob must end on the last profile when following it is a change:
	// a new daemon, or another profile than the one followed before (the
	// same profile again leaves an explicit choice made since in force).
	prev, changes := fb.ppdProf.get(), fb.ppd == nil
	changes = changes || last != prev
	if fb.ppd == nil {
		c, err := dbus.Connect(fb.bus.Addr)
		if err != nil {
			m.fatalf(rt, "%v", err)
		}
		fb.ppd = c
		fb.ppdProf.set("balanced")
		if err := c.Export(&fb.ppdProf, "/net/hadess/PowerProfiles", "org.freedesktop.DBus.Properties"); err != nil {
			m.fatalf(rt, "%v", err)
		}
		if r, err := c.RequestName("net.hadess.PowerProfiles", dbus.NameFlagReplaceExisting|dbus.NameFlagDoNotQueue); err != nil || r != dbus.RequestNameReplyPrimaryOwner {
			m.fatalf(rt, "the power-profiles daemon cannot own its name: %v %v", r, err)
		}
	}
	for i := 0; i < faultFlaps; i++ {
		p := []string{"performance", "power-saver"}[i%2]
		if i == faultFlaps-1 {
			p = last
		}
		fb.ppdProf.set(p)
		if err := fb.ppd.Emit("/net/hadess/PowerProfiles", "org.freedesktop.DBus.Properties.PropertiesChanged",
			"net.hadess.PowerProfiles", map[string]dbus.Variant{"ActiveProfile": dbus.MakeVariant(p)}, []string{}); err != nil {
			m.fatalf(rt, "%v", err)
		}
	}
	if leave {
		fb.ppd.Close()
		fb.ppd = nil
		m.poll(rt, "the daemon serving the power-profiles names again", func() (bool, string) {
			var o, ours string
			fb.root.BusObject().Call("org.freedesktop.DBus.GetNameOwner", 0, "net.hadess.PowerProfiles").Store(&o)
			fb.root.BusObject().Call("org.freedesktop.DBus.GetNameOwner", 0, bus.Name).Store(&ours)
			return o != "" && o == ours, o
		})
	} else if changes {
		want := map[string]uint32{"performance": 0, "balanced": 1, "power-saver": 2}[last]
		m.poll(rt, "the followed daemon's last profile "+last, func() (bool, string) {
			v, err := m.prop("PowerAware")
			got, _ := v.Value().(uint32)
			return err == nil && got == want, fmt.Sprint(got, err)
		})
	}
	m.settle(rt)
	rss := m.peakRSS(rt)
	m.stats.peakRSS = max(m.stats.peakRSS, rss)
	if rss > faultRSSBound {
		m.fatalf(rt, "the daemon's peak RSS is %d MiB after a flapping power-profiles daemon, above %d MiB", rss>>20, faultRSSBound>>20)
	}
}
