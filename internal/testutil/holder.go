package testutil

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
)

// Holder is another process (bash) holding a reference into a mounted
// tree, which keeps the mount alive after a lazy unmount (umount -l): an
// open file or its working directory. Path is where the held file is
// reached through it (/proc/PID/fd/3, or /proc/PID/cwd/NAME), for a
// detached tree the only way left to reach it.
//
// The holder is never the test's own process, nor a child whose cmd.Dir is
// in the tree: a file left open here into a tree the test serves itself
// deadlocks the exit (its close waits for a FLUSH reply from the server
// that died first), and a chdir into such a mount between fork and exec
// deadlocks the fork (the runtime cannot start the thread that would
// serve it while a thread waits in clone(CLONE_VFORK)). bash opens the
// file or changes directory after its exec.
type Holder struct {
	cmd  *exec.Cmd
	Path string
}

// HoldFile starts bash holding file open as fd 3 (how "open file") or
// with its working directory in file's directory (how "cwd"), and waits
// until it does (Eventually). It is killed at cleanup if still running.
// It skips t where there is no bash.
func HoldFile(t testing.TB, file, how string) *Holder {
	t.Helper()
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skipf("needs bash to hold the tree from another process: %v", err)
	}
	var script, ref, want string
	switch how {
	case "open file":
		script, ref, want = `exec 3< "$0" && exec sleep 3600`, "/fd/3", file
	case "cwd":
		script, ref, want = `cd "$(dirname "$0")" && exec sleep 3600`, "/cwd", filepath.Dir(file)
	default:
		t.Fatalf("HoldFile: unknown holder %q", how)
	}
	cmd := exec.Command("bash", "-c", script, file)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	h := &Holder{cmd: cmd}
	t.Cleanup(h.Release)
	link := "/proc/" + strconv.Itoa(cmd.Process.Pid) + ref
	Eventually(t, "holder ("+how+") in the tree", func() (bool, string) {
		got, err := os.Readlink(link)
		return got == want, fmt.Sprintf("%s -> %q %v", link, got, err)
	})
	h.Path = link
	if how == "cwd" {
		h.Path = link + "/" + filepath.Base(file)
	}
	return h
}

// Read reads the held file through the holder's reference.
func (h *Holder) Read() (string, error) {
	b, err := os.ReadFile(h.Path)
	return string(b), err
}

// Pid is the holder's process id.
func (h *Holder) Pid() int { return h.cmd.Process.Pid }

// Release kills the holder and waits for it; safe to call twice.
func (h *Holder) Release() {
	if h.cmd.ProcessState == nil {
		h.cmd.Process.Kill()
		h.cmd.Wait()
	}
}
