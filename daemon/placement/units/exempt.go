package units

import "github.com/schedpolicyd/schedpolicyd/daemon/placement"

// IDs lists the units as the engine's exempt list names them: their
// unit name and their manager ("system", "user:UID").
func (u *Placement) IDs() []placement.WorkloadID {
	out := make([]placement.WorkloadID, 0, len(u.workloads))
	for k, w := range u.workloads {
		out = append(out, placement.WorkloadID{Key: k, Manager: managerName(w.uid), Name: w.name})
	}
	return out
}

// SetExempt marks the units of keys exempt and every other one not. An
// exempt unit is left out of the plan, so the apply that follows gives
// it its original AllowedCPUs= back as it does a unit with an override
// of performance — through the system manager, or the user's link for a
// user's unit (never waited for on the loop) — with the journal's steps
// (the widening step recorded first), after which its record holds
// nothing of ours; a value someone set since is theirs and stays.
func (u *Placement) SetExempt(keys map[string]bool) {
	for k, w := range u.workloads {
		w.exempt = keys[k]
	}
}
