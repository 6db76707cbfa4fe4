package units

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/sirupsen/logrus"

	"github.com/schedpolicyd/schedpolicyd/sysfs"
	"github.com/schedpolicyd/schedpolicyd/systemd"
)

// unitMsg is one message of Placement.EventsC, beside the users' links'
// (linkMsg): exactly one of a signal of the system manager (ev), its
// connection closing (closed), a user logging in or out (user, from
// logind), or a focus watch event (focus: the cgroup directories whose
// attributes changed; focusOverflow: events were lost).
type unitMsg struct {
	ev            systemd.UnitEvent
	closed        bool
	user          *systemd.UserEvent
	focus         []string
	focusOverflow bool
}

// forward copies the system manager's signals to msgs until its
// connection closes (then it says so) or close ends it.
func (u *Placement) forward(ch <-chan systemd.UnitEvent) {
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
		case out <- unitMsg{closed: true}:
		case <-done:
		}
	}()
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
	// cgroup is user@UID.service's ControlGroup and mainPID its MainPID,
	// as the system manager says: every unit of the user's manager must
	// have its cgroup below it, and the socket the link reaches must be
	// listened on by that process.
	cgroup  string
	mainPID int
	// link talks to the user's manager while delegated (userlink.go);
	// nil otherwise (user@UID.service is then placed as a whole). up: it
	// is connected and has listed the units; the user's units are
	// workloads only while it is.
	link *userLink
	up   bool
	// writing: a batch of writes is with the link, whose answer the
	// user's units wait for; again: an apply left them out meanwhile, so
	// the answer asks for another.
	writing, again bool
	// said is the last link failure said at warning level (its repeats
	// are said at debug level); full: maxUserWorkloads reached, said.
	said string
	full bool
	// recordsFull: maxUserRecords reached, said.
	recordsFull bool
	// refusedSaid: the refused values said (unit and field), at most
	// maxRefusedSaid.
	refusedSaid map[string]bool
	// Whether this manager process applies what it is told (cgroup v2):
	// a manager already running when cpuset reached its cgroup (the
	// package's daemon-reload) stores AllowedCPUs= and never applies it,
	// as systemd reads the controllers it may use when it starts (seen
	// with systemd 252). The first unit given a narrower value is looked
	// at (check, the unit's key; checkSamples, the samples since) two
	// samples later: a cgroup without cpuset.cpus makes the manager inert
	// — its units are left out of every plan, so that their originals go
	// back, until its main process changes — and a cgroup with it marks
	// the manager as one that applies (nothing more is looked at).
	check        string
	checkSamples int
	applies      bool
	inert        bool
}

// maxRefusedSaid bounds what a user's refusals said are remembered by.
const maxRefusedSaid = 256

// openUsers starts following users: through logind's ListUsers and its
// UserNew/UserRemoved signals where logind runs (never started by
// activation), else through the system manager's user@UID.service units
// alone; the source is logged. With app.slice managed it also starts the
// focus watch.
func (u *Placement) openUsers(ctx context.Context) {
	var l *systemd.Logind
	err := errors.New("bus = \"none\": no D-Bus")
	if u.e.Cfg.Bus != "none" {
		l, err = systemd.ConnectLogind(ctx)
	}
	if err != nil {
		u.userSource = "system manager"
		u.e.Log.WithError(err).Info("following users through the system manager's user@UID.service units (logind is not reachable)")
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
			u.e.Log.WithError(err).Warn("logind: listing users")
		}
		var uids []string
		for _, us := range users {
			uids = append(uids, strconv.Itoa(us.UID))
			if u.people[us.UID] == nil {
				u.people[us.UID] = &userManager{uid: us.UID}
			}
		}
		u.e.Log.WithField("users", strings.Join(uids, ",")).Info("following users through logind")
	}
	if u.userManaged["app.slice"] {
		if err := u.startFocus(); err != nil {
			u.e.Log.WithError(err).Warn("the focused app cannot be followed (no inotify watch)")
		}
	}
}

// closeUsers drops logind, the users' links and the focus watch.
func (u *Placement) closeUsers() {
	if u.logind != nil {
		u.logind.Close()
		u.logind = nil
	}
	for _, p := range u.people {
		u.stopLink(p)
	}
	if u.focus != nil {
		u.focus.w.Close()
		u.focus = nil
	}
}

// scanUsers follows every user@UID.service of the system manager's list
// (scan); it reports whether the workloads changed.
func (u *Placement) scanUsers(list []systemd.UnitInfo) bool {
	changed := false
	seen := map[int]bool{}
	for _, info := range list {
		if isUserManager(info.Name) {
			seen[userManagerUID(info.Name)] = true
			if u.userUnit(info) {
				changed = true
			}
		}
	}
	for uid, p := range u.people {
		if !seen[uid] && p.link != nil {
			changed = u.stopLink(p) || changed
		}
	}
	return changed
}

