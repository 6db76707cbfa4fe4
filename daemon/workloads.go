package daemon

import (
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/schedpolicyd/schedpolicyd/policy"
)

// MaxWorkloadName is the longest workload name CreateWorkload accepts, in
// bytes.
const MaxWorkloadName = 64

// ValidWorkloadName checks a name for CreateWorkload: 1–64 bytes, one path
// component (no "/", not "." or ".."), no control characters, and not
// starting with "." or looking like a cgroup interface file ("cgroup.",
// "cpuset.", "cpu.", "tasks"). Errors wrap policy.ErrInvalid.
func ValidWorkloadName(name string) error {
	bad := func(why string) error { return fmt.Errorf("%w: workload name %q %s", policy.ErrInvalid, name, why) }
	switch {
	case name == "":
		return bad("is empty")
	case len(name) > MaxWorkloadName:
		return bad(fmt.Sprintf("is longer than %d bytes", MaxWorkloadName))
	case name == "." || name == "..":
		return bad("is not a name")
	case strings.HasPrefix(name, "."):
		return bad("starts with a dot")
	case name == "tasks" || name == "notify_on_release" || name == "release_agent":
		return bad("is a cgroup interface file")
	}
	for _, prefix := range []string{"cgroup.", "cpuset.", "cpu.", "cpuacct.", "memory.", "io.", "pids."} {
		if strings.HasPrefix(name, prefix) {
			return bad("looks like a cgroup interface file")
		}
	}
	for _, r := range name {
		if r == '/' {
			return bad("contains /")
		}
		if r < 0x20 || r == 0x7f || r == utf8.RuneError {
			return bad("contains a control character or invalid UTF-8")
		}
	}
	return nil
}
