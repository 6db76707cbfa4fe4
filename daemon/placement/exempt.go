package placement

import (
	"fmt"
	"slices"
	"strings"

	"github.com/sirupsen/logrus"

	"github.com/schedpolicyd/schedpolicyd/internal/names"
	"github.com/schedpolicyd/schedpolicyd/policy"
)

// The escape hatch: workloads taken out of placement by name. The engine
// holds the exempt list — the configuration's (Config.Exempt, refreshed
// on a reload) and the one made over D-Bus (AddExempt, RemoveExempt),
// kept in state.json — and applies it to its driver's workloads before
// each plan (syncExempt, from Apply): which workload is exempt is decided
// here, once, for both drivers; each driver only leaves its exempt
// workloads out of the plan and puts their originals back through its
// own path (Exempter).

// WorkloadID is a workload as the exempt list names it: its key in the
// driver (unique), its manager ("" for a cgroup of the managed parent,
// "system", "user:UID": names.Exempt.Match) and its published name (the
// unit's, or the cgroup's as Status publishes it).
type WorkloadID struct {
	Key, Manager, Name string
}

// Exempter: the driver's workloads can be exempt. IDs lists them;
// SetExempt says which are exempt now (by key; every other one is not).
// An exempt workload is neither planned nor written while it stays
// exempt, and one that holds a value of ours gets its original back at
// once (the apply that follows at the latest), through the driver's own
// restore, after which its record holds nothing of ours; a value someone
// else set meanwhile is theirs and stays. One no longer exempt is placed
// again by the next plan, its value then its original.
type Exempter interface {
	IDs() []WorkloadID
	SetExempt(keys map[string]bool)
}

// ExemptOverride is what the Workloads property and schedpolicyctl show
// as the override of an exempt workload.
const ExemptOverride = "exempt"

// ExemptFrom says where an entry of the exempt list comes from.
type ExemptFrom string

const (
	// ExemptConfig: the configuration's exempt setting.
	ExemptConfig ExemptFrom = "config"
	// ExemptState: made over D-Bus (Exempt), kept in state.json.
	ExemptState ExemptFrom = "state"
)

// ExemptEntry is one entry of the exempt list and where it comes from.
type ExemptEntry struct {
	Entry names.Exempt
	From  ExemptFrom
}

// Exempts is the exempt list: the configuration's entries, then those
// made over D-Bus, in the order they were made.
func (e *Engine) Exempts() []ExemptEntry {
	var out []ExemptEntry
	for _, x := range e.Cfg.Exempt {
		out = append(out, ExemptEntry{x, ExemptConfig})
	}
	for _, x := range e.exempt {
		out = append(out, ExemptEntry{x, ExemptState})
	}
	return out
}

// exempts reports whether an entry of the list names workload id.
func (e *Engine) exempts(id WorkloadID) bool {
	for _, x := range e.Cfg.Exempt {
		if x.Match(id.Manager, id.Name) {
			return true
		}
	}
	for _, x := range e.exempt {
		if x.Match(id.Manager, id.Name) {
			return true
		}
	}
	return false
}

// Matching lists the workloads entry names now, in key order (none where
// the driver has no Exempter).
func (e *Engine) Matching(entry names.Exempt) []WorkloadID {
	x, ok := e.drv.(Exempter)
	if !ok {
		return nil
	}
	var out []WorkloadID
	for _, id := range x.IDs() {
		if entry.Match(id.Manager, id.Name) {
			out = append(out, id)
		}
	}
	slices.SortFunc(out, func(a, b WorkloadID) int { return strings.Compare(a.Key, b.Key) })
	return out
}

