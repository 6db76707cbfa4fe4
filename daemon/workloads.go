package daemon

import (
	"fmt"

	"github.com/schedpolicyd/schedpolicyd/daemon/placement"
	"github.com/schedpolicyd/schedpolicyd/internal/names"
	"github.com/schedpolicyd/schedpolicyd/policy"
)

// MaxWorkloadName is the longest workload name CreateWorkload accepts, in
// bytes (names.MaxWorkload).
const MaxWorkloadName = names.MaxWorkload

// createWorkload makes workload name with pid in it and re-plans
// (CreateWorkload; placement.create has the errors).
func (d *Daemon) createWorkload(name string, pid int) (string, error) {
	// A cgroup under the managed parent, or a transient scope in
	// schedpolicyd.slice.
	path, err := d.place.Create(name, pid)
	if err == nil {
		d.recompute("workload created", true)
	}
	return path, err
}

// setWorkloadOverride sets or clears a workload's override and re-plans
// (SetWorkloadPolicy; placement.SetOverride has the errors).
func (d *Daemon) setWorkloadOverride(name string, pol policy.Policy) error {
	if err := d.place.SetOverride(name, pol); err != nil {
		return err
	}
	d.recompute("workload override", true)
	return nil
}

// setExempt adds (on) or removes entry from the exempt list made over
// D-Bus (Engine.AddExempt, RemoveExempt: saved to state.json first) and
// re-plans, so that what it names gets its original back, or is placed
// again, now. An entry already there changes nothing (changed false).
// Errors (policy.ErrInvalid: not an entry, the list full, not exempt,
// the configuration's; or state.json cannot be saved) change nothing.
func (d *Daemon) setExempt(entry string, on bool) (changed bool, err error) {
	x, err := names.ParseExempt(entry)
	if err != nil {
		return false, fmt.Errorf("%w: %v", policy.ErrInvalid, err)
	}
	if on {
		changed, err = d.place.AddExempt(x)
	} else {
		err = d.place.RemoveExempt(x)
		changed = err == nil
	}
	if err != nil {
		return false, err
	}
	if changed {
		d.recompute("exempt list changed", true)
	}
	return changed, nil
}

// ValidWorkloadName checks a workload's name as CreateWorkload does: a
// cgroup directory's or a unit name's stem, no longer than
// MaxWorkloadName. Errors wrap policy.ErrInvalid.
func ValidWorkloadName(name string) error { return placement.ValidWorkloadName(name) }
