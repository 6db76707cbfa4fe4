package reconnect

import (
	"context"
	"errors"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/fsnotify/fsnotify"
)

// WaitSocket waits before the next attempt to connect to the unix socket
// file path, for a client that reconnects (the system bus, acpid, and the
// daemon's own bus): until the file is created or re-created — an inotify
// watch on its directory, or on the directory's parent while the directory
// itself is missing (/run/dbus before the bus starts) — or, while the file
// exists (a service that died and left it, or is still starting), at the
// latest after backoff. So a daemon on a machine without the service never
// wakes to retry, and one whose service restarts reconnects as
// soon as the new socket appears. Where it cannot watch (no inotify,
// neither directory exists, path empty or relative) it waits backoff. It
// returns early when ctx is done.
func WaitSocket(ctx context.Context, path string, backoff time.Duration) {
	timer := time.NewTimer(backoff)
	defer timer.Stop()
	if path == "" || !filepath.IsAbs(path) {
		select {
		case <-ctx.Done():
		case <-timer.C:
		}
		return
	}
	w, err := fsnotify.NewWatcher()
	if err != nil {
		select {
		case <-ctx.Done():
		case <-timer.C:
		}
		return
	}
	defer w.Close()
	// Errors are drained apart from the loop: fsnotify's reader sends some
	// while holding the lock that Add and Remove take (a watched directory
	// moved away and deleted), so reading them in the loop that calls Add
	// could deadlock. Close ends the drain.
	go func() {
		for range w.Errors {
		}
	}()
	dir := filepath.Dir(path)
	watched := ""
	exists := func() bool {
		_, err := os.Stat(path)
		return !errors.Is(err, fs.ErrNotExist)
	}
	absent := !exists()
	for {
		target := dir
		if !isDir(dir) {
			target = filepath.Dir(dir)
		}
		if target != watched {
			if watched != "" {
				w.Remove(watched)
			}
			watched = ""
			if isDir(target) {
				if w.Add(target) == nil {
					watched = target
				} else if !isDir(target) {
					// It went between the check and the watch (moved
					// away or deleted): look again, or nothing would
					// wake this wait.
					continue
				}
			}
		}
		if watched != "" && watched != dir && isDir(dir) {
			// The directory was made while its parent's watch was set
			// up: its Create came before the watch, and the socket's
			// would never reach the parent's. Watch the directory.
			continue
		}
		if absent && exists() {
			listening(ctx, path)
			return // created before or while the watch was set up
		}
		// The timer runs only while the file exists: a missing one is
		// waited for without waking.
		var tick <-chan time.Time
		if !absent || watched == "" {
			tick = timer.C
		}
		select {
		case <-ctx.Done():
			return
		case <-tick:
			return
		case ev, ok := <-w.Events:
			if !ok {
				return
			}
			if ev.Name == path && ev.Op&fsnotify.Create != 0 {
				listening(ctx, path)
				return // (re-)created
			}
			if ev.Name == watched && ev.Op&(fsnotify.Remove|fsnotify.Rename) != 0 {
				// The watched directory itself went: its watch ended with
				// it, even if a new directory of the same name is already
				// there, so the loop watches again.
				watched = ""
			}
			if absent && exists() {
				listening(ctx, path)
				return
			}
			if ev.Name == path && ev.Op&(fsnotify.Remove|fsnotify.Rename) != 0 {
				absent = !exists() // removed: wait for the new one without a timer
			}
		}
	}
}

// listenGrace bounds how long listening waits for a new socket to accept
// (a variable for the tests).
var listenGrace = time.Second

// listening returns once the unix socket path, just created, accepts a
// connection (the probe is closed at once), or after listenGrace, or when
// ctx is done. A service creates its socket file with bind() and accepts
// only after listen(): a client woken by the file's creation that
// connects in between is refused (ECONNREFUSED), and would wait a whole
// backoff for nothing and report a failure that is not one.
func listening(ctx context.Context, path string) {
	if fi, err := os.Stat(path); err != nil || fi.Mode()&fs.ModeSocket == 0 {
		return // not a socket: nothing to wait for
	}
	deadline := time.Now().Add(listenGrace)
	for {
		c, err := net.DialTimeout("unix", path, listenGrace)
		if err == nil {
			c.Close()
			return
		}
		if !errors.Is(err, syscall.ECONNREFUSED) || time.Now().After(deadline) {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// unixSocketPath returns the socket path of a D-Bus address of the form
// "unix:path=/run/dbus/system_bus_socket[,guid=...]" (the first such entry
// of a ";"-separated list), or "" for other transports.
func unixSocketPath(addr string) string {
	for _, a := range strings.Split(addr, ";") {
		rest, ok := strings.CutPrefix(a, "unix:")
		if !ok {
			continue
		}
		for _, kv := range strings.Split(rest, ",") {
			if p, ok := strings.CutPrefix(kv, "path="); ok {
				return p
			}
		}
	}
	return ""
}

// BusSocket returns the socket file of a bus given as "system" (from
// DBUS_SYSTEM_BUS_ADDRESS, else the D-Bus specification's default
// /var/run/dbus/system_bus_socket), "session" (DBUS_SESSION_BUS_ADDRESS)
// or a D-Bus address; "" when it is not a unix socket path (abstract
// sockets, tcp), for WaitSocket.
func BusSocket(bus string) string {
	switch bus {
	case "system":
		if addr := os.Getenv("DBUS_SYSTEM_BUS_ADDRESS"); addr != "" {
			return unixSocketPath(addr)
		}
		return "/var/run/dbus/system_bus_socket"
	case "session":
		return unixSocketPath(os.Getenv("DBUS_SESSION_BUS_ADDRESS"))
	}
	return unixSocketPath(bus)
}

func isDir(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.IsDir()
}
