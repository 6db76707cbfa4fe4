package testutil

import (
	"bufio"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// NotifySocket is an sd_notify socket of the test's own (a unixgram
// socket in t.TempDir()): the messages a child sends to the NOTIFY_SOCKET
// it is given ("READY=1\nSTATUS=...", "WATCHDOG=1"), one datagram each,
// in order on Msgs (buffered: 100), which closes when the socket does.
type NotifySocket struct {
	conn *net.UnixConn
	// Msgs carries each datagram received, as a string.
	Msgs chan string
}

// ListenNotify opens a NotifySocket and returns it with its path, for a
// child's NOTIFY_SOCKET; it is closed at cleanup.
func ListenNotify(t testing.TB) (*NotifySocket, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "notify.sock")
	c, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	n := &NotifySocket{conn: c, Msgs: make(chan string, 100)}
	go func() {
		buf := make([]byte, 4096)
		for {
			k, err := c.Read(buf)
			if err != nil {
				close(n.Msgs)
				return
			}
			n.Msgs <- string(buf[:k])
		}
	}()
	t.Cleanup(func() { c.Close() })
	return n, path
}

// Expect returns the next message containing s, dropping those before
// it. It fails t if the socket closes first, or if none comes within
// DefaultBound (a hang guard, not a speed claim).
func (n *NotifySocket) Expect(t testing.TB, s string) string {
	t.Helper()
	timeout := time.After(DefaultBound)
	for {
		select {
		case m, ok := <-n.Msgs:
			if !ok {
				t.Fatalf("notify socket closed before %q", s)
			}
			if strings.Contains(m, s) {
				return m
			}
		case <-timeout:
			t.Fatalf("no sd_notify message containing %q", s)
		}
	}
}

// Proc is one run of a daemon's binary under test: its stdout and stderr
// in Log, NOTIFY_SOCKET pointing at Notify, and its end on Exited.
type Proc struct {
	Cmd *exec.Cmd
	Log *LockedBuffer
	// Exited receives cmd.Wait's error once the process has ended; a
	// receiver puts it back (Exited <- err), so that the next one sees
	// it too.
	Exited chan error
	Notify *NotifySocket
	// Ready is the READY=1 message (with its STATUS=), once WaitReady
	// saw it.
	Ready string
}

// StartProc starts bin with args, the environment of the test and
// NOTIFY_SOCKET pointing at a fresh NotifySocket, in a process group of
// its own, and returns at once. At cleanup the whole group is killed
// (SIGKILL) and the process reaped, and its log goes to t.Log when t
// failed or runs verbose. The group, not the process alone: a daemon run
// under a wrapper (strace, which forks it) outlived the wrapper's kill
// and kept the log's pipe open, so the reap waited for ever
// (TestPrivilegeBoundaries after a t.Fatal). A caller with more to undo
// after the kill (a FUSE mount the dead process leaves) registers it
// before StartProc: cleanups run last first.
func StartProc(t testing.TB, bin string, args ...string) *Proc {
	t.Helper()
	notify, notifyPath := ListenNotify(t)
	p := &Proc{Log: &LockedBuffer{}, Exited: make(chan error, 1), Notify: notify}
	p.Cmd = exec.Command(bin, args...)
	p.Cmd.Env = append(os.Environ(), "NOTIFY_SOCKET="+notifyPath)
	p.Cmd.Stdout, p.Cmd.Stderr = p.Log, p.Log
	p.Cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := p.Cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.Exited <- p.Cmd.Wait() }()
	t.Cleanup(func() {
		_ = syscall.Kill(-p.Cmd.Process.Pid, syscall.SIGKILL)
		p.Cmd.Process.Kill()
		err := <-p.Exited
		p.Exited <- err
		if t.Failed() || testing.Verbose() {
			t.Logf("daemon (pid %d) log:\n%s", p.Cmd.Process.Pid, p.Log.String())
		}
	})
	return p
}

// WaitReady waits until the process either sends READY=1 (true: Ready
// holds the message) or exits first (false: Exited holds its error).
// There is no time limit: a process that does neither is the test
// binary's -timeout to catch.
func (p *Proc) WaitReady() bool {
	ready := make(chan string, 1)
	go func() {
		for m := range p.Notify.Msgs {
			if strings.Contains(m, "READY=1") {
				ready <- m
				return
			}
		}
	}()
	select {
	case err := <-p.Exited:
		p.Exited <- err
		return false
	case m := <-ready:
		p.Ready = m
		return true
	}
}

// StartPiped starts c with a pipe to its standard input and one from its
// standard output, the rest as c says (its environment, its standard
// error), and returns the pipe's writing end and a reader of the other's.
// At cleanup the process is killed (SIGKILL) and reaped, unless the test
// reaped it before (c.Wait).
func StartPiped(t testing.TB, c *exec.Cmd) (io.WriteCloser, *bufio.Reader) {
	t.Helper()
	in, err := c.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := c.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if c.ProcessState == nil {
			c.Process.Kill()
			c.Wait()
		}
	})
	return in, bufio.NewReader(out)
}
