package daemon

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/schedpolicyd/schedpolicyd/policy"
)

func TestStateRoundTrip(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	st, err := LoadState(dir)
	if err != nil || st.Knob != policy.DefaultKnob() || st.Originals != nil {
		t.Fatalf("missing file: got %+v, %v; want defaults, nil", st, err)
	}
	want := State{
		Knob:      policy.Knob{PowerAware: 2, PowerAwarePolicy: policy.Balance},
		Originals: map[string]string{"/sys/fs/cgroup/cpuset/schedpolicyd/w1": "0-3,8", "/sys/fs/cgroup/x/y": ""},
	}
	if err := SaveState(dir, want); err != nil {
		t.Fatal(err)
	}
	got, err := LoadState(dir)
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("got %+v, %v; want %+v", got, err, want)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("state dir holds %d entries, want only state.json (no temp files left)", len(entries))
	}
	fi, _ := os.Stat(filepath.Join(dir, StateFile))
	if fi.Mode().Perm() != 0o644 {
		t.Errorf("mode %v, want 0644", fi.Mode().Perm())
	}
}

func TestStateCorruptAndInvalid(t *testing.T) {
	for name, content := range map[string]string{
		"garbage":         "{not json",
		"wrong version":   `{"version": 9, "power_aware": 1, "power_aware_policy": "balance"}`,
		"bad knob":        `{"version": 1, "power_aware": 7, "power_aware_policy": "balance"}`,
		"bad policy":      `{"version": 1, "power_aware": 1, "power_aware_policy": "performance"}`,
		"bad original":    `{"version": 1, "power_aware": 1, "power_aware_policy": "balance", "originals": {"/a": "3-1"}}`,
		"relative cgroup": `{"version": 1, "power_aware": 1, "power_aware_policy": "balance", "originals": {"a": "1"}}`,
		"truncated file":  ``,
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			os.WriteFile(filepath.Join(dir, StateFile), []byte(content), 0o644)
			st, err := LoadState(dir)
			if !errors.Is(err, ErrCorruptState) {
				t.Errorf("err = %v, want ErrCorruptState", err)
			}
			if st.Knob != policy.DefaultKnob() || st.Originals != nil {
				t.Errorf("state = %+v, want defaults", st)
			}
		})
	}
}

func TestSaveStateRejectsInvalidAndKeepsOld(t *testing.T) {
	dir := t.TempDir()
	old := State{Knob: policy.Knob{PowerAware: 0, PowerAwarePolicy: policy.Powersaving}}
	if err := SaveState(dir, old); err != nil {
		t.Fatal(err)
	}
	if err := SaveState(dir, State{Knob: policy.Knob{PowerAware: 5, PowerAwarePolicy: policy.Balance}}); !errors.Is(err, policy.ErrInvalid) {
		t.Fatalf("err = %v, want ErrInvalid", err)
	}
	if got, _ := LoadState(dir); got.Knob != old.Knob {
		t.Errorf("state changed to %+v after a rejected save", got)
	}
}

func TestLockIsExclusive(t *testing.T) {
	dir := t.TempDir()
	first, err := prepareStateDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := prepareStateDir(dir); !errors.Is(err, ErrAlreadyRunning) {
		t.Fatalf("second lock: err = %v, want ErrAlreadyRunning", err)
	}
	first.Close() // the holder goes away (as on a crash): the lock is free
	again, err := prepareStateDir(dir)
	if err != nil {
		t.Fatalf("after release: %v", err)
	}
	again.Close()
}

func TestPrepareStateDirRejectsUnusable(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "afile")
	os.WriteFile(file, nil, 0o644)
	if _, err := prepareStateDir(file); err == nil {
		t.Error("a regular file was accepted as the state dir")
	}
	os.Mkdir(filepath.Join(dir, "s"), 0o755)
	os.Mkdir(filepath.Join(dir, "s", StateFile), 0o755)
	if _, err := prepareStateDir(filepath.Join(dir, "s")); err == nil {
		t.Error("state.json as a directory was accepted")
	}
}
