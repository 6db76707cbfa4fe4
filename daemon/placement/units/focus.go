package units

import (
	"errors"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/sirupsen/logrus"
	"golang.org/x/sys/unix"

	"github.com/schedpolicyd/schedpolicyd/daemon/placement"
)

// FocusXattr is the extended attribute GNOME's Mutter writes on the
// cgroup directory of each application's unit (GNOME/mutter
// src/core/display.c, meta_window_set_inactive_since, since Mutter 41):
// "-1" while one of the app's windows has focus, else the
// g_get_monotonic_time() (CLOCK_MONOTONIC, µs) at which it lost it, as a
// decimal string without a terminating NUL.
const FocusXattr = "user.xdg.inactive-since"

// focusWatch follows FocusXattr on the cgroups of the app.slice units of
// users' managers without polling: setxattr(2) raises IN_ATTRIB on the
// directory (fsnotify_xattr in the VFS, whatever the filesystem: seen on
// cgroup v1 and v2 cgroupfs).
type focusWatch struct {
	w     *fsnotify.Watcher
	byDir map[string]string // cgroup directory → workloadKey
	// perUID counts each user's watched apps (at most maxFocusWatches:
	// the watches are root's inotify watches, of which every user's
	// apps take one).
	perUID map[int]int
	// marked counts each user's watched apps whose cgroup carries
	// FocusXattr (any value): none means the user's desktop says nothing
	// of the focus (no Mutter; KDE Plasma, say), and every app of theirs
	// is placed as the app in front (policy.ClassAppNoFocus).
	marked map[int]int
	// said is, per user with apps, whether the log last said the desktop
	// writes the focus (true) or not (false).
	said map[int]bool
}

// maxFocusWatches bounds the apps of one user whose focus is followed;
// the others count as unfocused apps.
const maxFocusWatches = 256

// focusEvery is the least time between two messages of the focus watch,
// and so between two plans that focus changes make: the cgroup's xattr
// is the user's to write, as often as they like, and each plan may set
// AllowedCPUs= on many units. Changes within it go in one message at its
// end.
const focusEvery = 200 * time.Millisecond

// startFocus makes the inotify watch and feeds its events to msgs,
// coalesced: the cgroups whose attributes changed go to the loop in one
// message at most every focusEvery (the first at once), so that a user
// who writes the xattr in a loop costs the loop five messages a second,
// not one per write.
func (u *Placement) startFocus() error {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return err
	}
	u.focus = &focusWatch{w: w, byDir: map[string]string{}, perUID: map[int]int{}, marked: map[int]int{}, said: map[int]bool{}}
	go coalesceFocus(w, u.msgs, u.done, u.e.Log)
	return nil
}

// coalesceFocus is startFocus's goroutine.
func coalesceFocus(w *fsnotify.Watcher, out chan<- placement.Event, done <-chan struct{}, log logrus.FieldLogger) {
	pending := map[string]bool{}
	overflow, warned := false, false
	var last time.Time
	var due <-chan time.Time
	for {
		select {
		case ev, ok := <-w.Events:
			if !ok {
				return
			}
			if !ev.Has(fsnotify.Chmod) {
				continue
			}
			pending[ev.Name] = true
		case err, ok := <-w.Errors:
			if !ok {
				return
			}
			if !errors.Is(err, fsnotify.ErrEventOverflow) {
				if !warned {
					log.WithError(err).Warn("focus watch")
					warned = true
				}
				continue
			}
			overflow = true
		case <-due:
			due = nil
		case <-done:
			return
		}
		if due != nil || len(pending) == 0 && !overflow {
			continue
		}
		if wait := focusEvery - time.Since(last); wait > 0 {
			due = time.After(wait)
			continue
		}
		m := unitMsg{focusOverflow: overflow}
		for d := range pending {
			m.focus = append(m.focus, d)
		}
		sort.Strings(m.focus)
		select {
		case out <- m:
		case <-done:
			return
		}
		clear(pending)
		overflow, last = false, time.Now()
	}
}

// watchFocus reads w's focus and watches its cgroup, for an app.slice
// unit of a user's manager.
func (u *Placement) watchFocus(w *unitWorkload) {
	if u.focus == nil || w.uid < 0 || w.slice != "app.slice" {
		return
	}
	if u.focus.perUID[w.uid] >= maxFocusWatches {
		return // counts as an unfocused app
	}
	if err := u.focus.w.Add(w.cgroup); err != nil {
		u.e.Log.WithError(err).WithField("unit", w.name).Warn("cannot watch an app's cgroup for focus changes")
		return
	}
	u.focus.byDir[w.cgroup] = workloadKey(w.uid, w.name)
	u.focus.perUID[w.uid]++
	u.setFocus(w, w.cgroup)
}