// userUnit follows what the system manager says of a user's manager,
// user@UID.service: while it runs, whether cpuset is delegated to it and,
// if so, a link to it (whose units come later, as the link's messages);
// when it stops, or its main process changes, the link is dropped. It
// reports whether the workloads changed.
func (u *Placement) userUnit(info systemd.UnitInfo) bool {
	uid := userManagerUID(info.Name)
	p := u.people[uid]
	active := info.ControlGroup != "" && (info.ActiveState == "active" || info.ActiveState == "reloading")
	if !active {
		changed := false
		if p != nil {
			changed = u.stopLink(p)
		}
		if p != nil && u.logind == nil && info.ActiveState != "activating" {
			delete(u.people, uid)
		}
		return changed
	}
	if p == nil {
		p = &userManager{uid: uid}
		u.people[uid] = p
		u.e.Log.WithFields(logrus.Fields{"uid": uid, "source": u.userSource}).Info("following a user")
	}
	delegated, why := u.cpusetDelegated(info)
	log := u.e.Log.WithFields(logrus.Fields{"uid": uid, "unit": info.Name})
	if delegated != p.delegated || why != p.why {
		if delegated {
			log.Info("cpuset is delegated to the user's manager: the units of its managed slices are placed through it")
		} else {
			log.WithField("why", why).Info("the user's manager is placed as a whole, never confined (it holds the session and the app in front): its own units cannot be placed until cpuset is delegated to it, at the user's next login where user@.service's drop-in delegates it (schedpolicyd(8))")
		}
		p.delegated, p.why = delegated, why
	}
	if !delegated {
		return u.stopLink(p)
	}
	changed := false
	if p.link != nil && (p.cgroup != info.ControlGroup || p.mainPID != info.MainPID) {
		// A new manager process (user@UID.service restarted): the link
		// checks its socket against the new one.
		changed = u.stopLink(p)
	}
	if p.mainPID != info.MainPID {
		p.check, p.applies, p.inert = "", false, false
	}
	p.cgroup, p.mainPID = info.ControlGroup, info.MainPID
	if p.link == nil {
		p.link = u.newLink(uid, systemd.UserOptions{Socket: u.userSocket(uid), PeerPID: info.MainPID, MaxCPUs: u.maxCPUs, MaxUnits: maxUserWorkloads * 4})
		u.askLingering(p)
	}
	return changed
}

// userSocket is uid's manager's private socket below the runtime root
// (placement.Config.RunRoot): RUNROOT/user/UID/systemd/private.
func (u *Placement) userSocket(uid int) string {
	return filepath.Join(u.runRoot, "user", strconv.Itoa(uid), "systemd", "private")
}

// askLingering asks p's link to report, with its next listing, which of
// the user's records no workload holds have a runtime drop-in that
// outlives their unit (dropGone).
func (u *Placement) askLingering(p *userManager) {
	var check []string
	for _, r := range u.records {
		if recordUID(r.Manager) == p.uid && r.Written() && r.DropIns != "" && u.workloads[workloadKey(p.uid, r.Unit)] == nil {
			check = append(check, r.DropIns)
		}
	}
	sort.Strings(check)
	p.link.ask(func(w *linkWork) { w.check = check })
}

// stopLink ends p's link, if any, and forgets the user's workloads; their
// records stay until the reset at stop, a logout or a listing decides. It
// reports whether the workloads changed.
func (u *Placement) stopLink(p *userManager) bool {
	if p.link == nil {
		return false
	}
	p.link.close()
	p.link, p.up, p.writing, p.again = nil, false, false, false
	delete(u.reloading, p.uid)
	delete(u.held, p.uid)
	return u.forgetUser(p.uid, "no longer managing a user's units: its manager stopped")
}

