package statefile

import (
	"fmt"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/schedpolicyd/schedpolicyd/sysfs"
)

// Values are one record's values as the record-before-write protocol
// steps them (cpulists, sysfs.ParseCPUList's; "" for Applied and Pending
// is none): Original, what the target (a cgroup's cpuset.cpus, a unit's
// AllowedCPUs=) held before the daemon first wrote it; Applied, the last
// value the daemon wrote and saw succeed; Pending, the one it is about to
// write, recorded (and saved) first. Record and UnitRecord embed them, so
// their JSON fields are the records' own.
//
// The protocol's steps, for every write: Begin records the value as
// Pending, and state.json is saved before the write (nothing is written
// without a successful save); then Done (the value is Applied, Pending
// cleared; Applied too when the value is the original: nothing of ours is
// there) or Failed (Pending cleared, Applied stays); state.json is saved
// again. At a restore, a target that holds someone else's value keeps
// it: Theirs makes it the original; one whose original is back (or that
// is gone) is Restored. Ours says whether a value found in the target is
// the daemon's.
type Values struct {
	Original string `json:"original_cpus"`
	Applied  string `json:"applied_cpus,omitempty"`
	Pending  string `json:"pending_cpus,omitempty"`
}

// Begin records val as the Pending value, the value about to be written;
// it reports whether that changed the record (to be saved before the
// write).
func (v *Values) Begin(val string) (changed bool) {
	if v.Pending == val {
		return false
	}
	v.Pending = val
	return true
}

// Done: the write of val succeeded. val is Applied (none when it is the
// original: nothing of ours is there), Pending is cleared.
func (v *Values) Done(val string) {
	v.Applied, v.Pending = val, ""
	if val == v.Original {
		v.Applied = ""
	}
}

// Failed: the write recorded as Pending did not happen (refused, or not
// tried); Pending is cleared, Applied stays.
func (v *Values) Failed() { v.Pending = "" }

// Theirs: the target holds cur, someone else's value. It becomes the
// original, and nothing of ours is there any more.
func (v *Values) Theirs(cur string) { v.Original, v.Applied, v.Pending = cur, "", "" }

// Restored: nothing of ours is left in the target (the original is back,
// or the target is gone with our value).
func (v *Values) Restored() { v.Applied, v.Pending = "", "" }

// Ours reports whether cur, what the target holds now, is a value of
// ours: the Pending value (a write under way, which may have made the
// target's identity anew: not asked), or the Applied value while kept,
// the caller's identity check, says the target is the one the daemon
// wrote. An empty value is none. same compares a recorded value with
// cur, with the caller's equivalences (nil: as they are).
func (v Values) Ours(cur string, kept bool, same func(val, cur string) bool) bool {
	if same == nil {
		same = func(val, cur string) bool { return val == cur }
	}
	if v.Pending != "" && same(v.Pending, cur) {
		return true
	}
	return kept && v.Applied != "" && same(v.Applied, cur)
}

// Record is what state.json keeps of one cgroup: enough to put back what
// the daemon changed, and only that, after a clean stop or a crash.
type Record struct {
	// Path is the cgroup directory (absolute, clean).
	Path string `json:"path"`
	// Inode is the directory's inode number: a record is used only for the
	// same cgroup, never for one removed and made again under the path. 0
	// (a version-1 file may lack it, a hand-edited one too): the record
	// cannot be matched to a cgroup and is not used (the daemon's
	// placement.load).
	Inode uint64 `json:"inode,omitempty"`
	// Values: Original is cpuset.cpus as found before the daemon first
	// wrote it ("" is v2's "inherit"), meaningful while Applied or Pending
	// is set, or Unverified; Applied the last cpulist the daemon wrote and
	// saw succeed, Pending the one it is about to write. A file that holds
	// neither (nor, on cgroup v1, either of them less CPUs the kernel took
	// away on hotplug) was changed by someone else, whose value is then
	// kept.
	Values
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

// Written reports whether the cgroup's cpuset.cpus may hold a value the
// daemon wrote: Applied or Pending is set, or the record is Unverified.
func (r *Record) Written() bool { return r.Applied != "" || r.Pending != "" || r.Unverified }

// Needed reports whether the record still covers something, and so must
// stay in state.json: a value of ours (Written), a cleared
// sched_load_balance, a cgroup the daemon made, or a user's release.
func (r *Record) Needed() bool {
	return r.Written() || r.LoadBalanceCleared || r.Created || r.Released
}

// Key identifies a cgroup record: its Path. No two records of a state
// file share one.
func (r Record) Key() string { return r.Path }

// Kept reports whether state.json keeps the record: it is Needed, or it
// is the managed parent's.
func (r Record) Kept() bool { return r.Needed() || r.Parent }

// Validate checks one record as LoadState does: Path is absolute and
// clean, and Original, Applied and Pending are cpulists that
// sysfs.ParseCPUList accepts ("" included). The error names the record
// and the field.
func (r Record) Validate() error {
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

// SortedRecords returns copies of the records of m (cgroup path → record)
// sorted by path, as State.Cgroups holds them; nil when m is empty.
func SortedRecords(m map[string]*Record) []Record {
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
	// Values: Original is the unit's AllowedCPUs= as found before the
	// daemon first set it ("" is unset: no restriction of its own; a
	// non-empty original was set by an administrator: it bounds the
	// daemon's choice); Applied the last AllowedCPUs= the daemon set and
	// saw accepted, Pending the one it is about to set. A unit whose
	// AllowedCPUs= is neither was changed by someone else, whose value is
	// kept.
	Values
	// Created: the daemon started this transient scope (CreateWorkload,
	// schedpolicyctl run); systemd removes it when its last process exits.
	Created bool `json:"created,omitempty"`
	// DropIns identifies the AllowedCPUs= drop-ins the unit's manager
	// listed right after the daemon's last write was accepted (the
	// daemon's dropIns: "PATH@INODE.MTIME" each, space-separated; "" when
	// unknown). systemd writes every SetUnitProperties call to a file named
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

// Key identifies a unit record: "MANAGER/UNIT", e.g.
// "user:1000/app-firefox-1234.scope". No two records of a state file
// share one.
func (r UnitRecord) Key() string { return r.Manager + "/" + r.Unit }

// Written reports whether the unit's AllowedCPUs= may hold a value the
// daemon set: Applied or Pending is set.
func (r *UnitRecord) Written() bool { return r.Applied != "" || r.Pending != "" }

// Kept reports whether state.json keeps the record: a value of ours
// (Written), or a scope the daemon started.
func (r UnitRecord) Kept() bool { return r.Written() || r.Created }

// Validate checks one unit record as LoadState does: Manager is "system"
// or "user:UID" (UID a decimal ≥ 0), Unit names a service or scope
// without "/" or NUL, and Original, Applied and Pending are cpulists that
// sysfs.ParseCPUList accepts ("" included). The error names the record
// and the field.
func (r UnitRecord) Validate() error {
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
			return fmt.Errorf("unit record %s: %s %q: %v", r.Key(), what, v, err)
		}
	}
	return nil
}
