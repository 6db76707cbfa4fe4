package bus

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"

	"github.com/schedpolicyd/schedpolicyd/internal/testutil"
	"github.com/schedpolicyd/schedpolicyd/policy"
)

// The power-profiles names and paths, as power-profiles-daemon's clients
// spell them.
const (
	ppFree   = "org.freedesktop.UPower.PowerProfiles"
	ppFreeP  = "/org/freedesktop/UPower/PowerProfiles"
	ppHadess = "net.hadess.PowerProfiles"
)

// systemPython is Debian's python3, for which python3-gi is installed
// (powerprofilesctl's interpreter; another python3 may be first on PATH).
const systemPython = "/usr/bin/python3"

// ppGioHolder is a Gio client (python3-gi, as powerprofilesctl is) of the
// power-profiles interface argv[1] at argv[2] that reads commands on
// standard input — "hold PROFILE", "release COOKIE" — and prints one line
// per answer ("cookie N", "released-own N", "error MESSAGE") and one per
// ProfileReleased signal its proxy delivers ("released N"; the proxy
// passes only its own name's owner's signals on its own path and
// interface). It exits when standard input closes.
const ppGioHolder = `
import sys
from gi.repository import Gio, GLib
name, path = sys.argv[1], sys.argv[2]
bus = Gio.bus_get_sync(Gio.BusType.SYSTEM, None)
proxy = Gio.DBusProxy.new_sync(bus, Gio.DBusProxyFlags.DO_NOT_LOAD_PROPERTIES, None, name, path, name, None)
loop = GLib.MainLoop()
def on_signal(_proxy, _sender, signal, params):
    if signal == 'ProfileReleased':
        print('released', params[0], flush=True)
proxy.connect('g-signal', on_signal)
def on_input(_source, _cond):
    line = sys.stdin.readline()
    if not line:
        loop.quit()
        return False
    cmd = line.split()
    try:
        if cmd[0] == 'hold':
            print('cookie', proxy.HoldProfile('(sss)', cmd[1], 'test', 'org.example.Holder'), flush=True)
        elif cmd[0] == 'release':
            proxy.ReleaseProfile('(u)', int(cmd[1]))
            print('released-own', cmd[1], flush=True)
    except GLib.Error as e:
        print('error', e.message, flush=True)
    return True
GLib.io_add_watch(sys.stdin, GLib.IO_IN | GLib.IO_HUP, on_input)
print('ready', flush=True)
loop.run()
`

// gioHolder is a running ppGioHolder.
type gioHolder struct {
	in    io.WriteCloser
	lines chan string
	done  chan struct{}
}

// say sends one command.
func (h *gioHolder) say(t *testing.T, cmd string) {
	t.Helper()
	if _, err := fmt.Fprintln(h.in, cmd); err != nil {
		t.Fatal(err)
	}
}

// next returns its next line, failing t if none comes.
func (h *gioHolder) next(t *testing.T) string {
	t.Helper()
	var line string
	testutil.Eventually(t, "a line from the Gio holder", func() (bool, string) {
		select {
		case l, ok := <-h.lines:
			if !ok {
				t.Fatal("the Gio holder exited")
			}
			line = l
			return true, ""
		default:
			return false, ""
		}
	})
	return line
}

// ppClients run power-profiles clients as the unprivileged user nobody
// on the bus at addr (the system bus to them: DBUS_SYSTEM_BUS_ADDRESS).
type ppClients struct{ addr string }

func (c ppClients) cmd(name string, args ...string) *exec.Cmd {
	cmd := exec.Command("setpriv", append([]string{"--reuid=65534", "--regid=65534", "--clear-groups", name}, args...)...)
	cmd.Env = append(os.Environ(), "DBUS_SYSTEM_BUS_ADDRESS="+c.addr)
	return cmd
}

// run runs a client to its end: its output and whether it succeeded.
func (c ppClients) run(name string, args ...string) (string, error) {
	out, err := c.cmd(name, args...).CombinedOutput()
	return string(out), err
}

// pctl is the real powerprofilesctl (it speaks to net.hadess.PowerProfiles).
func (c ppClients) pctl(args ...string) (string, error) { return c.run("powerprofilesctl", args...) }

