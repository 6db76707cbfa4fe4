package units

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/sirupsen/logrus"

	"github.com/schedpolicyd/schedpolicyd/daemon/statefile"
	"github.com/schedpolicyd/schedpolicyd/sysfs"
	"github.com/schedpolicyd/schedpolicyd/systemd"
)

// unitMsg is one message of Placement.EventsC: exactly one of a unit
// signal (ev, of manager ev.UID), a manager's connection closing (closed,
// of manager uid, the connection from), a user logging in or out (user,
// from logind), or a focus watch event (focus: the cgroup directory whose
// attributes changed; focusOverflow: events were lost).
type unitMsg struct {
	ev            systemd.UnitEvent
	closed        bool
	uid           int
	from          unitManager
	user          *systemd.UserEvent
	focus         string
	focusOverflow bool
}

// userManager is one followed user: logged in or lingering, found
// through logind or through the system manager's user@UID.service.
type userManager struct {
	uid int
	// delegated: the cpuset controller is delegated to user@UID.service,
	// so the user's manager applies AllowedCPUs= to its units; why says
	// why not (logged once per change).
	delegated bool
	why       string
	// mgr is the user's manager while delegated and reachable; nil
	// otherwise (user@UID.service is then placed as a whole).
	mgr unitManager
}

// forward copies the unit signals of manager m (of uid) to msgs until
// its connection closes (then it says so, naming m) or close ends it.
func (u *Placement) forward(uid int, m unitManager, ch <-chan systemd.UnitEvent) {
	out, done := u.msgs, u.done
	go func() {
		for ev := range ch {
			select {
			case out <- unitMsg{ev: ev}:
			case <-done:
				return
			}
		}
		select {
		case out <- unitMsg{closed: true, uid: uid, from: m}:
		case <-done:
		}
	}()
}

// openUsers starts following users: through logind's ListUsers and its
// UserNew/UserRemoved signals where logind runs (never started by
// activation), else through the system manager's user@UID.service units
// alone; the source is logged. With app.slice managed it also starts the
// focus watch.
func (u *Placement) openUsers(ctx context.Context) {
	var l *systemd.Logind
	err := errors.New("bus = \"none\": no D-Bus")
	if u.cfg.Bus != "none" {
		l, err = systemd.ConnectLogind(ctx)
	}
	if err != nil {
		u.userSource = "system manager"
		u.log.WithError(err).Info("following users through the system manager's user@UID.service units (logind is not reachable)")
	} else {
		u.logind, u.userSource = l, "logind"
		out, done := u.msgs, u.done
		go func() {
			for ev := range l.Events() {
				ev := ev
				select {
				case out <- unitMsg{user: &ev}:
				case <-done:
					return
				}
			}
		}()
		users, err := l.Users(ctx)
		if err != nil {
			u.log.WithError(err).Warn("logind: listing users")
		}
		var uids []string
		for _, us := range users {
			uids = append(uids, strconv.Itoa(us.UID))
			if u.people[us.UID] == nil {
				u.people[us.UID] = &userManager{uid: us.UID}
			}
		}
		u.log.WithField("users", strings.Join(uids, ",")).Info("following users through logind")
	}
	if u.userManaged["app.slice"] {
		if err := u.startFocus(); err != nil {
			u.log.WithError(err).Warn("the focused app cannot be followed (no inotify watch)")
		}
	}
}

// closeUsers drops logind, the users' managers and the focus watch.
func (u *Placement) closeUsers() {
	if u.logind != nil {
		u.logind.Close()
		u.logind = nil
	}
	for _, p := range u.people {
		if p.mgr != nil {
			p.mgr.Close()
			p.mgr = nil
		}
	}
	if u.focus != nil {
		u.focus.w.Close()
		u.focus = nil
	}
}

// scanUsers follows every user@UID.service of the system manager's list
// (scan); it reports whether the workloads changed.
func (u *Placement) scanUsers(ctx context.Context, list []systemd.UnitInfo) bool {
	changed := false
	seen := map[int]bool{}
	for _, info := range list {
		if isUserManager(info.Name) {
			seen[userManagerUID(info.Name)] = true
			if u.userUnit(ctx, info) {
				changed = true
			}
		}
	}
	for uid, p := range u.people {
		if !seen[uid] && p.mgr != nil {
			u.dropUserManager(p)
			changed = true
		}
	}
	return changed
}

