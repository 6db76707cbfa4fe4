// Package energypref moves the CPUs' energy-performance preference (EPP,
// each cpufreq policy's energy_performance_preference) and the ACPI
// platform profile with the policy in force, by a documented map, and
// puts back what it found: each value is recorded (state.json, through
// the save function the daemon hands in) before the first write, restored
// at stop, and after a crash by the next start — only where the file
// still holds the value written; someone else's value since then is left
// alone, and that file is not written again by this run.
//
// It does no bus or clock I/O: who owns the knobs is the daemon's to
// find (Settings), the files are read and written through Knobs (sysfs.FS
// on a root; tests inject failures), and the records are saved through
// the Save function before any write.
package energypref

import (
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"sort"
	"strings"

	"github.com/schedpolicyd/schedpolicyd/acpi"
	"github.com/schedpolicyd/schedpolicyd/daemon/statefile"
	"github.com/schedpolicyd/schedpolicyd/policy"
	"github.com/schedpolicyd/schedpolicyd/sysfs"
)

// Knobs reads and writes the preference files; sysfs.FS implements it.
type Knobs interface {
	EPPPolicies() ([]sysfs.EPPPolicy, error)
	PlatformProfile() sysfs.PlatformProfile
	ReadPref(file string) (string, error)
	WritePref(file, value string) error
}

// The map from the policy in force to the values written (README,
// schedpolicyd.conf(5) ENERGY PREFERENCES). Each list is tried in order
// and the first value the file offers is written; none offered: the file
// is left as it is. Performance writes nothing of its own: it puts back
// the values found at start (each record's Original). Only balance's EPP
// depends on the power source.
var (
	// eppPowersaving: the kernel's most efficient hint, else the next.
	eppPowersaving = []string{"power", "balance_power"}
	// eppBalanceBattery and eppBalanceAC: balance leans to efficiency on
	// battery and to performance on AC (or an unknown source, which the
	// daemon treats as AC), as power-profiles-daemon's balanced profile
	// does with intel_pstate and amd-pstate.
	eppBalanceBattery = []string{"balance_power", "balance_performance"}
	eppBalanceAC      = []string{"balance_performance", "balance_power"}
	// ppPowersaving: the platform profile's lowest power, else its quiet
	// or cool profiles (asus-wmi before Linux 6.15 offers "quiet" and no
	// "low-power"; some HP and Dell machines "cool").
	ppPowersaving = []string{"low-power", "quiet", "cool"}
	ppBalance     = []string{"balanced"}
)

// Want is the value the map gives file kind ("epp" or "platform_profile")
// under policy p on power source src for a file offering offered; "" means
// the value found at start (performance), and ok false that none of the
// map's values is offered (the file is left alone).
func Want(kind string, p policy.Policy, src acpi.Source, offered func(string) bool) (value string, ok bool) {
	var list []string
	switch {
	case p == policy.Performance:
		return "", true
	case kind == KindEPP && p == policy.Powersaving:
		list = eppPowersaving
	case kind == KindEPP && src == acpi.Battery:
		list = eppBalanceBattery
	case kind == KindEPP:
		list = eppBalanceAC
	case p == policy.Powersaving:
		list = ppPowersaving
	default:
		list = ppBalance
	}
	for _, v := range list {
		if offered(v) {
			return v, true
		}
	}
	return "", false
}

// The two kinds of knob, as settings and probe name them.
const (
	KindEPP             = "epp"
	KindPlatformProfile = "platform_profile"
)

// Settings are what Apply is told besides the policy: whether each kind
// may be written now ("" yes; else why not: "off", or the owner that
// steps the daemon aside, as probe and the log say it).
type Settings struct {
	EPPAside, PlatformAside string
}

// Report is what an Apply did, for the log: per file, the value written
// or why nothing was ("left alone: someone else's value",
// "refused: ..."). Files whose value was already right are not listed.
type Report struct {
	Written map[string]string // file → value written
	Skipped map[string]string // file → why not
}

func (r *Report) write(file, v string) {
	if r.Written == nil {
		r.Written = map[string]string{}
	}
	r.Written[file] = v
}

func (r *Report) skip(file, why string) {
	if r.Skipped == nil {
		r.Skipped = map[string]string{}
	}
	r.Skipped[file] = why
}

