package testutil

import (
	"runtime"

	"golang.org/x/sys/unix"
)

// AsUID runs fn on an OS thread of its own whose effective uid and gid
// are uid and which has no supplementary groups (real and saved ids stay
// root's), and returns fn's error once fn has returned. Only that thread
// changes: the calls are the raw setgroups(2), setresgid(2) and
// setresuid(2), not the libc or syscall wrappers that change every thread
// of the process, and the thread ends with fn (its goroutine exits with
// the thread still locked), so nothing else ever runs on it. A credential
// change that fails (not root: EPERM) is returned as its syscall.Errno,
// and fn does not run then. What a socket made in fn is connected or
// bound with, SO_PEERCRED shows as uid.
func AsUID(uid int, fn func() error) error {
	done := make(chan error, 1)
	go func() {
		// Never unlocked: the goroutine's end takes the thread, with its
		// changed credentials, away.
		runtime.LockOSThread()
		id := uintptr(uid)
		for _, call := range [][4]uintptr{
			{unix.SYS_SETGROUPS, 0, 0},
			{unix.SYS_SETRESGID, ^uintptr(0), id, ^uintptr(0)},
			{unix.SYS_SETRESUID, ^uintptr(0), id, ^uintptr(0)},
		} {
			if _, _, e := unix.RawSyscall(call[0], call[1], call[2], call[3]); e != 0 {
				done <- e
				return
			}
		}
		done <- fn()
	}()
	return <-done
}
