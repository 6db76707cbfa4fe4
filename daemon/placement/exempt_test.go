package placement

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	logtest "github.com/sirupsen/logrus/hooks/test"

	"github.com/schedpolicyd/schedpolicyd/daemon/statefile"
	"github.com/schedpolicyd/schedpolicyd/internal/names"
	"github.com/schedpolicyd/schedpolicyd/policy"
	"github.com/schedpolicyd/schedpolicyd/sysfs"
)

// exemptDriver is an in-process driver with exemptions: its workloads
// (IDs), and what each apply found exempt (applied: the keys SetExempt
// gave before it, sorted, one line per apply).
type exemptDriver struct {
	ids     []WorkloadID
	exempt  map[string]bool
	applied []string
}

func (d *exemptDriver) Mode() string                { return "fake" }
func (d *exemptDriver) Open() error                 { return nil }
func (d *exemptDriver) Close()                      {}
func (d *exemptDriver) Scan() bool                  { return false }
func (d *exemptDriver) Sample() bool                { return false }
func (d *exemptDriver) Restore() bool               { return true }
func (d *exemptDriver) Count() int                  { return len(d.ids) }
func (d *exemptDriver) IDs() []WorkloadID           { return slices.Clone(d.ids) }
func (d *exemptDriver) SetExempt(k map[string]bool) { d.exempt = k }

