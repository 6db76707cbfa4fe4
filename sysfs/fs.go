package sysfs

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// DefaultRoot is where the kernel mounts sysfs.
const DefaultRoot = "/sys"

// FS is a sysfs tree rooted at a directory: "/sys" on a real machine, or a
// mock tree such as the repository's testdata/power_supply/<case>/sys.
// FS values are immutable and safe for concurrent use.
type FS struct {
	root string
}

// NewFS returns an FS rooted at root. It fails when root does not exist or is
// not a directory; nothing below the root has to exist.
func NewFS(root string) (FS, error) {
	st, err := os.Stat(root)
	if err != nil {
		return FS{}, fmt.Errorf("sysfs root %q: %w", root, err)
	}
	if !st.IsDir() {
		return FS{}, fmt.Errorf("sysfs root %q: not a directory", root)
	}
	return FS{root: filepath.Clean(root)}, nil
}

// Root returns the root directory the FS was created with.
func (fs FS) Root() string { return fs.root }

// Path joins elements below the root. Each element is cleaned as if it were
// absolute, so ".." can never leave the root.
func (fs FS) Path(elem ...string) string {
	return filepath.Join(fs.root, filepath.Clean("/"+filepath.Join(elem...)))
}

// ReadAttr reads a sysfs attribute file with a single read(2) of at most
// 4096 bytes (PAGE_SIZE, the most a sysfs show() returns) and returns its
// content with surrounding whitespace removed. Some drivers return EAGAIN
// forever to repeated reads, which is why this is not os.ReadFile.
// Errors are the open or read errors, wrapped with the path; absent files
// give an error satisfying errors.Is(err, fs.ErrNotExist).
func ReadAttr(path string) (string, error) {
	fd, err := OpenRaw(path, syscall.O_RDONLY)
	if err != nil {
		return "", err
	}
	defer syscall.Close(fd)
	buf := make([]byte, 4096)
	n, err := readRaw(fd, buf)
	if err != nil {
		return "", fmt.Errorf("read %s: %w", path, err)
	}
	return strings.TrimSpace(string(buf[:n])), nil
}

// OpenRaw opens a kernel attribute file with open(2) directly, not through
// os.File: sysfs and cgroupfs files are pollable, so os.Open would register
// every one with the runtime's epoll (epoll_ctl add and del, an fstat and
// a finalizer per file), which dominated the daemon's per-sample CPU time
// with many workloads.
//
// Some paths come from other processes (a unit's ControlGroup, from a
// user's manager), so the file is opened as a kernel attribute must be: a
// symbolic link as the last component is not followed (O_NOFOLLOW: ELOOP),
// a FIFO or device does not block the open (O_NONBLOCK, which kernfs and
// procfs files ignore) and anything but a regular file is refused
// (ErrNotRegular): every sysfs, cgroupfs and procfs attribute is one. The
// error is an *os.PathError, as os.Open's.
func OpenRaw(path string, flags int) (int, error) {
	for {
		fd, err := syscall.Open(path, flags|syscall.O_CLOEXEC|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return -1, &os.PathError{Op: "open", Path: path, Err: err}
		}
		var st syscall.Stat_t
		if err := syscall.Fstat(fd, &st); err != nil || st.Mode&syscall.S_IFMT != syscall.S_IFREG {
			syscall.Close(fd)
			if err == nil {
				err = ErrNotRegular
			}
			return -1, &os.PathError{Op: "open", Path: path, Err: err}
		}
		return fd, nil
	}
}

// ErrNotRegular is OpenRaw's error for a path that is not a regular file
// (a FIFO, a device, a socket, a directory): no kernel attribute is one.
var ErrNotRegular = errors.New("not a regular file (a kernel attribute is one)")

// MaxKernelFile bounds what ReadFileRaw reads of one file, in bytes: a v1
// cgroup's tasks of every possible thread (PID_MAX_LIMIT, 4,194,304 IDs
// of up to 8 bytes) fits. A longer file is an error, not a larger buffer.
const MaxKernelFile = 32 << 20

// readRaw is one read(2), retried on EINTR; n is 0 at end of file.
func readRaw(fd int, buf []byte) (int, error) {
	for {
		n, err := syscall.Read(fd, buf)
		if err == syscall.EINTR {
			continue
		}
		if n < 0 {
			n = 0
		}
		return n, err
	}
}

// ReadFileRaw is os.ReadFile for kernel files (cgroupfs, procfs), without
// the runtime poller and with OpenRaw's checks; a file longer than
// MaxKernelFile is an error.
func ReadFileRaw(path string) ([]byte, error) {
	fd, err := OpenRaw(path, syscall.O_RDONLY)
	if err != nil {
		return nil, err
	}
	defer syscall.Close(fd)
	buf := make([]byte, 0, 512)
	for {
		if len(buf) > MaxKernelFile {
			return nil, &os.PathError{Op: "read", Path: path, Err: fmt.Errorf("more than %d bytes", MaxKernelFile)}
		}
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		if cap(buf) > MaxKernelFile+1 {
			buf = buf[: len(buf) : MaxKernelFile+1]
		}
		n, err := readRaw(fd, buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if err != nil {
			return nil, &os.PathError{Op: "read", Path: path, Err: err}
		}
		if n == 0 {
			return buf, nil
		}
	}
}

// ParseError is the error of a read whose file was there and readable but
// held something that is not in the file's format, as opencontainers/cgroups
// reports its own (fscommon.ParseError). Path names the file; Err says what
// is wrong and may wrap ErrCPUList or a *strconv.NumError, so callers can
// use errors.As for the file and errors.Is for the cause.
type ParseError struct {
	Path string
	Err  error
}

func (e *ParseError) Error() string { return "parse " + e.Path + ": " + e.Err.Error() }

func (e *ParseError) Unwrap() error { return e.Err }

// ReadIntAttr reads an attribute holding one decimal integer. A value that
// is not one gives a *ParseError wrapping strconv's error.
func ReadIntAttr(path string) (int64, error) {
	s, err := ReadAttr(path)
	if err != nil {
		return 0, err
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, &ParseError{Path: path, Err: err}
	}
	return v, nil
}

// WriteAttr writes value to a kernel attribute file with one write(2), the
// way sysfs and cgroupfs expect it (never temp-and-rename). The error names
// the value and the path and wraps the errno, so callers can use
// errors.Is(err, syscall.EINVAL) and friends.
func WriteAttr(path, value string) error {
	fd, err := OpenRaw(path, syscall.O_WRONLY|syscall.O_TRUNC)
	if err != nil {
		return fmt.Errorf("write %q to %s: %w", value, path, err)
	}
	var werr error
	for {
		_, werr = syscall.Write(fd, []byte(value))
		if werr != syscall.EINTR {
			break
		}
	}
	cerr := syscall.Close(fd)
	if werr != nil {
		return fmt.Errorf("write %q to %s: %w", value, path, werr)
	}
	if cerr != nil {
		return fmt.Errorf("write %q to %s: %w", value, path, cerr)
	}
	return nil
}