// gdbusSet sets ActiveProfile at the current name with GLib's gdbus.
func (c ppClients) gdbusSet(profile string) (string, error) {
	return c.run("gdbus", "call", "--system", "--dest", ppFree, "--object-path", ppFreeP,
		"--method", "org.freedesktop.DBus.Properties.Set", ppFree, "ActiveProfile", "<'"+profile+"'>")
}

// holder starts a ppGioHolder on name at path.
func (c ppClients) holder(t *testing.T, name, path string) *gioHolder {
	t.Helper()
	cmd := c.cmd(systemPython, "-c", ppGioHolder, name, path)
	var stderr lockedLog
	cmd.Stderr = &stderr
	in, out := testutil.StartPiped(t, cmd)
	h := &gioHolder{in: in, lines: make(chan string, 16), done: make(chan struct{})}
	go func() {
		defer close(h.done)
		defer close(h.lines)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			h.lines <- sc.Text()
		}
	}()
	t.Cleanup(func() {
		in.Close()
		cmd.Process.Kill()
		cmd.Wait()
		if t.Failed() {
			t.Logf("Gio holder on %s:\n%s", name, stderr.String())
		}
	})
	if l := h.next(t); l != "ready" {
		t.Fatalf("Gio holder: %q, want ready", l)
	}
	return h
}

// lockedLog collects a child's output for the failure message.
type lockedLog struct {
	mu sync.Mutex
	b  []byte
}

func (l *lockedLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.b = append(l.b, p...)
	return len(p), nil
}

func (l *lockedLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return string(l.b)
}

// ppGrant is a polkit rule granting the user nobody the actions ids.
func ppGrant(ids ...string) string {
	return `var granted = ["` + strings.Join(ids, `", "`) + `"];
polkit.addRule(function(action, subject) {
    if (subject.user == "nobody" && granted.indexOf(action.id) >= 0) {
        return polkit.Result.YES;
    }
});
`
}

