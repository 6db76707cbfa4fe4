package units

import (
	"strings"

	"github.com/schedpolicyd/schedpolicyd/policy"
)

// class is w's Class (WorkloadStatus, policy.Load.Class). A user
// manager's units: policy.ClassFocused (an app.slice unit whose cgroup's
// user.xdg.inactive-since is -1), policy.ClassApp (the other app.slice
// units of a user whose desktop writes that attribute on some app),
// policy.ClassAppNoFocus (the app.slice units of a user whose desktop
// writes it on none: any may be the app in front), policy.ClassBackground
// (background.slice), policy.ClassSession (session.slice). The system
// manager's: unitClass.
func (u *Placement) class(w *unitWorkload) string {
	if w.uid < 0 {
		return unitClass(w.name, w.slice)
	}
	if w.slice == "app.slice" {
		switch {
		case w.focused:
			return policy.ClassFocused
		case !u.focusWritten(w.uid):
			return policy.ClassAppNoFocus
		}
		return policy.ClassApp
	}
	return strings.TrimSuffix(w.slice, ".slice")
}

// UnitClass is the class the daemon gives a system unit name of slice
// (WorkloadStatus.Class; `schedpolicyd plan` uses it for its --load
// NAME@SLICE).
func UnitClass(name, slice string) string { return unitClass(name, slice) }

// unitClass is a system unit's Class: by its slice, or policy.ClassUser
// for a user's manager placed as a whole; any other slice its name
// without ".slice".
func unitClass(name, slice string) string {
	switch {
	case isUserManager(name):
		return policy.ClassUser
	case slice == "system.slice":
		return policy.ClassService
	case slice == createSlice:
		return policy.ClassWorkload
	}
	return strings.TrimSuffix(slice, ".slice")
}

// isUserManager reports whether name is a user's manager,
// user@UID.service (a system unit in user-UID.slice).
func isUserManager(name string) bool {
	uid, ok := strings.CutPrefix(name, "user@")
	uid, ok2 := strings.CutSuffix(uid, ".service")
	if !ok || !ok2 || uid == "" {
		return false
	}
	for _, c := range uid {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// userSlices are the slices of a user's manager (systemd
// docs/DESKTOP_ENVIRONMENTS.md). Listed in manage, they mean every
// logged-in user's (users.go): where the cpuset controller is delegated to
// user@UID.service, that user's units in these slices are placed through
// the user's manager; where it is not (Debian 12's user@.service delegates
// pids memory cpu: AllowedCPUs= on a user manager's units is stored and
// never applied, seen in the systemd test VM), what can be placed is the
// user's manager as a whole, user@UID.service, through the system
// manager: all of that user's apps, background work and session together.
var userSlices = map[string]bool{"app.slice": true, "background.slice": true, "session.slice": true}
