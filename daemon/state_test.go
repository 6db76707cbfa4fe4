package daemon

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/schedpolicyd/schedpolicyd/policy"
)

func TestStateRoundTrip(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	k, err := LoadState(dir)
	if err != nil || k != policy.DefaultKnob() {
		t.Fatalf("missing file: got %+v, %v; want defaults, nil", k, err)
	}
	want := policy.Knob{PowerAware: 2, PowerAwarePolicy: policy.Balance}
	if err := SaveState(dir, want); err != nil {
		t.Fatal(err)
	}
	got, err := LoadState(dir)
	if err != nil || got != want {
		t.Fatalf("got %+v, %v; want %+v", got, err, want)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("state dir holds %d entries, want only state.json (no temp files left)", len(entries))
	}
	st, _ := os.Stat(filepath.Join(dir, StateFile))
	if st.Mode().Perm() != 0o644 {
		t.Errorf("mode %v, want 0644", st.Mode().Perm())
	}
}

func TestStateCorruptAndInvalid(t *testing.T) {
	for name, content := range map[string]string{
		"garbage":        "{not json",
		"wrong version":  `{"version": 9, "power_aware": 1, "power_aware_policy": "balance"}`,
		"bad knob":       `{"version": 1, "power_aware": 7, "power_aware_policy": "balance"}`,
		"bad policy":     `{"version": 1, "power_aware": 1, "power_aware_policy": "performance"}`,
		"truncated file": ``,
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			os.WriteFile(filepath.Join(dir, StateFile), []byte(content), 0o644)
			k, err := LoadState(dir)
			if !errors.Is(err, ErrCorruptState) {
				t.Errorf("err = %v, want ErrCorruptState", err)
			}
			if k != policy.DefaultKnob() {
				t.Errorf("knob = %+v, want defaults", k)
			}
		})
	}
}

func TestSaveStateRejectsInvalidAndKeepsOld(t *testing.T) {
	dir := t.TempDir()
	old := policy.Knob{PowerAware: 0, PowerAwarePolicy: policy.Powersaving}
	if err := SaveState(dir, old); err != nil {
		t.Fatal(err)
	}
	if err := SaveState(dir, policy.Knob{PowerAware: 5, PowerAwarePolicy: policy.Balance}); !errors.Is(err, policy.ErrInvalid) {
		t.Fatalf("err = %v, want ErrInvalid", err)
	}
	if got, _ := LoadState(dir); got != old {
		t.Errorf("state changed to %+v after a rejected save", got)
	}
}