// forgetUser forgets uid's workloads, logging why once when there were
// any; it reports whether there were.
func (u *Placement) forgetUser(uid int, why string) bool {
	changed := false
	for k, w := range u.workloads {
		if w.uid == uid {
			u.forget(k)
			changed = true
		}
	}
	if changed {
		u.e.Log.WithField("uid", uid).Info(why)
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
	dir, err := u.cgroupDir(-1, info.ControlGroup)
	if err != nil {
		return false, err.Error()
	}
	f := filepath.Join(dir, "cgroup.controllers")
	ctl, err := sysfs.ReadAttr(f)
	if err != nil {
		return false, fmt.Sprintf("reading %s: %v", f, err)
	}
	if !slices.Contains(strings.Fields(ctl), "cpuset") {
		return false, fmt.Sprintf("cpuset is not in %s (%q)", f, strings.TrimSpace(ctl))
	}
	return true, ""
}

// onUser follows logind's UserNew and UserRemoved; it reports whether
// the workloads changed. A user who logged out takes their manager, and
// the runtime AllowedCPUs= set on its units, with them: their records
// are forgotten.
func (u *Placement) onUser(ev systemd.UserEvent) bool {
	log := u.e.Log.WithFields(logrus.Fields{"uid": ev.UID, "source": "logind"})
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
		changed := u.userUnit(info)
		if u.consider(-1, u.systemView(info)) {
			changed = true
		}
		u.e.Flush()
		return changed
	}
	changed := false
	if p := u.people[ev.UID]; p != nil {
		changed = u.stopLink(p)
		delete(u.people, ev.UID)
	}
	delete(u.reloading, ev.UID)
	if u.forgetUser(ev.UID, "the user's units are gone with their manager") {
		changed = true
	}
	u.forgetUserRecords(ev.UID, "user logged out: its manager and the AllowedCPUs= set on its units are gone; record forgotten")
	log.Info("user logged out")
	u.e.Flush()
	return changed
}

// forgetUserRecords drops every record of uid's manager (its runtime
// values went with it), logging why for each.
func (u *Placement) forgetUserRecords(uid int, why string) {
	for k, r := range u.records {
		if r.Manager == managerName(uid) {
			if w := u.workloads[workloadKey(uid, r.Unit)]; w != nil {
				u.forget(workloadKey(uid, r.Unit))
			}
			u.e.Log.WithFields(logrus.Fields{"unit": r.Unit, "manager": r.Manager}).Info(why)
			delete(u.records, k)
			u.e.Dirty = true
		}
	}
}

// onLink follows one message of a user's link (linkMsg); it reports
// whether the workloads changed, or the user's units wait for a plan
// (replan). A message of a link the daemon dropped changes nothing.
func (u *Placement) onLink(msg linkMsg) (replan bool) {
	p := u.people[msg.uid]
	if p == nil || p.link == nil || p.link != msg.link {
		return false
	}
	log := u.e.Log.WithField("uid", msg.uid)
	u.sayRefused(p, msg.refused, msg.refusedMore)
	switch {
	case msg.up:
		p.up, p.said = true, ""
		log.WithField("systemd", msg.version).Info("managing a user's units through its manager")
		replan = u.takeUserList(p, msg.views, msg.lingers)
	case msg.list:
		replan = u.takeUserList(p, msg.views, msg.lingers)
	case msg.units:
		for _, v := range msg.views {
			if u.consider(p.uid, v) {
				replan = true
			}
		}
		for _, name := range msg.gone {
			if k := workloadKey(p.uid, name); u.workloads[k] != nil {
				u.forget(k)
				replan = true
			}
		}
	case msg.reload && msg.started:
		u.reloading[p.uid] = true
		log.Info("the user's manager is reloading: its units are held (not forgotten, not set) until it is done")
	case msg.reload:
		delete(u.reloading, p.uid) // the listing that follows takes in what changed
	case msg.written:
		replan = u.takeUserWritten(p, msg.results)
	case msg.down:
		replan = u.linkDown(p, msg)
	}
	if msg.up || msg.list || msg.units {
		u.sayFocus([]int{p.uid})
	}
	u.e.Flush()
	return replan
}

// sayRefused warns, once per unit and property, of the values a user's
// manager sent that systemd cannot have (systemd.InvalidError): the unit
// is not placed, and the message names the user.
func (u *Placement) sayRefused(p *userManager, refused []error, more int) {
	for _, err := range refused {
		var ie *systemd.InvalidError
		key := err.Error()
		if errors.As(err, &ie) {
			key = ie.Unit + "\x00" + ie.Field
		}
		if p.refusedSaid[key] {
			continue
		}
		if p.refusedSaid == nil || len(p.refusedSaid) >= maxRefusedSaid {
			p.refusedSaid = map[string]bool{}
		}
		p.refusedSaid[key] = true
		u.e.Log.WithError(err).WithField("uid", p.uid).Warn("refused what a user's manager sent: systemd cannot send it; the unit is not placed")
	}
	if more > 0 {
		u.e.Log.WithFields(logrus.Fields{"uid": p.uid, "more": more}).Warn("refused more values a user's manager sent")
	}
}

