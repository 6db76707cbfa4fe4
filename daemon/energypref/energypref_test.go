package energypref

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"

	"github.com/schedpolicyd/schedpolicyd/acpi"
	"github.com/schedpolicyd/schedpolicyd/daemon/statefile"
	"github.com/schedpolicyd/schedpolicyd/internal/testutil"
	"github.com/schedpolicyd/schedpolicyd/policy"
	"github.com/schedpolicyd/schedpolicyd/sysfs"
)

const fixtures = "../../sysfs/testdata/energypref"

// machine is a sysfs root made of the named overlays (fixtures README).
func machine(t *testing.T, overlays ...string) (string, sysfs.FS) {
	t.Helper()
	root := t.TempDir()
	for _, o := range overlays {
		testutil.CopyFixture(t, filepath.Join(fixtures, o), root)
	}
	fsys, err := sysfs.NewFS(root)
	if err != nil {
		t.Fatal(err)
	}
	return root, fsys
}

func epp(n int) string {
	return fmt.Sprintf("devices/system/cpu/cpufreq/policy%d/energy_performance_preference", n)
}

// values reads every policy's EPP, "policyN=value" joined by spaces, and
// the platform profile if any.
func values(t *testing.T, root string) string {
	t.Helper()
	var out []string
	for n := 0; ; n++ {
		b, err := os.ReadFile(filepath.Join(root, epp(n)))
		if errors.Is(err, os.ErrNotExist) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, fmt.Sprintf("%d=%s", n, strings.TrimSpace(string(b))))
	}
	if b, err := os.ReadFile(filepath.Join(root, sysfs.PlatformProfileFile)); err == nil {
		out = append(out, "pp="+strings.TrimSpace(string(b)))
	}
	return strings.Join(out, " ")
}

// same is n policies' "i=v" for v, from first.
func same(first, n int, v string) string {
	var out []string
	for i := first; i < first+n; i++ {
		out = append(out, fmt.Sprintf("%d=%s", i, v))
	}
	return strings.Join(out, " ")
}

// journal is a save function that records what was saved and checks
// that every file a record marks Pending still holds another value: the
// record is saved before the write.
type journal struct {
	t     *testing.T
	fsys  sysfs.FS
	saves [][]statefile.PrefRecord
	fail  error
}

func (j *journal) save(recs []statefile.PrefRecord) error {
	if j.fail != nil {
		return j.fail
	}
	for _, r := range recs {
		if r.Pending == "" {
			continue
		}
		if cur, err := j.fsys.ReadPref(r.File); err == nil && cur == r.Pending && r.Pending != r.Applied {
			j.t.Errorf("record of %s saved with pending %q after the file already holds it", r.File, r.Pending)
		}
	}
	j.saves = append(j.saves, recs)
	return nil
}

// TestMapIntelActive walks the map on the i7-1260P's intel_pstate
// (active, HWP; pepc's adl0 dump): powersaving writes power to all 16
// policies, balance balance_power on battery and balance_performance (the
// original) on AC, performance the values found; each record is saved
// before its write and dropped once the original is back.
func TestMapIntelActive(t *testing.T) {
	root, fsys := machine(t, "intel-adl-p-i7-1260p", "thinkpad-dytc")
	j := &journal{t: t, fsys: fsys}
	a := New(fsys, j.save)
	steps := []struct {
		p       policy.Policy
		src     acpi.Source
		want    string
		records int
	}{
		{policy.Powersaving, acpi.Battery, same(0, 16, "power") + " pp=low-power", 17},
		{policy.Balance, acpi.Battery, same(0, 16, "balance_power") + " pp=balanced", 16},
		{policy.Balance, acpi.AC, same(0, 16, "balance_performance") + " pp=balanced", 0},
		{policy.Powersaving, acpi.AC, same(0, 16, "power") + " pp=low-power", 17},
		{policy.Performance, acpi.AC, same(0, 16, "balance_performance") + " pp=balanced", 0},
	}
	for i, s := range steps {
		if _, err := a.Apply(s.p, s.src, Settings{}); err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		if got := values(t, root); got != s.want {
			t.Errorf("step %d (%s on %s): %s\nwant %s", i, s.p, s.src, got, s.want)
		}
		if got := len(a.Records()); got != s.records {
			t.Errorf("step %d: %d records, want %d", i, got, s.records)
		}
	}
	rec := j.saves[0][0]
	if want := (statefile.PrefRecord{File: epp(0), Original: "balance_performance", Pending: "power"}); rec != want {
		t.Errorf("first save of policy0: %+v, want %+v", rec, want)
	}
}

