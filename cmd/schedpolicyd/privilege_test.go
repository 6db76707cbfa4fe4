package main

// Privilege boundaries with the real binary: the FUSE tree
// enforces its modes for other users, workload names cannot leave the
// managed parent, and the daemon writes only inside the managed cgroup
// parent, its tree, its state directory and the boost file (every
// write-mode open, mkdir, rename and unlink recorded with strace), creating
// nothing world-writable even under umask 0.

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/godbus/dbus/v5"

	"github.com/schedpolicyd/schedpolicyd/daemon"
	"github.com/schedpolicyd/schedpolicyd/daemon/bus"
	"github.com/schedpolicyd/schedpolicyd/internal/testutil"
)

// TestPrivilegeBoundaries runs the daemon under strace with umask 0 and
// drives every writing path: adoption, packing on battery, boost off, a
// tree write, a workload created over D-Bus, a clean stop.
func TestPrivilegeBoundaries(t *testing.T) {
	requireMachine(t)
	for _, tool := range []string{"strace", "setpriv"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("needs %s (Debian packages strace, util-linux)", tool)
		}
	}
	bin := buildDaemon(t)
	addr := testutil.StartBus(t, testutil.BusOptions{}).Addr
	sys := mockMachine(t, "ac-offline-battery-unknown")
	boost := filepath.Join(sys, "devices/system/cpu/cpufreq/boost")
	testutil.Put(t, boost, "1")
	cg := newV1Parent(t)
	cg.child(t, "w1", cg.cpus)
	cg.spin(t, "w1")
	// The tree lives under a directory others may enter, so that nobody
	// reaches the mount point and the permission check is the mount's.
	base, err := os.MkdirTemp("", "spd-priv-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	os.Chmod(base, 0o755)
	stateDir, treeDir := filepath.Join(base, "state"), filepath.Join(base, "run", "tree")
	trace := filepath.Join(t.TempDir(), "strace.out")
	knob := filepath.Join(treeDir, daemon.TreePrefix)

	p := startDaemonProc(t, "sh", "-c", `umask 000; exec "$@"`, "sh",
		"strace", "-f", "-qq", "-y", "-o", trace, "-e", "trace=open,openat,openat2,creat,mkdir,mkdirat,rename,renameat,renameat2,unlink,unlinkat,rmdir,truncate,chmod,fchmodat,symlink,symlinkat,link,linkat",
		bin, "--sysfs-root", sys, "--cgroup-root", cg.dir, "--tree-dir", treeDir, "--tree-backend", "fuse",
		"--state-dir", stateDir, "--bus", addr, "--events", "fsnotify", "--debounce", "50ms", "--sample-interval", "200ms",
		"--boost-on-battery", "off", "--config", emptyConf(t), "--log-level", "debug")
	// The lock file's first line is the pid (then the directories made).
	pidLine, _, _ := strings.Cut(testutil.ReadTrim(t, treeDir+".lock"), "\n")
	daemonPid, _ := strconv.Atoi(pidLine)
	if daemonPid <= 0 {
		t.Fatalf("no daemon pid in %s.lock", treeDir)
	}

	t.Run("mount options", func(t *testing.T) {
		b, _ := os.ReadFile("/proc/self/mountinfo")
		var line string
		for _, l := range strings.Split(string(b), "\n") {
			if f := strings.Fields(l); len(f) > 4 && f[4] == treeDir {
				line = l
			}
		}
		if line == "" {
			t.Fatalf("no mount at %s", treeDir)
		}
		for _, opt := range []string{"default_permissions", "allow_other"} {
			if !strings.Contains(line, opt) {
				t.Errorf("tree mount lacks %s: %s", opt, line)
			}
		}
	})

	t.Run("non-root", func(t *testing.T) {
		nobody := func(script string) (string, error) {
			out, err := exec.Command("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "sh", "-c", script).CombinedOutput()
			return string(out), err
		}
		// Reading works for everyone (allow_other; not ENOENT or EACCES).
		for _, f := range []string{"current_sched_policy", "power_aware", "power_source", "available_sched_policy"} {
			if out, err := nobody("cat " + knob + "/" + f); err != nil || out == "" {
				t.Errorf("nobody: cat %s: %v %q", f, err, out)
			}
		}
		// Writing a 0644 or 0444 file is refused by the kernel's
		// permission check: EACCES, and nothing changes.
		for _, f := range []string{"current_sched_policy", "power_aware", "power_aware_policy", "power_source"} {
			out, err := nobody("echo 2 > " + knob + "/" + f)
			if err == nil || !strings.Contains(out, "Permission denied") {
				t.Errorf("nobody: echo > %s: %v %q, want Permission denied", f, err, out)
			}
		}
		for _, op := range []string{"rm -f " + knob + "/power_aware", "mkdir " + knob + "/x", "touch " + knob + "/new"} {
			if out, err := nobody(op); err == nil {
				t.Errorf("nobody: %s succeeded: %q", op, out)
			}
		}
		if got := testutil.ReadTrim(t, knob+"/power_aware"); got != "1" {
			t.Errorf("power_aware = %s after refused writes, want 1", got)
		}
	})

	t.Run("workload names cannot escape", func(t *testing.T) {
		conn, err := dbus.Connect(addr)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		obj := conn.Object(bus.Name, bus.ObjectPath)
		testutil.WaitFor(t, "name", 10*time.Second, func() (bool, string) { return testutil.NameOwnedAt(addr, bus.Name) })
		before, _ := os.ReadDir(filepath.Dir(cg.dir))
		for _, name := range []string{"..", "../escape", "a/b", "/abs", ".hidden", "cgroup.procs", "cpuset.cpus", "tasks", "x\ny", strings.Repeat("n", 65), ""} {
			call := obj.Call(bus.Interface+".CreateWorkload", 0, name, uint32(os.Getpid()))
			if e, ok := call.Err.(dbus.Error); !ok || e.Name != "org.freedesktop.DBus.Error.InvalidArgs" {
				t.Errorf("CreateWorkload(%q) = %v, want InvalidArgs", name, call.Err)
			}
		}
		after, _ := os.ReadDir(filepath.Dir(cg.dir))
		if len(after) != len(before) {
			t.Errorf("the cpuset root changed: %d → %d entries", len(before), len(after))
		}
		if kids := subdirs(cg.dir); len(kids) != 1 || kids[0] != "w1" {
			t.Errorf("managed parent holds %v, want only w1", kids)
		}
		// A valid one, so the creating path is traced: busctl exec'd by a
		// shell that passes its own PID, so the bus credentials match.
		out, err := exec.Command("sh", "-c", `exec busctl --address="$0" call `+bus.Name+` `+string(bus.ObjectPath)+` `+bus.Interface+` CreateWorkload su made $$`, addr).CombinedOutput()
		if err != nil {
			t.Fatalf("CreateWorkload(made) through busctl: %v %s", err, out)
		}
		if want := fmt.Sprintf("s %q\n", cg.dir+"/made"); string(out) != want {
			t.Errorf("CreateWorkload reply %q, want %q", out, want)
		}
	})

	// Writing paths: a tree write, battery (pack, boost off), AC, stop.
	testutil.Write(t, knob+"/power_aware_policy", "balance")
	onBattery(t, sys)
	testutil.WaitFor(t, "packed with boost off", 15*time.Second, func() (bool, string) {
		a := cg.cpusOf(t, "w1")
		return single(a) && testutil.ReadTrim(t, boost) == "0", a
	})
	onAC(t, sys)
	testutil.WaitFor(t, "spread", 15*time.Second, func() (bool, string) {
		a := cg.cpusOf(t, "w1")
		return a == cg.cpus, a
	})
	syscall.Kill(daemonPid, syscall.SIGTERM)
	select {
	case err := <-p.exited:
		p.exited <- err // for the cleanup
	case <-time.After(20 * time.Second):
		t.Fatal("daemon under strace did not exit")
	}

	t.Run("writes stay inside", func(t *testing.T) {
		b, err := os.ReadFile(trace)
		if err != nil {
			t.Fatal(err)
		}
		allowed := []string{cg.dir + "/", stateDir + "/", treeDir + "/", treeDir + ".lock", boost}
		exact := map[string]bool{cg.dir: true, stateDir: true, treeDir: true, filepath.Dir(treeDir): true,
			"/dev/fuse": true, "/dev/null": true,
			// The CPU pressure trigger (a PSI trigger is armed by writing
			// to the file; cgroup v1 has only the machine-wide one).
			"/proc/pressure/cpu": true}
		writes := 0
		for _, w := range tracedWrites(string(b)) {
			writes++
			ok := exact[w.path]
			for _, a := range allowed {
				ok = ok || strings.HasPrefix(w.path, a) || w.path == strings.TrimSuffix(a, "/")
			}
			if !ok {
				t.Errorf("wrote outside its places: %s", w.line)
			}
		}
		if writes < 10 {
			t.Errorf("only %d writing calls traced; is the trace complete?\n%s", writes, b)
		}
		t.Logf("%d writing calls traced, all inside the managed parent, tree, state dir, boost file and the PSI trigger", writes)
		if testing.Verbose() {
			for _, w := range tracedWrites(string(b)) {
				t.Log(w.path)
			}
		}
	})

	t.Run("nothing world-writable", func(t *testing.T) {
		for _, dir := range []string{stateDir, filepath.Dir(treeDir)} {
			filepath.Walk(dir, func(p string, info os.FileInfo, err error) error {
				if err == nil && info.Mode().Perm()&0o002 != 0 {
					t.Errorf("%s is world-writable (%v) under umask 0", p, info.Mode())
				}
				return nil
			})
		}
		if info, err := os.Stat(cg.dir + "/made"); err == nil && info.Mode().Perm()&0o002 != 0 {
			t.Errorf("created workload %s is world-writable (%v)", cg.dir+"/made", info.Mode())
		}
	})
}

type tracedWrite struct{ path, line string }

var (
	// openat(AT_FDCWD</x>, "/abs/path", O_WRONLY|O_CREAT|O_CLOEXEC, 0644) = 3</abs/path>
	traceOpen = regexp.MustCompile(`\b(open|openat|openat2|creat)\((?:[^,]*, )?"([^"]*)", ([A-Z_|]+)`)
	// mkdirat(AT_FDCWD</x>, "/p", 0755), renameat2(..., "/a", ..., "/b", 0), unlinkat(3</dir>, "name", 0)
	traceOther = regexp.MustCompile(`\b(mkdir|mkdirat|rename|renameat|renameat2|unlink|unlinkat|rmdir|truncate|chmod|fchmodat|symlink|symlinkat|link|linkat)\((.*)\)\s+=`)
	traceStr   = regexp.MustCompile(`(?:(\d+)<([^>]*)>, )?"([^"]*)"`)
	traceDirFd = regexp.MustCompile(`^(\d+)<([^>]*)>, "`)
)

// tracedWrites lists the paths of every writing call in an strace -y log
// that succeeded: opens with O_WRONLY, O_RDWR, O_CREAT or O_TRUNC, and
// every mkdir, rename, unlink, rmdir, truncate, chmod and link. Relative
// names are resolved against the directory fd strace printed with -y.
func tracedWrites(log string) []tracedWrite {
	var out []tracedWrite
	for _, line := range strings.Split(log, "\n") {
		if strings.Contains(line, "= -1 ") || strings.Contains(line, "<unfinished") {
			continue
		}
		if m := traceOpen.FindStringSubmatch(line); m != nil {
			flags := m[3]
			if !strings.Contains(flags, "O_WRONLY") && !strings.Contains(flags, "O_RDWR") && !strings.Contains(flags, "O_CREAT") && !strings.Contains(flags, "O_TRUNC") {
				continue
			}
			out = append(out, tracedWrite{resolve(line, m[0], m[2]), line})
			continue
		}
		if m := traceOther.FindStringSubmatch(line); m != nil {
			for _, s := range traceStr.FindAllStringSubmatch(m[2], -1) {
				p := s[3]
				if !filepath.IsAbs(p) && s[2] != "" {
					p = filepath.Join(s[2], p)
				}
				out = append(out, tracedWrite{p, line})
			}
		}
	}
	return out
}

func resolve(line, call, p string) string {
	if filepath.IsAbs(p) {
		return filepath.Clean(p)
	}
	args := call[strings.IndexByte(call, '(')+1:]
	if m := traceDirFd.FindStringSubmatch(args); m != nil {
		return filepath.Join(m[2], p)
	}
	return fmt.Sprintf("(relative) %s", p)
}

// subdirs lists the names of the directories in dir.
func subdirs(dir string) []string {
	var out []string
	es, _ := os.ReadDir(dir)
	for _, e := range es {
		if e.IsDir() {
			out = append(out, e.Name())
		}
	}
	return out
}
