package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/schedpolicyd/schedpolicyd/daemon/placement/units"
	"github.com/schedpolicyd/schedpolicyd/internal/testutil"
)

// TestProbeUserManagersUnderRoot (issue 34): with the default manage
// (the users' slices in it) and placement systemd, probe reads the
// users' managers below its --sysfs-root's fs/cgroup, never the
// machine's /sys/fs/cgroup, and says per user whether cpuset is delegated
// now (and in use), why not, that the delegation comes at the next login,
// and whether the desktop says which app has the focus.
func TestProbeUserManagersUnderRoot(t *testing.T) {
	root := filepath.Join(t.TempDir(), "sys")
	testutil.CopyFixture(t, filepath.Join(topoFixtures, "adl-p-i7-1260p"), root)
	cg := filepath.Join(root, "fs/cgroup")
	write := func(rel, name, v string) string {
		t.Helper()
		d := filepath.Join(cg, rel)
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if name != "" {
			if err := os.WriteFile(filepath.Join(d, name), []byte(v+"\n"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		return d
	}
	write("", "cgroup.controllers", "cpuset cpu io memory pids")
	u1 := "user.slice/user-1000.slice/user@1000.service"
	write(u1, "cgroup.controllers", "cpuset cpu memory pids")
	write(u1, "cgroup.subtree_control", "cpu memory pids")
	app := write(u1+"/app.slice/app-gnome-firefox-1.scope", "", "")
	u2 := "user.slice/user-1001.slice/user@1001.service"
	write(u2, "cgroup.controllers", "cpu memory pids")
	write(u2+"/app.slice/app-kde-konsole-3.scope", "", "")
	if err := unix.Setxattr(app, units.FocusXattr, []byte("-1"), 0); err != nil {
		t.Skipf("the test directory's file system takes no user.* xattr (%v): the focus line cannot be checked here", err)
	}
	conf := filepath.Join(t.TempDir(), "systemd.conf")
	if err := os.WriteFile(conf, []byte("placement = \"systemd\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, r := runProbe(t, "--sysfs-root", root, "--config", conf)
	for _, line := range []string{
		"  manage:      schedpolicyd.slice system.slice app.slice background.slice session.slice\n",
		"  user:        user@1000.service: cpuset delegated now (none of its units uses it yet); its units are placed through it, from the user's next login if this manager was already running when cpuset was delegated\n",
		"    focus:     1 of its 1 apps carry user.xdg.inactive-since: the desktop says which app has the focus\n",
		"  user:        user@1001.service: placed as a whole, never confined: cpuset is not delegated to it now (its cgroup.controllers: cpu memory pids); the package's user@.service drop-in delegates it from the user's next login (schedpolicyd(8), USERS' UNITS)\n",
		"    focus:     none of its 1 apps carries user.xdg.inactive-since: the desktop says nothing of the focus; its apps are left unconfined\n",
	} {
		if !strings.Contains(out, line) {
			t.Errorf("probe lacks %q:\n%s", line, out)
		}
	}
	if len(r.UserManagers) != 2 || !r.UserManagers[0].Delegated || r.UserManagers[0].InUse || r.UserManagers[0].FocusMarked != 1 || r.UserManagers[1].Delegated || r.UserManagers[1].Apps != 1 {
		t.Errorf("JSON user_managers: %+v", r.UserManagers)
	}
}
