package testutil

import (
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

// PolkitdBinary is Debian's polkitd (package polkitd).
const PolkitdBinary = "/usr/lib/polkit-1/polkitd"

// Polkitd is the real polkitd serving one private bus, in a mount
// namespace of its own where the directories it reads actions and rules
// from (/usr/share/polkit-1/actions, /etc/polkit-1/rules.d,
// /usr/share/polkit-1/rules.d) are temporary ones: it knows only the
// action files the test gave it and the rules the test wrote, and
// nothing of the machine's own is read or changed.
type Polkitd struct {
	addr    string
	actions string // the directory bound over the actions directory
	rules   string // the one bound over /etc/polkit-1/rules.d
	empty   string // the one bound over /usr/share/polkit-1/rules.d

	mu  sync.Mutex
	cmd *exec.Cmd
	log LockedBuffer
}

// StartPolkitd starts polkitd on the bus at addr (a system-like bus whose
// policy lets polkitd's user own org.freedesktop.PolicyKit1:
// StartSystemPolicyBus) with the action files actions and the polkit
// rules (JavaScript, "" for none), and returns once it owns
// org.freedesktop.PolicyKit1. It skips t unless the test runs as root
// with polkitd and unshare installed; the test's cleanup stops it, and
// logs its output when t failed.
func StartPolkitd(t testing.TB, addr string, rules string, actions ...string) *Polkitd {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: polkitd runs in a mount namespace of its own and switches to its own user")
	}
	if _, err := os.Stat(PolkitdBinary); err != nil {
		t.Skipf("needs polkitd (Debian package polkitd): %v", err)
	}
	if _, err := exec.LookPath("unshare"); err != nil {
		t.Skip("needs unshare (Debian package util-linux)")
	}
	dir := t.TempDir()
	p := &Polkitd{addr: addr, actions: filepath.Join(dir, "actions"), rules: filepath.Join(dir, "rules"), empty: filepath.Join(dir, "empty")}
	for _, d := range []string{p.actions, p.rules, p.empty} {
		// polkitd reads them as its own user.
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, a := range actions {
		b, err := os.ReadFile(a)
		if err != nil {
			t.Fatal(err)
		}
		WriteFile(t, filepath.Join(p.actions, filepath.Base(a)), string(b))
	}
	p.writeRules(t, rules)
	t.Cleanup(func() {
		p.stop()
		if t.Failed() {
			t.Logf("polkitd:\n%s", p.log.String())
		}
	})
	p.start(t)
	return p
}

// Restart stops polkitd, replaces its rules with rules and starts it
// again, returning once it owns its name: the rules in force are then
// exactly these (polkitd also reloads rules it sees change, but at a
// moment of its own).
func (p *Polkitd) Restart(t testing.TB, rules string) {
	t.Helper()
	p.stop()
	p.writeRules(t, rules)
	p.start(t)
}

func (p *Polkitd) writeRules(t testing.TB, rules string) {
	t.Helper()
	f := filepath.Join(p.rules, "50-test.rules")
	if rules == "" {
		if err := os.Remove(f); err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
		return
	}
	WriteFile(t, f, rules)
	if err := os.Chmod(f, 0o644); err != nil {
		t.Fatal(err)
	}
}

func (p *Polkitd) start(t testing.TB) {
	t.Helper()
	cmd := exec.Command("unshare", "--mount", "--propagation", "private", "sh", "-c",
		`mount --bind "$0" /usr/share/polkit-1/actions && mount --bind "$1" /etc/polkit-1/rules.d && `+
			`mount --bind "$2" /usr/share/polkit-1/rules.d && exec "$3" --no-debug`,
		p.actions, p.rules, p.empty, PolkitdBinary)
	cmd.Env = append(os.Environ(), "DBUS_SYSTEM_BUS_ADDRESS="+p.addr)
	cmd.Stdout, cmd.Stderr = &p.log, &p.log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	p.mu.Lock()
	p.cmd = cmd
	p.mu.Unlock()
	Eventually(t, "polkitd owns org.freedesktop.PolicyKit1", func() (bool, string) {
		select {
		case <-exited:
			t.Fatalf("polkitd exited:\n%s", p.log.String())
		default:
		}
		return NameOwnedAt(p.addr, "org.freedesktop.PolicyKit1")
	})
}

// stop kills polkitd and waits until its name is free again.
func (p *Polkitd) stop() {
	p.mu.Lock()
	cmd := p.cmd
	p.cmd = nil
	p.mu.Unlock()
	if cmd == nil {
		return
	}
	cmd.Process.Kill()
	// Wait is the goroutine's (start); the name goes with the process.
	Poll(DefaultBound, func() (bool, string) {
		owned, _ := NameOwnedAt(p.addr, "org.freedesktop.PolicyKit1")
		return !owned, ""
	})
}