// TestMapAMDPstateEPP: amd-pstate-epp (bug 215800's Zen 3, found at
// performance): powersaving writes power, the stop puts performance back
// and leaves no record.
func TestMapAMDPstateEPP(t *testing.T) {
	root, fsys := machine(t, "amd-zen3-pstate-epp")
	j := &journal{t: t, fsys: fsys}
	a := New(fsys, j.save)
	if _, err := a.Apply(policy.Powersaving, acpi.Battery, Settings{}); err != nil {
		t.Fatal(err)
	}
	if got := values(t, root); got != "0=power 1=power" {
		t.Errorf("powersaving: %s", got)
	}
	if _, err := a.Apply(policy.Balance, acpi.AC, Settings{}); err != nil {
		t.Fatal(err)
	}
	if got := values(t, root); got != "0=balance_performance 1=balance_performance" {
		t.Errorf("balance on AC: %s", got)
	}
	if _, err := a.RestoreAll(); err != nil {
		t.Fatal(err)
	}
	if got := values(t, root); got != "0=performance 1=performance" {
		t.Errorf("after the stop: %s", got)
	}
	if last := j.saves[len(j.saves)-1]; last != nil {
		t.Errorf("records after the stop: %+v", last)
	}
}

// TestPerformanceGovernorLeftAlone: intel_pstate refuses a preference
// other than performance on a policy under the performance governor
// (EBUSY): those policies are not asked, and the report says why.
func TestPerformanceGovernorLeftAlone(t *testing.T) {
	root, fsys := machine(t, "intel-performance-governor")
	a := New(fsys, (&journal{t: t, fsys: fsys}).save)
	rep, err := a.Apply(policy.Powersaving, acpi.Battery, Settings{})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := values(t, root), same(0, 8, "performance")+" "+same(8, 8, "power"); got != want {
		t.Errorf("%s\nwant %s", got, want)
	}
	if why := rep.Skipped[epp(3)]; !strings.Contains(why, "intel_pstate refuses any preference but performance under the performance governor (EBUSY)") {
		t.Errorf("policy3's reason: %q", why)
	}
	if len(a.Records()) != 8 {
		t.Errorf("%d records, want the 8 written", len(a.Records()))
	}
}

// failingKnobs is an fs whose writes to some files fail with err (what
// the kernel's driver answers), and whose reads of others fail too (an
// inactive policy: EBUSY).
type failingKnobs struct {
	sysfs.FS
	writeErr map[string]error
	readErr  map[string]error
}

func (k failingKnobs) WritePref(file, v string) error {
	if err := k.writeErr[file]; err != nil {
		return fmt.Errorf("write %q to %s: %w", v, file, err)
	}
	return k.FS.WritePref(file, v)
}

func (k failingKnobs) ReadPref(file string) (string, error) {
	if err := k.readErr[file]; err != nil {
		return "", fmt.Errorf("read %s: %w", file, err)
	}
	return k.FS.ReadPref(file)
}

// TestWriteRefusedEBUSY: a driver that refuses one policy's write with
// EBUSY (intel_pstate under the performance governor, set between our
// read and our write) leaves that policy as it was, with no record; the
// others are written. A policy that cannot be read (inactive: EBUSY) is
// skipped and its record kept for a later turn; once readable (the CPU is
// online again) it is restored.
func TestWriteRefusedEBUSY(t *testing.T) {
	root, fsys := machine(t, "intel-adl-p-i7-1260p")
	k := failingKnobs{FS: fsys, writeErr: map[string]error{epp(3): syscall.EBUSY}, readErr: map[string]error{}}
	a := New(k, (&journal{t: t, fsys: fsys}).save)
	rep, err := a.Apply(policy.Powersaving, acpi.Battery, Settings{})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := values(t, root), same(0, 3, "power")+" 3=balance_performance "+same(4, 12, "power"); got != want {
		t.Errorf("%s\nwant %s", got, want)
	}
	if why := rep.Skipped[epp(3)]; !strings.HasPrefix(why, "refused: ") || !strings.Contains(why, "device or resource busy") {
		t.Errorf("policy3's reason: %q", why)
	}
	for _, r := range a.Records() {
		if r.File == epp(3) {
			t.Errorf("a record of the refused policy3 is kept: %+v", r)
		}
	}
	// policy5 goes inactive (its CPU offline): the stop cannot restore it
	// and keeps its record; the next turn that can read it restores it.
	k.readErr[epp(5)] = syscall.EBUSY
	rep, err = a.RestoreAll()
	if err != nil {
		t.Fatal(err)
	}
	if got := a.Records(); len(got) != 1 || got[0].File != epp(5) || got[0].Applied != "power" {
		t.Errorf("records after the stop: %+v, want policy5's alone", got)
	}
	if !strings.Contains(rep.Skipped[epp(5)], "kept for the next start") {
		t.Errorf("policy5's reason: %q", rep.Skipped[epp(5)])
	}
	delete(k.readErr, epp(5))
	if _, err := a.RestoreAll(); err != nil {
		t.Fatal(err)
	}
	if got := values(t, root); got != same(0, 16, "balance_performance") {
		t.Errorf("after both stops: %s", got)
	}
}

