package statefile

import (
	"bufio"
	"errors"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// ErrAlreadyRunning is returned by Run when another daemon holds the lock
// of the same state directory, tree directory or managed parent cgroup.
var ErrAlreadyRunning = errors.New("another schedpolicyd is running")

// procLocks is the kernel's list of file locks.
const procLocks = "/proc/locks"

// FlockHolder returns the pid listed in /proc/locks as holding a FLOCK
// WRITE lock on the inode ino of the device dev, or 0 if none is listed.
// A line reads "1: FLOCK  ADVISORY  WRITE 1234 00:2a:5678 0 EOF": major and
// minor in hex, the inode in decimal; waiters ("1: -> FLOCK ...") are
// skipped.
func FlockHolder(dev, ino uint64) int {
	f, err := os.Open(procLocks)
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fl := strings.Fields(sc.Text())
		if len(fl) < 6 || fl[1] != "FLOCK" || fl[3] != "WRITE" {
			continue
		}
		id := strings.Split(fl[5], ":")
		if len(id) != 3 {
			continue
		}
		maj, err1 := strconv.ParseUint(id[0], 16, 32)
		min, err2 := strconv.ParseUint(id[1], 16, 32)
		n, err3 := strconv.ParseUint(id[2], 10, 64)
		if err1 != nil || err2 != nil || err3 != nil || n != ino || uint32(maj) != unix.Major(dev) || uint32(min) != unix.Minor(dev) {
			continue
		}
		if pid, err := strconv.Atoi(fl[4]); err == nil && pid > 0 {
			return pid
		}
	}
	return 0
}

// HeldBy words who holds a lock, for an error.
func HeldBy(pid int) string {
	if pid > 0 {
		return "pid " + strconv.Itoa(pid)
	}
	return "another process"
}
