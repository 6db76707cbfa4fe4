package sysfs

import (
	"errors"
	"fmt"
	"os"
	"reflect"
	"syscall"
	"testing"

	"github.com/schedpolicyd/schedpolicyd/internal/testutil"
)

// boostTree writes files (relative path → content) below a new root.
func boostTree(t *testing.T, files map[string]string) FS {
	t.Helper()
	root := t.TempDir()
	testutil.WriteTree(t, root, files)
	fsys, err := NewFS(root)
	if err != nil {
		t.Fatal(err)
	}
	return fsys
}

const (
	pGlobal  = "devices/system/cpu/cpufreq/boost"
	pNoTurbo = "devices/system/cpu/intel_pstate/no_turbo"
	pPol0    = "devices/system/cpu/cpufreq/policy0/boost"
	pPol1    = "devices/system/cpu/cpufreq/policy1/boost"
)

func readTree(t *testing.T, fsys FS, paths ...string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, p := range paths {
		v, err := ReadAttr(fsys.Path(p))
		if err != nil {
			t.Fatal(err)
		}
		out[p] = v
	}
	return out
}

func TestBoost(t *testing.T) {
	tests := []struct {
		name  string
		files map[string]string
		want  string
	}{
		// Global switches.
		{"acpi-cpufreq on", map[string]string{pGlobal: "1\n"}, BoostOn},
		{"acpi-cpufreq off", map[string]string{pGlobal: "0\n"}, BoostOff},
		{"intel_pstate turbo allowed", map[string]string{pNoTurbo: "0\n"}, BoostOn},
		{"intel_pstate no_turbo", map[string]string{pNoTurbo: "1\n"}, BoostOff},
		{"intel_pstate no_turbo clamped 5", map[string]string{pNoTurbo: "5\n"}, BoostOff},
		// Per-policy files (amd-pstate, 2023+ cpufreq core).
		{"per-policy only, all on", map[string]string{pPol0: "1\n", pPol1: "1\n"}, BoostOn},
		{"per-policy only, all off", map[string]string{pPol0: "0\n", pPol1: "0\n"}, BoostOff},
		{"per-policy only, mixed counts as on", map[string]string{pPol0: "0\n", pPol1: "1\n"}, BoostOn},
		{"global on, policies all off", map[string]string{pGlobal: "1\n", pPol0: "0\n", pPol1: "0\n"}, BoostOff},
		{"global on, one policy on", map[string]string{pGlobal: "1\n", pPol0: "0\n", pPol1: "1\n"}, BoostOn},
		{"global off wins over policies", map[string]string{pGlobal: "0\n", pPol0: "1\n"}, BoostOff},
		// None.
		{"no cpufreq at all (VM)", map[string]string{"devices/system/cpu/online": "0-1\n"}, BoostUnsupported},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := boostTree(t, tt.files).Boost()
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Fatalf("Boost() = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestBoostUnparsable(t *testing.T) {
	got, err := boostTree(t, map[string]string{pGlobal: "1\n", pPol0: "yes\n"}).Boost()
	if err == nil || got != BoostUnsupported {
		t.Fatalf("Boost() = %q, %v; want unsupported and an error", got, err)
	}
}

func TestBoostFiles(t *testing.T) {
	fsys := boostTree(t, map[string]string{pPol1: "1\n", pPol0: "1\n"})
	want := []string{fsys.Path(pGlobal), fsys.Path(pNoTurbo), fsys.Path(pPol0), fsys.Path(pPol1)}
	if got := fsys.BoostFiles(); !reflect.DeepEqual(want, got) {
		t.Fatalf("BoostFiles:\nwant %q\ngot  %q", want, got)
	}
}

func TestSetBoost(t *testing.T) {
	tests := []struct {
		name  string
		files map[string]string
		on    bool
		want  map[string]string // file contents afterwards
		boost string            // Boost() afterwards
	}{
		{"acpi-cpufreq off", map[string]string{pGlobal: "1\n"}, false, map[string]string{pGlobal: "0"}, BoostOff},
		{"acpi-cpufreq on", map[string]string{pGlobal: "0\n"}, true, map[string]string{pGlobal: "1"}, BoostOn},
		{"intel_pstate off is no_turbo=1", map[string]string{pNoTurbo: "0\n"}, false, map[string]string{pNoTurbo: "1"}, BoostOff},
		{"intel_pstate on is no_turbo=0", map[string]string{pNoTurbo: "1\n"}, true, map[string]string{pNoTurbo: "0"}, BoostOn},
		{"per-policy only, off", map[string]string{pPol0: "1\n", pPol1: "0\n"}, false, map[string]string{pPol0: "0", pPol1: "0"}, BoostOff},
		{"global and policies on", map[string]string{pGlobal: "0\n", pPol0: "0\n", pPol1: "1\n"}, true, map[string]string{pGlobal: "1", pPol0: "1", pPol1: "1"}, BoostOn},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fsys := boostTree(t, tt.files)
			if err := fsys.SetBoost(tt.on); err != nil {
				t.Fatal(err)
			}
			var paths []string
			for p := range tt.want {
				paths = append(paths, p)
			}
			if got := readTree(t, fsys, paths...); !reflect.DeepEqual(tt.want, got) {
				t.Fatalf("files:\nwant %v\ngot  %v", tt.want, got)
			}
			if b, err := fsys.Boost(); err != nil || b != tt.boost {
				t.Fatalf("Boost() = %q, %v; want %q", b, err, tt.boost)
			}
		})
	}
}

