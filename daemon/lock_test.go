package daemon

// One manager per managed parent cgroup, and lock
// files that cannot be turned against root.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/sirupsen/logrus"
	"golang.org/x/sys/unix"

	"github.com/schedpolicyd/schedpolicyd/daemon/statefile"
	"github.com/schedpolicyd/schedpolicyd/internal/testutil"
)

// startOutcome runs a daemon with cfg and reports how its start ended:
// the error of a refused start, or nil once it was ready (it is then
// stopped). It does not time out: a daemon that neither starts nor fails
// is the test binary's -timeout to catch.
func startOutcome(t *testing.T, cfg Config) error {
	t.Helper()
	if cfg.Log == nil {
		log := logrus.New()
		log.SetOutput(testutil.LogWriter(t))
		cfg.Log = log
	}
	d, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	errc := make(chan error, 1)
	go func() { errc <- d.Run(ctx) }()
	select {
	case err := <-errc:
		if err == nil {
			t.Fatal("Run returned nil before it was ready")
		}
		return err
	case <-d.Ready():
		cancel()
		if err := <-errc; err != nil {
			t.Errorf("stopping the started daemon: %v", err)
		}
		return nil
	}
}

// quietCfg is a daemon without placement, bus or events on m's machine.
func quietCfg(m mockLaptop, tree, state string) Config {
	return Config{SysfsRoot: m.sys, CgroupRoot: "", TreeDir: tree, TreeBackend: "plain",
		StateDir: state, Bus: "none", Events: "none", RecheckInterval: -1}
}

// TestCgroupParentSecondManagerRefused (case 4): a daemon with its own
// state and tree directories but the managed parent of a running one
// refuses to start, names the first one's pid and the parent, and writes
// nothing: the first keeps its workloads and placement.
func TestCgroupParentSecondManagerRefused(t *testing.T) {
	m := newMockLaptop(t)
	d, _, _ := m.start(t)
	b := filepath.Join(m.managed, "b/cpuset.cpus")
	testutil.Eventually(t, "two workloads on all CPUs", func() (bool, string) {
		n := len(d.Snapshot().Workloads)
		return n == 2 && testutil.ReadTrim(t, b) == "0-7", fmt.Sprint(n, " ", testutil.ReadTrim(t, b))
	})
	other := t.TempDir()
	cfg := quietCfg(m, filepath.Join(other, "tree"), filepath.Join(other, "state"))
	cfg.CgroupRoot = m.managed
	err := startOutcome(t, cfg)
	if !errors.Is(err, ErrAlreadyRunning) {
		t.Fatalf("second daemon on the same parent: Run = %v, want ErrAlreadyRunning", err)
	}
	for _, want := range []string{"pid " + strconv.Itoa(os.Getpid()), m.managed} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("refusal %q does not name %q", err, want)
		}
	}
	if st, _ := statefile.LoadState(filepath.Join(other, "state")); len(st.Cgroups) != 0 {
		t.Errorf("the refused daemon saved records %v", st.Cgroups)
	}
	if n := len(d.Snapshot().Workloads); n != 2 || testutil.ReadTrim(t, b) != "0-7" {
		t.Errorf("first daemon disturbed: %d workloads, b=%s", n, testutil.ReadTrim(t, b))
	}
}

// TestLockFileSymlinkRefused (case 7): a lock file that is a symlink or a
// hard link to another file makes the daemon refuse to start, and that
// file is left exactly as it was (the lock was opened with O_NOFOLLOW and
// truncated only when it is a regular file of ours with one link).
func TestLockFileSymlinkRefused(t *testing.T) {
	m := newMockLaptop(t)
	dir := t.TempDir()
	victim := filepath.Join(dir, "victim")
	const precious = "root:precious:0:0\n"
	if err := os.WriteFile(victim, []byte(precious), 0o644); err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]struct {
		plant func(state, tree string) error
		want  string
	}{
		"state lock symlink":   {func(state, _ string) error { return os.Symlink(victim, filepath.Join(state, statefile.LockFile)) }, "symbolic link"},
		"tree lock symlink":    {func(_, tree string) error { return os.Symlink(victim, tree+".lock") }, "symbolic link"},
		"state lock hard link": {func(state, _ string) error { return os.Link(victim, filepath.Join(state, statefile.LockFile)) }, "hard links"},
		"tree lock hard link":  {func(_, tree string) error { return os.Link(victim, tree+".lock") }, "hard links"},
		"tree lock a FIFO":     {func(_, tree string) error { return unix.Mkfifo(tree+".lock", 0o644) }, "not a regular file"},
	} {
		t.Run(name, func(t *testing.T) {
			base := t.TempDir()
			state, tree := filepath.Join(base, "state"), filepath.Join(base, "run", "tree")
			os.MkdirAll(state, 0o755)
			os.MkdirAll(filepath.Dir(tree), 0o755)
			if err := c.plant(state, tree); err != nil {
				t.Fatal(err)
			}
			err := startOutcome(t, quietCfg(m, tree, state))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("Run = %v, want a refusal saying %q", err, c.want)
			}
			if b, _ := os.ReadFile(victim); string(b) != precious {
				t.Fatalf("the victim file now holds %q", b)
			}
		})
	}
}

