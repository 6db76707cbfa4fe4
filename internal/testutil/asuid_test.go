package testutil

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// TestAsUID: fn runs with the effective uid and gid given and no
// supplementary groups, the rest of the process keeps root's, and a
// socket fn binds is uid's; a credential change refused (as any uid but
// root) is its errno, without fn running.
func TestAsUID(t *testing.T) {
	if os.Geteuid() != 0 {
		ran := false
		err := AsUID(4242, func() error { ran = true; return nil })
		if !errors.Is(err, syscall.EPERM) || ran {
			t.Fatalf("AsUID as uid %d: %v, fn ran %v; want EPERM, fn not run", os.Geteuid(), err, ran)
		}
		return
	}
	var euid, egid int
	var groups []int
	// A directory uid 4242 may write in (a t.TempDir's parent is 0700).
	dir, err := os.MkdirTemp("", "testutil-asuid-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "sock")
	var ln net.Listener
	err = AsUID(4242, func() (err error) {
		euid, egid = unix.Geteuid(), unix.Getegid()
		if groups, err = unix.Getgroups(); err != nil {
			return err
		}
		ln, err = net.Listen("unix", sock)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if euid != 4242 || egid != 4242 || len(groups) != 0 {
		t.Errorf("in fn: euid %d egid %d groups %v; want 4242 4242 []", euid, egid, groups)
	}
	if os.Geteuid() != 0 || os.Getegid() != 0 {
		t.Errorf("after AsUID the test runs as euid %d egid %d, want root's", os.Geteuid(), os.Getegid())
	}
	var st syscall.Stat_t
	if err := syscall.Lstat(sock, &st); err != nil || st.Uid != 4242 {
		t.Errorf("the socket fn made: owner %d, %v; want 4242", st.Uid, err)
	}
	want := errors.New("fn's own")
	if err := AsUID(4242, func() error { return want }); err != want {
		t.Errorf("AsUID = %v, want fn's error", err)
	}
}