func TestSetBoostNone(t *testing.T) {
	err := boostTree(t, nil).SetBoost(false)
	if !errors.Is(err, ErrNoBoost) || !BoostNotControllable(err) {
		t.Fatalf("SetBoost on a machine without boost: %v, want ErrNoBoost", err)
	}
}

// TestSetBoostErrno: a boost file that refuses writes (here: a directory
// in place of a per-policy file gives EISDIR; a read-only file as non-root
// EACCES) is reported with its path and errno, and the other files are
// still written.
func TestSetBoostErrno(t *testing.T) {
	fsys := boostTree(t, map[string]string{pGlobal: "1\n", pPol1: "1\n"})
	// policy0/boost is a directory: reading it fails (EISDIR), so it
	// counts as existing and its write fails too.
	if err := os.MkdirAll(fsys.Path(pPol0), 0o755); err != nil {
		t.Fatal(err)
	}
	err := fsys.SetBoost(false)
	if !errors.Is(err, syscall.EISDIR) {
		t.Fatalf("SetBoost: %v, want EISDIR", err)
	}
	if BoostNotControllable(err) {
		t.Fatalf("EISDIR classified as not controllable: %v", err)
	}
	if got := readTree(t, fsys, pGlobal, pPol1); got[pGlobal] != "0" || got[pPol1] != "0" {
		t.Fatalf("other files not written: %v", got)
	}
	for _, e := range []error{syscall.EAGAIN, syscall.EPERM, syscall.EINVAL} {
		if !BoostNotControllable(fmt.Errorf("write %q to x: %w", "1", e)) {
			t.Errorf("%v not classified as not controllable", e)
		}
	}
}

func TestBoostSnapshotRestore(t *testing.T) {
	fsys := boostTree(t, map[string]string{pGlobal: "1\n", pPol0: "0\n", pPol1: "1\n"})
	snap, err := fsys.BoostSnapshot()
	if err != nil {
		t.Fatal(err)
	}
	want := []BoostSetting{{pGlobal, "1"}, {pPol0, "0"}, {pPol1, "1"}}
	if !reflect.DeepEqual(want, snap) {
		t.Fatalf("snapshot:\nwant %v\ngot  %v", want, snap)
	}
	if err := fsys.SetBoost(false); err != nil {
		t.Fatal(err)
	}
	if err := fsys.RestoreBoost(snap); err != nil {
		t.Fatal(err)
	}
	if got := readTree(t, fsys, pGlobal, pPol0, pPol1); !reflect.DeepEqual(map[string]string{pGlobal: "1", pPol0: "0", pPol1: "1"}, got) {
		t.Fatalf("after restore: %v", got)
	}

	// A saved policy that no longer exists is skipped; a path that is not a
	// boost file is refused before anything is written.
	if err := fsys.RestoreBoost([]BoostSetting{{"devices/system/cpu/cpufreq/policy7/boost", "1"}, {pGlobal, "0"}}); err != nil {
		t.Fatalf("restore with a vanished policy: %v", err)
	}
	for _, bad := range [][]BoostSetting{
		{{"class/power_supply/AC/online", "1"}},
		{{"devices/system/cpu/cpufreq/../../../../etc/passwd", "1"}},
		{{pGlobal, "2"}},
	} {
		if err := fsys.RestoreBoost(append([]BoostSetting{{pPol0, "1"}}, bad...)); err == nil {
			t.Fatalf("RestoreBoost(%v) accepted", bad)
		}
	}
	if got := readTree(t, fsys, pPol0); got[pPol0] != "0" {
		t.Fatalf("a refused restore wrote policy0: %v", got)
	}
	if err := boostTree(t, nil).RestoreBoost(nil); !errors.Is(err, ErrNoBoost) {
		t.Fatalf("empty restore: %v", err)
	}
	if snap, err := boostTree(t, nil).BoostSnapshot(); err != nil || snap != nil {
		t.Fatalf("snapshot without boost: %v, %v", snap, err)
	}
}
