// Package statefile reads and writes the daemon's persisted state,
// <state-dir>/state.json: the knob and the user's choices, the records of
// the cgroups and systemd units whose CPUs the daemon changed, the boost
// setting it found, the energy preferences it wrote and the measured energy
// totals.
package statefile

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/schedpolicyd/schedpolicyd/daemon/snapshot"
	"github.com/schedpolicyd/schedpolicyd/internal/names"
	"github.com/schedpolicyd/schedpolicyd/policy"
	"github.com/schedpolicyd/schedpolicyd/sysfs"
)

// StateFile is the name of the persisted state inside the state directory
// (default /var/lib/schedpolicyd/state.json).
const StateFile = "state.json"

// stateVersion is written into every state file. Version 1 files (four
// parallel maps of originals, their inodes, cleared flags and created
// workloads) are migrated on load; files of any other version are ignored
// with a warning.
const stateVersion = 2

// State is what survives a restart or a crash: the contents of
// state.json, as LoadState returns them and SaveState writes them.
type State struct {
	// Knob is the knob in force (power_aware, power_aware_policy).
	Knob policy.Knob
	// Chosen reports that Knob is the user's explicit choice (through the
	// tree, D-Bus or the CLI); until then the configured default applies
	// and may change with the configuration.
	Chosen bool
	// ChosenAt is when the explicit choice in force (Chosen) took
	// effect: made, or brought back by a change of power source; zero
	// when not known (a file of an older version, a knob a followed
	// power profile set).
	ChosenAt time.Time
	// Boost is the cpufreq boost setting found before the daemon first
	// changed it (boost_on_battery); restored on exit, or by the next start
	// after a crash. Empty when boost is not being managed.
	Boost []sysfs.BoostSetting
	// Cgroups holds one record per cgroup the daemon manages, changed or
	// made (sorted by path): the managed parent and its workloads. A record
	// is written before any write it covers and dropped only once what it
	// records has been restored, or its cgroup is gone.
	Cgroups []Record
	// Energy is the measured energy per policy and power source, summed
	// over every closed segment (the daemon's energy meter), in SortEnergy's
	// order.
	Energy []snapshot.EnergyTotal
	// EnergyErr, set by LoadState only, says why the file's energy totals
	// were ignored (an unknown policy, a negative or non-finite value, a
	// pair given twice); the rest of the file is used, since an energy
	// figure is not worth a workload's original cpuset. Nil otherwise.
	EnergyErr error
	// Units holds one record per systemd unit whose AllowedCPUs= the
	// daemon sets or set (placement "systemd"), sorted by manager and
	// unit, kept by the same rule as Cgroups.
	Units []UnitRecord
	// Choices is the user's last explicit choice per power source ("ac",
	// "battery"; the daemon's choices.go); nil when none was made since
	// this field exists (a file without it loads as before: Knob carries
	// over).
	Choices map[string]policy.Knob
	// ChoicesErr, set by LoadState only, says why the file's choices were
	// ignored (an unknown power source, an invalid knob); the rest of the
	// file is used.
	ChoicesErr error
	// Exempt is the exempt list made over D-Bus (Exempt, Unexempt;
	// schedpolicyctl exempt): entries of names.ParseExempt, at most
	// names.MaxExempts, each once, in the order they were made; nil when
	// none (a file without the field loads as before). The
	// configuration's exempt setting is not kept here.
	Exempt []string
	// ExemptErr, set by LoadState only, says which entries of the file's
	// exempt list were dropped (not an entry, one twice, beyond the
	// bound); the others are used.
	ExemptErr error
	// Prefs holds one record per energy preference file (a cpufreq
	// policy's EPP, the platform profile) the daemon writes or wrote
	// (PrefRecord), saved before each write, dropped once the original
	// is back or someone else's value is there.
	Prefs []PrefRecord
	// PrefsErr, set by LoadState only, says why the file's energy
	// preference records were ignored (an unknown file, a bad value, a
	// file twice); the rest of the file is used.
	PrefsErr error
}

// StartKnob is the knob a daemon starting with this state applies: the
// saved one when it is an explicit choice (Chosen); else def, the
// configured default (configuration keys power_aware and
// power_aware_policy), when given; else the built-in default
// (policy.DefaultKnob: power_aware 1 with powersaving) — not a default
// saved by an earlier run whose configuration has changed since.
// `schedpolicyd probe` uses it too, so both say the same.
func (st State) StartKnob(def *policy.Knob) policy.Knob {
	switch {
	case st.Chosen:
		return st.Knob
	case def != nil:
		return *def
	}
	return policy.DefaultKnob()
}

