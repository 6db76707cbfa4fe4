package sysfs

import (
	"errors"
	"os/exec"
	"testing"
	"time"
)

// TestExitWatch: a real process's exit is reported once; a pid that is
// gone gives ErrProcessGone; a closed watch reports nothing.
func TestExitWatch(t *testing.T) {
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Skipf("needs sleep(1): %v", err)
	}
	exited := make(chan *ExitWatch, 2)
	w, err := WatchExit(cmd.Process.Pid, func(w *ExitWatch) { exited <- w })
	if err != nil {
		cmd.Process.Kill()
		t.Fatal(err)
	}
	defer w.Close()
	select {
	case <-exited:
		t.Fatal("exit reported while the process runs")
	default:
	}
	cmd.Process.Kill()
	cmd.Wait() // reaped: its pid is free now
	select {
	case got := <-exited:
		if got != w {
			t.Fatalf("onExit got %p, want the watch %p", got, w)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("exit not reported")
	}
	if _, err := WatchExit(cmd.Process.Pid, func(*ExitWatch) {}); !errors.Is(err, ErrProcessGone) {
		t.Fatalf("watch of a reaped pid: %v, want ErrProcessGone", err)
	}

	cmd2 := exec.Command("sleep", "60")
	if err := cmd2.Start(); err != nil {
		t.Fatal(err)
	}
	w2, err := WatchExit(cmd2.Process.Pid, func(w *ExitWatch) { exited <- w })
	if err != nil {
		t.Fatal(err)
	}
	w2.Close()
	cmd2.Process.Kill()
	cmd2.Wait()
	select {
	case <-exited:
		t.Fatal("a closed watch reported an exit")
	case <-time.After(100 * time.Millisecond):
	}
}
