package statefile

import (
	"fmt"

	"github.com/schedpolicyd/schedpolicyd/sysfs"
)

// PrefRecord is the record of one energy preference file the daemon
// writes (daemon/energypref): a cpufreq policy's
// energy_performance_preference or the ACPI platform profile. Saved
// before each write, as the cpusets' records are: Pending is the value
// about to be written, Applied the value written, Original what the file
// held before the daemon's first write. The stop (or the next start after
// a crash) writes Original back where the file still holds Pending or
// Applied, and only there.
type PrefRecord struct {
	// File is relative to the sysfs root (sysfs.PrefFileValid):
	// "devices/system/cpu/cpufreq/policy0/energy_performance_preference",
	// "firmware/acpi/platform_profile".
	File     string `json:"file"`
	Original string `json:"original"`
	Applied  string `json:"applied,omitempty"`
	Pending  string `json:"pending,omitempty"`
}

// Ours reports whether cur, what the file holds now, is a value of ours
// (Pending or Applied).
func (r PrefRecord) Ours(cur string) bool {
	return cur != "" && (cur == r.Pending || cur == r.Applied)
}

// Validate checks the record: a preference file, and values that are
// preference values (sysfs.PrefValueValid; Applied and Pending may be
// empty).
func (r PrefRecord) Validate() error {
	if !sysfs.PrefFileValid(r.File) {
		return fmt.Errorf("energy preference record: %q is not an energy preference file", r.File)
	}
	for _, v := range []string{r.Original, r.Applied, r.Pending} {
		if v != "" && !sysfs.PrefValueValid(v) {
			return fmt.Errorf("energy preference record of %s: %q is not a preference value", r.File, v)
		}
	}
	if r.Original == "" {
		return fmt.Errorf("energy preference record of %s: no original value", r.File)
	}
	return nil
}

// validPrefs returns recs when each is valid and no file is recorded
// twice; else nil and why.
func validPrefs(recs []PrefRecord) ([]PrefRecord, error) {
	seen := map[string]bool{}
	for _, r := range recs {
		if err := r.Validate(); err != nil {
			return nil, err
		}
		if seen[r.File] {
			return nil, fmt.Errorf("two energy preference records of %s", r.File)
		}
		seen[r.File] = true
	}
	return recs, nil
}
