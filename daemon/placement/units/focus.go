package units

import (
	"errors"
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
	u.focus = &focusWatch{w: w, byDir: map[string]string{}, perUID: map[int]int{}}
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
	w.focused = readFocused(w.cgroup)
}

// unwatchFocus ends w's watch (its cgroup may be gone already).
func (u *Placement) unwatchFocus(w *unitWorkload) {
	if u.focus == nil {
		return
	}
	if _, ok := u.focus.byDir[w.cgroup]; ok {
		delete(u.focus.byDir, w.cgroup)
		u.focus.perUID[w.uid]--
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
	for _, k := range keys {
		w := u.workloads[k]
		if w == nil {
			continue
		}
		if f := readFocused(w.cgroup); f != w.focused {
			w.focused = f
			changed = true
			u.e.Log.WithFields(logrus.Fields{"unit": w.name, "uid": w.uid, "focused": f}).Debug("focus changed")
		}
	}
	return changed
}

// readFocused reports whether dir's FocusXattr says focused ("-1"); a
// missing attribute (no Mutter, or not yet written) or an unreadable one
// is not focused.
func readFocused(dir string) bool {
	v, err := focusValue(dir)
	return err == nil && v == "-1"
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
