// Package names holds the one rule for workload names, shared by the
// daemon (CreateWorkload, D-Bus contract
// daemon/bus/org.schedpolicyd.SchedPolicy1.xml) and schedpolicyctl (run
// --name), so that a name the client lets through is one the daemon
// accepts. It imports nothing of the project's.
package names

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// MaxWorkload is the longest workload name, in bytes.
const MaxWorkload = 64

// Error is a refused workload name: Why says what is wrong with it, in a
// few words ("empty", "contains /").
type Error struct {
	Name string
	Why  string
}

func (e *Error) Error() string { return fmt.Sprintf("workload name %q: %s", e.Name, e.Why) }

// interfaceFiles are cgroup interface files without a controller prefix;
// interfacePrefixes those with one (cgroup v1 and v2).
var (
	interfaceFiles    = map[string]bool{"tasks": true, "notify_on_release": true, "release_agent": true}
	interfacePrefixes = []string{"cgroup.", "cpuset.", "cpu.", "cpuacct.", "memory.", "io.", "pids."}
)

// Workload checks a workload name: 1 to MaxWorkload bytes of valid UTF-8,
// one path component (no "/", not "." or ".."), not starting with "." (a
// hidden directory), not a cgroup interface file's name ("tasks",
// "cgroup.procs", "cpuset.cpus", ...), and no control character (Unicode
// category Cc: C0, DEL and C1, such as U+0085). A name it accepts, joined
// to a managed parent, names a direct child that is never an interface
// file. The error is an *Error.
func Workload(name string) error {
	bad := func(why string) error { return &Error{Name: name, Why: why} }
	switch {
	case name == "":
		return bad("empty")
	case len(name) > MaxWorkload:
		return bad(fmt.Sprintf("longer than %d bytes", MaxWorkload))
	case name == "." || name == "..":
		return bad(`"." and ".." are not names`)
	case strings.HasPrefix(name, "."):
		return bad("starts with a dot")
	case interfaceFiles[name]:
		return bad("is a cgroup interface file")
	case !utf8.ValidString(name):
		return bad("not valid UTF-8")
	case strings.ContainsRune(name, '/'):
		return bad(`contains "/"`)
	case strings.IndexFunc(name, unicode.IsControl) >= 0:
		return bad("contains a control character")
	}
	for _, p := range interfacePrefixes {
		if strings.HasPrefix(name, p) {
			return bad("looks like a cgroup interface file")
		}
	}
	return nil
}
