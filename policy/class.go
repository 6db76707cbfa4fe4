package policy

// Workload classes (Load.Class): what kind of work a workload is, from
// where it runs. The daemon's unit placement names them (a unit's slice, a
// user's manager, GNOME's user.xdg.inactive-since xattr on an app's
// cgroup); the empty class is ClassWorkload.
const (
	// ClassWorkload: a workload made through schedpolicyd (schedpolicyctl
	// run, CreateWorkload) or a child of the managed parent cgroup.
	ClassWorkload = "workload"
	// ClassService: a system service, a unit of system.slice.
	ClassService = "service"
	// ClassUser: a user's whole manager, user@UID.service.
	ClassUser = "user"
	// ClassFocused: the app that has the focus (Mutter writes
	// user.xdg.inactive-since = -1 on its cgroup).
	ClassFocused = "focused"
	// ClassApp: any other app of a user's app.slice.
	ClassApp = "app"
	// ClassBackground: a unit of a user's background.slice (deferred
	// work: indexers, backups, updates).
	ClassBackground = "background"
	// ClassSession: a unit of a user's session.slice (the session's own
	// services: the compositor, the shell, the sound server, input
	// methods, portals).
	ClassSession = "session"
	// ClassAppNoFocus: an app of a user whose desktop says nothing of the
	// focus (no app of that user's app.slice carries Mutter's
	// user.xdg.inactive-since): any of them may be the app in front, so
	// each is placed as the focused app is.
	ClassAppNoFocus = "app-nofocus"
)

// SliceRule is one slice's configured policy ([[slice]] in
// schedpolicyd.conf(5)), for Input.Slices.
type SliceRule struct {
	// Policy is Balance or Powersaving: the least packing its units get
	// while it applies. Performance would change nothing (see
	// LoadPolicy) and is refused by the configuration.
	Policy Policy
	// Always applies the rule also while the machine's policy is
	// Performance (on AC power, or power_aware 0); without it the slice's
	// units are unrestricted then, like everything else.
	Always bool
}

// packing orders the policies by how hard they pack: Performance (and
// anything unknown) 0, Balance 1, Powersaving 2.
func packing(p Policy) int {
	switch p {
	case Balance:
		return 1
	case Powersaving:
		return 2
	}
	return 0
}

// ClassPolicy is the policy a workload of class is placed with while the
// machine's effective policy is machine. On battery the work nobody
// waits for (background.slice, system services, the apps the user is not
// looking at) is what can be packed hardest, while what the user sees and
// hears (the app in front, the session's compositor and sound server)
// is never confined:
//
//	class                                performance  balance      powersaving
//	background, service, app             performance  powersaving  powersaving
//	focused, session, user, app-nofocus  performance  performance  performance
//	any other                            performance  balance      powersaving
//
// So background work, services and unfocused apps are packed as hard as
// the planner packs whenever the machine packs at all (on a hybrid
// machine onto the efficient cores first); the foreground (Foreground)
// keeps every CPU it may use, and on a hybrid machine the cores its load
// needs are kept free of packed work (PlanPlacement, "Efficiency
// classes"); under performance nothing is restricted. A user's whole
// manager (ClassUser, where cpuset is not delegated to it) holds the
// session and the focused app, so it is foreground too.
func ClassPolicy(machine Policy, class string) Policy {
	if packing(machine) == 0 || Foreground(class) {
		return Performance
	}
	switch class {
	case ClassBackground, ClassService, ClassApp:
		return Powersaving
	}
	return machine
}

// Foreground reports whether class is work the user sees or hears and
// waits for: the focused app, a user's session units, a user's whole
// manager, and the apps of a desktop that says nothing of the focus.
// Its class policy never confines it.
func Foreground(class string) bool {
	switch class {
	case ClassFocused, ClassSession, ClassUser, ClassAppNoFocus:
		return true
	}
	return false
}

// packedAway reports whether class is work a hybrid plan keeps off the
// foreground's cores: background work, system services and unfocused
// apps.
func packedAway(class string) bool {
	switch class {
	case ClassBackground, ClassService, ClassApp:
		return true
	}
	return false
}

// LoadPolicy is the policy a workload is placed with: ClassPolicy, then
// its slice's rule (nil: none), which packs the slice's units at least as
// hard as rule.Policy while the machine packs (or always, with
// rule.Always). A rule never loosens: a slice's policy is a cap on how
// spread its units may be, so "balance" on a slice leaves its units at
// powersaving under machine powersaving, and an administrator's rule wins
// over the class rule (a focused app in a slice ruled "powersaving" is
// packed like powersaving).
func LoadPolicy(machine Policy, class string, rule *SliceRule) Policy {
	p := ClassPolicy(machine, class)
	if rule != nil && (packing(machine) > 0 || rule.Always) && packing(rule.Policy) > packing(p) {
		p = rule.Policy
	}
	return p
}
