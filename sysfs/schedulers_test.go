package sysfs

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestReadEnergyAware: the sysctl's three values and its absence.
func TestReadEnergyAware(t *testing.T) {
	for _, c := range []struct {
		dir  string
		want EnergyAware
	}{
		{"testdata/schedulers/eas-on/proc", EnergyAware{true, "1"}},
		{"testdata/schedulers/eas-off/proc", EnergyAware{true, "0"}},
		{"testdata/schedulers/eas-impossible/proc", EnergyAware{true, ""}},
		{t.TempDir(), EnergyAware{}},
	} {
		got, err := ReadEnergyAware(c.dir)
		if err != nil || got != c.want {
			t.Errorf("%s: %+v, %v; want %+v", c.dir, got, err, c.want)
		}
	}
	// A directory where the file should be is an error naming it.
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "sys/kernel/sched_energy_aware"), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadEnergyAware(dir); err == nil || !strings.Contains(err.Error(), "sched_energy_aware") {
		t.Errorf("a directory: %v, want an error naming the file", err)
	}
}

// TestSchedExt: a loaded scheduler with its ops name, none attached, a
// kernel without sched_ext, and names that are not printable or too long.
func TestSchedExt(t *testing.T) {
	for _, c := range []struct {
		root string
		want SchedExt
	}{
		{"testdata/schedulers/scx-lavd/sys", SchedExt{Present: true, State: "enabled", Ops: "lavd"}},
		{"testdata/schedulers/eas-on/sys", SchedExt{Present: true, State: "disabled"}},
		{"testdata/schedulers/eas-off/sys", SchedExt{}},
	} {
		fs, err := NewFS(c.root)
		if err != nil {
			t.Fatal(err)
		}
		got, err := fs.SchedExt()
		if err != nil || got != c.want {
			t.Errorf("%s: %+v, %v; want %+v", c.root, got, err, c.want)
		}
		if got.Loaded() != (c.want.State == "enabled") {
			t.Errorf("%s: Loaded %v", c.root, got.Loaded())
		}
	}
	dir := t.TempDir()
	put := func(p, v string) {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, p), []byte(v), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	put("kernel/sched_ext/state", "enabled\n")
	put("kernel/sched_ext/root/ops", "caf\xe9\n")
	fs, _ := NewFS(dir)
	if got, err := fs.SchedExt(); err != nil || got.Ops != `"caf\xe9"` {
		t.Errorf("a name not UTF-8: %+v, %v; want it quoted", got, err)
	}
	put("kernel/sched_ext/root/ops", strings.Repeat("x", 1000))
	if got, err := fs.SchedExt(); err != nil || got.Ops != strings.Repeat("x", maxSchedExtName) {
		t.Errorf("a long name: %d bytes, %v; want %d", len(got.Ops), err, maxSchedExtName)
	}
}

// TestScalingGovernor: CPU 0's governor, and none without cpufreq.
func TestScalingGovernor(t *testing.T) {
	fs, _ := NewFS("testdata/schedulers/eas-on/sys")
	if g, err := fs.ScalingGovernor(0); err != nil || g != "schedutil" {
		t.Errorf("eas-on: %q, %v", g, err)
	}
	if g, err := fs.ScalingGovernor(1); err != nil || g != "" {
		t.Errorf("no cpufreq: %q, %v", g, err)
	}
}
