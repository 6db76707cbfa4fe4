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
	// services: the compositor, the shell).
	ClassSession = "session"
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
// waits for (background.slice, system services) is what can be packed
// hardest, while the app the user looks at keeps the room balance would
// give it:
//
//	class                   performance  balance      powersaving
//	background, service     performance  powersaving  powersaving
//	focused                 performance  balance      balance
//	any other               performance  balance      powersaving
//
// So background work and services are packed as hard as the planner
// packs whenever the machine packs at all; the focused app is never packed
// harder than balance would pack it; and under performance nothing is
// restricted.
func ClassPolicy(machine Policy, class string) Policy {
	if packing(machine) == 0 {
		return Performance
	}
	switch class {
	case ClassBackground, ClassService:
		return Powersaving
	case ClassFocused:
		return Balance
	}
	return machine
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
