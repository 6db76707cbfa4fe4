package cgroupfs

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/schedpolicyd/schedpolicyd/internal/testutil"
)

// TestCgroupParentRelocked (the lock rules' case 4, while running; moved
// from package daemon), on the mock cgroup v2 tree: a managed parent that
// is removed and made again is locked again; one that another manager
// holds when it takes the place of ours (here: renamed over it, so no
// scan ever finds the path missing) is not managed — a warning names the
// holder and nothing in it is written — until that manager lets go.
func TestCgroupParentRelocked(t *testing.T) {
	c, r := runAB(t)
	me := os.Getpid() // in-process: the placement's pid is ours
	if got := holderOf(t, c.parent); got != me {
		t.Fatalf("/proc/locks: the managed parent is held by %d, want the placement (%d)", got, me)
	}

	// Removed and made again: the new directory is locked. As on
	// cgroupfs, the children go first (rmdir refuses a cgroup that has
	// any) and are seen gone; the mock's files go before them (cgroupfs's
	// go with the rmdir).
	entries, err := os.ReadDir(c.parent)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if !e.IsDir() {
			if err := os.Remove(filepath.Join(c.parent, e.Name())); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, e := range entries {
		if e.IsDir() {
			if err := os.RemoveAll(filepath.Join(c.parent, e.Name())); err != nil {
				t.Fatal(err)
			}
		}
	}
	r.until("the children seen gone", func() bool { return r.names() == "" })
	if err := os.Remove(c.parent); err != nil {
		t.Fatal(err)
	}
	r.until("parent recreated", func() bool {
		_, err := os.Stat(c.parent)
		return err == nil
	})
	c.fillParent()
	c.child("z", "")
	r.until("z adopted and the new parent locked", func() bool { return r.names() == "z" && holderOf(t, c.parent) == me })

	// Another manager's parent takes the place of ours.
	theirs := &cgtree{t: t, parent: c.parent + ".theirs"}
	theirs.fillParent()
	theirs.child("c", "1")
	held, err := os.Open(theirs.parent)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	if err := unix.Flock(int(held.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		t.Fatalf("flock %s: %v", theirs.parent, err)
	}
	if err := unix.Renameat2(unix.AT_FDCWD, theirs.parent, unix.AT_FDCWD, c.parent, unix.RENAME_EXCHANGE); err != nil {
		t.Skipf("renameat2(RENAME_EXCHANGE) on this file system: %v", err)
	}
	if err := os.RemoveAll(theirs.parent); err != nil { // our old parent, now there
		t.Fatal(err)
	}
	warning := "pid " + strconv.Itoa(me) + " manages the cgroup " + c.parent
	r.until("a warning naming the other manager", func() bool { return strings.Contains(fmt.Sprint(r.logged("")), warning) })
	r.until("no workloads while another manager holds the parent", func() bool { return r.names() == "" })
	testutil.WantEq(t, "c in a parent another manager holds: untouched", cpus(t, filepath.Join(c.parent, "c")), "1")

	// The other manager goes: ours again.
	held.Close()
	r.until("c adopted once the other manager left", func() bool { return r.names() == "c" && holderOf(t, c.parent) == me })
}
