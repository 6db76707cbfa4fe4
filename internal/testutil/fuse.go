package testutil

import (
	"os"
	"testing"
)

// NeedFUSE skips t unless this process can open /dev/fuse for reading and
// writing, which mounting a FUSE tree takes: the fuse kernel module
// loaded, a device mode that lets the test in and, in a container, the
// device passed in. Mounting may take root too: a caller that needs root
// checks for it itself.
func NeedFUSE(t testing.TB) {
	t.Helper()
	f, err := os.OpenFile("/dev/fuse", os.O_RDWR, 0)
	if err != nil {
		t.Skipf("needs /dev/fuse to mount the tree: %v", err)
	}
	f.Close()
}