// TestPowerProfilesClientsPolkit serves the power-profiles API on a
// private bus with the system bus's own policy (and the package's), beside
// the real polkitd knowing only the package's polkit actions, and uses it
// as the unprivileged user nobody (no session: only a rule grants
// anything) with the real powerprofilesctl (net.hadess.PowerProfiles),
// GLib's gdbus and a Gio client (org.freedesktop.UPower.PowerProfiles):
//
//   - each name asks polkit about power-profiles-daemon's action of that
//     name — switch-profile for ActiveProfile, hold-profile for
//     HoldProfile — and neither about the daemon's own
//     org.schedpolicyd.set-policy; refused, nothing changes;
//   - an unknown profile is AccessDenied before authorisation and Failed
//     after it;
//   - setting the profile a hold made active keeps the hold and saves no
//     choice (powerprofilesctl launch releases its hold at the end, which
//     fails if the hold is gone);
//   - ProfileReleased reaches the holder alone, only when a user's change
//     cancels its hold: not for its own ReleaseProfile, not when a holder
//     leaves the bus, and never another client (gdbus monitor).
func TestPowerProfilesClientsPolkit(t *testing.T) {
	for _, tool := range []string{"setpriv", "powerprofilesctl", "gdbus", systemPython} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("needs %s (Debian packages util-linux, power-profiles-daemon, libglib2.0-bin, python3-gi)", tool)
		}
	}
	if err := exec.Command(systemPython, "-c", "from gi.repository import Gio").Run(); err != nil {
		t.Skipf("needs python3-gi for the Gio client: %v", err)
	}
	addr := testutil.StartSystemPolicyBus(t, "../../packaging/dbus/org.schedpolicyd.SchedPolicy1.conf").Addr
	pk := testutil.StartPolkitd(t, addr, "", "../../packaging/polkit/org.schedpolicyd.policy", "../../packaging/polkit/org.schedpolicyd.power-profiles.policy")
	st := startService(t, addr, Config{PowerProfilesAPI: PowerProfilesServe})
	testutil.Eventually(t, "both power-profiles names served", func() (bool, string) {
		a, _ := testutil.NameOwnedAt(addr, ppFree)
		b, _ := testutil.NameOwnedAt(addr, ppHadess)
		return a && b, ""
	})
	c := ppClients{addr: addr}
	knob := func(what string, pa policy.PowerAware, holds int) {
		t.Helper()
		if s := st.f.Published(); s.Knob.PowerAware != pa || len(s.Holds) != holds {
			t.Errorf("%s: power_aware %d with %d holds, want %d with %d", what, s.Knob.PowerAware, len(s.Holds), pa, holds)
		}
	}
	refused := func(what, out string, err error, action string) {
		t.Helper()
		if err == nil || !strings.Contains(out, "org.freedesktop.DBus.Error.AccessDenied") || !strings.Contains(out, "polkit refused "+action) {
			t.Errorf("%s: err=%v out=%q, want AccessDenied naming %s", what, err, out, action)
		}
	}

	// No rule: refused by polkit on both names, the unknown name too.
	out, err := c.pctl("set", "power-saver")
	refused("powerprofilesctl set", out, err, ppHadess+".switch-profile")
	out, err = c.pctl("set", "turbo")
	refused("powerprofilesctl set turbo", out, err, ppHadess+".switch-profile")
	out, err = c.pctl("launch", "-p", "performance", "true")
	refused("powerprofilesctl launch", out, err, ppHadess+".hold-profile")
	out, err = c.gdbusSet("power-saver")
	refused("gdbus Set", out, err, ppFree+".switch-profile")
	out, err = c.run("gdbus", "call", "--system", "--dest", ppFree, "--object-path", ppFreeP,
		"--method", ppFree+".HoldProfile", "performance", "r", "org.example.Gdbus")
	refused("gdbus HoldProfile", out, err, ppFree+".hold-profile")
	knob("after refused calls", policy.PowerAwareAuto, 0)

	// Our own action and Debian 12's (net.hadess) ones: powerprofilesctl
	// may, a client of the current name may not.
	pk.Restart(t, ppGrant(PolkitAction, ppHadess+".switch-profile", ppHadess+".hold-profile"))
	if out, err := c.pctl("set", "power-saver"); err != nil {
		t.Fatalf("powerprofilesctl set with net.hadess granted: %v %s", err, out)
	}
	knob("powerprofilesctl set power-saver", policy.PowerAwareOn, 0)
	out, err = c.gdbusSet("performance")
	refused("gdbus Set with only net.hadess granted", out, err, ppFree+".switch-profile")
	knob("after a refused gdbus Set", policy.PowerAwareOn, 0)

	// The current name's actions too.
	pk.Restart(t, ppGrant(ppHadess+".switch-profile", ppHadess+".hold-profile", ppFree+".switch-profile", ppFree+".hold-profile"))
	if out, err := c.gdbusSet("balanced"); err != nil {
		t.Fatalf("gdbus Set with %s granted: %v %s", ppFree, err, out)
	}
	knob("gdbus Set balanced", policy.PowerAwareAuto, 0)
	if out, err := c.pctl("set", "turbo"); err == nil || !strings.Contains(out, "org.freedesktop.DBus.Error.Failed") || !strings.Contains(out, `invalid profile name "turbo"`) {
		t.Errorf("authorised powerprofilesctl set turbo: err=%v out=%q, want Failed", err, out)
	}
	if out, err := c.pctl("set", "power-saver"); err != nil {
		t.Fatalf("powerprofilesctl set power-saver: %v %s", err, out)
	}

	// Setting the held profile keeps the hold and saves nothing: launch's
	// ReleaseProfile at the end succeeds, and power-saver comes back.
	out, err = c.pctl("launch", "-p", "performance", "-i", "org.example.Build", "--",
		"sh", "-c", "powerprofilesctl set performance && powerprofilesctl get && powerprofilesctl list-holds")
	if err != nil || !strings.Contains(out, "performance\nHold:\n  Profile:         performance\n  Application ID:  org.example.Build\n") {
		t.Errorf("launch, set the held profile inside: err=%v\n%s", err, out)
	}
	knob("after launch", policy.PowerAwareOn, 0)
	if s := st.f.Published(); s.Policy != policy.Powersaving {
		t.Errorf("after launch: policy %s, want powersaving (the choice made before it)", s.Policy)
	}

	// ProfileReleased: only to the holder, only for a user's change.
	mon := c.cmd("gdbus", "monitor", "--system", "--dest", ppFree)
	var monOut lockedLog
	mon.Stdout, mon.Stderr = &monOut, &monOut
	if err := mon.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mon.Process.Kill(); mon.Wait() })
	testutil.Eventually(t, "gdbus monitor watching", func() (bool, string) {
		return strings.Contains(monOut.String(), "The name "+ppFree+" is owned by"), monOut.String()
	})
	h := c.holder(t, ppFree, ppFreeP)
	leaver := c.holder(t, ppFree, ppFreeP)
	h.say(t, "hold performance")
	own := h.next(t)
	h.say(t, "release "+strings.TrimPrefix(own, "cookie "))
	if l := h.next(t); l != "released-own "+strings.TrimPrefix(own, "cookie ") {
		t.Fatalf("own release: %q", l)
	}
	leaver.say(t, "hold power-saver")
	if l := leaver.next(t); !strings.HasPrefix(l, "cookie ") {
		t.Fatalf("leaver's hold: %q", l)
	}
	leaver.in.Close() // it leaves the bus: its hold ends
	<-leaver.done
	testutil.Eventually(t, "the leaver's hold ended", func() (bool, string) {
		return len(st.f.Published().Holds) == 0, fmt.Sprint(st.f.Published().Holds)
	})
	h.say(t, "hold performance")
	kept := h.next(t)
	if out, err := c.pctl("set", "balanced"); err != nil { // the user's change
		t.Fatalf("powerprofilesctl set balanced: %v %s", err, out)
	}
	if l := h.next(t); l != "released "+strings.TrimPrefix(kept, "cookie ") {
		t.Errorf("the holder's first signal: %q, want released for %s (none for its own release)", l, kept)
	}
	knob("after the user's change", policy.PowerAwareAuto, 0)
	// A last change the monitor must see: signals reach it in order, so
	// it has seen everything sent before.
	if out, err := c.gdbusSet("performance"); err != nil {
		t.Fatalf("gdbus Set performance: %v %s", err, out)
	}
	testutil.Eventually(t, "gdbus monitor sees the last change", func() (bool, string) {
		return strings.Contains(monOut.String(), "{'ActiveProfile': <'performance'>}"), monOut.String()
	})
	if strings.Contains(monOut.String(), "ProfileReleased") {
		t.Errorf("another client received ProfileReleased:\n%s", monOut.String())
	}
}