// takeUserList takes a complete listing of p's manager: its units of
// the managed slices adopted, refreshed or forgotten, and the records of
// its units that are no longer loaded dropped, unless their value
// lingers in a runtime drop-in (lingers, from the link). It reports a
// change.
func (u *Placement) takeUserList(p *userManager, views []unitView, lingers map[string]bool) bool {
	changed := false
	seen := map[string]bool{}
	for _, v := range views {
		seen[v.Name] = true
		if u.consider(p.uid, v) {
			changed = true
		}
	}
	for k, w := range u.workloads {
		if w.uid == p.uid && !seen[w.name] {
			u.forget(k)
			changed = true
		}
	}
	for k, r := range u.records {
		if recordUID(r.Manager) != p.uid || r.Manager == "system" || seen[r.Unit] {
			continue
		}
		if r.Written() && r.DropIns != "" && lingers[r.DropIns] {
			continue // the value comes back with a unit of that name
		}
		if _, asked := lingers[r.DropIns]; r.Written() && r.DropIns != "" && !asked {
			continue // not asked about yet: the next listing says
		}
		delete(u.records, k)
		u.e.Dirty = true
	}
	// A complete listing ends the user's reload, whether or not its end
	// was heard (a user's manager may drop it, or never send it).
	delete(u.reloading, p.uid)
	if u.held[p.uid] {
		delete(u.held, p.uid)
		changed = true
	}
	// The next listing says which of the records left linger.
	u.askLingering(p)
	if p.recordsFull && u.userRecords(p.uid) < maxUserRecords {
		p.recordsFull = false
	}
	return changed
}

// linkDown follows the end of p's connection: the user's units are
// forgotten until the link is up again (their records stay). The first
// failure of a run is warned about, with the back-off, and its repeats
// said at debug level; a user whose socket is gone (logged out while
// the daemon did not follow) has its records forgotten. It reports a
// change.
func (u *Placement) linkDown(p *userManager, msg linkMsg) bool {
	p.up, p.writing = false, false
	delete(u.reloading, p.uid)
	changed := u.forgetUser(p.uid, "the user's units are not placed until its manager answers again")
	log := u.e.Log.WithError(msg.err).WithFields(logrus.Fields{"uid": p.uid, "retry_in": msg.backoff.String()})
	switch {
	case msg.socketGone:
		u.forgetUserRecords(p.uid, "the user's manager is gone (logged out): nothing left to reset; record forgotten")
		log.Debug("the user's manager has no socket")
	case !msg.misbehaved:
		log.Info("the user's manager closed the connection (it re-executed or exited); connecting again")
	case msg.err.Error() != p.said:
		p.said = msg.err.Error()
		log.Warn("the user's manager does not answer as systemd does: dropped, and tried again after a back-off; its units are not placed meanwhile")
	default:
		log.Debug("the user's manager still does not answer as systemd does")
	}
	return changed
}

// userManagerUID is the uid of user@UID.service (isUserManager).
func userManagerUID(name string) int {
	n, _ := strconv.Atoi(strings.TrimSuffix(strings.TrimPrefix(name, "user@"), ".service"))
	return n
}

// UserManagerProbe is what `schedpolicyd probe` says of one running
// user's manager: whether its units can be placed through it now, and
// whether the user's desktop says which app has the focus.
type UserManagerProbe struct {
	Unit string `json:"unit"` // "user@1000.service"
	// Delegated: cpuset is in its cgroup's cgroup.controllers (cgroup v2)
	// now, so the daemon places the units of the managed user slices
	// through the user's manager; else it places user@UID.service as a
	// whole, never confined, for the reason in Why.
	Delegated bool `json:"cpuset_delegated"`
	// InUse: cpuset is in its cgroup's cgroup.subtree_control: the user's
	// manager has turned it on for its units (systemd does so once one of
	// them has AllowedCPUs=).
	InUse bool   `json:"cpuset_in_use"`
	Why   string `json:"why,omitempty"`
	// Apps is how many of the user's app.slice services and scopes were
	// looked at (at most MaxProbeApps), FocusMarked how many of them
	// carry FocusXattr: none of several means the desktop says nothing
	// of the focus, and the daemon leaves every app unconfined
	// (policy.ClassAppNoFocus).
	Apps        int `json:"apps"`
	FocusMarked int `json:"focus_marked"`
}

// Probe bounds: the user managers ProbeUserManagers lists, and the app
// units of each it looks at.
const (
	MaxProbeUsers = 64
	MaxProbeApps  = 256
)

