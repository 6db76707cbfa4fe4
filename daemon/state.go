package daemon

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/schedpolicyd/schedpolicyd/policy"
	"github.com/schedpolicyd/schedpolicyd/sysfs"
)

// StateFile is the name of the persisted state inside the state directory
// (default /var/lib/schedpolicyd/state.json).
const StateFile = "state.json"

// lockFile, in the state directory, is held (flock) by the running daemon.
const lockFile = "lock"

// stateVersion is written into every state file; files of another version
// are ignored with a warning.
const stateVersion = 1

// State is what survives a restart or a crash.
type State struct {
	// Knob is the knob in force (power_aware, power_aware_policy).
	Knob policy.Knob
	// Chosen reports that Knob is the user's explicit choice (through the
	// tree, D-Bus or the CLI); until then the configured default applies
	// and may change with the configuration.
	Chosen bool
	// Originals maps each managed workload's cgroup directory to its
	// cpuset.cpus as found at adoption (a cpulist, "" for v2's inherit),
	// recorded before the daemon first writes that cpuset. After a crash
	// the next start restores from here, not from the packed set it finds.
	Originals map[string]string
	// OriginalIDs maps the same directories to their inode numbers: a saved
	// original is used only for the same cgroup, not for one removed and
	// made again under the path (files written before it had none: then
	// the path alone decides).
	OriginalIDs map[string]uint64
	// Boost is the cpufreq boost setting found before the daemon first
	// changed it (boost_on_battery); restored on exit, or by the next start
	// after a crash. Empty when boost is not being managed.
	Boost []sysfs.BoostSetting
	// LoadBalanceCleared maps the cgroup v1 workload directories whose
	// cpuset.sched_load_balance the daemon changed from 1 to 0 (recorded
	// before the write) to their inode numbers; set back to 1 on exit, or
	// by the next start after a crash — only if the directory is still the
	// same cgroup (same inode).
	LoadBalanceCleared map[string]uint64
	// Created maps the workload directories the daemon created
	// (CreateWorkload) to their inode numbers, so that a restarted daemon
	// still removes them when their last task exits — only the same
	// cgroup, never one made again under the same name.
	Created map[string]uint64
}

// persisted is the JSON shape of state.json.
type persisted struct {
	Version int `json:"version"`
	policy.Knob
	Chosen    bool                 `json:"chosen,omitempty"`
	Originals map[string]string    `json:"originals,omitempty"`
	Boost     []sysfs.BoostSetting `json:"boost,omitempty"`
	LBCleared map[string]uint64    `json:"sched_load_balance_cleared,omitempty"`
	Created   map[string]uint64    `json:"created,omitempty"`
	OrigIDs   map[string]uint64    `json:"original_inodes,omitempty"`
}

// ErrCorruptState is wrapped by LoadState when state.json exists but cannot
// be used; the caller starts from defaults and says which file it ignored.
var ErrCorruptState = errors.New("corrupt state file")

// LoadState reads dir/state.json. A missing file is not an error: it
// returns the default knob and no originals. A file that does not parse,
// has another version or holds invalid values returns the defaults and an
// error wrapping ErrCorruptState (the next save replaces it). Other read
// errors (state.json is a directory, EACCES) are returned as they are. It
// never writes.
func LoadState(dir string) (State, error) {
	def := State{Knob: policy.DefaultKnob()}
	path := filepath.Join(dir, StateFile)
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return def, nil
	}
	if err != nil {
		return def, fmt.Errorf("read %s: %w", path, err)
	}
	var p persisted
	if err := json.Unmarshal(b, &p); err != nil {
		return def, fmt.Errorf("%w %s: %v; starting from defaults", ErrCorruptState, path, err)
	}
	if p.Version != stateVersion {
		return def, fmt.Errorf("%w %s: version %d, want %d; starting from defaults", ErrCorruptState, path, p.Version, stateVersion)
	}
	if err := p.Knob.Validate(); err != nil {
		return def, fmt.Errorf("%w %s: %v; starting from defaults", ErrCorruptState, path, err)
	}
	for cg, cpus := range p.Originals {
		if _, err := sysfs.ParseCPUList(cpus); err != nil || !filepath.IsAbs(cg) {
			return def, fmt.Errorf("%w %s: original cpuset %q of %q: %v; starting from defaults", ErrCorruptState, path, cpus, cg, err)
		}
	}
	for _, b := range p.Boost {
		if b.File == "" || filepath.IsAbs(b.File) || strings.Contains(b.File, "..") || (b.Value != "0" && b.Value != "1") {
			return def, fmt.Errorf("%w %s: boost setting %+v; starting from defaults", ErrCorruptState, path, b)
		}
	}
	for what, m := range map[string]map[string]uint64{"sched_load_balance_cleared": p.LBCleared, "created": p.Created} {
		for cg := range m {
			if !filepath.IsAbs(cg) {
				return def, fmt.Errorf("%w %s: %s entry %q is not an absolute path; starting from defaults", ErrCorruptState, path, what, cg)
			}
		}
	}
	return State{Knob: p.Knob, Chosen: p.Chosen, Originals: p.Originals, Boost: p.Boost, LoadBalanceCleared: p.LBCleared, Created: p.Created, OriginalIDs: p.OrigIDs}, nil
}

// SaveState writes st to dir/state.json atomically: a temporary file in the
// same directory, fsync, rename over the old file, fsync of the directory.
// The directory is created (0755) if missing; the file is 0644. On any
// error the old file is untouched and the temporary file removed. An
// invalid knob is rejected with an error wrapping policy.ErrInvalid.
func SaveState(dir string, st State) error {
	if err := st.Knob.Validate(); err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("create state dir: %w", err)
	}
	b, err := json.MarshalIndent(persisted{Version: stateVersion, Knob: st.Knob, Chosen: st.Chosen, Originals: st.Originals, Boost: st.Boost, LBCleared: st.LoadBalanceCleared, Created: st.Created, OrigIDs: st.OriginalIDs}, "", "  ")
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
