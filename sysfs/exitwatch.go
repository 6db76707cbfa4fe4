package sysfs

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// ErrProcessGone is wrapped by WatchExit when the process had already
// exited (ESRCH).
var ErrProcessGone = errors.New("process is gone")

// ExitWatch waits for one process to exit, with no timer: a pidfd
// (pidfd_open(2), Linux 5.3) becomes readable when the process exits, and
// the wait runs on Go's network poller, so nothing wakes while the
// process lives.
type ExitWatch struct{ f *os.File }

// WatchExit starts watching process pid; onExit(the watch) is called once, from the
// watch's own goroutine, when it exits (after Close only if the exit was
// seen first: callers drop a stale one). Errors wrap
// ErrProcessGone (it already exited) or the errno of pidfd_open (ENOSYS on
// kernels before 5.3, EPERM, EMFILE).
func WatchExit(pid int, onExit func(*ExitWatch)) (*ExitWatch, error) {
	fd, err := unix.PidfdOpen(pid, unix.PIDFD_NONBLOCK)
	if errors.Is(err, unix.ESRCH) {
		return nil, fmt.Errorf("watch pid %d: %w", pid, ErrProcessGone)
	}
	if err != nil {
		return nil, fmt.Errorf("pidfd_open %d: %w", pid, err)
	}
	w := &ExitWatch{f: os.NewFile(uintptr(fd), "pidfd")}
	rc, err := w.f.SyscallConn()
	if err != nil {
		w.f.Close()
		return nil, err
	}
	go func() {
		exited := false
		err := rc.Read(func(fd uintptr) bool {
			// Readable means exited; poll with no timeout, as the network
			// poller reports edges, not the state at registration.
			p := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
			n, _ := unix.Poll(p, 0)
			exited = n > 0
			return exited
		})
		if err == nil && exited {
			onExit(w)
		}
	}()
	return w, nil
}

// Close ends the watch (its wait ends with an error; onExit is not called
// unless the exit was seen first). Nil-safe.
func (w *ExitWatch) Close() {
	if w != nil {
		w.f.Close()
	}
}