// ProbeUserManagers lists the user managers running under the cgroup v2
// hierarchy of sysfsRoot (SYSFSROOT/fs/cgroup/user.slice/user-UID.slice/
// user@UID.service, at most MaxProbeUsers, by name) with whether cpuset
// is delegated to each now (cgroup.controllers) and in use
// (cgroup.subtree_control), and how many of its app.slice units carry the
// focus attribute. It reads files only, no bus. On cgroup v1 it returns
// nil: there systemd never manages cpusets.
func ProbeUserManagers(sysfsRoot string) []UserManagerProbe {
	root := filepath.Join(sysfsRoot, "fs/cgroup")
	if !cgroupV2(sysfsRoot, root) {
		return nil
	}
	dirs, _ := filepath.Glob(filepath.Join(root, "user.slice", "user-*.slice", "user@*.service"))
	sort.Strings(dirs)
	var out []UserManagerProbe
	for _, d := range dirs {
		p := UserManagerProbe{Unit: filepath.Base(d)}
		if !isUserManager(p.Unit) || filepath.Base(filepath.Dir(d)) != "user-"+strconv.Itoa(userManagerUID(p.Unit))+".slice" {
			continue
		}
		if len(out) == MaxProbeUsers {
			break
		}
		ctl, err := sysfs.ReadAttr(filepath.Join(d, "cgroup.controllers"))
		switch {
		case err != nil:
			p.Why = err.Error()
		case slices.Contains(strings.Fields(ctl), "cpuset"):
			p.Delegated = true
		default:
			p.Why = fmt.Sprintf("cpuset is not delegated to it now (its cgroup.controllers: %s); the package's user@.service drop-in delegates it from the user's next login (schedpolicyd(8), USERS' UNITS)", strings.TrimSpace(ctl))
		}
		if sub, err := sysfs.ReadAttr(filepath.Join(d, "cgroup.subtree_control")); err == nil {
			p.InUse = slices.Contains(strings.Fields(sub), "cpuset")
		}
		p.Apps, p.FocusMarked = probeFocus(filepath.Join(d, "app.slice"))
		out = append(out, p)
	}
	return out
}

// probeFocus counts the services and scopes directly in an app.slice
// cgroup directory (at most MaxProbeApps) and those whose directory
// carries FocusXattr.
func probeFocus(dir string) (apps, marked int) {
	f, err := os.Open(dir)
	if err != nil {
		return 0, 0
	}
	defer f.Close()
	names, _ := f.Readdirnames(4 * MaxProbeApps) // cgroup files too
	sort.Strings(names)
	for _, n := range names {
		if !strings.HasSuffix(n, ".scope") && !strings.HasSuffix(n, ".service") {
			continue
		}
		if apps == MaxProbeApps {
			break
		}
		apps++
		if _, err := focusValue(filepath.Join(dir, n)); err == nil {
			marked++
		}
	}
	return apps, marked
}

func (unitMsg) BackendEvent() {}

// checkApplied looks, for each user whose manager may not apply what it
// is told (userManager.check), whether the unit it was given a narrower
// value holds a cpuset in its cgroup, two samples after the write was
// answered (a manager realises a unit's cgroup after it answers, so the
// sample right after the answer may come too soon). It reports whether
// a manager was found inert (its units leave the plan).
func (u *Placement) checkApplied() (changed bool) {
	for _, p := range u.people {
		if p.check == "" {
			continue
		}
		w := u.workloads[p.check]
		if w == nil || w.rec.Applied == "" || w.cpus.IsEmpty() {
			p.check = "" // gone, or back at its original: the next write looks
			continue
		}
		if p.checkSamples++; p.checkSamples < 2 {
			continue
		}
		p.check = ""
		if _, err := os.Stat(w.cgroup); err != nil {
			continue // stopped meanwhile
		}
		_, err := os.Stat(filepath.Join(w.cgroup, "cpuset.cpus"))
		switch {
		case err == nil:
			p.applies = true
		case errors.Is(err, fs.ErrNotExist):
			p.inert = true
			changed = true
			u.e.Log.WithFields(logrus.Fields{"uid": p.uid, "unit": w.name, "allowed_cpus": w.cpus.String()}).Warn("the user's manager stores AllowedCPUs= but does not apply it (its unit's cgroup has no cpuset.cpus): it was already running when cpuset was delegated to it, and systemd reads the controllers it may use when it starts; its units are given their own values back and are not placed until the user logs in again (schedpolicyd(8), USERS' UNITS)")
		}
	}
	return changed
}

// inertUser reports whether uid's manager stores AllowedCPUs= without
// applying it (checkApplied).
func (u *Placement) inertUser(uid int) bool {
	p := u.people[uid]
	return uid >= 0 && p != nil && p.inert
}