// Unfinished describes what of the daemon's own st holds, which a clean
// stop leaves nothing of, as counts for a log line ("2 cgroups, 1 unit,
// boost"): cgroups whose cpuset.cpus or sched_load_balance it set, units
// whose AllowedCPUs= it set (Written), and a boost setting it changed. ""
// when there is none: the last run stopped cleanly (or never changed
// anything).
func (st State) Unfinished() string {
	var cgroups, units int
	for i := range st.Cgroups {
		if r := &st.Cgroups[i]; r.Written() || r.LoadBalanceCleared {
			cgroups++
		}
	}
	for i := range st.Units {
		if st.Units[i].Written() {
			units++
		}
	}
	var parts []string
	plural := func(n int, one string) string {
		if n == 1 {
			return "1 " + one
		}
		return fmt.Sprintf("%d %ss", n, one)
	}
	if cgroups > 0 {
		parts = append(parts, plural(cgroups, "cgroup"))
	}
	if units > 0 {
		parts = append(parts, plural(units, "unit"))
	}
	if len(st.Boost) > 0 {
		parts = append(parts, "boost")
	}
	if n := len(st.Prefs); n > 0 {
		parts = append(parts, plural(n, "energy preference"))
	}
	return strings.Join(parts, ", ")
}

// persisted is the JSON shape of state.json.
type persisted struct {
	Version int `json:"version"`
	policy.Knob
	Chosen bool `json:"chosen,omitempty"`
	// ChosenAt: optional (added after version 2); RFC 3339.
	ChosenAt *time.Time             `json:"chosen_at,omitempty"`
	Boost    []sysfs.BoostSetting   `json:"boost,omitempty"`
	Cgroups  []Record               `json:"cgroups,omitempty"`
	Energy   []snapshot.EnergyTotal `json:"energy,omitempty"`
	Units    []UnitRecord           `json:"units,omitempty"`
	// Choices: optional in version 2 (added after it, so older files lack it).
	Choices map[string]policy.Knob `json:"choices,omitempty"`
	// Exempt: optional in version 2 (added after it).
	Exempt []string `json:"exempt,omitempty"`
	// Prefs: optional in version 2 (added after it).
	Prefs []PrefRecord `json:"energy_prefs,omitempty"`

	// Version 1, read only for migration (migrateV1).
	Originals map[string]string `json:"originals,omitempty"`
	LBCleared map[string]uint64 `json:"sched_load_balance_cleared,omitempty"`
	Created   map[string]uint64 `json:"created,omitempty"`
	OrigIDs   map[string]uint64 `json:"original_inodes,omitempty"`
}

// migrateV1 turns a version-1 file's maps into records: an original is
// Unverified (v1 did not record what it wrote, and restored the original
// whatever the file held), a cleared flag and a created workload keep
// their inode.
func (p *persisted) migrateV1() {
	recs := map[string]*Record{}
	get := func(path string) *Record {
		if r, ok := recs[path]; ok {
			return r
		}
		r := &Record{Path: path}
		recs[path] = r
		return r
	}
	for path, cpus := range p.Originals {
		r := get(path)
		r.Original, r.Unverified, r.Inode = cpus, true, p.OrigIDs[path]
	}
	for path, ino := range p.LBCleared {
		r := get(path)
		r.LoadBalanceCleared = true
		if r.Inode == 0 {
			r.Inode = ino
		}
	}
	for path, ino := range p.Created {
		r := get(path)
		r.Created = true
		if r.Inode == 0 {
			r.Inode = ino
		}
	}
	p.Cgroups = SortedRecords(recs)
	p.Originals, p.LBCleared, p.Created, p.OrigIDs = nil, nil, nil, nil
}

// ErrCorruptState is wrapped by LoadState when state.json exists but cannot
// be used; the caller starts from defaults and says which file it ignored.
var ErrCorruptState = errors.New("corrupt state file")

