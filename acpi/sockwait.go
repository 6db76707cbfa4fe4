package acpi

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/fsnotify/fsnotify"
)

// waitForSocket blocks until the unix socket file path exists (or ctx is
// done), by watching its directory with inotify — or the directory's
// parent while the directory itself is missing (/run/dbus before the bus
// starts) — so a daemon on a machine without the system bus or acpid does
// not wake periodically to retry (issue 7). It returns true when the file
// was absent and has appeared (the caller retries at once) or ctx is done;
// false at once when the file exists (the service refused: the caller
// backs off on its timer) or when it cannot watch (no inotify, neither
// directory exists, path empty).
func waitForSocket(ctx context.Context, path string) bool {
	if path == "" || !filepath.IsAbs(path) {
		return false
	}
	if _, err := os.Stat(path); !errors.Is(err, fs.ErrNotExist) {
		return false
	}
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return false
	}
	defer w.Close()
	dir := filepath.Dir(path)
	watched := ""
	for {
		if _, err := os.Stat(path); !errors.Is(err, fs.ErrNotExist) {
			return true // there (or not checkable: let the caller try)
		}
		target := dir
		if !isDir(dir) {
			target = filepath.Dir(dir)
			if !isDir(target) {
				return false
			}
		}
		if target != watched {
			if watched != "" {
				w.Remove(watched)
			}
			if err := w.Add(target); err != nil {
				return false
			}
			watched = target
			continue // re-check: it may have appeared before the watch
		}
		select {
		case <-ctx.Done():
			return true
		case ev, ok := <-w.Events:
			if !ok {
				return false
			}
			_ = ev // any create or rename in the watched directory: look again
		case _, ok := <-w.Errors:
			if !ok {
				return false
			}
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

// systemBusSocket is the socket the system-bus client connects to: from
// MonitorConfig.SystemBusAddress, else DBUS_SYSTEM_BUS_ADDRESS, else the
// D-Bus specification's default /var/run/dbus/system_bus_socket.
func (m *Monitor) systemBusSocket() string {
	addr := m.cfg.SystemBusAddress
	if addr == "" {
		addr = os.Getenv("DBUS_SYSTEM_BUS_ADDRESS")
	}
	if addr == "" {
		return "/var/run/dbus/system_bus_socket"
	}
	return unixSocketPath(addr)
}
