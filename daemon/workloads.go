package daemon

import (
	"fmt"

	"github.com/schedpolicyd/schedpolicyd/internal/names"
	"github.com/schedpolicyd/schedpolicyd/policy"
)

// MaxWorkloadName is the longest workload name CreateWorkload accepts, in
// bytes (names.MaxWorkload).
const MaxWorkloadName = names.MaxWorkload

// ValidWorkloadName checks a name for CreateWorkload by the rule
// schedpolicyctl applies too (names.Workload): 1–64 bytes of valid UTF-8,
// one path component (no "/", not "." or ".."), no control characters,
// not starting with "." and not looking like a cgroup interface file
// ("cgroup.", "cpuset.", "cpu.", "tasks"). Errors wrap policy.ErrInvalid
// and a *names.Error.
func ValidWorkloadName(name string) error {
	if err := names.Workload(name); err != nil {
		return fmt.Errorf("%w: %w", policy.ErrInvalid, err)
	}
	return nil
}