// setFocus reads w's focus from dir and counts its mark; it reports
// whether its focus or mark changed.
func (u *Placement) setFocus(w *unitWorkload, dir string) bool {
	v, err := focusValue(dir)
	focused, marked := err == nil && v == "-1", err == nil
	if focused == w.focused && marked == w.marked {
		return false
	}
	if marked != w.marked {
		if marked {
			u.focus.marked[w.uid]++
		} else {
			u.focus.marked[w.uid]--
		}
	}
	w.focused, w.marked = focused, marked
	return true
}

// focusWritten reports whether uid's desktop says where the focus is:
// some watched app of theirs carries FocusXattr. Without a focus watch
// (no inotify) nobody's does.
func (u *Placement) focusWritten(uid int) bool {
	return u.focus != nil && u.focus.marked[uid] > 0
}

// sayFocus logs, once per change, whether each user with watched apps
// has a desktop that writes the focus (users: the uids to look at; nil:
// every user with apps).
func (u *Placement) sayFocus(users []int) {
	if u.focus == nil {
		return
	}
	if users == nil {
		for uid := range u.focus.perUID {
			users = append(users, uid)
		}
		sort.Ints(users)
	}
	for _, uid := range users {
		if u.focus.perUID[uid] == 0 {
			delete(u.focus.said, uid)
			continue
		}
		written := u.focusWritten(uid)
		if said, ok := u.focus.said[uid]; ok && said == written {
			continue
		}
		u.focus.said[uid] = written
		log := u.e.Log.WithFields(logrus.Fields{"uid": uid, "xattr": FocusXattr})
		if written {
			log.Info("the user's desktop says which app has the focus: the other apps are packed as background work while the machine packs")
		} else {
			log.Info("the user's desktop says nothing of the focus (no app carries the attribute): every app of the user is left unconfined, as the app in front")
		}
	}
}

// unwatchFocus ends w's watch (its cgroup may be gone already).
func (u *Placement) unwatchFocus(w *unitWorkload) {
	if u.focus == nil {
		return
	}
	if _, ok := u.focus.byDir[w.cgroup]; ok {
		delete(u.focus.byDir, w.cgroup)
		u.focus.perUID[w.uid]--
		if u.focus.perUID[w.uid] == 0 {
			delete(u.focus.perUID, w.uid)
		}
		if w.marked {
			u.focus.marked[w.uid]--
			if u.focus.marked[w.uid] == 0 {
				delete(u.focus.marked, w.uid)
			}
		}
		w.focused, w.marked = false, false
		_ = u.focus.w.Remove(w.cgroup)
	}
}

// onFocus re-reads the focus of the apps whose cgroups' attributes
// changed (of every watched app after lost events); it reports a change.
func (u *Placement) onFocus(m unitMsg) bool {
	if u.focus == nil {
		return false
	}
	var keys []string
	for _, d := range m.focus {
		keys = append(keys, u.focus.byDir[d])
	}
	if m.focusOverflow {
		keys = keys[:0]
		for _, k := range u.focus.byDir {
			keys = append(keys, k)
		}
	}
	changed := false
	var users []int
	for _, k := range keys {
		w := u.workloads[k]
		if w == nil {
			continue
		}
		if u.setFocus(w, w.cgroup) {
			changed = true
			users = append(users, w.uid)
			u.e.Log.WithFields(logrus.Fields{"unit": w.name, "uid": w.uid, "focused": w.focused, "marked": w.marked}).Debug("focus changed")
		}
	}
	sort.Ints(users)
	u.sayFocus(slices.Compact(users))
	return changed
}

// focusValue is dir's FocusXattr, without surrounding blanks and NULs:
// at most 64 bytes (a longer value, which Mutter never writes, is an
// error, ERANGE), read without following a symbolic link.
func focusValue(dir string) (string, error) {
	b := make([]byte, 64)
	n, err := unix.Lgetxattr(dir, FocusXattr, b)
	if err != nil {
		return "", err
	}
	return strings.TrimRight(strings.TrimSpace(string(b[:n])), "\x00"), nil
}