// LoadState reads dir/state.json. A missing file is not an error: it
// returns the default knob and no records. A version-1 file is migrated
// (migrateV1). A file that does not parse, has another version or holds
// invalid values returns the defaults and an error wrapping
// ErrCorruptState (the next save replaces it). Invalid energy totals are
// the exception: they alone are dropped, State.EnergyErr says why, and the
// rest of the file is used. Other read errors (state.json is a directory,
// EACCES) are returned as they are. It never writes.
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
	switch p.Version {
	case 1:
		for what, m := range map[string]map[string]uint64{"sched_load_balance_cleared": p.LBCleared, "created": p.Created, "original_inodes": p.OrigIDs} {
			for cg := range m {
				if !filepath.IsAbs(cg) {
					return def, fmt.Errorf("%w %s: %s entry %q is not an absolute path; starting from defaults", ErrCorruptState, path, what, cg)
				}
			}
		}
		for cg := range p.Originals {
			if !filepath.IsAbs(cg) {
				return def, fmt.Errorf("%w %s: original of %q: not an absolute path; starting from defaults", ErrCorruptState, path, cg)
			}
		}
		p.migrateV1()
		for i := range p.Cgroups {
			p.Cgroups[i].Path = filepath.Clean(p.Cgroups[i].Path)
		}
	case stateVersion:
		if p.Originals != nil || p.LBCleared != nil || p.Created != nil || p.OrigIDs != nil {
			return def, fmt.Errorf("%w %s: version %d with version-1 fields; starting from defaults", ErrCorruptState, path, p.Version)
		}
	default:
		return def, fmt.Errorf("%w %s: version %d, want %d; starting from defaults", ErrCorruptState, path, p.Version, stateVersion)
	}
	if err := p.Knob.Validate(); err != nil {
		return def, fmt.Errorf("%w %s: %v; starting from defaults", ErrCorruptState, path, err)
	}
	seen := map[string]bool{}
	for _, r := range p.Cgroups {
		if err := r.Validate(); err != nil {
			return def, fmt.Errorf("%w %s: %v; starting from defaults", ErrCorruptState, path, err)
		}
		if seen[r.Path] {
			return def, fmt.Errorf("%w %s: two records for %s; starting from defaults", ErrCorruptState, path, r.Path)
		}
		seen[r.Path] = true
	}
	for _, r := range p.Units {
		if err := r.Validate(); err != nil {
			return def, fmt.Errorf("%w %s: %v; starting from defaults", ErrCorruptState, path, err)
		}
		if seen[r.Key()] {
			return def, fmt.Errorf("%w %s: two records for unit %s; starting from defaults", ErrCorruptState, path, r.Key())
		}
		seen[r.Key()] = true
	}
	for _, b := range p.Boost {
		if b.File == "" || filepath.IsAbs(b.File) || strings.Contains(b.File, "..") || (b.Value != "0" && b.Value != "1") {
			return def, fmt.Errorf("%w %s: boost setting %+v; starting from defaults", ErrCorruptState, path, b)
		}
	}
	st := State{Knob: p.Knob, Chosen: p.Chosen, Boost: p.Boost, Cgroups: p.Cgroups, Units: p.Units, Choices: p.Choices}
	if p.ChosenAt != nil && p.Chosen {
		st.ChosenAt = *p.ChosenAt
	}
	for src, k := range p.Choices {
		err := k.Validate()
		if src != "ac" && src != "battery" {
			err = fmt.Errorf("power source %q: want ac or battery", src)
		}
		if err != nil {
			st.Choices, st.ChoicesErr = nil, fmt.Errorf("%s: choices: %v; the per-source choices are ignored", path, err)
			break
		}
	}
	st.Exempt, st.ExemptErr = validExempt(p.Exempt)
	if st.ExemptErr != nil {
		st.ExemptErr = fmt.Errorf("%s: %w; the other exemptions are kept", path, st.ExemptErr)
	}
	if st.Prefs, st.PrefsErr = validPrefs(p.Prefs); st.PrefsErr != nil {
		st.PrefsErr = fmt.Errorf("%s: %w; the energy preference records are ignored", path, st.PrefsErr)
	}
	st.Energy, st.EnergyErr = validEnergy(p.Energy)
	if st.EnergyErr != nil {
		st.EnergyErr = fmt.Errorf("%s: %w; the energy totals start from zero", path, st.EnergyErr)
	}
	return st, nil
}

// SaveState writes st to dir/state.json atomically: a temporary file in the
// same directory, fsync, rename over the old file, fsync of the directory.
// The directory is created (0755) if missing; the file is 0644. On any
// error the old file is untouched and the temporary file removed. An
// invalid knob is rejected with an error wrapping policy.ErrInvalid,
// invalid energy totals (see LoadState) with an error naming the entry.
func SaveState(dir string, st State) error {
	if err := st.Knob.Validate(); err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("create state dir: %w", err)
	}
	if _, err := validEnergy(st.Energy); err != nil {
		return fmt.Errorf("save state: %w", err)
	}
	if _, err := validExempt(st.Exempt); err != nil {
		return fmt.Errorf("save state: %w", err)
	}
	if _, err := validPrefs(st.Prefs); err != nil {
		return fmt.Errorf("save state: %w", err)
	}
	p := persisted{Version: stateVersion, Knob: st.Knob, Chosen: st.Chosen, Boost: st.Boost, Cgroups: st.Cgroups, Units: st.Units, Energy: st.Energy, Choices: st.Choices, Exempt: st.Exempt, Prefs: st.Prefs}
	if st.Chosen && !st.ChosenAt.IsZero() {
		at := st.ChosenAt.UTC()
		p.ChosenAt = &at
	}
	b, err := json.MarshalIndent(p, "", "  ")
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

// validExempt returns the entries of list that are exempt entries
// (names.ParseExempt), each once, at most names.MaxExempts of them, in
// order, with an error naming those it dropped (nil when none was).
func validExempt(list []string) ([]string, error) {
	var out, dropped []string
	seen := map[string]bool{}
	for _, s := range list {
		switch _, err := names.ParseExempt(s); {
		case err != nil:
			dropped = append(dropped, err.Error())
		case seen[s]:
			dropped = append(dropped, fmt.Sprintf("exempt entry %q: given twice", s))
		case len(out) == names.MaxExempts:
			dropped = append(dropped, fmt.Sprintf("exempt entry %q: beyond the %d entries kept", s, names.MaxExempts))
		default:
			seen[s] = true
			out = append(out, s)
		}
	}
	if len(dropped) == 0 {
		return out, nil
	}
	if len(dropped) > 4 {
		dropped = append(dropped[:4], fmt.Sprintf("and %d more", len(dropped)-4))
	}
	return out, fmt.Errorf("exempt: dropped %s", strings.Join(dropped, "; "))
}
