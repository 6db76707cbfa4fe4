// Package packaging holds no Go code; its tests check that the files the
// Debian package, the RPM and the Arch package install agree with each
// other and with the code.
package packaging

import (
	"encoding/xml"
	"os"
	"os/exec"
	"reflect"
	"regexp"
	"strings"
	"testing"
)

func read(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestDebActivation: the activation file is named after the bus name and
// points at the alias the unit installs (dbus-daemon(1): on the system bus
// the file is named after the bus name, and SystemdService= names the unit,
// here reached through its Alias=).
func TestDebActivation(t *testing.T) {
	const name = "org.schedpolicyd.SchedPolicy1"
	act := read(t, "dbus/"+name+".service")
	for _, want := range []string{"[D-BUS Service]\n", "Name=" + name + "\n", "User=root\n",
		"SystemdService=dbus-" + name + ".service\n", "Exec=/usr/sbin/schedpolicyd\n"} {
		if !strings.Contains(act, want) {
			t.Errorf("activation file lacks %q", want)
		}
	}
	unit := read(t, "../systemd/schedpolicyd.service")
	for _, want := range []string{"Alias=dbus-" + name + ".service\n", "BusName=" + name + "\n"} {
		if !strings.Contains(unit, want) {
			t.Errorf("unit lacks %q", want)
		}
	}
	if !strings.Contains(read(t, "dbus/"+name+".conf"), `<allow own="`+name+`"/>`) {
		t.Error("bus policy does not let root own the name")
	}
}

// polkitDefaults are an action's implicit authorisations.
type polkitDefaults struct {
	Any      string `xml:"allow_any"`
	Inactive string `xml:"allow_inactive"`
	Active   string `xml:"allow_active"`
}

// polkitActions are the actions of a polkit .policy file with their
// defaults, by id.
func polkitActions(t *testing.T, data string) map[string]polkitDefaults {
	t.Helper()
	var pc struct {
		Actions []struct {
			ID       string         `xml:"id,attr"`
			Defaults polkitDefaults `xml:"defaults"`
		} `xml:"action"`
	}
	if err := xml.Unmarshal([]byte(data), &pc); err != nil {
		t.Fatal(err)
	}
	out := map[string]polkitDefaults{}
	for _, a := range pc.Actions {
		if _, dup := out[a.ID]; dup {
			t.Errorf("action %s defined twice", a.ID)
		}
		out[a.ID] = a.Defaults
	}
	return out
}

// TestDebPolkit: our actions exist with the defaults the issues ask for
// (org.schedpolicyd.exempt: an administrator, remembered for a while, to
// exempt what is not the caller's own),
// and power-profiles-daemon's four actions (asked about on the
// power-profiles names) with power-profiles-daemon's defaults — the same
// as the file of the power-profiles-daemon installed here says, where one
// is (Debian 12's names only net.hadess.PowerProfiles.*): with both
// packages installed, polkit uses whichever file it reads first.
func TestDebPolkit(t *testing.T) {
	ours := polkitActions(t, read(t, "polkit/org.schedpolicyd.policy"))
	want := map[string]polkitDefaults{
		"org.schedpolicyd.set-policy": {Any: "auth_admin", Inactive: "auth_admin", Active: "yes"},
		"org.schedpolicyd.exempt":     {Any: "auth_admin", Inactive: "auth_admin", Active: "auth_admin_keep"},
	}
	if !reflect.DeepEqual(ours, want) {
		t.Errorf("org.schedpolicyd.policy: %+v, want %+v", ours, want)
	}
	pp := polkitActions(t, read(t, "polkit/org.schedpolicyd.power-profiles.policy"))
	ppd := polkitDefaults{Any: "no", Inactive: "no", Active: "yes"}
	want = map[string]polkitDefaults{}
	for _, ns := range []string{"org.freedesktop.UPower.PowerProfiles", "net.hadess.PowerProfiles"} {
		for _, verb := range []string{"switch-profile", "hold-profile"} {
			want[ns+"."+verb] = ppd
		}
	}
	if !reflect.DeepEqual(pp, want) {
		t.Errorf("org.schedpolicyd.power-profiles.policy: %+v, want %+v", pp, want)
	}
	found := 0
	for _, f := range []string{"net.hadess.PowerProfiles.policy", "power-profiles-daemon.policy"} {
		b, err := os.ReadFile("/usr/share/polkit-1/actions/" + f)
		if err != nil {
			continue
		}
		for id, d := range polkitActions(t, string(b)) {
			if w, ok := pp[id]; ok {
				found++
				if w != d {
					t.Errorf("%s: power-profiles-daemon's %s has defaults %+v, ours %+v", id, f, d, w)
				}
			}
		}
	}
	t.Logf("compared %d actions with the installed power-profiles-daemon's", found)
}

// TestDebMaintainerScripts: valid sh, start only where systemd runs, and
// the conffile list matches the shipped config.
func TestDebMaintainerScripts(t *testing.T) {
	scripts := []string{"postinst", "prerm", "postrm", "../build-deb.sh", "../deb-test.sh",
		"../build-rpm.sh", "../make-tarball.sh", "../pkg-test.sh"}
	// The systemd test's scripts (lib.sh is sourced, not run).
	for _, s := range []string{"rootfs.sh", "container.sh", "container-guest.sh", "run.sh", "vm.sh", "vm-guest.sh"} {
		scripts = append(scripts, "../systemd-test/"+s)
	}
	for _, s := range scripts {
		p := "debian/" + s
		if out, err := exec.Command("sh", "-n", p).CombinedOutput(); err != nil {
			t.Errorf("sh -n %s: %v %s", p, err, out)
		}
		if fi, err := os.Stat(p); err != nil || fi.Mode()&0o111 == 0 {
			t.Errorf("%s is not executable", p)
		}
	}
	post := read(t, "debian/postinst")
	start := strings.Index(post, "deb-systemd-invoke")
	guard := strings.Index(post, "if [ -d /run/systemd/system ]")
	if start < 0 || guard < 0 || guard > start {
		t.Error("postinst must start the unit only under `[ -d /run/systemd/system ]`")
	}
	if !strings.Contains(read(t, "debian/postrm"), "rm -rf /var/lib/schedpolicyd") {
		t.Error("postrm purge keeps /var/lib/schedpolicyd")
	}
	if got := strings.TrimSpace(read(t, "debian/conffiles")); got != "/etc/schedpolicyd/schedpolicyd.conf" {
		t.Errorf("conffiles = %q", got)
	}
	if !regexp.MustCompile(`^schedpolicyd \([0-9][^)-]*\) `).MatchString(read(t, "debian/changelog")) {
		t.Error("changelog's top entry is not a native version of schedpolicyd")
	}
}

// TestDebCompletions: both completion files offer every schedpolicyctl
// command and policy.
func TestDebCompletions(t *testing.T) {
	bash := read(t, "completions/schedpolicyctl.bash")
	zsh := read(t, "completions/_schedpolicyctl")
	if out, err := exec.Command("bash", "-n", "completions/schedpolicyctl.bash").CombinedOutput(); err != nil {
		t.Errorf("bash -n: %v %s", err, out)
	}
	for _, w := range []string{"status", "set", "auto", "reset", "watch", "workloads", "exempt", "unexempt", "workload-policy", "run", "launch", "rebalance", "energy",
		"performance", "balance", "powersaving", "--json", "--bus", "--name", "--policy", "--reason"} {
		if !strings.Contains(bash, w) {
			t.Errorf("bash completion lacks %s", w)
		}
		if !strings.Contains(zsh, w) {
			t.Errorf("zsh completion lacks %s", w)
		}
	}
	if !strings.HasPrefix(zsh, "#compdef schedpolicyctl\n") {
		t.Error("zsh completion must start with #compdef")
	}
}

// TestDebManPages: every page renders without groff warnings.
func TestDebManPages(t *testing.T) {
	if _, err := exec.LookPath("groff"); err != nil {
		t.Skip("needs groff (Debian package groff-base)")
	}
	for _, p := range []string{"man/schedpolicyd.8", "man/schedpolicyctl.1", "man/schedpolicyd.conf.5"} {
		cmd := exec.Command("groff", "-man", "-Tutf8", "-ww", "-z", p)
		if out, err := cmd.CombinedOutput(); err != nil || len(out) > 0 {
			t.Errorf("groff %s: %v\n%s", p, err, out)
		}
	}
}

// TestPackageVersions: the RPM spec and the PKGBUILD carry the version of
// the Debian changelog's top entry, the spec's %changelog starts with it,
// and the PKGBUILD and its install script are valid bash.
func TestPackageVersions(t *testing.T) {
	m := regexp.MustCompile(`^schedpolicyd \(([^)]+)\) `).FindStringSubmatch(read(t, "debian/changelog"))
	if m == nil {
		t.Fatal("no version in debian/changelog")
	}
	version := m[1]
	spec := read(t, "rpm/schedpolicyd.spec")
	if got := regexp.MustCompile(`(?m)^Version:\s+(\S+)$`).FindStringSubmatch(spec); got == nil || got[1] != version {
		t.Errorf("spec Version: %v, want %s", got, version)
	}
	_, log, ok := strings.Cut(spec, "\n%changelog\n")
	if !ok {
		t.Fatal("spec has no changelog section")
	}
	first, _, _ := strings.Cut(log, "\n")
	if !regexp.MustCompile(`^\* \w{3} \w{3} \d{2} \d{4} .+ - ` + regexp.QuoteMeta(version) + `-\d+$`).MatchString(first) {
		t.Errorf("spec's %%changelog starts with %q, want an entry for %s", first, version)
	}
	pkgbuild := read(t, "arch/PKGBUILD")
	if !strings.Contains(pkgbuild, "\npkgver="+version+"\n") {
		t.Errorf("PKGBUILD's pkgver is not %s", version)
	}
	for _, p := range []string{"arch/PKGBUILD", "arch/schedpolicyd.install"} {
		if out, err := exec.Command("bash", "-n", p).CombinedOutput(); err != nil {
			t.Errorf("bash -n %s: %v %s", p, err, out)
		}
	}
}

// TestManPagesNameOnlyShippedDocs: a man page that names a page of docs/
// says that it is the source tree's, since no package installs docs/.
func TestManPagesNameOnlyShippedDocs(t *testing.T) {
	for _, p := range []string{"man/schedpolicyd.8", "man/schedpolicyctl.1", "man/schedpolicyd.conf.5"} {
		text := strings.Join(strings.Fields(read(t, p)), " ")
		for _, m := range regexp.MustCompile(`docs/[A-Z_-]+\.md[^.;)]*`).FindAllString(text, -1) {
			if !strings.Contains(m, "source tree") {
				t.Errorf("%s names %q without saying it is the source tree's (the package does not ship docs/)", p, m)
			}
		}
	}
}

// TestDelegateCpusetDropIn (issue 34): the user@.service drop-in that
// delegates cpuset repeats upstream's list (pids memory cpu) and adds
// cpuset, in a [Service] section; the three packages install it under
// the unit directory's user@.service.d/ by the same name (the RPM in
// %install and %files), so an administrator masks it with that name
// under /etc/systemd/system/user@.service.d/; and no maintainer script
// restarts or reloads a user's manager (it applies at the next login).
func TestDelegateCpusetDropIn(t *testing.T) {
	const name = "50-schedpolicyd-delegate-cpuset.conf"
	var section string
	var delegate []string
	for _, l := range strings.Split(read(t, "../systemd/"+name), "\n") {
		l = strings.TrimSpace(l)
		switch {
		case l == "" || strings.HasPrefix(l, "#"):
		case strings.HasPrefix(l, "["):
			section = l
		case strings.HasPrefix(l, "Delegate="):
			if section != "[Service]" {
				t.Errorf("Delegate= in %s, want [Service]", section)
			}
			delegate = append(delegate, strings.TrimPrefix(l, "Delegate="))
		default:
			t.Errorf("unexpected line %q", l)
		}
	}
	if !reflect.DeepEqual(delegate, []string{"pids memory cpu cpuset"}) {
		t.Errorf("Delegate= lines %q, want one: pids memory cpu cpuset", delegate)
	}
	for _, w := range []struct{ file, want string }{
		{"build-deb.sh", `"$root/lib/systemd/system/user@.service.d/` + name + `"`},
		{"rpm/schedpolicyd.spec", `%{buildroot}%{_unitdir}/user@.service.d/` + name + "\n"},
		{"rpm/schedpolicyd.spec", "\n%{_unitdir}/user@.service.d/" + name + "\n"},
		{"arch/PKGBUILD", `"$pkgdir/usr/lib/systemd/system/user@.service.d/` + name + `"`},
		{"deb-test.sh", "./lib/systemd/system/user@.service.d/" + name},
	} {
		if !strings.Contains(read(t, w.file), w.want) {
			t.Errorf("%s does not install the drop-in: no %q", w.file, w.want)
		}
	}
	restart := regexp.MustCompile(`(?m)^[^#]*(systemctl|deb-systemd-invoke)[^\n]*user@`)
	for _, s := range []string{"debian/postinst", "debian/prerm", "debian/postrm", "arch/schedpolicyd.install", "rpm/schedpolicyd.spec"} {
		if m := restart.FindString(read(t, s)); m != "" {
			t.Errorf("%s touches a user's manager: %q", s, m)
		}
	}
	for _, s := range []string{"debian/postinst", "arch/schedpolicyd.install", "rpm/schedpolicyd.spec"} {
		if !strings.Contains(read(t, s), "from the user's next login") {
			t.Errorf("%s does not say the delegation applies at the next login", s)
		}
	}
}
