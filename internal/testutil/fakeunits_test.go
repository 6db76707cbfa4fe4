package testutil

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestCPUMask: the byte array systemd's AllowedCPUs= property carries,
// and cpulists, both ways.
func TestCPUMask(t *testing.T) {
	for _, tc := range []struct {
		cpus []int
		mask []byte
		list string
	}{
		{nil, []byte{}, ""},
		{[]int{0}, []byte{0x01}, "0"},
		{[]int{0, 1, 2, 3, 6}, []byte{0x4f}, "0-3,6"},
		{[]int{1, 8, 9, 15}, []byte{0x02, 0x83}, "1,8-9,15"},
	} {
		if got := CPUMask(tc.cpus); !slices.Equal(got, tc.mask) || got == nil {
			t.Errorf("CPUMask(%v) = %#v, want %#v", tc.cpus, got, tc.mask)
		}
		if got := MaskCPUs(tc.mask); !slices.Equal(got, tc.cpus) {
			t.Errorf("MaskCPUs(%x) = %v, want %v", tc.mask, got, tc.cpus)
		}
		if got := CPUList(tc.cpus); got != tc.list {
			t.Errorf("CPUList(%v) = %q, want %q", tc.cpus, got, tc.list)
		}
		if got := ParseCPUList(tc.list); !slices.Equal(got, tc.cpus) {
			t.Errorf("ParseCPUList(%q) = %v, want %v", tc.list, got, tc.cpus)
		}
	}
	if got := ParseCPUList("x,2-y,4"); !slices.Equal(got, []int{4}) {
		t.Errorf("ParseCPUList skips what is not a number: %v", got)
	}
}

// TestFakeManagerLifecycle: the world's side played as systemd plays it —
// the signals in order, drop-ins written and read back on a reload (the
// persistent one shadowing the runtime one), a transient unit's drop-ins
// gone with it, the administrator's writes neither refused nor counted.
func TestFakeManagerLifecycle(t *testing.T) {
	f := NewFakeManager(t)
	dir := t.TempDir()
	f.DropInsBelow(dir, -1)
	var got []string
	f.OnSignal(func(s FakeSignal) {
		if s.Member == "Reloading" {
			got = append(got, fmt.Sprintf("Reloading(%v)", s.Reloading))
			return
		}
		got = append(got, s.Member+" "+s.Unit)
	})
	signals := func() string {
		s := strings.Join(got, ", ")
		got = nil
		return s
	}
	want := func(what, have, want string) {
		t.Helper()
		if have != want {
			t.Errorf("%s: %q, want %q", what, have, want)
		}
	}

	f.Start("a.service", "system.slice", false, 0, 1)
	f.Start("s.scope", "app.slice", true)
	want("start", signals(), "UnitNew a.service, JobRemoved a.service, UnitNew s.scope, JobRemoved s.scope")
	want("a's own value", f.Allowed("a.service"), "0-1")
	u, _ := f.Unit("a.service")
	want("a's cgroup", u.ControlGroup, "/system.slice/a.service")

	if err := f.Set("a.service", true, CPUMask([]int{1})); err != nil {
		t.Fatal(err)
	}
	f.Admin("a.service", false, 0)
	if err := f.Set("s.scope", true, CPUMask([]int{0})); err != nil {
		t.Fatal(err)
	}
	want("clients' writes", strings.Join(f.Writes(), " "), "a.service=1 s.scope=0")
	want("administrator's value in force", f.Allowed("a.service"), "0")

	f.RefuseSets(func(name string, mask []byte) bool { return name == "a.service" })
	if err := f.Set("a.service", true, CPUMask([]int{1})); err == nil || err.Name != "org.freedesktop.DBus.Error.AccessDenied" {
		t.Errorf("refused write: %v", err)
	}
	f.Admin("a.service", true, 1) // runtime, shadowed by the persistent 0
	want("refused write not counted", strings.Join(f.Writes(), " "), "a.service=1 s.scope=0")
	if err := f.Set("gone.service", true, nil); err == nil || err.Name != "org.freedesktop.systemd1.NoSuchUnit" {
		t.Errorf("write to a unit not loaded: %v", err)
	}

	f.Reload()
	want("reload", signals(), "Reloading(true), UnitRemoved a.service, UnitRemoved s.scope, UnitNew a.service, UnitNew s.scope, Reloading(false)")
	want("a after the reload: the persistent drop-in", f.Allowed("a.service"), "0")
	u, _ = f.Unit("a.service")
	want("a's drop-ins", strings.Join(u.DropIns, " "), filepath.Join(dir, "etc/systemd/system.control/a.service.d", AllowedCPUsDropIn))
	b, err := os.ReadFile(u.DropIns[0])
	if err != nil {
		t.Fatal(err)
	}
	want("a's drop-in", string(b), "[Service]\nAllowedCPUs=0\n")
	want("s after the reload: its transient drop-in", f.Allowed("s.scope"), "0")

	u, _ = f.Unit("s.scope")
	f.Stop("s.scope")
	want("a transient unit's stop", signals(), "JobRemoved s.scope, UnitRemoved s.scope")
	if _, err := os.Stat(u.DropIns[0]); !os.IsNotExist(err) {
		t.Errorf("the transient unit's drop-in outlived it: %v", err)
	}
	f.Stop("a.service")
	u, _ = f.Unit("a.service")
	want("a stopped", u.ActiveState+" "+u.ControlGroup, "inactive ")
	f.Drop("a.service")
	want("stop and drop", signals(), "JobRemoved a.service, UnitRemoved a.service")
	want("dropped", f.Allowed("a.service"), "(not found)")
	if _, err := os.Stat(filepath.Join(dir, "etc/systemd/system.control/a.service.d", AllowedCPUsDropIn)); err != nil {
		t.Errorf("a unit file's drop-in went with the unit: %v", err)
	}
}