// Actuator holds the records of the files written (state.json's Prefs)
// and the files released to someone else for the rest of the run. It is
// not safe for concurrent use: the daemon's loop owns it.
type Actuator struct {
	k    Knobs
	recs map[string]*statefile.PrefRecord
	// released: files that held someone else's value after ours; not
	// written again by this run (file → that value).
	released map[string]string
	// save persists the records (all of them) before a write; an error
	// means nothing is written.
	save func([]statefile.PrefRecord) error
}

// New is an actuator over k that saves its records with save.
func New(k Knobs, save func([]statefile.PrefRecord) error) *Actuator {
	return &Actuator{k: k, recs: map[string]*statefile.PrefRecord{}, released: map[string]string{}, save: save}
}

// Records are the records to save, sorted by file.
func (a *Actuator) Records() []statefile.PrefRecord {
	out := make([]statefile.PrefRecord, 0, len(a.recs))
	for _, r := range a.recs {
		out = append(out, *r)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].File < out[j].File })
	if len(out) == 0 {
		return nil
	}
	return out
}

// target is one file and the value it should hold ("" its original).
type target struct {
	file, want string
	kind       string
}

// Apply makes every preference file offered follow policy p on source
// src, as the map (Want) says, for the kinds set allows; the kinds it
// does not allow get their originals back where they still hold our
// value. Steps, per file: a recorded file that holds neither its original
// nor a value of ours is released (its record dropped, not written again
// by this run); a file that cannot be read (an inactive policy: EBUSY)
// is skipped, its record kept; a policy under the performance governor of
// intel_pstate or amd-pstate-epp is not asked for anything but
// "performance" (the driver refuses with EBUSY); the records of every file
// about to be written are saved (Pending) before any write — a failed save
// writes nothing and is returned; each write's outcome updates its record
// (a refused one keeps the file as it was), and the records are saved
// again. Errors: the save's; a refused write is in the report, not an
// error.
func (a *Actuator) Apply(p policy.Policy, src acpi.Source, set Settings) (Report, error) {
	var rep Report
	var targets []target
	if set.EPPAside == "" {
		pols, _ := a.k.EPPPolicies()
		for _, pol := range pols {
			want, ok := Want(KindEPP, p, src, pol.Offers)
			switch {
			case !ok:
				rep.skip(pol.File, "offers none of "+strings.Join(eppListFor(p, src), ", "))
				continue
			case want != "" && want != "performance" && pol.Governor == "performance" && refusesUnderPerformance(pol.Driver):
				rep.skip(pol.File, fmt.Sprintf("%s refuses any preference but performance under the performance governor (EBUSY)", pol.Driver))
				want = "" // only our own value, if any, goes back
			}
			targets = append(targets, target{file: pol.File, want: want, kind: KindEPP})
		}
	} else {
		a.restoreKind(KindEPP, &rep)
	}
	if set.PlatformAside == "" {
		if pp := a.k.PlatformProfile(); pp.Present {
			if want, ok := Want(KindPlatformProfile, p, src, pp.Offers); ok {
				targets = append(targets, target{file: sysfs.PlatformProfileFile, want: want, kind: KindPlatformProfile})
			} else {
				rep.skip(sysfs.PlatformProfileFile, "offers none of "+strings.Join(ppListFor(p), ", "))
			}
		}
	} else {
		a.restoreKind(KindPlatformProfile, &rep)
	}
	return rep, a.apply(targets, &rep)
}

func eppListFor(p policy.Policy, src acpi.Source) []string {
	switch {
	case p == policy.Powersaving:
		return eppPowersaving
	case src == acpi.Battery:
		return eppBalanceBattery
	}
	return eppBalanceAC
}

func ppListFor(p policy.Policy) []string {
	if p == policy.Powersaving {
		return ppPowersaving
	}
	return ppBalance
}

// refusesUnderPerformance: drivers that refuse an EPP other than
// "performance" while the policy's governor is performance (EBUSY):
// intel_pstate (intel_pstate.rst, "Energy vs Performance Hints") and
// amd-pstate-epp (amd_pstate.c, amd_pstate_epp_update_limit's
// CPUFREQ_POLICY_PERFORMANCE case).
func refusesUnderPerformance(driver string) bool {
	return driver == "intel_pstate" || driver == "amd-pstate-epp"
}