// userUnit follows what the system manager says of a user's manager,
// user@UID.service: while it runs, whether cpuset is delegated to it and,
// if so, a connection to it with its units adopted; when it stops, the
// connection is dropped. It reports whether the workloads changed.
func (u *Placement) userUnit(ctx context.Context, info systemd.UnitInfo) bool {
	uid := userManagerUID(info.Name)
	p := u.people[uid]
	active := info.ControlGroup != "" && (info.ActiveState == "active" || info.ActiveState == "reloading")
	if !active {
		if p != nil && p.mgr != nil {
			u.dropUserManager(p)
			return true
		}
		if p != nil && u.logind == nil && info.ActiveState != "activating" {
			delete(u.people, uid)
		}
		return false
	}
	if p == nil {
		p = &userManager{uid: uid}
		u.people[uid] = p
		u.log.WithFields(logrus.Fields{"uid": uid, "source": u.userSource}).Info("following a user")
	}
	delegated, why := u.cpusetDelegated(info)
	log := u.log.WithFields(logrus.Fields{"uid": uid, "unit": info.Name})
	if delegated != p.delegated || why != p.why {
		if delegated {
			log.Info("cpuset is delegated to the user's manager: the units of its managed slices are placed through it")
		} else {
			log.WithField("why", why).Info("the user's manager is placed as a whole: its own units cannot be")
		}
		p.delegated, p.why = delegated, why
	}
	if !delegated {
		if p.mgr != nil {
			u.dropUserManager(p)
			return true
		}
		return false
	}
	if p.mgr != nil {
		return false
	}
	m, err := u.connect(ctx, uid)
	var events <-chan systemd.UnitEvent
	if err == nil {
		if events, err = m.Events(ctx); err != nil {
			m.Close()
		}
	}
	if err != nil {
		log.WithError(err).Warn("cannot reach the user's manager; its units are not placed until it answers")
		return false
	}
	p.mgr = m
	u.forward(uid, m, events)
	v, _ := m.Version(ctx)
	log.WithField("systemd", v).Info("managing a user's units through its manager")
	list, err := m.Units(ctx, "*.service", "*.scope")
	if err != nil {
		log.WithError(err).Warn("listing a user manager's units")
		return false
	}
	changed := false
	for _, ui := range list {
		if u.consider(uid, ui) {
			changed = true
		}
	}
	return changed
}

// cpusetDelegated reports whether a user's manager (info is its
// user@UID.service) can apply AllowedCPUs= to its own units: its
// DelegateControllers= names cpuset and, on cgroup v2, cpuset is in its
// cgroup's cgroup.controllers (systemd enabled it for the subtree). If
// not, it says why.
func (u *Placement) cpusetDelegated(info systemd.UnitInfo) (bool, string) {
	if !info.Delegate || !slices.Contains(info.DelegateControllers, "cpuset") {
		return false, fmt.Sprintf("its Delegate= (%s) does not name cpuset (a drop-in for user@.service can, docs/USERS.md)", strings.Join(info.DelegateControllers, " "))
	}
	if !u.unified {
		return false, "cgroup v1: systemd never manages cpusets"
	}
	f := filepath.Join(u.cgroupRoot, info.ControlGroup, "cgroup.controllers")
	ctl, err := sysfs.ReadAttr(f)
	if err != nil {
		return false, fmt.Sprintf("reading %s: %v", f, err)
	}
	if !slices.Contains(strings.Fields(ctl), "cpuset") {
		return false, fmt.Sprintf("cpuset is not in %s (%q)", f, strings.TrimSpace(ctl))
	}
	return true, ""
}

// dropUserManager closes a user's manager connection and forgets its
// workloads; their records stay until the reset or dropGone decides.
func (u *Placement) dropUserManager(p *userManager) {
	if p.mgr != nil {
		p.mgr.Close()
		p.mgr = nil
	}
	delete(u.reloading, p.uid)
	for k, w := range u.workloads {
		if w.uid == p.uid {
			u.forget(k)
		}
	}
	u.log.WithField("uid", p.uid).Info("no longer managing a user's units: its manager stopped")
}

// onUser follows logind's UserNew and UserRemoved; it reports whether
// the workloads changed. A user who logged out takes their manager, and
// the runtime AllowedCPUs= set on its units, with them: their records
// are forgotten.
func (u *Placement) onUser(ev systemd.UserEvent) bool {
	log := u.log.WithFields(logrus.Fields{"uid": ev.UID, "source": "logind"})
	if ev.New {
		if u.people[ev.UID] == nil {
			u.people[ev.UID] = &userManager{uid: ev.UID}
		}
		log.Info("user logged in")
		ctx, cancel := context.WithTimeout(context.Background(), unitOpTimeout)
		defer cancel()
		info, err := u.mgr.UnitInfo(ctx, "user@"+strconv.Itoa(ev.UID)+".service")
		if err != nil {
			return false // its manager's start job (JobRemoved) brings it
		}
		changed := u.userUnit(ctx, info)
		if u.consider(-1, info) {
			changed = true
		}
		u.Flush()
		return changed
	}
	changed := false
	if p := u.people[ev.UID]; p != nil {
		if p.mgr != nil {
			p.mgr.Close()
			p.mgr = nil
		}
		delete(u.people, ev.UID)
	}
	delete(u.reloading, ev.UID)
	for k, w := range u.workloads {
		if w.uid == ev.UID {
			u.forget(k)
			changed = true
		}
	}
	for k, r := range u.records {
		if r.Manager == managerName(ev.UID) {
			log.WithField("unit", r.Unit).Info("user logged out: its manager and the AllowedCPUs= set on its units are gone; record forgotten")
			delete(u.records, k)
			u.Dirty = true
		}
	}
	log.Info("user logged out")
	u.Flush()
	return changed
}