// AddExempt adds entry to the list made over D-Bus and saves state.json;
// the caller plans (the apply resets what it names at once). It reports
// whether the list changed: an entry already in it (or in the
// configuration's) changes nothing. Errors, on which nothing changes:
// the list holds names.MaxExempts entries (policy.ErrInvalid), or
// state.json cannot be saved.
func (e *Engine) AddExempt(entry names.Exempt) (bool, error) {
	if slices.Contains(e.exempt, entry) || slices.Contains(e.Cfg.Exempt, entry) {
		return false, nil
	}
	if len(e.exempt) >= names.MaxExempts {
		return false, fmt.Errorf("%w: the exempt list holds %d entries, as many as it keeps; unexempt some first", policy.ErrInvalid, names.MaxExempts)
	}
	was := e.exempt
	e.exempt = append(slices.Clip(was), entry)
	if err := e.saveExempt(); err != nil {
		e.exempt = was
		e.putExempt()
		return false, err
	}
	e.Log.WithField("entry", entry.String()).Info("exempt: what it names is given its original CPUs back and not placed")
	return true, nil
}

// RemoveExempt removes entry from the list made over D-Bus and saves
// state.json; the caller plans (what it named is placed again). Errors,
// on which nothing changes: the entry is the configuration's (edit the
// file) or not in the list (policy.ErrInvalid), or state.json cannot be
// saved.
func (e *Engine) RemoveExempt(entry names.Exempt) error {
	i := slices.Index(e.exempt, entry)
	if i < 0 {
		if slices.Contains(e.Cfg.Exempt, entry) {
			return fmt.Errorf("%w: %q is exempt by the configuration file's exempt setting: remove it there and reload", policy.ErrInvalid, entry.String())
		}
		return fmt.Errorf("%w: %q is not exempt", policy.ErrInvalid, entry.String())
	}
	was := e.exempt
	e.exempt = slices.Delete(slices.Clone(was), i, i+1)
	if err := e.saveExempt(); err != nil {
		e.exempt = was
		e.putExempt()
		return err
	}
	e.Log.WithField("entry", entry.String()).Info("unexempt: what it names is placed again")
	return nil
}

// saveExempt puts the list made over D-Bus into the store and saves
// state.json now.
func (e *Engine) saveExempt() error {
	if e.store == nil {
		return fmt.Errorf("no state file to keep the exempt list in")
	}
	e.putExempt()
	e.Dirty = true
	if err := e.FlushErr(); err != nil {
		return fmt.Errorf("cannot save state.json: %w", err)
	}
	return nil
}

// putExempt writes the list made over D-Bus into the store (nil: none).
func (e *Engine) putExempt() {
	if e.store == nil {
		return
	}
	var list []string
	for _, x := range e.exempt {
		list = append(list, x.String())
	}
	e.store.SetExempt(list)
}

// loadExempt takes the list state.json holds (statefile.LoadState
// validated it).
func (e *Engine) loadExempt(list []string) {
	e.exempt = nil
	for _, s := range list {
		if x, err := names.ParseExempt(s); err == nil {
			e.exempt = append(e.exempt, x)
		}
	}
}

// syncExempt tells the driver which of its workloads the list names
// (Exempter), before each plan, and logs each workload that became or
// stopped being exempt. Without entries, and none exempt before, it
// costs nothing.
func (e *Engine) syncExempt() {
	x, ok := e.drv.(Exempter)
	if !ok || len(e.Cfg.Exempt) == 0 && len(e.exempt) == 0 && len(e.exempted) == 0 {
		return
	}
	now, present := map[string]bool{}, map[string]bool{}
	for _, id := range x.IDs() {
		present[id.Key] = true
		if !e.exempts(id) {
			continue
		}
		now[id.Key] = true
		if !e.exempted[id.Key] {
			f := logrus.Fields{"workload": id.Name}
			if id.Manager != "" {
				f["manager"] = id.Manager
			}
			e.Log.WithFields(f).Info("workload exempt: given its original CPUs back, not placed while exempt")
		}
	}
	for k := range e.exempted {
		if present[k] && !now[k] {
			e.Log.WithField("workload", k).Info("workload no longer exempt: placed again")
		}
	}
	e.exempted = now
	x.SetExempt(now)
}
