package daemon

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/schedpolicyd/schedpolicyd/daemon/snapshot"
	"github.com/schedpolicyd/schedpolicyd/policy"
	"github.com/schedpolicyd/schedpolicyd/sysfs"
)

// StateFile is the name of the persisted state inside the state directory
// (default /var/lib/schedpolicyd/state.json).
const StateFile = "state.json"

// lockFile, in the state directory, is held (flock) by the running daemon.
const lockFile = "lock"

// stateVersion is written into every state file. Version 1 files (four
// parallel maps of originals, their inodes, cleared flags and created
// workloads) are migrated on load; files of any other version are ignored
// with a warning.
const stateVersion = 2

// State is what survives a restart or a crash.
type State struct {
	// Knob is the knob in force (power_aware, power_aware_policy).
	Knob policy.Knob
	// Chosen reports that Knob is the user's explicit choice (through the
	// tree, D-Bus or the CLI); until then the configured default applies
	// and may change with the configuration.
	Chosen bool
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
	// over every closed segment (energy.go), in Totals order.
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
	// "battery"; choices.go); nil when none was made since this field
	// exists (a file without it loads as before: Knob carries over).
	Choices map[string]policy.Knob
	// ChoicesErr, set by LoadState only, says why the file's choices were
	// ignored (an unknown power source, an invalid knob); the rest of the
	// file is used.
	ChoicesErr error
}

// UnitRecord is what state.json keeps of one systemd unit placed through
// systemd's API (SetUnitProperties with runtime=true): enough to reset
// exactly the AllowedCPUs= value the daemon set, and only while the unit
// still has it.
type UnitRecord struct {
	// Manager is the unit's manager: "system", or "user:UID" for a user's
	// manager (user@UID.service).
	Manager string `json:"manager"`
	// Unit is the unit's name, "cron.service", "app-firefox-1234.scope".
	Unit string `json:"unit"`
	// Original is the unit's AllowedCPUs= as found before the daemon first
	// set it (a cpulist; "" is unset: no restriction of its own). A
	// non-empty original was set by an administrator: it bounds the
	// daemon's choice.
	Original string `json:"original_cpus"`
	// Applied is the last AllowedCPUs= the daemon set and saw accepted,
	// Pending the one it is about to set (recorded first); "" when none.
	// A unit whose AllowedCPUs= is neither was changed by someone else,
	// whose value is kept.
	Applied string `json:"applied_cpus,omitempty"`
	Pending string `json:"pending_cpus,omitempty"`
	// Created: the daemon started this transient scope (CreateWorkload,
	// schedpolicyctl run); systemd removes it when its last process exits.
	Created bool `json:"created,omitempty"`
	// DropIns identifies the AllowedCPUs= drop-ins the unit's manager
	// listed right after the daemon's last write was accepted (dropIns:
	// "PATH@INODE.MTIME" each, space-separated; "" when unknown). systemd
	// writes every SetUnitProperties call to a file named
	// 50-AllowedCPUs.conf, replacing it: the one below /run holds the
	// daemon's value, one below /etc/systemd/system.control an
	// administrator's `systemctl set-property` without --runtime. While
	// the daemon's value is in force, they are unchanged: a file replaced
	// or added since means someone set AllowedCPUs= again, also to the
	// value the daemon had set, and that value is theirs. The file below
	// /run also outlives a unit loaded from a unit file (not a transient
	// one): a unit created again under the same name starts with it.
	DropIns string `json:"dropins,omitempty"`
}

// key identifies a unit record: "MANAGER/UNIT".
func (r UnitRecord) key() string { return r.Manager + "/" + r.Unit }

// written reports whether AllowedCPUs= may hold a value of ours.
func (r *UnitRecord) written() bool { return r.Applied != "" || r.Pending != "" }

