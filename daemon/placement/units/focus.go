package units

import (
	"errors"
	"strings"

	"github.com/fsnotify/fsnotify"
	"github.com/sirupsen/logrus"
	"golang.org/x/sys/unix"
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
}

// startFocus makes the inotify watch and feeds its events to msgs.
func (u *Placement) startFocus() error {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return err
	}
	u.focus = &focusWatch{w: w, byDir: map[string]string{}}
	out, done, log := u.msgs, u.done, u.log
	go func() {
		for {
			var m unitMsg
			select {
			case ev, ok := <-w.Events:
				if !ok {
					return
				}
				if !ev.Has(fsnotify.Chmod) {
					continue
				}
				m.focus = ev.Name
			case err, ok := <-w.Errors:
				if !ok {
					return
				}
				if !errors.Is(err, fsnotify.ErrEventOverflow) {
					log.WithError(err).Warn("focus watch")
					continue
				}
				m.focusOverflow = true
			}
			select {
			case out <- m:
			case <-done:
				return
			}
		}
	}()
	return nil
}

// watchFocus reads w's focus and watches its cgroup, for an app.slice
// unit of a user's manager.
func (u *Placement) watchFocus(w *unitWorkload) {
	if u.focus == nil || w.uid < 0 || w.slice != "app.slice" {
		return
	}
	if err := u.focus.w.Add(w.cgroup); err != nil {
		u.log.WithError(err).WithField("unit", w.name).Warn("cannot watch an app's cgroup for focus changes")
	} else {
		u.focus.byDir[w.cgroup] = workloadKey(w.uid, w.name)
	}
	w.focused = readFocused(w.cgroup)
}

// unwatchFocus ends w's watch (its cgroup may be gone already).
func (u *Placement) unwatchFocus(w *unitWorkload) {
	if u.focus == nil {
		return
	}
	if _, ok := u.focus.byDir[w.cgroup]; ok {
		delete(u.focus.byDir, w.cgroup)
		_ = u.focus.w.Remove(w.cgroup)
	}
}

// onFocus re-reads the focus of the app whose cgroup's attributes
// changed (of every watched app after lost events); it reports a change.
func (u *Placement) onFocus(m unitMsg) bool {
	if u.focus == nil {
		return false
	}
	keys := []string{u.focus.byDir[m.focus]}
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
			u.log.WithFields(logrus.Fields{"unit": w.name, "uid": w.uid, "focused": f}).Debug("focus changed")
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