// TestSomeoneElsesValueLeftAlone: a value another writer put in a file
// since ours stays: the file's record is dropped, it is not written
// again by this run, and the stop does not put the original over it.
func TestSomeoneElsesValueLeftAlone(t *testing.T) {
	root, fsys := machine(t, "intel-adl-p-i7-1260p", "thinkpad-dytc")
	a := New(fsys, (&journal{t: t, fsys: fsys}).save)
	if _, err := a.Apply(policy.Powersaving, acpi.Battery, Settings{}); err != nil {
		t.Fatal(err)
	}
	testutil.Put(t, filepath.Join(root, epp(5)), "performance")
	testutil.Put(t, filepath.Join(root, sysfs.PlatformProfileFile), "performance")
	rep, err := a.Apply(policy.Balance, acpi.Battery, Settings{})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := values(t, root), same(0, 5, "balance_power")+" 5=performance "+same(6, 10, "balance_power")+" pp=performance"; got != want {
		t.Errorf("%s\nwant %s", got, want)
	}
	if why := rep.Skipped[epp(5)]; why != `left alone: someone else wrote "performance" since` {
		t.Errorf("policy5's reason: %q", why)
	}
	if _, err := a.RestoreAll(); err != nil {
		t.Fatal(err)
	}
	if got, want := values(t, root), same(0, 5, "balance_performance")+" 5=performance "+same(6, 10, "balance_performance")+" pp=performance"; got != want {
		t.Errorf("after the stop: %s\nwant %s", got, want)
	}
	if got := a.Released(); !reflect.DeepEqual(got, []string{epp(5), sysfs.PlatformProfileFile}) {
		t.Errorf("released %q", got)
	}
}

// TestHotplugNewPolicy: a policy that appears (its CPU came online for
// the first time) gets the policy's value at the next Apply, its
// original recorded first; the stop restores it too.
func TestHotplugNewPolicy(t *testing.T) {
	root, fsys := machine(t, "amd-zen3-pstate-epp")
	j := &journal{t: t, fsys: fsys}
	a := New(fsys, j.save)
	if _, err := a.Apply(policy.Powersaving, acpi.Battery, Settings{}); err != nil {
		t.Fatal(err)
	}
	src := filepath.Join(root, "devices/system/cpu/cpufreq/policy1")
	dst := filepath.Join(root, "devices/system/cpu/cpufreq/policy2")
	if err := testutil.CopyTree(src, dst); err != nil {
		t.Fatal(err)
	}
	testutil.Put(t, filepath.Join(dst, sysfs.EPPFile), "balance_performance")
	n := len(j.saves)
	if _, err := a.Apply(policy.Powersaving, acpi.Battery, Settings{}); err != nil {
		t.Fatal(err)
	}
	if got := values(t, root); got != "0=power 1=power 2=power" {
		t.Errorf("after the hotplug: %s", got)
	}
	var first statefile.PrefRecord
	for _, r := range j.saves[n] {
		if r.File == epp(2) {
			first = r
		}
	}
	if want := (statefile.PrefRecord{File: epp(2), Original: "balance_performance", Pending: "power"}); first != want {
		t.Errorf("policy2's record as saved before its write: %+v, want %+v", first, want)
	}
	if _, err := a.RestoreAll(); err != nil {
		t.Fatal(err)
	}
	if got := values(t, root); got != "0=performance 1=performance 2=balance_performance" {
		t.Errorf("after the stop: %s", got)
	}
}