// TestStateAndTreeDirsOthersCanWriteRefused (case 7): a state directory,
// tree directory or directory holding the tree's lock that its group or
// others can write (sticky or not), or that another user owns, makes the
// daemon refuse to start with an error naming it; a sticky world-writable
// ancestor (like /tmp) is fine.
func TestStateAndTreeDirsOthersCanWriteRefused(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to give a directory to another user")
	}
	m := newMockLaptop(t)
	for name, c := range map[string]struct {
		which string // "state", "tree" or "treeparent"
		mode  os.FileMode
		owner int
		want  string
	}{
		"state 0777":          {"state", 0o777, 0, "writable by its group or by others"},
		"state 0775":          {"state", 0o775, 0, "writable by its group or by others"},
		"state 0757":          {"state", 0o757, 0, "writable by its group or by others"},
		"state sticky 1777":   {"state", 0o777 | os.ModeSticky, 0, "writable by its group or by others"},
		"state another owner": {"state", 0o755, 65534, "owned by uid 65534"},
		"tree's parent 1777":  {"treeparent", 0o777 | os.ModeSticky, 0, "writable by its group or by others"},
		"tree's parent 0770":  {"treeparent", 0o770, 0, "writable by its group or by others"},
		"tree's parent owned": {"treeparent", 0o755, 65534, "owned by uid 65534"},
		"tree 0777":           {"tree", 0o777, 0, "writable by its group or by others"},
		"tree another owner":  {"tree", 0o755, 65534, "owned by uid 65534"},
	} {
		t.Run(name, func(t *testing.T) {
			base := t.TempDir()
			dirs := map[string]string{"state": filepath.Join(base, "state"), "treeparent": filepath.Join(base, "run"), "tree": filepath.Join(base, "run", "tree")}
			for _, p := range dirs {
				os.MkdirAll(p, 0o755)
			}
			p := dirs[c.which]
			if err := os.Chmod(p, c.mode); err != nil {
				t.Fatal(err)
			}
			if err := os.Chown(p, c.owner, c.owner); err != nil {
				t.Fatal(err)
			}
			err := startOutcome(t, quietCfg(m, dirs["tree"], dirs["state"]))
			if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), p) {
				t.Errorf("Run = %v, want a refusal naming %s and saying %q", err, p, c.want)
			}
			if _, err := os.Lstat(filepath.Join(dirs["state"], statefile.LockFile)); c.which == "state" && err == nil {
				t.Errorf("a lock file was created in the refused state dir")
			}
		})
	}
	t.Run("sticky world-writable ancestor", func(t *testing.T) {
		base := t.TempDir()
		if err := os.Chmod(base, 0o777|os.ModeSticky); err != nil {
			t.Fatal(err)
		}
		if err := startOutcome(t, quietCfg(m, filepath.Join(base, "run", "tree"), filepath.Join(base, "state"))); err != nil {
			t.Errorf("Run = %v under a 1777 ancestor, want a start", err)
		}
	})
}

// TestTreeDirSymlinkSecondDaemonRefused (case 7): a second daemon whose
// --tree-dir is a symlink to a running daemon's tree (or lies below a
// symlink to its directory) locks the same resolved path, so it refuses to
// start naming the first's pid, and the first's tree keeps serving.
func TestTreeDirSymlinkSecondDaemonRefused(t *testing.T) {
	m := newMockLaptop(t)
	d, _, _ := m.start(t)
	knob := filepath.Join(m.tree, TreePrefix, "current_sched_policy")
	other := t.TempDir()
	links := map[string]string{
		"the tree dir a symlink":   filepath.Join(other, "tree-link"),
		"its parent a symlink":     filepath.Join(other, "parent-link", filepath.Base(m.tree)),
		"a relative symlink chain": filepath.Join(other, "rel-link"),
	}
	if err := os.Symlink(m.tree, links["the tree dir a symlink"]); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Dir(m.tree), filepath.Join(other, "parent-link")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("tree-link", links["a relative symlink chain"]); err != nil {
		t.Fatal(err)
	}
	for name, link := range links {
		t.Run(name, func(t *testing.T) {
			err := startOutcome(t, quietCfg(m, link, t.TempDir()))
			if !errors.Is(err, ErrAlreadyRunning) || !strings.Contains(err.Error(), "pid "+strconv.Itoa(os.Getpid())) {
				t.Errorf("Run = %v, want ErrAlreadyRunning naming pid %d", err, os.Getpid())
			}
			if got := testutil.ReadTrim(t, knob); got != "performance" {
				t.Errorf("first daemon's tree reads %q", got)
			}
		})
	}
	if d.Snapshot().Policy != "performance" {
		t.Error("first daemon disturbed")
	}
}
