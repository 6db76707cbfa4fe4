package cgroup

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
)

// CloseWriteWatch reports files that were closed after being opened for
// writing (inotify(7) IN_CLOSE_WRITE), such as a user's
// `echo 1 > cpuset.cpus`. A process that keeps its file open and writes
// with pwrite(2) — the daemon's own held-open cpuset.cpus files
// (Cgroup.OpenCPUs) — raises no such event, so a policy switch that
// rewrites 1,000 cpusets does not wake the watch 1,000 times (fsnotify,
// the library used elsewhere, does not offer this event).
//
// It is safe for concurrent use. Events are coalesced: C is poked once
// for any number of them, and Take returns the paths written since the
// last call.
type CloseWriteWatch struct {
	f       *os.File // the inotify instance, on Go's poller
	fd      int      // its descriptor (f.Fd would make it blocking)
	c       chan struct{}
	done    chan struct{}
	mu      sync.Mutex
	paths   map[int32]string // watch descriptor → path; under mu
	wds     map[string]int32 // path → watch descriptor; under mu
	written map[string]bool  // under mu; nil after an overflow: all
	lost    bool             // the kernel's queue overflowed; under mu
}

// NewCloseWriteWatch starts a watch with no files. Errors wrap the errno
// of inotify_init1(2) (EMFILE: the per-user instance limit).
func NewCloseWriteWatch() (*CloseWriteWatch, error) {
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		return nil, fmt.Errorf("inotify_init1: %w", err)
	}
	w := &CloseWriteWatch{
		f: os.NewFile(uintptr(fd), "inotify"), fd: fd, c: make(chan struct{}, 1), done: make(chan struct{}),
		paths: map[int32]string{}, wds: map[string]int32{}, written: map[string]bool{},
	}
	go w.read()
	return w, nil
}

// Add watches path (a file). Errors wrap the errno of
// inotify_add_watch(2): ENOENT, ENOSPC (the per-user watch limit).
func (w *CloseWriteWatch) Add(path string) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	wd, err := unix.InotifyAddWatch(w.fd, path, unix.IN_CLOSE_WRITE)
	if err != nil {
		return fmt.Errorf("watch %s: %w", path, err)
	}
	w.paths[int32(wd)], w.wds[path] = path, int32(wd)
	return nil
}

// Remove stops watching path; a path not watched is ignored.
func (w *CloseWriteWatch) Remove(path string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if wd, ok := w.wds[path]; ok {
		unix.InotifyRmWatch(w.fd, uint32(wd))
		delete(w.wds, path)
		delete(w.paths, wd)
	}
}

// C is poked (capacity 1) when a watched file was written and closed.
func (w *CloseWriteWatch) C() <-chan struct{} { return w.c }

// Take returns the paths written since the last call and clears them. all
// is true when events were lost (the kernel's queue overflowed): then any
// watched file may have been written.
func (w *CloseWriteWatch) Take() (paths map[string]bool, all bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	paths, all = w.written, w.lost
	w.written, w.lost = map[string]bool{}, false
	return paths, all
}

// Close ends the watch and waits for its reader.
func (w *CloseWriteWatch) Close() {
	w.f.Close()
	<-w.done
}

func (w *CloseWriteWatch) read() {
	defer close(w.done)
	buf := make([]byte, 64*(unix.SizeofInotifyEvent+unix.NAME_MAX+1))
	for {
		n, err := w.f.Read(buf)
		if err != nil {
			if errors.Is(err, os.ErrClosed) {
				return
			}
			if errors.Is(err, unix.EINTR) {
				continue
			}
			return
		}
		any := false
		w.mu.Lock()
		for off := 0; off+unix.SizeofInotifyEvent <= n; {
			ev := (*unix.InotifyEvent)(unsafe.Pointer(&buf[off]))
			off += unix.SizeofInotifyEvent + int(ev.Len)
			switch {
			case ev.Mask&unix.IN_Q_OVERFLOW != 0:
				w.lost, any = true, true
			case ev.Mask&unix.IN_IGNORED != 0:
				// The file is gone (or Remove): the kernel dropped the watch.
				if p, ok := w.paths[ev.Wd]; ok {
					delete(w.paths, ev.Wd)
					if w.wds[p] == ev.Wd {
						delete(w.wds, p)
					}
				}
			case ev.Mask&unix.IN_CLOSE_WRITE != 0:
				if p, ok := w.paths[ev.Wd]; ok {
					w.written[p], any = true, true
				}
			}
		}
		w.mu.Unlock()
		if any {
			select {
			case w.c <- struct{}{}:
			default:
			}
		}
	}
}
