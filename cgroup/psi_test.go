package cgroup

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/schedpolicyd/schedpolicyd/sysfs"
)

// TestDirCPUPressure: a unit's cgroup directory gives its some avg10; v1
// (no file) is fs.ErrNotExist; a malformed file names itself.
func TestDirCPUPressure(t *testing.T) {
	dir := t.TempDir()
	if _, err := DirCPUPressure(dir); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("no cpu.pressure: err %v, want fs.ErrNotExist", err)
	}
	f := filepath.Join(dir, "cpu.pressure")
	if err := os.WriteFile(f, []byte("some avg10=12.50 avg60=3.00 avg300=1.00 total=12345\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if v, err := DirCPUPressure(dir); err != nil || v.Avg10 != 12.5 {
		t.Errorf("DirCPUPressure = %v, %v; want 12.5", v, err)
	}
	if err := os.WriteFile(f, []byte("some avg10=NaN\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := DirCPUPressure(dir); !errors.Is(err, sysfs.ErrPSIFormat) || !strings.Contains(err.Error(), f) {
		t.Errorf("malformed: err %v, want sysfs.ErrPSIFormat naming %s", err, f)
	}
}