// TestCrashRecovery: records a killed run left are adopted by the next
// start and restored where the file still holds the dead run's value;
// a file someone changed since is left as it is.
func TestCrashRecovery(t *testing.T) {
	root, fsys := machine(t, "amd-zen3-pstate-epp", "asus-wmi-quiet")
	dead := New(fsys, (&journal{t: t, fsys: fsys}).save)
	if _, err := dead.Apply(policy.Powersaving, acpi.Battery, Settings{}); err != nil {
		t.Fatal(err)
	}
	if got := values(t, root); got != "0=power 1=power pp=quiet" {
		t.Fatalf("the dead run's values: %s", got)
	}
	left := dead.Records()
	testutil.Put(t, filepath.Join(root, epp(1)), "balance_power") // someone else, after the crash
	next := New(fsys, (&journal{t: t, fsys: fsys}).save)
	next.Adopt(left)
	if _, err := next.RestoreAll(); err != nil {
		t.Fatal(err)
	}
	if got := values(t, root); got != "0=performance 1=balance_power pp=balanced" {
		t.Errorf("after the next start: %s", got)
	}
	if len(next.Records()) != 0 {
		t.Errorf("records left: %+v", next.Records())
	}
}

// TestSaveFailsNothingWritten: a record that cannot be saved stops every
// write.
func TestSaveFailsNothingWritten(t *testing.T) {
	root, fsys := machine(t, "amd-zen3-pstate-epp", "thinkpad-dytc")
	a := New(fsys, (&journal{t: t, fsys: fsys, fail: errors.New("disk full")}).save)
	if _, err := a.Apply(policy.Powersaving, acpi.Battery, Settings{}); err == nil || !strings.Contains(err.Error(), "disk full") {
		t.Errorf("Apply = %v, want the save's error", err)
	}
	if got := values(t, root); got != "0=performance 1=performance pp=balanced" {
		t.Errorf("written without a record: %s", got)
	}
	if len(a.Records()) != 0 {
		t.Errorf("records: %+v", a.Records())
	}
}

// TestAsideRestores: a kind set aside (epp = "off" on a reload, or an
// owner appeared) gets its originals back and is not written; the other
// kind goes on.
func TestAsideRestores(t *testing.T) {
	root, fsys := machine(t, "amd-zen3-pstate-epp", "thinkpad-dytc")
	a := New(fsys, (&journal{t: t, fsys: fsys}).save)
	if _, err := a.Apply(policy.Powersaving, acpi.Battery, Settings{}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Apply(policy.Powersaving, acpi.Battery, Settings{EPPAside: "off"}); err != nil {
		t.Fatal(err)
	}
	if got := values(t, root); got != "0=performance 1=performance pp=low-power" {
		t.Errorf("epp off: %s", got)
	}
	if _, err := a.Apply(policy.Balance, acpi.Battery, Settings{EPPAside: "off", PlatformAside: "tlp.service (installed, enabled)"}); err != nil {
		t.Fatal(err)
	}
	if got := values(t, root); got != "0=performance 1=performance pp=balanced" {
		t.Errorf("both aside: %s", got)
	}
}

// TestWantFallbacks: the map's fallbacks where a value is not offered.
func TestWantFallbacks(t *testing.T) {
	offers := func(vs ...string) func(string) bool {
		return func(v string) bool {
			for _, o := range vs {
				if o == v {
					return true
				}
			}
			return false
		}
	}
	for _, c := range []struct {
		kind    string
		p       policy.Policy
		src     acpi.Source
		offered []string
		want    string
		ok      bool
	}{
		{KindEPP, policy.Powersaving, acpi.AC, []string{"default", "performance", "balance_performance", "balance_power", "power"}, "power", true},
		{KindEPP, policy.Powersaving, acpi.AC, []string{"performance", "balance_power"}, "balance_power", true},
		{KindEPP, policy.Balance, acpi.Battery, []string{"performance", "balance_performance"}, "balance_performance", true},
		{KindEPP, policy.Balance, acpi.Unknown, []string{"balance_performance", "balance_power"}, "balance_performance", true},
		{KindEPP, policy.Powersaving, acpi.Battery, []string{"performance"}, "", false},
		{KindEPP, policy.Performance, acpi.Battery, nil, "", true},
		{KindPlatformProfile, policy.Powersaving, acpi.Battery, []string{"quiet", "balanced", "performance"}, "quiet", true},
		{KindPlatformProfile, policy.Powersaving, acpi.Battery, []string{"cool", "balanced", "performance"}, "cool", true},
		{KindPlatformProfile, policy.Powersaving, acpi.Battery, []string{"balanced", "performance"}, "", false},
		{KindPlatformProfile, policy.Balance, acpi.AC, []string{"low-power", "balanced"}, "balanced", true},
	} {
		got, ok := Want(c.kind, c.p, c.src, offers(c.offered...))
		if got != c.want || ok != c.ok {
			t.Errorf("Want(%s, %s, %s, %q) = %q, %v; want %q, %v", c.kind, c.p, c.src, c.offered, got, ok, c.want, c.ok)
		}
	}
}
