package testutil

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// CopyTree copies the tree below src into dst, which it creates if need
// be: directories (mode 0755), regular files (0644, whatever their mode in
// src) and symbolic links (recreated with the same target, not followed);
// anything else (devices, sockets, FIFOs) is skipped. It returns the first
// error, from reading src or from writing dst (an existing file in dst is
// overwritten, an existing symbolic link is an error).
func CopyTree(src, dst string) error {
	return copyTree(src, dst, false)
}

// CopyFixture is CopyTree for a test: it copies a committed fixture tree
// (a testdata directory, such as the power_supply corpus) from src into dst and fails t on any
// error.
func CopyFixture(t testing.TB, src, dst string) {
	t.Helper()
	if err := copyTree(src, dst, false); err != nil {
		t.Fatalf("copy %s to %s: %v", src, dst, err)
	}
}

// CopyReadable copies the directories and regular files below src into
// dst, skipping whatever cannot be read (live sysfs, such as this
// machine's /sys/devices/system/cpu/cpu*/topology, has files whose read
// fails) and everything that is not a directory or a regular file,
// symbolic links included. A missing src copies nothing. Errors writing
// dst fail t.
func CopyReadable(t testing.TB, src, dst string) {
	t.Helper()
	if err := copyTree(src, dst, true); err != nil {
		t.Fatalf("copy %s to %s: %v", src, dst, err)
	}
}

func copyTree(src, dst string, lenient bool) error {
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if lenient {
				return nil
			}
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		out := filepath.Join(dst, rel)
		switch {
		case d.IsDir():
			return os.MkdirAll(out, 0o755)
		case d.Type()&fs.ModeSymlink != 0:
			if lenient {
				return nil
			}
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			return os.Symlink(target, out)
		case !d.Type().IsRegular():
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			if lenient {
				return nil
			}
			return err
		}
		return os.WriteFile(out, b, 0o644)
	})
}

// WriteFile writes content to path exactly as given (mode 0644),
// creating path's parent directories (0755) first, and fails t on error.
// It is for mock trees in temporary directories; for real sysfs and
// cgroupfs files use Write, which creates nothing.
func WriteFile(t testing.TB, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// WriteTree writes each of files (a path relative to dir → its content,
// exactly as given) below dir, as WriteFile does: a mock sysfs or cgroup
// tree in a temporary directory.
func WriteTree(t testing.TB, dir string, files map[string]string) {
	t.Helper()
	for p, content := range files {
		WriteFile(t, filepath.Join(dir, p), content)
	}
}

// Put writes value and a newline to path, like `echo value > path`,
// creating path's parent directories first (WriteFile), and fails t on
// error.
func Put(t testing.TB, path, value string) {
	t.Helper()
	WriteFile(t, path, value+"\n")
}

// Write writes value and a newline to path, like `echo value > path`,
// without creating any directory: for files of real sysfs and cgroupfs
// (cpuset.cpus, cgroup.procs), where a missing directory must be an error
// and not a new cgroup. It fails t with the value and the path on error.
func Write(t testing.TB, path, value string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(value+"\n"), 0o644); err != nil {
		t.Fatalf("write %q to %s: %v", value, path, err)
	}
}

// WriteOnce writes value and a newline to the existing file path in one
// write(2), without truncating it first: the way to change a real sysfs
// or cgroupfs file when a test counts the inotify events it raises (an
// os.WriteFile's O_TRUNC raises an IN_MODIFY of its own before the
// write's). It fails t with the value and the path on error.
func WriteOnce(t testing.TB, path, value string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatalf("write %q to %s: %v", value, path, err)
	}
	_, err = f.Write([]byte(value + "\n"))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatalf("write %q to %s: %v", value, path, err)
	}
}

// Read returns path's content as it is and fails t if it cannot be read.
func Read(t testing.TB, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// ReadTrim returns path's content without surrounding white space (a
// sysfs or cgroupfs value without its newline) and fails t with the path
// if it cannot be read.
func ReadTrim(t testing.TB, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read %s: %v", path, err)
	}
	return strings.TrimSpace(string(b))
}

// WatchOpens watches dirs with inotify for IN_OPEN and IN_ACCESS of
// anything in them (a file, a FIFO, a file reached through a symbolic
// link in another watched directory) and returns a function that lists
// what was opened or read so far, "DIR/NAME" each; the watch ends with
// the test. It fails t if a watch cannot be added.
func WatchOpens(t testing.TB, dirs ...string) func() []string {
	t.Helper()
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	byWD := map[int]string{}
	for _, d := range dirs {
		wd, err := unix.InotifyAddWatch(fd, d, unix.IN_OPEN|unix.IN_ACCESS)
		if err != nil {
			t.Fatalf("inotify watch on %s: %v", d, err)
		}
		byWD[wd] = d
	}
	var seen []string
	return func() []string {
		buf := make([]byte, 64<<10)
		for {
			n, err := unix.Read(fd, buf)
			if err != nil || n <= 0 {
				return seen
			}
			for off := 0; off+unix.SizeofInotifyEvent <= n; {
				ev := (*unix.InotifyEvent)(unsafe.Pointer(&buf[off]))
				name := strings.TrimRight(string(buf[off+unix.SizeofInotifyEvent:off+unix.SizeofInotifyEvent+int(ev.Len)]), "\x00")
				seen = append(seen, byWD[int(ev.Wd)]+"/"+name)
				off += unix.SizeofInotifyEvent + int(ev.Len)
			}
		}
	}
}
