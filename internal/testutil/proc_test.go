package testutil

import (
	"errors"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// TestProcNotifyHelper is the child of TestStartProc: with
// TESTUTIL_NOTIFY set it sends that message to NOTIFY_SOCKET and then
// runs until it is killed.
func TestProcNotifyHelper(t *testing.T) {
	msg := os.Getenv("TESTUTIL_NOTIFY")
	if msg == "" {
		return
	}
	c, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: os.Getenv("NOTIFY_SOCKET"), Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Write([]byte(msg)); err != nil {
		t.Fatal(err)
	}
	// Until killed (SIGKILL at the test's cleanup).
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM)
	<-sig
}

// TestStartProc: a process that sends READY=1 is ready (WaitReady true,
// Ready the whole message) and killed at cleanup; one that exits first is
// not (false, Exited its exit status, Log its output).
func TestStartProc(t *testing.T) {
	t.Run("ready", func(t *testing.T) {
		t.Setenv("TESTUTIL_NOTIFY", "READY=1\nSTATUS=up")
		p := StartProc(t, os.Args[0], "-test.run=^TestProcNotifyHelper$")
		if !p.WaitReady() {
			t.Fatalf("WaitReady false; exit %v, log %q", <-p.Exited, p.Log.String())
		}
		WantEq(t, "Ready", p.Ready, "READY=1\nSTATUS=up")
		select {
		case err := <-p.Exited:
			t.Fatalf("the helper exited: %v", err)
		default:
		}
	})
	t.Run("refused", func(t *testing.T) {
		p := StartProc(t, "sh", "-c", "echo refused; exit 3")
		if p.WaitReady() {
			t.Fatalf("WaitReady true for a process that exited; Ready %q", p.Ready)
		}
		err := <-p.Exited
		p.Exited <- err
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 3 {
			t.Errorf("exit %v, want status 3", err)
		}
		WantEq(t, "log", p.Log.String(), "refused\n")
	})
	// A wrapper whose child outlives it (as strace's daemon does) and
	// holds the log's pipe: the cleanup kills the child too, so the reap
	// returns (before, it waited for the pipe for ever), and the child
	// exits (it waits for SIGTERM: nothing else ends it). Both waits have
	// no bound of their own: a hang is the test binary's -timeout to
	// catch, as it was before the fix.
	childFD := -1
	t.Run("wrapper", func(t *testing.T) {
		t.Setenv("TESTUTIL_NOTIFY", "READY=1")
		p := StartProc(t, "sh", "-c", `"$@" & echo $!; wait`, "sh", os.Args[0], "-test.run=^TestProcNotifyHelper$")
		if !p.WaitReady() {
			t.Fatalf("WaitReady false; exit %v, log %q", <-p.Exited, p.Log.String())
		}
		line, _, _ := strings.Cut(p.Log.String(), "\n")
		child, err := strconv.Atoi(line)
		if err != nil {
			t.Fatalf("the child's pid: %q", p.Log.String())
		}
		// Opened while the child runs (it is ready), so the descriptor is
		// that process's, whatever its pid becomes later.
		if childFD, err = unix.PidfdOpen(child, 0); err != nil {
			t.Fatalf("pidfd of the child %d: %v", child, err)
		}
	})
	if childFD < 0 {
		return
	}
	defer unix.Close(childFD)
	// A pidfd polls readable once its process has exited.
	for {
		_, err := unix.Poll([]unix.PollFd{{Fd: int32(childFD), Events: unix.POLLIN}}, -1)
		if err != unix.EINTR {
			if err != nil {
				t.Fatal(err)
			}
			break
		}
	}
}

// TestHoldFile: each holder reaches the file through its own reference
// after the file's name is gone from the directory (as a detached tree's
// files are), and is gone once released.
func TestHoldFile(t *testing.T) {
	for _, how := range []string{"open file", "cwd"} {
		t.Run(how, func(t *testing.T) {
			dir := t.TempDir()
			file := filepath.Join(dir, "knob")
			WriteFile(t, file, "1\n")
			h := HoldFile(t, file, how)
			WantEq(t, "Path", filepath.Base(h.Path), map[string]string{"open file": "3", "cwd": "knob"}[how])
			if how == "open file" {
				os.Remove(file) // only the open file is left
			}
			got, err := h.Read()
			if err != nil {
				t.Fatal(err)
			}
			WantEq(t, "read through the holder", got, "1\n")
			h.Release()
			h.Release() // safe twice
			if _, err := os.Stat(h.Path); err == nil {
				t.Errorf("%s still there after Release", h.Path)
			}
		})
	}
}

// TestStartPiped: what the test writes reaches the child's standard
// input and what it prints comes back; the cleanup kills and reaps a
// child still running, and leaves one the test reaped alone.
func TestStartPiped(t *testing.T) {
	var running, done *exec.Cmd
	t.Run("piped", func(t *testing.T) {
		running = exec.Command("sh", "-c", `read x; echo "got $x"; exec sleep 1000`)
		in, out := StartPiped(t, running)
		if _, err := in.Write([]byte("go\n")); err != nil {
			t.Fatal(err)
		}
		if l, err := out.ReadString('\n'); l != "got go\n" || err != nil {
			t.Fatalf("read %q, %v; want %q", l, err, "got go\n")
		}
		done = exec.Command("true")
		StartPiped(t, done)
		if err := done.Wait(); err != nil {
			t.Fatal(err)
		}
	})
	if st := running.ProcessState; st == nil || st.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Errorf("after the cleanup the child's state is %v, want killed by SIGKILL", st)
	}
	if st := done.ProcessState; st == nil || !st.Success() {
		t.Errorf("the child the test reaped: %v, want its own exit 0", st)
	}
}
