package statefile

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	"github.com/sirupsen/logrus/hooks/test"

	"github.com/schedpolicyd/schedpolicyd/daemon/snapshot"
	"github.com/schedpolicyd/schedpolicyd/policy"
	"github.com/schedpolicyd/schedpolicyd/sysfs"
)

// TestStoreHoldsAndSaves: each owner's part written into the store is
// what the next save writes, exactly as SaveState writes the same State;
// the other placement mode's records stay as loaded; Changed says whether
// anything differs from the last save.
func TestStoreHoldsAndSaves(t *testing.T) {
	dir := t.TempDir()
	unit := UnitRecord{Manager: "system", Unit: "b.service", Values: Values{Original: "1"}}
	loaded := State{Knob: policy.DefaultKnob(), Units: []UnitRecord{unit}, EnergyErr: os.ErrInvalid, ChoicesErr: os.ErrInvalid}
	log, _ := test.NewNullLogger()
	s := NewStore(dir, loaded, log)
	if !s.Changed() {
		t.Fatal("a new store is not Changed")
	}
	if st := s.State(); st.EnergyErr != nil || st.ChoicesErr != nil {
		t.Errorf("the load's errors are kept: %v, %v", st.EnergyErr, st.ChoicesErr)
	}
	at := time.Date(2024, 5, 6, 7, 8, 9, 0, time.UTC)
	k := policy.Knob{PowerAware: policy.PowerAwareOn, PowerAwarePolicy: policy.Balance}
	choices := map[string]policy.Knob{"battery": k}
	boost := []sysfs.BoostSetting{{File: "devices/system/cpu/cpufreq/boost", Value: "1"}}
	energy := []snapshot.EnergyTotal{{Policy: policy.Balance, PowerSource: "battery", Joules: 12.5, Seconds: 10}}
	cgroups := []Record{{Path: "/sys/fs/cgroup/cpuset/p/w", Inode: 7, Values: Values{Original: "0-3", Pending: "0"}}}
	s.SetDecision(k, true, at, choices)
	s.SetBoost(boost)
	s.SetEnergy(energy)
	s.SetCgroups(cgroups)
	if err := s.Save(); err != nil {
		t.Fatal(err)
	}
	if s.Changed() {
		t.Error("Changed right after a save")
	}
	want := State{Knob: k, Chosen: true, ChosenAt: at, Choices: choices, Boost: boost, Energy: energy, Cgroups: cgroups, Units: []UnitRecord{unit}}
	if got := s.State(); !reflect.DeepEqual(got, want) {
		t.Errorf("held %+v, want %+v", got, want)
	}
	got, err := os.ReadFile(filepath.Join(dir, StateFile))
	if err != nil {
		t.Fatal(err)
	}
	ref := t.TempDir()
	if err := SaveState(ref, want); err != nil {
		t.Fatal(err)
	}
	if exp, _ := os.ReadFile(filepath.Join(ref, StateFile)); string(got) != string(exp) {
		t.Errorf("state.json:\n%s\nwant, as SaveState writes it:\n%s", got, exp)
	}
	if s.Boost()[0] != boost[0] {
		t.Errorf("Boost() = %v", s.Boost())
	}
	s.SetBoost(nil)
	if !s.Changed() {
		t.Error("not Changed after SetBoost(nil)")
	}
	s.SetBoost(boost)
	if s.Changed() {
		t.Error("Changed with what was saved set back")
	}
}

// TestStoreCheckpointSaysFailureOnce: a checkpoint that fails is said
// once at error level, its repeats at debug level, the first one that
// works again once at info level; state.json is then what the store
// holds.
func TestStoreCheckpointSaysFailureOnce(t *testing.T) {
	base := t.TempDir()
	dir := filepath.Join(base, "state")
	// A file where the directory must be: every save fails.
	if err := os.WriteFile(dir, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	log, hook := test.NewNullLogger()
	log.SetLevel(logrus.DebugLevel)
	s := NewStore(dir, State{Knob: policy.DefaultKnob()}, log)
	var said []string
	take := func() string {
		for _, e := range hook.AllEntries() {
			said = append(said, e.Level.String()+": "+e.Message)
		}
		hook.Reset()
		s := strings.Join(said, " | ")
		said = nil
		return s
	}
	for range 2 {
		if err := s.Checkpoint(); err == nil {
			t.Fatal("checkpoint into a file saved")
		}
	}
	if !s.Changed() {
		t.Error("not Changed after failed saves")
	}
	if got, want := take(), "error: cannot save state.json; no cpuset or AllowedCPUs= is changed, and energy totals are kept in memory, until it can be | debug: cannot save state.json yet"; got != want {
		t.Errorf("said %q, want %q", got, want)
	}
	if err := os.Remove(dir); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := s.Checkpoint(); err != nil {
			t.Fatal(err)
		}
	}
	if got, want := take(), "info: state.json saved again"; got != want {
		t.Errorf("said %q, want %q", got, want)
	}
	st, err := LoadState(dir)
	if err != nil || st.Knob != policy.DefaultKnob() {
		t.Errorf("state.json after the checkpoint: %+v, %v", st, err)
	}
}