// TestPowerProfilesCtl: the real powerprofilesctl, run by root (no polkit
// asked), sets and gets profiles through net.hadess.PowerProfiles and
// lists the service's profiles with the driver named schedpolicyd.
func TestPowerProfilesCtl(t *testing.T) {
	ctl, err := exec.LookPath("powerprofilesctl")
	if err != nil {
		t.Skip("needs powerprofilesctl (Debian package power-profiles-daemon)")
	}
	st := startService(t, "", Config{PowerProfilesAPI: PowerProfilesServe})
	env := append(os.Environ(), "DBUS_SYSTEM_BUS_ADDRESS="+st.addr)
	pctl := func(args ...string) string {
		t.Helper()
		cmd := exec.Command(ctl, args...)
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("powerprofilesctl %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	if out := pctl("set", "balanced"); out != "" {
		t.Errorf("set balanced printed %q", out)
	}
	if out := pctl("get"); out != "balanced\n" {
		t.Errorf("get = %q, want balanced", out)
	}
	list := pctl("list")
	for _, want := range []string{"* balanced:", "  performance:", "  power-saver:", "schedpolicyd"} {
		if !strings.Contains(list, want) {
			t.Errorf("list lacks %q:\n%s", want, list)
		}
	}
	pctl("set", "power-saver")
	st.f.waitCalls(t, `WriteKnobUnlessHeld power_aware "1" power-profiles`, `WriteKnobUnlessHeld power_aware "2" power-profiles`)
	if k := st.f.Published().Knob; k.PowerAware != policy.PowerAwareOn {
		t.Errorf("powerprofilesctl set power-saver → power_aware %d, want 2", k.PowerAware)
	}
	if out := pctl("get"); out != "power-saver\n" {
		t.Errorf("get = %q, want power-saver", out)
	}
}