// validate checks one unit record: a manager name, a unit name of a
// service or scope, and cpulists that parse.
func (r UnitRecord) validate() error {
	if r.Manager != "system" {
		uid, ok := strings.CutPrefix(r.Manager, "user:")
		if n, err := strconv.Atoi(uid); !ok || err != nil || n < 0 {
			return fmt.Errorf("unit record %q: manager %q is neither \"system\" nor \"user:UID\"", r.Unit, r.Manager)
		}
	}
	if !strings.HasSuffix(r.Unit, ".service") && !strings.HasSuffix(r.Unit, ".scope") || strings.ContainsAny(r.Unit, "/\x00") {
		return fmt.Errorf("unit record %q: not the name of a service or scope", r.Unit)
	}
	for what, v := range map[string]string{"original_cpus": r.Original, "applied_cpus": r.Applied, "pending_cpus": r.Pending} {
		if _, err := sysfs.ParseCPUList(v); err != nil {
			return fmt.Errorf("unit record %s: %s %q: %v", r.key(), what, v, err)
		}
	}
	return nil
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

// Record is what state.json keeps of one cgroup: enough to put back what
// the daemon changed, and only that, after a clean stop or a crash.
type Record struct {
	// Path is the cgroup directory (absolute, clean).
	Path string `json:"path"`
	// Inode is the directory's inode number: a record is used only for the
	// same cgroup, never for one removed and made again under the path. 0
	// (a version-1 file may lack it, a hand-edited one too): the record
	// cannot be matched to a cgroup and is not used (placement.load).
	Inode uint64 `json:"inode,omitempty"`
	// Original is cpuset.cpus as found before the daemon first wrote it (a
	// cpulist; "" is v2's "inherit"); meaningful while Applied or Pending
	// is set, or Unverified.
	Original string `json:"original_cpus"`
	// Applied is the last cpulist the daemon wrote to cpuset.cpus and saw
	// succeed, Pending the one it is about to write (recorded first). ""
	// when none: the file holds nothing of ours. A file that holds neither
	// (nor, on cgroup v1, either of them less CPUs the kernel took away on
	// hotplug) was changed by someone else, whose value is then kept.
	Applied string `json:"applied_cpus,omitempty"`
	Pending string `json:"pending_cpus,omitempty"`
	// Unverified: migrated from a version-1 file, which did not record the
	// value written; whatever the file holds is taken as the daemon's.
	Unverified bool `json:"unverified,omitempty"`
	// LoadBalanceCleared: the daemon changed this cgroup v1 workload's
	// cpuset.sched_load_balance from 1 to 0 (recorded before the write);
	// set back to 1 on exit unless someone set it since.
	LoadBalanceCleared bool `json:"sched_load_balance_cleared,omitempty"`
	// Created: the daemon made this cgroup (CreateWorkload, schedpolicyctl
	// run); it is removed once its last task has gone, also by a later run.
	Created bool `json:"created,omitempty"`
	// Released: someone else changed the workload's cpuset.cpus while it
	// was managed; the daemon no longer places it (until
	// SetWorkloadPolicy(name, "") takes it back) and never restores it.
	Released bool `json:"released,omitempty"`
	// Parent marks the managed parent's record (cgroup v1: its cpuset.cpus
	// as first found, given back after CPU hotplug).
	Parent bool `json:"parent,omitempty"`
}

// unfinished describes what of the daemon's own st holds, which a clean
// stop leaves nothing of ("2 cgroups, 1 unit, boost"): cpusets, flags and
// AllowedCPUs= values it set, and a boost setting it changed. "" when
// there is none: the last run stopped cleanly (or never changed anything).
func (st State) unfinished() string {
	var cgroups, units int
	for i := range st.Cgroups {
		if r := &st.Cgroups[i]; r.written() || r.LoadBalanceCleared {
			cgroups++
		}
	}
	for i := range st.Units {
		if st.Units[i].written() {
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
	return strings.Join(parts, ", ")
}

// written reports whether cpuset.cpus may hold a value of ours.
func (r *Record) written() bool { return r.Applied != "" || r.Pending != "" || r.Unverified }

// needed reports whether the record still covers something: a value of
// ours, a cleared flag, a cgroup we made, or a user's release.
func (r *Record) needed() bool {
	return r.written() || r.LoadBalanceCleared || r.Created || r.Released
}

// persisted is the JSON shape of state.json.
type persisted struct {
	Version int `json:"version"`
	policy.Knob
	Chosen  bool                   `json:"chosen,omitempty"`
	Boost   []sysfs.BoostSetting   `json:"boost,omitempty"`
	Cgroups []Record               `json:"cgroups,omitempty"`
	Energy  []snapshot.EnergyTotal `json:"energy,omitempty"`
	Units   []UnitRecord           `json:"units,omitempty"`
	// Choices: optional in version 2 (added after it, so older files lack it).
	Choices map[string]policy.Knob `json:"choices,omitempty"`

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
	p.Cgroups = sortedRecords(recs)
	p.Originals, p.LBCleared, p.Created, p.OrigIDs = nil, nil, nil, nil
}

// sortedRecords returns the records of m sorted by path.
func sortedRecords(m map[string]*Record) []Record {
	if len(m) == 0 {
		return nil
	}
	out := make([]Record, 0, len(m))
	for _, r := range m {
		out = append(out, *r)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out
}

// validate checks one record: an absolute clean path and cpulists that
// parse.
func (r Record) validate() error {
	if !filepath.IsAbs(r.Path) || filepath.Clean(r.Path) != r.Path {
		return fmt.Errorf("cgroup record path %q is not an absolute clean path", r.Path)
	}
	for what, v := range map[string]string{"original_cpus": r.Original, "applied_cpus": r.Applied, "pending_cpus": r.Pending} {
		if _, err := sysfs.ParseCPUList(v); err != nil {
			return fmt.Errorf("cgroup record %s: %s %q: %v", r.Path, what, v, err)
		}
	}
	return nil
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
		if err := r.validate(); err != nil {
			return def, fmt.Errorf("%w %s: %v; starting from defaults", ErrCorruptState, path, err)
		}
		if seen[r.Path] {
			return def, fmt.Errorf("%w %s: two records for %s; starting from defaults", ErrCorruptState, path, r.Path)
		}
		seen[r.Path] = true
	}
	for _, r := range p.Units {
		if err := r.validate(); err != nil {
			return def, fmt.Errorf("%w %s: %v; starting from defaults", ErrCorruptState, path, err)
		}
		if seen[r.key()] {
			return def, fmt.Errorf("%w %s: two records for unit %s; starting from defaults", ErrCorruptState, path, r.key())
		}
		seen[r.key()] = true
	}
	for _, b := range p.Boost {
		if b.File == "" || filepath.IsAbs(b.File) || strings.Contains(b.File, "..") || (b.Value != "0" && b.Value != "1") {
			return def, fmt.Errorf("%w %s: boost setting %+v; starting from defaults", ErrCorruptState, path, b)
		}
	}
	st := State{Knob: p.Knob, Chosen: p.Chosen, Boost: p.Boost, Cgroups: p.Cgroups, Units: p.Units, Choices: p.Choices}
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
	st.Energy, st.EnergyErr = validEnergy(p.Energy)
	if st.EnergyErr != nil {
		st.EnergyErr = fmt.Errorf("%s: %w; the energy totals start from zero", path, st.EnergyErr)
	}
	return st, nil
}

// validEnergy checks the energy totals of a state file: each valid
// (validEnergyTotal), no (policy, power source) pair twice. On an
// error none is used.
func validEnergy(es []snapshot.EnergyTotal) ([]snapshot.EnergyTotal, error) {
	seen := map[energyKey]bool{}
	for _, e := range es {
		if err := validEnergyTotal(e); err != nil {
			return nil, err
		}
		k := energyKey{e.Policy, e.PowerSource}
		if seen[k] {
			return nil, fmt.Errorf("energy total %s/%s given twice", e.Policy, e.PowerSource)
		}
		seen[k] = true
	}
	if len(es) == 0 {
		return nil, nil
	}
	out := slices.Clone(es)
	sortTotals(out)
	return out, nil
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
	b, err := json.MarshalIndent(persisted{Version: stateVersion, Knob: st.Knob, Chosen: st.Chosen, Boost: st.Boost, Cgroups: st.Cgroups, Units: st.Units, Energy: st.Energy, Choices: st.Choices}, "", "  ")
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