// apply brings each target to its value in two passes: every record that
// changes is saved first, then the files are written.
func (a *Actuator) apply(targets []target, rep *Report) error {
	type step struct {
		target
		rec *statefile.PrefRecord
		val string // the value to write
		add bool   // rec is new: drop it if nothing is written
	}
	var steps []step
	for _, t := range targets {
		if _, gone := a.released[t.file]; gone {
			continue
		}
		cur, err := a.k.ReadPref(t.file)
		if err != nil {
			// An inactive policy (EBUSY) or one that went away: its
			// record, if any, is kept for a later turn or the stop.
			rep.skip(t.file, "cannot be read: "+err.Error())
			continue
		}
		rec := a.recs[t.file]
		if rec != nil && cur != rec.Original && !rec.Ours(cur) {
			a.release(t.file, cur, rep)
			continue
		}
		val := t.want
		if val == "" {
			if rec == nil {
				continue // performance, nothing of ours there
			}
			val = rec.Original
		}
		if cur == val {
			if rec != nil && val == rec.Original {
				delete(a.recs, t.file) // nothing of ours left
			}
			continue
		}
		add := rec == nil
		if add {
			rec = &statefile.PrefRecord{File: t.file, Original: cur}
			a.recs[t.file] = rec
		}
		rec.Pending = val
		steps = append(steps, step{target: t, rec: rec, val: val, add: add})
	}
	if len(steps) == 0 {
		return nil
	}
	if err := a.save(a.Records()); err != nil {
		for _, s := range steps {
			s.rec.Pending = ""
			if s.add {
				delete(a.recs, s.file)
			}
		}
		return fmt.Errorf("energy preferences not changed: %w", err)
	}
	for _, s := range steps {
		if err := a.k.WritePref(s.file, s.val); err != nil {
			s.rec.Pending = ""
			rep.skip(s.file, "refused: "+err.Error())
			if s.rec.Applied == "" {
				delete(a.recs, s.file)
			}
			continue
		}
		s.rec.Applied, s.rec.Pending = s.val, ""
		rep.write(s.file, s.val)
		if s.val == s.rec.Original {
			delete(a.recs, s.file)
		}
	}
	return a.save(a.Records())
}

// release drops file's record: cur, someone else's value, stays, and the
// file is not written again by this run.
func (a *Actuator) release(file, cur string, rep *Report) {
	delete(a.recs, file)
	a.released[file] = cur
	rep.skip(file, fmt.Sprintf("left alone: someone else wrote %q since", cur))
}

// restoreKind puts back the originals of kind's files (RestoreAll for one
// kind), e.g. when its setting became "off" or an owner appeared.
func (a *Actuator) restoreKind(kind string, rep *Report) {
	var files []string
	for f := range a.recs {
		if kindOf(f) == kind {
			files = append(files, f)
		}
	}
	a.restore(files, rep)
}

func kindOf(file string) string {
	if file == sysfs.PlatformProfileFile {
		return KindPlatformProfile
	}
	return KindEPP
}

// restore writes each file's original back where it holds our value.
func (a *Actuator) restore(files []string, rep *Report) {
	sort.Strings(files)
	for _, f := range files {
		rec := a.recs[f]
		cur, err := a.k.ReadPref(f)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			delete(a.recs, f) // its policy is gone, and our value with it
			continue
		case err != nil:
			rep.skip(f, "not restored, kept for the next start: "+err.Error())
			continue
		case cur == rec.Original:
			delete(a.recs, f)
			continue
		case !rec.Ours(cur):
			a.release(f, cur, rep)
			continue
		}
		if err := a.k.WritePref(f, rec.Original); err != nil {
			rep.skip(f, "not restored, kept for the next start: "+err.Error())
			continue
		}
		rep.write(f, rec.Original)
		delete(a.recs, f)
	}
}

// RestoreAll puts back the original of every recorded file that still
// holds our value, drops the records of the others (someone else's value
// stays), keeps those that could not be read or written (an inactive
// policy: EBUSY) for the next start, and saves the records. It is the
// stop, and the start after a crash (Adopt first).
func (a *Actuator) RestoreAll() (Report, error) {
	var rep Report
	files := make([]string, 0, len(a.recs))
	for f := range a.recs {
		files = append(files, f)
	}
	a.restore(files, &rep)
	return rep, a.save(a.Records())
}

// Adopt takes the records a previous run left in state.json (to be
// restored: RestoreAll). Records of files that are not preference files
// were refused when state.json was read.
func (a *Actuator) Adopt(recs []statefile.PrefRecord) {
	for _, r := range recs {
		r := r
		a.recs[r.File] = &r
	}
}

// Released lists the files this run left to someone else, sorted.
func (a *Actuator) Released() []string {
	out := make([]string, 0, len(a.released))
	for f := range a.released {
		out = append(out, f)
	}
	slices.Sort(out)
	return out
}
