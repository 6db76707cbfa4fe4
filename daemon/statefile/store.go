package statefile

import (
	"reflect"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/schedpolicyd/schedpolicyd/daemon/snapshot"
	"github.com/schedpolicyd/schedpolicyd/policy"
	"github.com/schedpolicyd/schedpolicyd/sysfs"
)

// Store is state.json held in memory: the whole State the daemon keeps,
// each part written in by its owner when it changes, and saved by the
// store itself. The daemon's loop writes its decision (SetDecision: the
// knob, whether it is chosen and since when, the per-source choices),
// boost's start-up value (SetBoost) and the energy totals (SetEnergy);
// the placement engine writes its records (SetCgroups or SetUnits: its
// own mode's), and the other placement mode's stay as they were loaded,
// so a change of mode between runs loses nothing. Save writes the state
// now; Checkpoint is the save of a background change (the placement's
// records before their writes, the energy totals), whose failures are
// said once. Not safe for concurrent use: the daemon's loop owns it.
type Store struct {
	dir string
	log logrus.FieldLogger
	st  State
	// saved is what dir/state.json holds as this store last saved it
	// (the zero State before its first save: a new store is Changed).
	saved State
	// failing: the last Checkpoint failed (and said so).
	failing bool
}

// NewStore holds st, as LoadState read it from dir (its EnergyErr and
// ChoicesErr, said by the caller, are not kept), to be saved to
// dir/state.json; a Checkpoint's failures are logged to log.
func NewStore(dir string, st State, log logrus.FieldLogger) *Store {
	st.EnergyErr, st.ChoicesErr, st.ExemptErr = nil, nil, nil
	return &Store{dir: dir, log: log, st: st}
}

// State is the state held now, as the next save writes it. Its slices
// and map are the store's: the caller does not change them.
func (s *Store) State() State { return s.st }

// SetDecision sets the knob in force k, whether it is an explicit choice
// (chosen) and since when (at: zero unknown or not chosen), and the
// per-source choices (the map is kept as it is: its owner replaces it on
// a change, never writes into it).
func (s *Store) SetDecision(k policy.Knob, chosen bool, at time.Time, choices map[string]policy.Knob) {
	s.st.Knob, s.st.Chosen, s.st.ChosenAt, s.st.Choices = k, chosen, at, choices
}

// Boost is the cpufreq boost setting found before the daemon changed it
// (State.Boost); nil while the daemon does not manage boost.
func (s *Store) Boost() []sysfs.BoostSetting { return s.st.Boost }

// SetBoost sets the boost setting found (nil: none to restore).
func (s *Store) SetBoost(b []sysfs.BoostSetting) { s.st.Boost = b }

// SetEnergy sets the energy totals (energy.Meter.Totals).
func (s *Store) SetEnergy(e []snapshot.EnergyTotal) { s.st.Energy = e }

// SetCgroups sets the cgroup records (sorted by path), the cgroupfs
// placement's.
func (s *Store) SetCgroups(r []Record) { s.st.Cgroups = r }

// SetUnits sets the unit records (sorted by key), the units placement's.
func (s *Store) SetUnits(r []UnitRecord) { s.st.Units = r }

// Exempt is the exempt list made over D-Bus (State.Exempt).
func (s *Store) Exempt() []string { return s.st.Exempt }

// SetExempt sets the exempt list (kept as it is: its owner replaces it on
// a change, never writes into it).
func (s *Store) SetExempt(list []string) { s.st.Exempt = list }

// Prefs is the energy preferences' records (State.Prefs).
func (s *Store) Prefs() []PrefRecord { return s.st.Prefs }

// SetPrefs sets the energy preferences' records (State.Prefs).
func (s *Store) SetPrefs(r []PrefRecord) { s.st.Prefs = r }

// Changed reports whether the state held differs from what this store
// last saved (always before its first save).
func (s *Store) Changed() bool { return !reflect.DeepEqual(s.st, s.saved) }

// Save writes the state held to dir/state.json now (SaveState: atomic,
// the old file untouched on an error, which is returned).
func (s *Store) Save() error {
	if err := SaveState(s.dir, s.st); err != nil {
		return err
	}
	s.saved = s.st // its map and slices are replaced on a change, never written into
	return nil
}

// Checkpoint is Save for a background change, which is retried at every
// event until it works: a failure is logged once, at error level with its
// cause (nothing the record-before-write protocol covers is written, and
// the energy totals stay in memory, until a save works), its repeats at
// debug level, and the first save that works again once.
func (s *Store) Checkpoint() error {
	err := s.Save()
	switch {
	case err != nil && !s.failing:
		s.log.WithError(err).Error("cannot save state.json; no cpuset or AllowedCPUs= is changed, and energy totals are kept in memory, until it can be")
		s.failing = true
	case err != nil:
		s.log.WithError(err).Debug("cannot save state.json yet")
	case s.failing:
		s.log.Info("state.json saved again")
		s.failing = false
	}
	return err
}
