package tree

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// mountWatch notices when a file system leaves a mount point, without a
// timer. /proc/self/mountinfo is pollable: once it is open, a change of the
// mount table of the process's mount namespace (a mount, an unmount, a lazy
// detach, a move) makes poll(2) report POLLPRI|POLLERR on it, once for all
// the changes since the last report (proc_pid_mounts(5), formerly proc(5):
// "this file is pollable"; mountinfo shares its poll, mounts_poll in the
// kernel's fs/proc_namespace.c, which compares the namespace's event counter
// with the one last reported on that open file). After each report the
// table is read again and the watch looks for its device at its mount point.
//
// This matters after umount -l: MNT_DETACH makes "the mount unavailable for
// new accesses" and disconnects it from the mount table at once, and
// "actually perform[s] the unmount when the mount ceases to be busy"
// (umount(2)). A FUSE server learns nothing until then: only when the last
// process holding a file or a cwd in it lets go does the kernel destroy the
// connection (Documentation/filesystems/fuse.rst), and reads of /dev/fuse
// fail with ENODEV. Meanwhile the mount point shows what lies beneath.
//
// One goroutine waits in poll(2) (the Go network poller does not ask for
// POLLPRI); it parks its OS thread in the kernel and costs no wakeups while
// the mount table does not change.
type mountWatch struct {
	dir  string // the mount point as /proc/self/mountinfo shows it
	dev  uint64 // the device (st_dev) of the watched file system
	lost func()

	mountinfo int // the open /proc/self/mountinfo the goroutine polls

	// mu guards stopFd, an eventfd that ends the poll; -1 once the
	// goroutine has closed it (and mountinfo) on its way out.
	mu     sync.Mutex
	stopFd int

	done chan struct{} // closed when the goroutine has exited
}

// watchMount starts watching for the moment no mount of device dev is at
// the mount point dir (an absolute path with symlinks resolved, as
// /proc/self/mountinfo prints it). Then lost is called once, from the
// watch's goroutine, and the watch ends by itself, releasing its files. A
// file system still at dir under another mount stacked on top counts as
// present; a bind mount of it at dir too.
//
// Errors: opening /proc/self/mountinfo or reading it (no procfs), the
// eventfd(2) error, and "not mounted" when no mount of dev is at dir when
// the watch starts: a path that does not match the table would otherwise
// report every tree as lost at once.
func watchMount(dir string, dev uint64, lost func()) (*mountWatch, error) {
	// Opened before the table is first read, so that a change between
	// the two is reported by the first poll.
	fd, err := unix.Open("/proc/self/mountinfo", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("tree: watch mount %s: %w", dir, err)
	}
	present, err := devMountedAt(dir, dev)
	if err == nil && !present {
		err = fmt.Errorf("device %d:%d not mounted there", unix.Major(dev), unix.Minor(dev))
	}
	if err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("tree: watch mount %s: %w", dir, err)
	}
	efd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("tree: watch mount %s: eventfd: %w", dir, err)
	}
	w := &mountWatch{dir: dir, dev: dev, lost: lost, mountinfo: fd, stopFd: efd, done: make(chan struct{})}
	go w.run()
	return w, nil
}

func (w *mountWatch) run() {
	defer close(w.done)
	defer func() {
		w.mu.Lock()
		unix.Close(w.stopFd)
		w.stopFd = -1
		w.mu.Unlock()
		unix.Close(w.mountinfo)
	}()
	fds := []unix.PollFd{{Fd: int32(w.mountinfo), Events: unix.POLLPRI}, {Fd: int32(w.stopFd), Events: unix.POLLIN}}
	for {
		fds[0].Revents, fds[1].Revents = 0, 0
		_, err := unix.Poll(fds, -1)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil || fds[1].Revents != 0 {
			// Stopped, or poll itself failed (EINVAL, ENOMEM): the
			// owner still learns of the loss when its server ends.
			return
		}
		if fds[0].Revents&(unix.POLLPRI|unix.POLLERR) == 0 {
			continue
		}
		// A table that cannot be read now (EMFILE, ENOMEM) says nothing:
		// wait for the next change.
		if present, err := devMountedAt(w.dir, w.dev); err == nil && !present {
			w.lost()
			return
		}
	}
}

// Close stops the watch and waits for its goroutine; lost is not called
// afterwards. Safe to call more than once and after the watch ended by
// itself.
func (w *mountWatch) Close() {
	w.mu.Lock()
	if w.stopFd >= 0 {
		one := []byte{1, 0, 0, 0, 0, 0, 0, 0}
		unix.Write(w.stopFd, one)
	}
	w.mu.Unlock()
	<-w.done
}

// devMountedAt reports whether a mount of device dev (the major:minor field
// of proc_pid_mountinfo(5)) has the absolute path dir as its mount point in
// /proc/self/mountinfo. Errors: opening or reading the file.
func devMountedAt(dir string, dev uint64) (bool, error) {
	want := fmt.Sprintf("%d:%d", unix.Major(dev), unix.Minor(dev))
	found := false
	err := scanMountinfo(func(fields []string) bool {
		if fields[2] == want && unescapeMountinfo(fields[4]) == dir {
			found = true
			return false
		}
		return true
	})
	return found, err
}

// scanMountinfo calls fn with the fields of each line of
// /proc/self/mountinfo, oldest mount first, until fn returns false. Lines
// with fewer than 7 fields are skipped. Errors: opening or reading the file.
//
//	36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw
//	(1)(2)(3)   (4)   (5)      (6)      (7)  (8) (9)    (10)   (11)
func scanMountinfo(fn func(fields []string) bool) error {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64*1024), 1024*1024)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 7 {
			continue
		}
		if !fn(fields) {
			return nil
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("reading mountinfo: %w", err)
	}
	return nil
}
