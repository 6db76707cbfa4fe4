package daemon

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/schedpolicyd/schedpolicyd/policy"
)

// StateFile is the name of the persisted state inside the state directory
// (default /var/lib/schedpolicyd/state.json).
const StateFile = "state.json"

// stateVersion is written into every state file; files of another version
// are ignored with a warning.
const stateVersion = 1

// persisted is the JSON shape of state.json.
type persisted struct {
	Version int `json:"version"`
	policy.Knob
}

// ErrCorruptState is wrapped by LoadState when state.json exists but cannot
// be used; the caller starts from defaults and says which file to remove.
var ErrCorruptState = errors.New("corrupt state file")

// LoadState reads the user's knob from dir/state.json. A missing file is not
// an error: it returns policy.DefaultKnob(). A file that does not parse, has
// another version or holds invalid values returns DefaultKnob and an error
// wrapping ErrCorruptState. It never writes.
func LoadState(dir string) (policy.Knob, error) {
	path := filepath.Join(dir, StateFile)
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return policy.DefaultKnob(), nil
	}
	if err != nil {
		return policy.DefaultKnob(), fmt.Errorf("read %s: %w", path, err)
	}
	var p persisted
	if err := json.Unmarshal(b, &p); err != nil {
		return policy.DefaultKnob(), fmt.Errorf("%w %s: %v (remove it to start from defaults)", ErrCorruptState, path, err)
	}
	if p.Version != stateVersion {
		return policy.DefaultKnob(), fmt.Errorf("%w %s: version %d, want %d", ErrCorruptState, path, p.Version, stateVersion)
	}
	if err := p.Knob.Validate(); err != nil {
		return policy.DefaultKnob(), fmt.Errorf("%w %s: %v", ErrCorruptState, path, err)
	}
	return p.Knob, nil
}

// SaveState writes the knob to dir/state.json atomically: a temporary file
// in the same directory, fsync, rename over the old file, fsync of the
// directory. The directory is created (0755) if missing; the file is 0644.
// On any error the old file is untouched and the temporary file removed.
func SaveState(dir string, k policy.Knob) error {
	if err := k.Validate(); err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("create state dir: %w", err)
	}
	b, err := json.MarshalIndent(persisted{Version: stateVersion, Knob: k}, "", "  ")
	if err != nil {
		return err
	}
	b = append(b, '\n')
	f, err := os.CreateTemp(dir, ".state-*.json")
	if err != nil {
		return fmt.Errorf("save state: %w", err)
	}
	tmp := f.Name()
	fail := func(err error) error {
		f.Close()
		os.Remove(tmp)
		return fmt.Errorf("save state to %s: %w", filepath.Join(dir, StateFile), err)
	}
	if err := f.Chmod(0o644); err != nil {
		return fail(err)
	}
	if _, err := f.Write(b); err != nil {
		return fail(err)
	}
	if err := f.Sync(); err != nil {
		return fail(err)
	}
	if err := f.Close(); err != nil {
		return fail(err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, StateFile)); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("save state: %w", err)
	}
	if d, err := os.Open(dir); err == nil {
		d.Sync()
		d.Close()
	}
	return nil
}