// userManagerClosed follows the end of a user manager's connection,
// from: its units are forgotten, and while the system manager says
// user@UID.service runs, the daemon connects again at once. A manager
// closes every connection of its private socket when it re-executes
// (`systemctl --user daemon-reexec`; Debian's systemd upgrade does it
// for every user's manager) and serves new ones right after; without
// connecting again, the user's units were no longer placed until the
// daemon restarted. The end of a connection the daemon dropped itself
// (from is not the user's manager now) changes nothing.
func (u *Placement) userManagerClosed(uid int, from unitManager) bool {
	p := u.people[uid]
	if p == nil || p.mgr == nil || p.mgr != from {
		return false
	}
	u.log.WithField("uid", uid).Info("the user's manager closed the connection (it re-executed or exited)")
	u.dropUserManager(p)
	ctx, cancel := context.WithTimeout(context.Background(), unitOpTimeout)
	defer cancel()
	if info, err := u.mgr.UnitInfo(ctx, "user@"+strconv.Itoa(uid)+".service"); err == nil {
		u.userUnit(ctx, info)
	}
	u.Flush()
	return true
}

// userGone reports whether the manager of user record r has gone, with
// every runtime AllowedCPUs= it held (the user logged out: no
// /run/user/UID/systemd/private); it logs that the record is forgotten.
func (u *Placement) userGone(r *statefile.UnitRecord) bool {
	uid := recordUID(r.Manager)
	if p := u.people[uid]; p != nil && p.mgr != nil {
		return false
	}
	if _, err := os.Stat(systemd.UserSocket(uid)); !errors.Is(err, fs.ErrNotExist) {
		return false
	}
	u.log.WithFields(logrus.Fields{"unit": r.Unit, "manager": r.Manager}).Info("the user's manager is gone (logged out): nothing left to reset; record forgotten")
	return true
}

// userManagerUID is the uid of user@UID.service (isUserManager).
func userManagerUID(name string) int {
	n, _ := strconv.Atoi(strings.TrimSuffix(strings.TrimPrefix(name, "user@"), ".service"))
	return n
}

// UserManagerProbe is what `schedpolicyd probe` says of one running
// user's manager: whether its units can be placed through it.
type UserManagerProbe struct {
	Unit string `json:"unit"` // "user@1000.service"
	// Delegated: cpuset is in its cgroup's cgroup.controllers (cgroup v2),
	// so the daemon places the units of the managed user slices through
	// the user's manager; else it places user@UID.service as a whole, for
	// the reason in Why.
	Delegated bool   `json:"cpuset_delegated"`
	Why       string `json:"why,omitempty"`
}

// ProbeUserManagers lists the user managers running under cgroupRoot
// (cgroup v2: user.slice/user-UID.slice/user@UID.service) with whether
// cpuset is delegated to each, from their cgroup.controllers. On cgroup
// v1 it returns nil: there systemd never manages cpusets.
func ProbeUserManagers(cgroupRoot string) []UserManagerProbe {
	if !sysfs.IsUnified(cgroupRoot) {
		return nil
	}
	dirs, _ := filepath.Glob(filepath.Join(cgroupRoot, "user.slice", "user-*.slice", "user@*.service"))
	var out []UserManagerProbe
	for _, d := range dirs {
		p := UserManagerProbe{Unit: filepath.Base(d)}
		if !isUserManager(p.Unit) {
			continue
		}
		ctl, err := sysfs.ReadAttr(filepath.Join(d, "cgroup.controllers"))
		switch {
		case err != nil:
			p.Why = err.Error()
		case slices.Contains(strings.Fields(ctl), "cpuset"):
			p.Delegated = true
		default:
			p.Why = fmt.Sprintf("cpuset is not delegated to it (its cgroup.controllers: %s; docs/USERS.md)", strings.TrimSpace(ctl))
		}
		out = append(out, p)
	}
	return out
}

func (unitMsg) BackendEvent() {}