// PlanInput records what an apply found exempt; nothing is placed.
func (d *exemptDriver) PlanInput(sysfs.CPUSet) (PlanInput, bool) {
	var keys []string
	for k := range d.exempt {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	d.applied = append(d.applied, strings.Join(keys, ","))
	return PlanInput{}, false
}

func (d *exemptDriver) Write(policy.Plan, []Want) {}

// exemptRig is an engine driving an exemptDriver, keeping state.json in
// dir.
type exemptRig struct {
	e     *Engine
	d     *exemptDriver
	dir   string
	store *statefile.Store
	hook  *logtest.Hook
}

func newExemptRig(t *testing.T, dir string, cfg []string) *exemptRig {
	t.Helper()
	log, hook := logtest.NewNullLogger()
	c := &Config{}
	for _, s := range cfg {
		x, err := names.ParseExempt(s)
		if err != nil {
			t.Fatal(err)
		}
		c.Exempt = append(c.Exempt, x)
	}
	st, err := statefile.LoadState(dir)
	if err != nil {
		t.Fatal(err)
	}
	r := &exemptRig{e: NewEngine(c, log, &Counters{}, nil), dir: dir, hook: hook, d: &exemptDriver{ids: []WorkloadID{
		{Key: "ssh.service", Manager: "system", Name: "ssh.service"},
		{Key: "user:1000/app-steam-1.scope", Manager: "user:1000", Name: "app-steam-1.scope"},
		{Key: "user:1001/app-steam-1.scope", Manager: "user:1001", Name: "app-steam-1.scope"},
		{Key: "user:1000/app-firefox.scope", Manager: "user:1000", Name: "app-firefox.scope"},
	}}}
	r.e.Drive(r.d)
	r.store = statefile.NewStore(dir, st, log)
	r.e.Keep(r.store)
	return r
}

func (r *exemptRig) apply() string {
	r.e.Apply(policy.Powersaving, policy.Topology{}, sysfs.CPUSet{}, false)
	return r.d.applied[len(r.d.applied)-1]
}

func (r *exemptRig) messages() []string {
	var out []string
	for _, e := range r.hook.AllEntries() {
		msg := e.Message
		if w, ok := e.Data["workload"]; ok {
			msg += " " + w.(string)
		}
		if w, ok := e.Data["entry"]; ok {
			msg += " " + w.(string)
		}
		out = append(out, msg)
	}
	r.hook.Reset()
	return out
}

func mustExempt(t *testing.T, s string) names.Exempt {
	t.Helper()
	x, err := names.ParseExempt(s)
	if err != nil {
		t.Fatal(err)
	}
	return x
}

// TestEngineExempt: the engine tells the driver, before each plan, which
// workloads the exempt list names — the configuration's and the one made
// over D-Bus, a manager narrowing an entry — logs each change once, keeps
// the list made over D-Bus in state.json (a restart has it), and refuses
// what it cannot do with an error that changes nothing.
func TestEngineExempt(t *testing.T) {
	dir := t.TempDir()
	r := newExemptRig(t, dir, []string{"system/ssh.service"})
	if got := r.apply(); got != "ssh.service" {
		t.Fatalf("exempt at the first plan: %q", got)
	}
	if got := r.messages(); !reflect.DeepEqual(got, []string{"workload exempt: given its original CPUs back, not placed while exempt ssh.service"}) {
		t.Errorf("log %q", got)
	}
	if got := r.apply(); got != "ssh.service" || len(r.messages()) != 0 {
		t.Errorf("second plan: %q, logged again", got)
	}

	// One user's own units: another user's of the same name stay placed.
	changed, err := r.e.AddExempt(mustExempt(t, "user:1000/app-steam*.scope"))
	if err != nil || !changed {
		t.Fatalf("AddExempt: %v %v", changed, err)
	}
	if again, err := r.e.AddExempt(mustExempt(t, "user:1000/app-steam*.scope")); err != nil || again {
		t.Errorf("the same entry again: %v %v, want no change, no error (idempotent)", again, err)
	}
	if again, err := r.e.AddExempt(mustExempt(t, "system/ssh.service")); err != nil || again {
		t.Errorf("the configuration's entry: %v %v, want no change", again, err)
	}
	if got := r.apply(); got != "ssh.service,user:1000/app-steam-1.scope" {
		t.Errorf("after exempting user:1000/app-steam*.scope: %q", got)
	}
	r.messages()
	st, _ := statefile.LoadState(dir)
	if !reflect.DeepEqual(st.Exempt, []string{"user:1000/app-steam*.scope"}) {
		t.Errorf("state.json's exempt list: %q", st.Exempt)
	}
	if got := r.e.Matching(mustExempt(t, "app-steam*.scope")); len(got) != 2 || got[0].Key != "user:1000/app-steam-1.scope" {
		t.Errorf("Matching: %v", got)
	}

	// A restart keeps it.
	r2 := newExemptRig(t, dir, nil)
	if got := r2.apply(); got != "user:1000/app-steam-1.scope" {
		t.Errorf("after a restart (the configuration's entry gone): %q", got)
	}
	if got := r2.e.Exempts(); len(got) != 1 || got[0].From != ExemptState {
		t.Errorf("Exempts: %v", got)
	}

	// Unexempt: placed again at the next plan; errors change nothing.
	if err := r.e.RemoveExempt(mustExempt(t, "system/ssh.service")); !errors.Is(err, policy.ErrInvalid) || !strings.Contains(err.Error(), "exempt by the configuration file's exempt setting") {
		t.Errorf("RemoveExempt of the configuration's: %v", err)
	}
	if err := r.e.RemoveExempt(mustExempt(t, "nothing.service")); !errors.Is(err, policy.ErrInvalid) || err.Error() != `invalid value: "nothing.service" is not exempt` {
		t.Errorf("RemoveExempt of what is not exempt: %v", err)
	}
	if err := r.e.RemoveExempt(mustExempt(t, "user:1000/app-steam*.scope")); err != nil {
		t.Fatal(err)
	}
	if got := r.apply(); got != "ssh.service" {
		t.Errorf("after unexempt: %q", got)
	}
	if got := r.messages(); !slices.Contains(got, "workload no longer exempt: placed again user:1000/app-steam-1.scope") {
		t.Errorf("log %q", got)
	}
	if st, _ := statefile.LoadState(dir); st.Exempt != nil {
		t.Errorf("state.json's exempt list after unexempt: %q", st.Exempt)
	}

	// A save that fails: nothing changes, in memory or on disk.
	os.Chmod(dir, 0o500)
	defer os.Chmod(dir, 0o700)
	if os.Geteuid() == 0 {
		// Root writes anyway: a directory where state.json goes.
		os.Chmod(dir, 0o700)
		os.Remove(filepath.Join(dir, statefile.StateFile))
		os.Mkdir(filepath.Join(dir, statefile.StateFile), 0o700)
	}
	if changed, err := r.e.AddExempt(mustExempt(t, "x.service")); err == nil || changed || !strings.HasPrefix(err.Error(), "cannot save state.json") {
		t.Errorf("AddExempt with state.json unsavable: %v %v", changed, err)
	}
	if len(r.e.Exempts()) != 1 || !reflect.DeepEqual(r.store.State().Exempt, []string(nil)) {
		t.Errorf("a failed AddExempt changed the list: %v %q", r.e.Exempts(), r.store.State().Exempt)
	}
}

// TestEngineExemptBound: the list made over D-Bus holds at most
// names.MaxExempts entries; one more is refused and changes nothing.
func TestEngineExemptBound(t *testing.T) {
	r := newExemptRig(t, t.TempDir(), nil)
	for i := range names.MaxExempts {
		if _, err := r.e.AddExempt(names.Exempt{Pattern: "w" + strings.Repeat("x", i%7) + string(rune('a'+i%26)) + string(rune('a'+i/26))}); err != nil {
			t.Fatal(i, err)
		}
	}
	_, err := r.e.AddExempt(mustExempt(t, "one-more"))
	if !errors.Is(err, policy.ErrInvalid) || !strings.Contains(err.Error(), "the exempt list holds 256 entries") {
		t.Errorf("entry %d: %v", names.MaxExempts+1, err)
	}
	if n := len(r.store.State().Exempt); n != names.MaxExempts {
		t.Errorf("state holds %d entries", n)
	}
}

// TestEngineExemptNothing: without entries the driver is never asked.
func TestEngineExemptNothing(t *testing.T) {
	r := newExemptRig(t, t.TempDir(), nil)
	r.apply()
	if r.d.exempt != nil {
		t.Errorf("SetExempt called without an exempt list: %v", r.d.exempt)
	}
}
